//! A model message as an AMQP 1.0 consumer receives it: header and message annotations made
//! by the broker, then the bare message — verbatim when it was published over 1.0, converted
//! from 0.9.1 properties and headers otherwise (RabbitMQ's `mc_amqpl:convert_to/3`).

use charon_model::{Body, DeathCause, DeathHistory, Encoded, Message, MessageId, Origin, Table, Value};
use serde_amqp::Value as Amqp;
use serde_amqp::primitives::{OrderedMap, Symbol, Timestamp};

use super::plain::plain_sections;
use super::sections::{APPLICATION_PROPERTIES, DATA, HEADER, MESSAGE_ANNOTATIONS, PROPERTIES, composite, push_section};
use crate::codec::value::to_amqp;

/// Facts about this delivery that go into the header.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeliveryFacts {
    /// Delivered before.
    pub redelivered: bool,
    /// The queue's count of returns (quorum queues), added to any count the message carries.
    pub delivery_count: u32,
}

fn string(s: &Option<String>) -> Amqp {
    s.as_ref().map_or(Amqp::Null, |v| Amqp::String(v.clone()))
}

fn symbol(s: &Option<String>) -> Amqp {
    s.as_ref().map_or(Amqp::Null, |v| Amqp::Symbol(Symbol::from(v.as_str())))
}

fn timestamp(t: Option<i64>) -> Amqp {
    t.map_or(Amqp::Null, |ms| Amqp::Timestamp(Timestamp::from_milliseconds(ms)))
}

/// `urn:uuid:` strings become uuids, as RabbitMQ converts 0.9.1 ids.
fn message_id_value(id: &Option<MessageId>) -> Amqp {
    match id {
        None => Amqp::Null,
        Some(MessageId::String(s)) => match parse_urn_uuid(s) {
            Some(uuid) => Amqp::Uuid(uuid.into()),
            None => Amqp::String(s.clone()),
        },
        Some(MessageId::Ulong(n)) => Amqp::Ulong(*n),
        Some(MessageId::Uuid(u)) => Amqp::Uuid((*u).into()),
        Some(MessageId::Binary(b)) => Amqp::Binary(b.to_vec().into()),
    }
}

fn parse_urn_uuid(s: &str) -> Option<[u8; 16]> {
    let hex: String = s.strip_prefix("urn:uuid:")?.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 || s.len() != 45 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    Some(out)
}

fn header_section(message: &Message, facts: DeliveryFacts) -> Amqp {
    let props = message.properties();
    let durable = match message.origin {
        Origin::Amqp091 => props.delivery_mode == Some(2),
        _ => props.durable.unwrap_or(true),
    };
    let delivery_count = message.broker.delivery_count.saturating_add(facts.delivery_count);
    let first_acquirer = !facts.redelivered && delivery_count == 0 && message.broker.deaths.is_none();
    // Dead lettering clears the TTL, but RabbitMQ 4.0.5 converts a 0.9.1 message for a 1.0
    // consumer from its unchanged properties: the published `expiration` (recorded with the first
    // death) shows as `header.ttl` again. The message does not expire by it.
    let ttl = props.ttl.or_else(|| match message.origin {
        Origin::Amqp091 => message.broker.deaths.as_deref().and_then(DeathHistory::original_ttl),
        _ => None,
    });
    composite(vec![
        Amqp::Bool(durable),
        props.priority.map_or(Amqp::Null, Amqp::Ubyte),
        ttl.and_then(|t| u32::try_from(t).ok()).map_or(Amqp::Null, Amqp::Uint),
        Amqp::Bool(first_acquirer),
        Amqp::Uint(delivery_count),
    ])
}

fn upsert(map: &mut OrderedMap<Amqp, Amqp>, key: &str, value: Amqp) {
    map.insert(Amqp::Symbol(Symbol::from(key)), value);
}

