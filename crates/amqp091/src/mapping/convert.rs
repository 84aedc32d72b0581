//! A message published over AMQP 1.0, as a 0.9.1 consumer receives it (RabbitMQ 4's
//! `mc_amqpl:convert_from(mc_amqp, ...)`). Where RabbitMQ 4.0.5 crashes (a `char`, `uuid` or
//! decimal application property), we deliver a sensible 0.9.1 value instead; `docs/fidelity.md`
//! lists every row.

use bytes::Bytes;
use charon_model::{Body, Message, MessageId, Properties, Table, Value};

/// What a 0.9.1 consumer gets for a 1.0 message.
pub(crate) struct Converted {
    pub(crate) properties: Properties,
    pub(crate) headers: Table,
}

/// `urn:uuid:` text for a uuid, as `mc_util:uuid_to_urn_string/1` writes it.
fn urn(uuid: &[u8; 16]) -> String {
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    let part = |from: usize, to: usize| hex.get(from..to).unwrap_or_default().to_owned();
    format!("urn:uuid:{}-{}-{}-{}-{}", part(0, 8), part(8, 12), part(12, 16), part(16, 20), part(20, 32))
}

fn is_shortstr(s: &str) -> bool {
    s.len() <= 255
}

/// A 1.0 value as a 0.9.1 field value (`mc_amqpl:to_091/2`): strings and symbols become long
/// strings, `ulong` a signed long, `binary` a long string, timestamps seconds, lists and
/// arrays field arrays, maps tables.
pub(crate) fn to_091(value: &Value) -> Value {
    match value {
        Value::String(s) | Value::Symbol(s) => Value::long_str(s),
        Value::U64(n) => Value::I64(i64::try_from(*n).unwrap_or(i64::MAX)),
        Value::Binary(b) => Value::LongStr(b.clone()),
        Value::Timestamp(ms) => Value::Timestamp(ms.div_euclid(1000) * 1000),
        Value::Char(c) => Value::long_str(&c.to_string()),
        Value::Uuid(u) => Value::long_str(&urn(u)),
        Value::Decimal32(b) => Value::Binary(Bytes::copy_from_slice(b)),
        Value::Decimal64(b) => Value::Binary(Bytes::copy_from_slice(b)),
        Value::Decimal128(b) => Value::Binary(Bytes::copy_from_slice(b)),
        Value::List(items) | Value::Array(items) => Value::List(items.iter().map(to_091).collect()),
        Value::Map(entries) => Value::Table(
            entries
                .iter()
                .filter_map(|(k, v)| match k {
                    Value::String(key) | Value::Symbol(key) => Some((key.clone(), to_091(v))),
                    other => other.as_i64().map(|n| (n.to_string(), to_091(v))),
                })
                .collect(),
        ),
        Value::Described(pair) => to_091(&pair.1),
        other => other.clone(),
    }
}

/// Annotations RabbitMQ adds during conversions and keeps away from 0.9.1 headers.
fn is_internal(key: &str) -> bool {
    key.starts_with("x-basic-") || matches!(key, "x-routing-key" | "x-exchange" | "x-death")
}

/// A 1.0 message id as 0.9.1 carries it: text in the property when it fits a short string,
/// otherwise in an `x-message-id` / `x-correlation-id` header.
fn id_091(id: &Option<MessageId>, header: &str, headers: &mut Table) -> Option<MessageId> {
    match id {
        None => None,
        Some(MessageId::Uuid(u)) => Some(MessageId::String(urn(u))),
        Some(MessageId::Ulong(n)) => Some(MessageId::String(n.to_string())),
        Some(MessageId::Binary(b)) => {
            headers.0.insert(0, (header.to_owned(), Value::Binary(b.clone())));
            None
        }
        Some(MessageId::String(s)) if is_shortstr(s) => Some(MessageId::String(s.clone())),
        Some(MessageId::String(s)) => {
            headers.0.insert(0, (header.to_owned(), Value::long_str(s)));
            None
        }
    }
}

