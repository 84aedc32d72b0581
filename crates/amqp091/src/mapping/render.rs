//! A model message as a 0.9.1 consumer receives it: the content-header properties of
//! `basic.deliver`, `basic.get-ok` and `basic.return`.
//!
//! A message a 0.9.1 publisher sent and the broker did not change gets its property bytes back
//! verbatim; a 1.0 message is converted ([`super::convert`]); any other is encoded from the
//! model, with the broker's annotations (`x-delivery-count`, the death history) rendered as
//! 0.9.1 headers.

use std::borrow::Cow;

use bytes::Bytes;
use charon_model::{Encoded, Message, Origin, Properties, Table, Value};

use super::convert::from_amqp10;
use super::deaths::headers_with_deaths;
use crate::proto::ContentProperties;

/// The content-header properties of one message, ready to hand to the connection.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "a short-lived stack value per message; boxing the properties would allocate per delivery"
)]
pub(crate) enum Rendered<'a> {
    /// The property list exactly as the 0.9.1 publisher sent it.
    Raw(&'a Bytes),
    /// Properties to encode.
    Encode {
        /// The properties (converted ones are owned).
        properties: Cow<'a, Properties>,
        /// The headers table, annotations included.
        headers: Cow<'a, Table>,
        /// The `expiration` text, from the model's TTL.
        expiration: Option<String>,
    },
}

impl Rendered<'_> {
    /// The properties as the connection encodes them.
    pub(crate) fn content_properties(&self) -> ContentProperties<'_> {
        match self {
            Self::Raw(raw) => ContentProperties::Raw(raw),
            Self::Encode { properties, headers, expiration } => {
                ContentProperties::Encode { properties, headers, expiration: expiration.as_deref() }
            }
        }
    }
}

/// Renders a message's properties for a 0.9.1 consumer. A redelivered quorum-queue message
/// also carries `x-delivery-count`, so it is encoded afresh rather than passed through.
pub(crate) fn for_consumer(message: &Message) -> Rendered<'_> {
    match &message.encoded {
        Encoded::Amqp091Properties(raw)
            if !message.broker.adds_entries() && annotation_headers(message).next().is_none() =>
        {
            Rendered::Raw(raw)
        }
        _ if message.origin == Origin::Amqp10 => {
            let converted = from_amqp10(message);
            let headers = match message.broker.deaths.as_deref() {
                Some(history) => headers_with_deaths(&converted.headers, history),
                None => converted.headers,
            };
            let expiration = converted.properties.ttl.map(|ttl| ttl.to_string());
            Rendered::Encode { properties: Cow::Owned(converted.properties), headers: Cow::Owned(headers), expiration }
        }
        _ => {
            let expiration = message.properties().ttl.map(|ttl| ttl.to_string());
            Rendered::Encode {
                properties: Cow::Borrowed(message.properties()),
                headers: rendered_headers(message),
                expiration,
            }
        }
    }
}

/// The headers of a message published over 0.9.1 (or built by the broker), as a 0.9.1
/// consumer sees them: `x-delivery-count` when a quorum queue redelivers it, then the death
/// history, then the `x-` annotations a 1.0 consumer's `modified` outcome left on it.
fn rendered_headers(message: &Message) -> Cow<'_, Table> {
    let headers = match message.broker.with_delivery_count(&message.headers) {
        Cow::Borrowed(headers) => with_history(headers, message),
        Cow::Owned(counted) => Cow::Owned(with_history(&counted, message).into_owned()),
    };
    with_annotations(headers, message)
}

/// The message's `x-` annotations that RabbitMQ renders as 0.9.1 headers
/// (`mc_amqpl:protocol_state/2`): integers as `long`, strings as `longstr`, booleans; other
/// values are left out.
fn annotation_headers(message: &Message) -> impl Iterator<Item = (&str, Value)> {
    message.annotations.iter().filter(|(key, _)| key.starts_with("x-")).filter_map(|(key, value)| {
        let header = match value {
            Value::String(s) | Value::Symbol(s) => Value::long_str(s),
            Value::Bool(b) => Value::Bool(*b),
            other => Value::I64(other.as_i64()?),
        };
        Some((key, header))
    })
}

/// `headers` with [`annotation_headers`] added (an annotation wins over a header of the same
/// name) and, when there are any, sorted by name as RabbitMQ's dedup sorts them.
fn with_annotations<'a>(headers: Cow<'a, Table>, message: &Message) -> Cow<'a, Table> {
    let mut added = annotation_headers(message).peekable();
    if added.peek().is_none() {
        return headers;
    }
    let mut table = headers.into_owned();
    for (key, value) in added {
        table.insert(key, value);
    }
    table.0.sort_by(|(a, _), (b, _)| a.cmp(b));
    Cow::Owned(table)
}