/// Message annotations: what the publisher sent (1.0) or the `x-` headers (0.9.1), then the
/// broker's `x-exchange` and `x-routing-key`. A redelivered quorum-queue message's
/// `x-delivery-count` joins the publisher's entries (RabbitMQ 4.0.5 adds it to a 0.9.1
/// message's headers, to a 1.0 message's annotations, before converting).
fn annotations(message: &Message) -> OrderedMap<Amqp, Amqp> {
    let mut map = OrderedMap::new();
    match message.origin {
        Origin::Amqp091 => {
            for (key, value) in message.broker.with_delivery_count(&message.headers).iter() {
                if key.starts_with("x-") {
                    upsert(&mut map, key, to_amqp(value));
                } else if key == "CC" && matches!(value, Value::List(_)) {
                    upsert(&mut map, "x-cc", to_amqp(value));
                }
            }
            if let Some(kind) = &message.properties().message_type {
                upsert(&mut map, "x-basic-type", Amqp::String(kind.clone()));
            }
            // Annotations a quorum queue merged in from a 1.0 `modified` outcome.
            for (key, value) in message.annotations.iter() {
                upsert(&mut map, key, to_amqp(value));
            }
        }
        _ => {
            for (key, value) in message.broker.with_delivery_count(&message.annotations).iter() {
                upsert(&mut map, key, to_amqp(value));
            }
        }
    }
    // RabbitMQ folds its annotation map into the published ones: atom keys (exchange, routing
    // keys, then deaths, in atom-table order) before the `x-first/last-death-*` binaries.
    upsert(&mut map, "x-exchange", Amqp::String(message.routing.exchange.clone()));
    upsert(&mut map, "x-routing-key", Amqp::String(message.routing.routing_key.clone()));
    let history = message.broker.deaths.as_deref();
    if let Some(history) = history {
        upsert(&mut map, "x-opt-deaths", deaths(history));
        for (key, value) in history.summary_fields() {
            upsert(&mut map, key, Amqp::String(value));
        }
    }
    map
}

/// `x-opt-deaths`: an array of maps with symbol keys (`mc_amqp:encode_deaths/1`), plus what a
/// refusing consumer said when it did (Charon's extension, see [`cause_fields`]).
fn deaths(history: &DeathHistory) -> Amqp {
    let key = |k: &str| Amqp::Symbol(Symbol::from(k));
    let entries = history
        .entries
        .iter()
        .map(|death| {
            let mut entry = OrderedMap::new();
            if let Some(ttl) = death.original_ttl {
                entry.insert(key("ttl"), Amqp::Uint(u32::try_from(ttl).unwrap_or(u32::MAX)));
            }
            entry.insert(key("queue"), Amqp::String(death.queue.clone()));
            entry.insert(key("reason"), Amqp::Symbol(Symbol::from(death.reason.as_str())));
            entry.insert(key("count"), Amqp::Ulong(death.count));
            entry.insert(key("first-time"), Amqp::Timestamp(Timestamp::from_milliseconds(death.first_time)));
            entry.insert(key("last-time"), Amqp::Timestamp(Timestamp::from_milliseconds(death.last_time)));
            entry.insert(key("exchange"), Amqp::String(death.exchange.clone()));
            let keys = death.routing_keys.iter().map(|k| Amqp::String(k.clone())).collect::<Vec<_>>();
            entry.insert(key("routing-keys"), Amqp::Array(keys.into()));
            if let Some(cause) = death.cause.as_deref() {
                cause_fields(&mut entry, cause);
            }
            Amqp::Map(entry)
        })
        .collect::<Vec<_>>();
    Amqp::Array(entries.into())
}

/// The parts of a death's cause present, after RabbitMQ's fields: `error-condition` (symbol),
/// `error-description` (string), `error-info` and `message-annotations` (maps with symbol
/// keys). Absent parts add nothing, so an entry without a cause is exactly RabbitMQ 4.0.5's.
fn cause_fields(entry: &mut OrderedMap<Amqp, Amqp>, cause: &DeathCause) {
    let key = |k: &str| Amqp::Symbol(Symbol::from(k));
    if let Some(condition) = cause.condition() {
        entry.insert(key("error-condition"), Amqp::Symbol(Symbol::from(condition)));
    }
    if let Some(description) = cause.description() {
        entry.insert(key("error-description"), Amqp::String(description.to_owned()));
    }
    if let Some(info) = cause.info() {
        entry.insert(key("error-info"), symbol_map(info));
    }
    if let Some(annotations) = cause.annotations() {
        entry.insert(key("message-annotations"), symbol_map(annotations));
    }
}

/// A table as a map with symbol keys (how 1.0 `fields` and annotations are keyed).
fn symbol_map(table: &Table) -> Amqp {
    let mut map = OrderedMap::new();
    for (k, v) in table.iter() {
        map.insert(Amqp::Symbol(Symbol::from(k)), to_amqp(v));
    }
    Amqp::Map(map)
}