/// Converts properties and headers of a 1.0-published message for a 0.9.1 consumer.
pub(crate) fn from_amqp10(message: &Message) -> Converted {
    let p = message.properties();
    let mut app: Table =
        message.headers.iter().filter(|(k, _)| is_shortstr(k)).map(|(k, v)| (k.to_owned(), to_091(v))).collect();
    let correlation_id = id_091(&p.correlation_id, "x-correlation-id", &mut app);
    let message_id = id_091(&p.message_id, "x-message-id", &mut app);
    let mut headers = Table::new();
    // A redelivered quorum-queue message's count joins the annotations, as RabbitMQ 4.0.5 adds
    // it to a 1.0 message before converting it.
    for (key, value) in message.broker.with_delivery_count(&message.annotations).iter() {
        match key {
            "x-cc" => headers.0.push(("CC".to_owned(), to_091(value))),
            "x-opt-rabbitmq-received-time" => {
                if let Value::Timestamp(ms) = value {
                    headers.0.push(("timestamp_in_ms".to_owned(), Value::I64(*ms)));
                }
            }
            k if k.starts_with("x-") && is_shortstr(k) && !is_internal(k) => {
                headers.0.push((k.to_owned(), to_091(value)))
            }
            _ => {}
        }
    }
    // Message id headers come first in the application part (RabbitMQ prepends them).
    let (ids, rest): (Vec<_>, Vec<_>) =
        app.0.into_iter().partition(|(k, _)| k == "x-correlation-id" || k == "x-message-id");
    let mut ids = ids;
    ids.sort_by_key(|(k, _)| k != "x-correlation-id");
    headers.0.extend(ids);
    headers.0.extend(rest);
    let annotation_type = message.annotations.get("x-basic-type").and_then(Value::as_str).map(str::to_owned);
    let message_type = match message.body {
        Body::Data(_) => annotation_type,
        Body::Amqp10Sections(_) => Some("amqp-1.0".to_owned()),
    };
    let user_id = p.user_id.clone().filter(|u| u.len() <= 255 && std::str::from_utf8(u).is_ok());
    let properties = Properties {
        content_type: p.content_type.clone().filter(|s| is_shortstr(s)),
        content_encoding: p.content_encoding.clone().filter(|s| is_shortstr(s)),
        delivery_mode: match p.durable {
            Some(false) => None,
            _ => Some(2),
        },
        priority: p.priority,
        correlation_id,
        reply_to: p.reply_to.clone().filter(|s| is_shortstr(s)),
        ttl: p.ttl,
        message_id,
        timestamp: p.timestamp.map(|ms| ms.div_euclid(1000) * 1000),
        message_type,
        user_id,
        app_id: p.group_id.clone().filter(|s| is_shortstr(s)),
        ..Properties::default()
    };
    Converted { properties, headers }
}

#[cfg(test)]
mod tests {
    use charon_model::{Origin, Routing};

    use super::*;

    #[test]
    fn ids_and_values_convert_like_rabbitmq() {
        let mut message = Message::new(Routing::default(), Body::Data(Bytes::from_static(b"x")));
        message.origin = Origin::Amqp10;
        message.set_properties(Properties {
            durable: Some(true),
            message_id: Some(MessageId::Ulong(42)),
            correlation_id: Some(MessageId::Binary(Bytes::from_static(&[1, 2]))),
            group_id: Some("g".into()),
            timestamp: Some(1_700_000_000_123),
            ..Properties::default()
        });
        message.headers = vec![
            ("s".to_owned(), Value::String("v".into())),
            ("u".to_owned(), Value::U64(7)),
            ("b".to_owned(), Value::Binary(Bytes::from_static(b"raw"))),
            ("c".to_owned(), Value::Char('z')),
        ]
        .into_iter()
        .collect();
        message.annotations = vec![
            ("x-custom".to_owned(), Value::Symbol("sym".into())),
            ("x-basic-type".to_owned(), Value::String("t".into())),
        ]
        .into_iter()
        .collect();
        let c = from_amqp10(&message);
        assert_eq!(c.properties.message_id, Some(MessageId::String("42".into())));
        assert_eq!(c.properties.correlation_id, None);
        assert_eq!(c.properties.delivery_mode, Some(2));
        assert_eq!(c.properties.app_id.as_deref(), Some("g"));
        assert_eq!(c.properties.timestamp, Some(1_700_000_000_000));
        assert_eq!(c.properties.message_type.as_deref(), Some("t"));
        let keys: Vec<&str> = c.headers.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["x-custom", "x-correlation-id", "s", "u", "b", "c"]);
        assert_eq!(c.headers.get("u"), Some(&Value::I64(7)));
        assert_eq!(c.headers.get("b"), Some(&Value::long_str("raw")));
        assert_eq!(c.headers.get("x-correlation-id"), Some(&Value::Binary(Bytes::from_static(&[1, 2]))));
    }

    #[test]
    fn a_redelivered_1_0_message_shows_its_count_among_the_annotation_headers() {
        let mut message = Message::default();
        message.origin = Origin::Amqp10;
        message.headers = vec![("app".to_owned(), Value::String("v".into()))].into_iter().collect();
        message.annotations = vec![("x-custom".to_owned(), Value::Symbol("sym".into()))].into_iter().collect();
        message.broker.acquired_count = 3;
        let c = from_amqp10(&message);
        let keys: Vec<&str> = c.headers.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["x-custom", "x-delivery-count", "app"]);
        assert_eq!(c.headers.get("x-delivery-count"), Some(&Value::I64(3)));
        assert!(message.annotations.get("x-delivery-count").is_none(), "the message is unchanged");
    }

    #[test]
    fn urns_are_lowercase_and_dashed() {
        let uuid = [0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8];
        assert_eq!(urn(&uuid), "urn:uuid:6ba7b810-9dad-11d1-80b4-00c04fd430c8");
    }
}