/// `headers`, plus the death history when the message was dead-lettered.
fn with_history<'a>(headers: &'a Table, message: &Message) -> Cow<'a, Table> {
    match message.broker.deaths.as_deref() {
        Some(history) => Cow::Owned(headers_with_deaths(headers, history)),
        None => Cow::Borrowed(headers),
    }
}

#[cfg(test)]
mod tests {
    use charon_model::{BrokerAnnotations, DeathHistory, DeathReason, DeathRecord};

    use super::*;

    fn message(acquired_count: u32) -> Message {
        let mut m = Message::default();
        m.origin = Origin::Amqp091;
        m.headers = vec![("z".to_owned(), Value::I32(1))].into_iter().collect();
        m.broker = BrokerAnnotations { acquired_count, ..BrokerAnnotations::default() };
        m
    }

    #[test]
    fn unchanged_0_9_1_properties_pass_through_and_redeliveries_are_encoded_afresh() {
        let raw = Bytes::from_static(&[0x10, 0x00, 0x02]);
        let mut first = message(0);
        first.encoded = Encoded::Amqp091Properties(raw.clone());
        assert!(matches!(for_consumer(&first), Rendered::Raw(r) if *r == raw));
        let mut again = message(1);
        again.encoded = Encoded::Amqp091Properties(raw);
        again.properties_mut().ttl = Some(500);
        let Rendered::Encode { headers, expiration, .. } = for_consumer(&again) else {
            panic!("a redelivered message is encoded");
        };
        assert_eq!(headers.get("x-delivery-count"), Some(&Value::I64(1)));
        assert_eq!(expiration.as_deref(), Some("500"));
    }

    #[test]
    fn x_annotations_a_consumer_left_become_headers_sorted_by_name() {
        let mut m = message(0);
        m.encoded = Encoded::Amqp091Properties(Bytes::from_static(&[0x10, 0x00, 0x02]));
        m.annotations.insert("x-opt-reason", Value::String("poison".into()));
        m.annotations.insert("x-opt-attempt", Value::I32(3));
        m.annotations.insert("x-opt-ratio", Value::F64(0.5));
        m.annotations.insert("not-x", Value::Bool(true));
        let Rendered::Encode { headers, .. } = for_consumer(&m) else {
            panic!("annotations are not in the publisher's property bytes");
        };
        assert_eq!(
            headers.0,
            vec![
                ("x-opt-attempt".to_owned(), Value::I64(3)),
                ("x-opt-reason".to_owned(), Value::long_str("poison")),
                ("z".to_owned(), Value::I32(1)),
            ]
        );
    }

    #[test]
    fn a_1_0_message_is_converted() {
        let mut m = Message::default();
        m.origin = Origin::Amqp10;
        m.headers = vec![("app".to_owned(), Value::String("v".into()))].into_iter().collect();
        let Rendered::Encode { properties, headers, .. } = for_consumer(&m) else {
            panic!("a 1.0 message is encoded");
        };
        assert!(matches!(properties, Cow::Owned(_)));
        assert_eq!(headers.get("app"), Some(&Value::long_str("v")));
    }

    #[test]
    fn a_redelivered_quorum_message_carries_x_delivery_count_as_a_long_header() {
        let first = message(0);
        assert!(matches!(rendered_headers(&first), Cow::Borrowed(h) if std::ptr::eq(h, &first.headers)));
        let again = message(2);
        let headers = rendered_headers(&again);
        assert_eq!(headers.0, vec![("z".to_owned(), Value::I32(1)), ("x-delivery-count".to_owned(), Value::I64(2))]);
        // With a death history the headers are sorted by name, the count among them.
        let keys = vec!["k".to_owned()];
        let record = DeathRecord {
            queue: "q",
            reason: DeathReason::Rejected,
            exchange: "",
            routing_keys: &keys,
            ttl: None,
            now: 0,
            cause: None,
        };
        let mut dead = message(1);
        dead.broker.deaths = Some(Box::new(DeathHistory::new(&record)));
        let headers = rendered_headers(&dead);
        let names: Vec<&str> = headers.iter().map(|(k, _)| k).take(2).collect();
        assert_eq!(names, ["x-death", "x-delivery-count"]);
        assert_eq!(headers.get("x-delivery-count"), Some(&Value::I64(1)));
    }
}