/// The bare message for a message that did not arrive over 1.0.
fn converted_bare(message: &Message, out: &mut Vec<u8>) {
    let p = message.properties();
    let properties = composite(vec![
        message_id_value(&p.message_id),
        p.user_id.as_ref().map_or(Amqp::Null, |b| Amqp::Binary(b.to_vec().into())),
        string(&p.to),
        string(&p.subject),
        string(&p.reply_to),
        message_id_value(&p.correlation_id),
        symbol(&p.content_type),
        symbol(&p.content_encoding),
        timestamp(p.absolute_expiry_time),
        timestamp(p.timestamp),
        match message.origin {
            Origin::Amqp091 => string(&p.app_id),
            _ => string(&p.group_id),
        },
        p.group_sequence.map_or(Amqp::Null, Amqp::Uint),
        string(&p.reply_to_group_id),
    ]);
    if !matches!(&properties, Amqp::List(fields) if fields.is_empty()) {
        push_section(out, PROPERTIES, properties);
    }
    // Non-`x-` headers of simple types become application properties; tables and arrays
    // cannot (1.0 application properties hold simple values only), as in RabbitMQ.
    let mut app = OrderedMap::new();
    for (key, value) in message.headers.iter() {
        let simple = !matches!(value, Value::Table(_) | Value::List(_) | Value::Array(_) | Value::Map(_));
        let keep = match message.origin {
            Origin::Amqp091 => !key.starts_with("x-") && simple,
            _ => simple,
        };
        if keep {
            app.insert(Amqp::String(key.to_owned()), to_amqp(value));
        }
    }
    if !app.is_empty() {
        push_section(out, APPLICATION_PROPERTIES, Amqp::Map(app));
    }
    match &message.body {
        Body::Data(bytes) => push_section(out, DATA, Amqp::Binary(bytes.to_vec().into())),
        Body::Amqp10Sections(bytes) => out.extend_from_slice(bytes),
    }
}

/// The header and message annotations of any message, built as values and encoded.
pub(super) fn general_sections(out: &mut Vec<u8>, message: &Message, facts: DeliveryFacts) {
    push_section(out, HEADER, header_section(message, facts));
    let annotations = annotations(message);
    if !annotations.is_empty() {
        push_section(out, MESSAGE_ANNOTATIONS, Amqp::Map(annotations));
    }
}

/// The transfer payload for a 1.0 consumer.
#[must_use]
pub fn for_consumer(message: &Message, facts: DeliveryFacts) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + message.body_len());
    render_for_consumer(&mut out, message, facts);
    out
}

