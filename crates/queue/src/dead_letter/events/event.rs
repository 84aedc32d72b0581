//! One dead-letter event: what it says about a death, its routing key and its JSON body.

use std::fmt::Write as _;

use charon_model::{DeathCause, DeathReason, Message, MessageId};
use serde::Serialize;

/// The exchange every vhost publishes its dead-letter events to: durable, topic, internal.
pub const EVENTS_EXCHANGE: &str = "amq.charon.dead-letter-events";

pub use crate::dead_letter::drops::DropReason;

/// One death, as the event stream reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct DeadLetterEvent {
    /// The vhost of the queue.
    pub vhost: String,
    /// The queue the message died in.
    pub queue: String,
    /// Why it died.
    pub reason: DeathReason,
    /// Why it went nowhere; `None` when it was dead-lettered (for at-least-once queues: kept
    /// until its targets confirm it).
    pub drop_reason: Option<DropReason>,
    /// The message's `message-id`, rendered as a string.
    pub message_id: Option<String>,
    /// The message's `correlation-id`, rendered as a string.
    pub correlation_id: Option<String>,
    /// How often the message has died in this queue for this reason, this death included
    /// (the `count` of its `x-death` entry).
    pub count: u64,
    /// The dead-letter exchange configured for the queue, if any.
    pub dead_letter_exchange: Option<String>,
    /// The keys the message was routed with when it died (publish key and CC, as `x-death`
    /// records them).
    pub routing_keys: Vec<String>,
    /// When it died, in milliseconds since the Unix epoch.
    pub time: i64,
    /// The error condition a 1.0 consumer gave when it rejected the message (`rejected{error}`),
    /// if it gave one.
    pub error_condition: Option<String>,
}

/// The facts of one death the queue knows.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Death<'a> {
    pub(crate) queue: &'a str,
    pub(crate) message: &'a Message,
    pub(crate) reason: DeathReason,
    pub(crate) dead_letter_exchange: Option<&'a str>,
    pub(crate) drop_reason: Option<DropReason>,
}

/// The JSON body, fields in the documented order.
#[derive(Serialize)]
struct Json<'a> {
    vhost: &'a str,
    queue: &'a str,
    reason: &'a str,
    drop_reason: Option<&'a str>,
    message_id: Option<&'a str>,
    correlation_id: Option<&'a str>,
    count: u64,
    dead_letter_exchange: Option<&'a str>,
    routing_keys: &'a [String],
    time: i64,
    error_condition: Option<&'a str>,
}

impl DeadLetterEvent {
    /// The event for `death` in `vhost` at `now` (ms since epoch).
    pub(crate) fn new(vhost: &str, death: Death<'_>, now: i64) -> Self {
        let Death { queue, message, reason, dead_letter_exchange, drop_reason } = death;
        let properties = message.properties();
        let earlier = message
            .broker
            .deaths
            .as_deref()
            .and_then(|h| h.entries.iter().find(|d| d.queue == queue && d.reason == reason))
            .map_or(0, |d| d.count);
        Self {
            vhost: vhost.to_owned(),
            queue: queue.to_owned(),
            reason,
            drop_reason,
            message_id: properties.message_id.as_ref().map(id_text),
            correlation_id: properties.correlation_id.as_ref().map(id_text),
            count: earlier + 1,
            dead_letter_exchange: dead_letter_exchange.map(str::to_owned),
            routing_keys: message.routing.visible_keys(),
            time: now,
            error_condition: message.broker.refusal.as_deref().and_then(DeathCause::condition).map(str::to_owned),
        }
    }

    /// `<reason>.<queue>`, so that a binding `rejected.#` or `*.orders` filters.
    #[must_use]
    pub fn routing_key(&self) -> String {
        format!("{}.{}", self.reason.as_str(), self.queue)
    }

    /// The JSON body.
    #[must_use]
    pub fn to_json(&self) -> String {
        let json = Json {
            vhost: &self.vhost,
            queue: &self.queue,
            reason: self.reason.as_str(),
            drop_reason: self.drop_reason.map(DropReason::as_str),
            message_id: self.message_id.as_deref(),
            correlation_id: self.correlation_id.as_deref(),
            count: self.count,
            dead_letter_exchange: self.dead_letter_exchange.as_deref(),
            routing_keys: &self.routing_keys,
            time: self.time,
            error_condition: self.error_condition.as_deref(),
        };
        // Strings, integers and options of them always serialize.
        serde_json::to_string(&json).unwrap_or_default()
    }
}