/// Appends the transfer payload for a 1.0 consumer to `out` (a connection renders every
/// delivery into one buffer it reuses, rather than allocating one per message).
pub fn render_for_consumer(out: &mut Vec<u8>, message: &Message, facts: DeliveryFacts) {
    if !plain_sections(out, message, facts) {
        general_sections(out, message, facts);
    }
    match &message.encoded {
        Encoded::Amqp10Bare(bare) => out.extend_from_slice(bare),
        _ => converted_bare(message, out),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use charon_model::{Properties, Routing};

    use super::*;
    use crate::codec::{BodyKind, parse_message};
    use crate::mapping::to_model;

    #[test]
    fn a_0_9_1_message_converts_like_rabbitmq() {
        let mut message = Message::new(
            Routing { exchange: "ex".into(), routing_key: "rk".into(), ..Routing::default() },
            Body::Data(Bytes::from_static(b"hi")),
        );
        message.origin = Origin::Amqp091;
        message.set_properties(Properties {
            delivery_mode: Some(2),
            priority: Some(4),
            ttl: Some(60_000),
            app_id: Some("app".into()),
            message_id: Some(MessageId::String("urn:uuid:6ba7b810-9dad-11d1-80b4-00c04fd430c8".into())),
            message_type: Some("t".into()),
            timestamp: Some(1_700_000_000_000),
            ..Properties::default()
        });
        message.headers = vec![
            ("plain".to_owned(), Value::long_str("v")),
            ("x-custom".to_owned(), Value::I32(7)),
            ("table".to_owned(), Value::Table(charon_model::Table::new())),
        ]
        .into_iter()
        .collect();
        let payload = Bytes::from(for_consumer(&message, DeliveryFacts::default()));
        let parsed = parse_message(&payload).unwrap();
        let header = parsed.header.unwrap();
        assert_eq!(
            (header.durable, header.priority, header.ttl, header.first_acquirer),
            (Some(true), Some(4), Some(60_000), Some(true))
        );
        let props = parsed.properties.unwrap();
        assert!(matches!(props.message_id, Some(fe2o3_amqp_types::messaging::MessageId::Uuid(_))));
        assert_eq!(props.group_id.as_deref(), Some("app"));
        assert_eq!(props.creation_time.map(|t| t.milliseconds()), Some(1_700_000_000_000));
        assert_eq!(parsed.application_properties, vec![("plain".to_owned(), Value::String("v".into()))]);
        let keys: Vec<String> = parsed.annotations.iter().filter_map(|(k, _)| k.as_str().map(str::to_owned)).collect();
        assert_eq!(keys, ["x-custom", "x-basic-type", "x-exchange", "x-routing-key"]);
        assert_eq!(parsed.body, Some(BodyKind::SingleData(Bytes::from_static(b"hi"))));
    }

    fn dead_letter(origin: Origin) -> Message {
        let mut message = Message::new(
            Routing { exchange: "dlx".into(), routing_key: "rk".into(), ..Routing::default() },
            Body::Data(Bytes::from_static(b"hi")),
        );
        message.origin = origin;
        message.headers = vec![("x-custom".to_owned(), Value::long_str("c"))].into_iter().collect();
        message.annotations = vec![("x-custom".to_owned(), Value::String("c".into()))].into_iter().collect();
        let keys = vec!["rk".to_owned()];
        let record = charon_model::DeathRecord {
            queue: "q",
            reason: charon_model::DeathReason::Rejected,
            exchange: "",
            routing_keys: &keys,
            ttl: Some(60_000),
            now: 1_700_000_000_000,
            cause: None,
        };
        // As dead lettering leaves it: the history records the TTL, the properties lose it.
        message.broker.deaths = Some(Box::new(DeathHistory::new(&record)));
        message
    }

    #[test]
    fn a_dead_letter_has_rabbitmqs_annotation_order() {
        let map = annotations(&dead_letter(Origin::Amqp091));
        let keys: Vec<String> = map
            .keys()
            .filter_map(|k| match k {
                Amqp::Symbol(s) => Some(s.0.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            keys,
            [
                "x-custom",
                "x-exchange",
                "x-routing-key",
                "x-opt-deaths",
                "x-first-death-exchange",
                "x-first-death-queue",
                "x-first-death-reason",
                "x-last-death-exchange",
                "x-last-death-queue",
                "x-last-death-reason"
            ]
        );
    }

    fn symbol_keys(map: &OrderedMap<Amqp, Amqp>) -> Vec<String> {
        map.keys()
            .filter_map(|k| match k {
                Amqp::Symbol(s) => Some(s.0.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_redriven_message_carries_x_charon_redrive_count_as_an_annotation() {
        for origin in [Origin::Amqp091, Origin::Amqp10] {
            let mut message = dead_letter(origin);
            message.broker.redrive_count = 3;
            let map = annotations(&message);
            let key = Amqp::Symbol(Symbol::from(charon_model::REDRIVE_COUNT_KEY));
            assert_eq!(map.get(&key), Some(&Amqp::Long(3)), "{origin:?}");
            assert!(map.get(&Amqp::Symbol(Symbol::from("x-opt-deaths"))).is_some(), "the history stays");
        }
        // The plain fast path does not drop it.
        let mut message = dead_letter(Origin::Amqp10);
        (message.broker.deaths, message.annotations) = (None, Table::new());
        message.broker.redrive_count = 1;
        let out = for_consumer(&message, DeliveryFacts::default());
        let parsed = parse_message(&Bytes::from(out)).unwrap();
        let found = parsed.annotations.iter().find(|(k, _)| k.as_str() == Some(charon_model::REDRIVE_COUNT_KEY));
        assert_eq!(found.map(|(_, v)| v.as_i64()), Some(Some(1)), "{:?}", parsed.annotations);
    }

    #[test]
    fn a_redelivered_quorum_message_carries_x_delivery_count_as_an_annotation() {
        for origin in [Origin::Amqp091, Origin::Amqp10] {
            let mut message = dead_letter(origin);
            message.broker.deaths = None;
            assert_eq!(symbol_keys(&annotations(&message)), ["x-custom", "x-exchange", "x-routing-key"]);
            message.broker.acquired_count = 2;
            let map = annotations(&message);
            assert_eq!(
                symbol_keys(&map),
                ["x-custom", "x-delivery-count", "x-exchange", "x-routing-key"],
                "{origin:?}"
            );
            let key = Amqp::Symbol(Symbol::from("x-delivery-count"));
            assert_eq!(map.get(&key), Some(&Amqp::Long(2)));
        }
        // It never becomes an application property of a converted 0.9.1 message.
        let mut message = dead_letter(Origin::Amqp091);
        message.broker.acquired_count = 1;
        let mut bare = Vec::new();
        converted_bare(&message, &mut bare);
        let parsed = parse_message(&Bytes::from(bare)).unwrap();
        assert!(parsed.application_properties.is_empty());
    }

    #[test]
    fn only_a_0_9_1_dead_letter_shows_its_published_ttl() {
        let header = |origin| match header_section(&dead_letter(origin), DeliveryFacts::default()) {
            Amqp::List(fields) => (fields.get(2).cloned(), fields.get(3).cloned()),
            _ => (None, None),
        };
        assert_eq!(header(Origin::Amqp091), (Some(Amqp::Uint(60_000)), Some(Amqp::Bool(false))));
        assert_eq!(header(Origin::Amqp10), (Some(Amqp::Null), Some(Amqp::Bool(false))));
    }

    #[test]
    fn a_1_0_message_keeps_its_bare_bytes() {
        let mut published = Vec::new();
        push_section(&mut published, PROPERTIES, composite(vec![Amqp::String("id".into())]));
        push_section(&mut published, DATA, Amqp::Binary(b"body".to_vec().into()));
        let payload = Bytes::from(published.clone());
        let parsed = parse_message(&payload).unwrap();
        let message = to_model(&parsed, "", "q".to_owned());
        let out = for_consumer(&message, DeliveryFacts { redelivered: true, delivery_count: 0 });
        assert!(out.ends_with(&published));
        let again = parse_message(&Bytes::from(out)).unwrap();
        assert_eq!(again.header.and_then(|h| h.first_acquirer), Some(false));
    }

    /// The `x-opt-deaths` entries of a message, each as `(symbol key, value)` pairs.
    fn death_entries(message: &Message) -> Vec<Vec<(String, Amqp)>> {
        let Some(Amqp::Array(entries)) = annotations(message).get(&Amqp::Symbol(Symbol::from("x-opt-deaths"))).cloned()
        else {
            panic!("x-opt-deaths")
        };
        entries
            .0
            .into_iter()
            .map(|entry| match entry {
                Amqp::Map(map) => map
                    .into_iter()
                    .map(|(k, v)| match k {
                        Amqp::Symbol(s) => (s.0, v),
                        other => panic!("key {other:?}"),
                    })
                    .collect(),
                other => panic!("entry {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_death_shows_its_cause_after_rabbitmqs_fields_and_only_when_present() {
        let mut message = dead_letter(Origin::Amqp10);
        let without: Vec<String> = death_entries(&message)[0].iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(without, ["ttl", "queue", "reason", "count", "first-time", "last-time", "exchange", "routing-keys"]);
        let info: Table = [("attempt".to_owned(), Value::U64(3))].into_iter().collect();
        let annotations: Table = [("x-opt-why".to_owned(), Value::String("stale".into()))].into_iter().collect();
        let cause = DeathCause::new(
            Some("app:bad-payload".into()),
            Some("schema v2 expected".into()),
            Some(info),
            Some(annotations),
        );
        let history = message.broker.deaths.as_deref_mut().unwrap();
        history.entries[0].cause = cause.map(std::sync::Arc::new);
        let entry = &death_entries(&message)[0];
        let (names, values): (Vec<&str>, Vec<&Amqp>) = entry.iter().map(|(k, v)| (k.as_str(), v)).unzip();
        assert_eq!(names[..8], without.iter().map(String::as_str).collect::<Vec<_>>()[..]);
        assert_eq!(names[8..], ["error-condition", "error-description", "error-info", "message-annotations"]);
        let map = |k: &str, v: Amqp| Amqp::Map([(Amqp::Symbol(Symbol::from(k)), v)].into_iter().collect());
        assert_eq!(
            values[8..],
            [
                &Amqp::Symbol(Symbol::from("app:bad-payload")),
                &Amqp::String("schema v2 expected".into()),
                &map("attempt", Amqp::Ulong(3)),
                &map("x-opt-why", Amqp::String("stale".into())),
            ]
        );
    }
}