/// A message or correlation id as text: a string as it is, a ulong in decimal, a uuid in its
/// canonical 8-4-4-4-12 form, a binary in lowercase hex.
#[must_use]
pub fn id_text(id: &MessageId) -> String {
    match id {
        MessageId::String(text) => text.clone(),
        MessageId::Ulong(number) => number.to_string(),
        MessageId::Uuid(bytes) => {
            let mut out = String::with_capacity(36);
            for (i, byte) in bytes.iter().enumerate() {
                if matches!(i, 4 | 6 | 8 | 10) {
                    out.push('-');
                }
                let _ = write!(out, "{byte:02x}");
            }
            out
        }
        MessageId::Binary(bytes) => bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut out, byte| {
            let _ = write!(out, "{byte:02x}");
            out
        }),
    }
}

#[cfg(test)]
mod tests {
    use charon_model::{Body, Properties, Routing};

    use super::*;
    use crate::dead_letter::dead_lettered_copy;

    fn message() -> Message {
        let routing = Routing {
            exchange: "shop".into(),
            routing_key: "orders".into(),
            cc: vec!["audit".into()],
            bcc: vec!["hidden".into()],
        };
        let mut m = Message::new(routing, Body::Data("m".into()));
        m.set_properties(Properties {
            message_id: Some(MessageId::String("m-1".into())),
            correlation_id: Some(MessageId::Ulong(42)),
            ..Properties::default()
        });
        m
    }

    fn death<'a>(message: &'a Message, drop_reason: Option<DropReason>) -> Death<'a> {
        Death {
            queue: "orders",
            message,
            reason: DeathReason::Rejected,
            dead_letter_exchange: Some("dlx"),
            drop_reason,
        }
    }

    #[test]
    fn the_json_has_every_field_in_order() {
        let event = DeadLetterEvent::new("/", death(&message(), None), 1_764_100_000_123);
        assert_eq!(
            event.to_json(),
            r#"{"vhost":"/","queue":"orders","reason":"rejected","drop_reason":null,"message_id":"m-1","correlation_id":"42","count":1,"dead_letter_exchange":"dlx","routing_keys":["orders","audit"],"time":1764100000123,"error_condition":null}"#
        );
        assert_eq!(event.routing_key(), "rejected.orders");
    }

    #[test]
    fn a_consumers_error_condition_is_reported() {
        let mut m = message();
        let cause = DeathCause::new(Some("app:bad-payload".into()), Some("schema v2 expected".into()), None, None);
        m.broker.refusal = cause.map(std::sync::Arc::new);
        let event = DeadLetterEvent::new("/", death(&m, None), 1);
        assert_eq!(event.error_condition.as_deref(), Some("app:bad-payload"));
        assert!(event.to_json().ends_with(r#""error_condition":"app:bad-payload"}"#), "{}", event.to_json());
    }

    #[test]
    fn a_drop_without_ids_or_exchange_says_so() {
        let m = Message::new(Routing { routing_key: "k".into(), ..Routing::default() }, Body::Data("m".into()));
        let death =
            Death { reason: DeathReason::Expired, dead_letter_exchange: None, ..death(&m, Some(DropReason::NoDlx)) };
        let event = DeadLetterEvent::new("vh", death, 5);
        assert_eq!(
            event.to_json(),
            r#"{"vhost":"vh","queue":"orders","reason":"expired","drop_reason":"no-dlx","message_id":null,"correlation_id":null,"count":1,"dead_letter_exchange":null,"routing_keys":["k"],"time":5,"error_condition":null}"#
        );
        assert_eq!(event.routing_key(), "expired.orders");
        assert_eq!(
            [DropReason::NoDlx, DropReason::Unroutable, DropReason::Cycle].map(DropReason::as_str),
            ["no-dlx", "unroutable", "cycle"]
        );
    }

    #[test]
    fn the_count_includes_earlier_deaths_of_the_same_queue_and_reason() {
        let once = dead_lettered_copy(&message(), "orders", DeathReason::Rejected, "", None, 1);
        let twice = dead_lettered_copy(&once, "orders", DeathReason::Rejected, "", None, 2);
        assert_eq!(DeadLetterEvent::new("/", death(&twice, None), 3).count, 3);
        let elsewhere = Death { queue: "other", ..death(&twice, None) };
        assert_eq!(DeadLetterEvent::new("/", elsewhere, 3).count, 1);
    }

    #[test]
    fn ids_of_every_type_render_as_text() {
        let uuid = MessageId::Uuid([0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(id_text(&uuid), "12345678-9abc-def0-0102-030405060708");
        assert_eq!(id_text(&MessageId::Binary(vec![0, 0xff, 0x10].into())), "00ff10");
        assert_eq!(id_text(&MessageId::Ulong(7)), "7");
        assert_eq!(id_text(&MessageId::String("s".into())), "s");
    }
}
