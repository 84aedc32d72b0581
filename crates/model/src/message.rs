//! The message the engine stores and routes.

use std::borrow::Cow;
use std::sync::{Arc, LazyLock};

use bytes::Bytes;

use crate::death::DeathHistory;
use crate::death_cause::DeathCause;
use crate::properties::Properties;
use crate::value::{Table, Value};

/// Where a message is addressed: the facts routing and dead lettering need.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Routing {
    /// The exchange it was (last) published to; `""` is the default exchange.
    pub exchange: String,
    /// The routing key it was published with.
    pub routing_key: String,
    /// Extra routing keys from the 0.9.1 `CC` header (or the 1.0 `x-cc` annotation). They stay
    /// visible to consumers.
    pub cc: Vec<String>,
    /// Extra routing keys from the 0.9.1 `BCC` header. They route the message but are removed
    /// from its headers, so no consumer ever sees them.
    pub bcc: Vec<String>,
}

impl Routing {
    /// Every routing key: the publish key, then CC, then BCC (RabbitMQ's order).
    pub fn all_keys(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.routing_key.as_str())
            .chain(self.cc.iter().map(String::as_str))
            .chain(self.bcc.iter().map(String::as_str))
    }

    /// The keys a death record shows: the publish key and CC, never BCC.
    #[must_use]
    pub fn visible_keys(&self) -> Vec<String> {
        std::iter::once(self.routing_key.clone()).chain(self.cc.iter().cloned()).collect()
    }

    /// Whether the message routes by more than its publish key.
    #[must_use]
    pub fn has_extra_keys(&self) -> bool {
        !self.cc.is_empty() || !self.bcc.is_empty()
    }
}

/// State the broker attaches to a message, rendered per consumer protocol.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BrokerAnnotations {
    /// Why and where the message was dead-lettered, if ever.
    pub deaths: Option<Box<DeathHistory>>,
    /// Failed deliveries so far (quorum queues; carried across dead lettering).
    pub delivery_count: u32,
    /// Times the message was handed to a consumer and came back. A quorum queue sets it on the
    /// copy it delivers (never on the message it keeps); consumers see it as
    /// [`DELIVERY_COUNT_KEY`], rendered per consumer protocol like the death history.
    pub acquired_count: u32,
    /// What the consumer that just refused the message said about it: set by the queue as it
    /// discards the message, moved into the death history when the message is dead-lettered
    /// (so it is neither stored nor rendered itself). `None` unless an AMQP 1.0 consumer sent
    /// an error or annotations with its outcome.
    pub refusal: Option<Arc<DeathCause>>,
    /// How often a redrive job moved the message out of a dead-letter queue (Charon's
    /// extension, issue 20); consumers see it as [`REDRIVE_COUNT_KEY`] once it is above 0.
    pub redrive_count: u32,
    /// Not deliverable before this moment (ms since the epoch): a queue keeps the message out
    /// of its ready messages until then (Zaqar's per-message `delay`, the only way to set it;
    /// no AMQP header or annotation sets it, and no AMQP consumer sees it). Stored with the
    /// message, so the delay survives restarts; a dead letter's copy loses it.
    pub not_before: Option<i64>,
}

/// The 0.9.1 header / 1.0 message annotation that shows a redelivered quorum-queue message's
/// [`BrokerAnnotations::acquired_count`] (RabbitMQ 4.0.5's
/// `rabbit_fifo_client:add_delivery_count_header/2`).
pub const DELIVERY_COUNT_KEY: &str = "x-delivery-count";

/// The 0.9.1 header / 1.0 message annotation that shows how often redrive jobs moved a
/// message out of a dead-letter queue ([`BrokerAnnotations::redrive_count`]).
pub const REDRIVE_COUNT_KEY: &str = "x-charon-redrive-count";

impl BrokerAnnotations {
    /// `table` (0.9.1 headers or 1.0 message annotations, whichever the publishing protocol
    /// keeps its `x-` entries in) with the broker's counts as longs — replacing an entry of
    /// that name in place, else appended: [`DELIVERY_COUNT_KEY`] when the message came back
    /// before (the first delivery carries no count), [`REDRIVE_COUNT_KEY`] when a redrive
    /// moved it; `table` itself when neither applies.
    #[must_use]
    pub fn with_delivery_count<'a>(&self, table: &'a Table) -> Cow<'a, Table> {
        if self.acquired_count == 0 && self.redrive_count == 0 {
            return Cow::Borrowed(table);
        }
        let mut counted = table.clone();
        if self.acquired_count > 0 {
            counted.insert(DELIVERY_COUNT_KEY, Value::I64(i64::from(self.acquired_count)));
        }
        if self.redrive_count > 0 {
            counted.insert(REDRIVE_COUNT_KEY, Value::I64(i64::from(self.redrive_count)));
        }
        Cow::Owned(counted)
    }

    /// Whether the counts change what a consumer sees ([`Self::with_delivery_count`] adds an
    /// entry), so that a message's original encoding cannot be passed through.
    #[must_use]
    pub fn adds_entries(&self) -> bool {
        self.acquired_count > 0 || self.redrive_count > 0
    }
}

/// The message body.
#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    /// Opaque bytes: a 0.9.1 body, or the contents of a 1.0 message's single `data` section.
    Data(Bytes),
    /// A 1.0 body that is not a single `data` section (`amqp-value`, `amqp-sequence`, or several
    /// `data` sections), kept as its encoded sections.
    Amqp10Sections(Bytes),
}

impl Body {
    /// Size in bytes, as length limits count it.
    #[must_use]
    pub fn len(&self) -> usize {
        match self {
            Self::Data(b) | Self::Amqp10Sections(b) => b.len(),
        }
    }

    /// Whether the body has no bytes.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The raw bytes, whatever their kind.
    #[must_use]
    pub fn bytes(&self) -> &Bytes {
        match self {
            Self::Data(b) | Self::Amqp10Sections(b) => b,
        }
    }
}

impl Default for Body {
    fn default() -> Self {
        Self::Data(Bytes::new())
    }
}

/// The message as it arrived on the wire, kept so a consumer on the same protocol gets the
/// original bytes when the broker changed nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Encoded {
    /// Nothing kept (built by the broker, or changed since it arrived).
    #[default]
    None,
    /// The property list of a 0.9.1 content header frame (flags onward), as received.
    Amqp091Properties(Bytes),
    /// The bare message of an AMQP 1.0 transfer (properties through footer), as received.
    Amqp10Bare(Bytes),
}

/// Which protocol published the message. Conversions follow different rules per origin
/// (RabbitMQ's `mc_amqpl` and `mc_amqp` modules), and the origin outlives [`Encoded`], which is
/// dropped once the broker changes a 0.9.1 message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Origin {
    /// Built by the broker itself.
    #[default]
    Broker,
    /// Published over AMQP 0.9.1: `headers` is the 0.9.1 header table (with `x-` headers).
    Amqp091,
    /// Published over AMQP 1.0: `headers` is application-properties, `annotations` the
    /// message annotations.
    Amqp10,
}

static NO_PROPERTIES: LazyLock<Properties> = LazyLock::new(Properties::default);

/// A message in the broker.
///
/// Queues hold it behind an `Arc`, so fanning out to many queues never copies it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Message {
    /// Boxed and optional because most high-rate messages carry few or no properties; this keeps
    /// a queued message small.
    properties: Option<Box<Properties>>,
    /// Application headers: 0.9.1 `headers` (without `BCC`), 1.0 `application-properties`.
    pub headers: Table,
    /// 1.0 message annotations (symbol keys, normally `x-` prefixed).
    pub annotations: Table,
    /// The body.
    pub body: Body,
    /// Routing facts.
    pub routing: Routing,
    /// Broker-owned annotations.
    pub broker: BrokerAnnotations,
    /// The original encoding, for pass-through.
    pub encoded: Encoded,
    /// The publishing protocol.
    pub origin: Origin,
}

impl Message {
    /// A message with the given routing and body and no properties.
    #[must_use]
    pub fn new(routing: Routing, body: Body) -> Self {
        Self { routing, body, ..Self::default() }
    }

    /// The message properties (defaults when none were set).
    #[must_use]
    pub fn properties(&self) -> &Properties {
        self.properties.as_deref().unwrap_or(&NO_PROPERTIES)
    }

    /// Mutable properties, allocated on first use.
    pub fn properties_mut(&mut self) -> &mut Properties {
        self.properties.get_or_insert_with(Box::default)
    }

    /// Replaces all properties.
    pub fn set_properties(&mut self, properties: Properties) {
        self.properties = if properties == Properties::default() { None } else { Some(Box::new(properties)) };
    }

    /// Replaces all properties with boxed ones, as a decoder made them: moves the box, not the
    /// 300 bytes in it.
    pub fn set_boxed_properties(&mut self, properties: Option<Box<Properties>>) {
        self.properties = properties.filter(|p| **p != *NO_PROPERTIES);
    }

    /// Whether the message asks to survive a broker restart. A 1.0 message is persistent
    /// unless its header says `durable=false`: RabbitMQ 4.0.5 reads a missing `durable` as true
    /// (`mc_amqp:get_property(durable, _)`), though the 1.0 spec defaults it to false.
    #[must_use]
    pub fn is_persistent(&self) -> bool {
        match self.origin {
            Origin::Amqp10 => self.properties().durable != Some(false),
            Origin::Amqp091 | Origin::Broker => self.properties().is_persistent(),
        }
    }

    /// Body size in bytes.
    #[must_use]
    pub fn body_len(&self) -> usize {
        self.body.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_keys_are_publish_then_cc_then_bcc() {
        let r = Routing { exchange: "x".into(), routing_key: "k".into(), cc: vec!["c".into()], bcc: vec!["b".into()] };
        assert_eq!(r.all_keys().collect::<Vec<_>>(), ["k", "c", "b"]);
        assert_eq!(r.visible_keys(), ["k", "c"]);
    }

    #[test]
    fn persistence_follows_delivery_mode_over_091_and_durable_defaulting_to_true_over_10() {
        let message = |origin, delivery_mode, durable| {
            let mut m = Message { origin, ..Message::default() };
            m.set_properties(Properties { delivery_mode, durable, ..Properties::default() });
            m
        };
        assert!(message(Origin::Amqp091, Some(2), None).is_persistent());
        assert!(!message(Origin::Amqp091, Some(1), None).is_persistent());
        assert!(!message(Origin::Amqp091, None, None).is_persistent());
        assert!(message(Origin::Amqp10, None, None).is_persistent());
        assert!(message(Origin::Amqp10, None, Some(true)).is_persistent());
        assert!(!message(Origin::Amqp10, None, Some(false)).is_persistent());
    }

    #[test]
    fn the_delivery_count_shows_only_after_a_return_and_replaces_in_place() {
        let table: Table = vec![("a".to_owned(), Value::I32(1)), ("b".to_owned(), Value::I32(2))].into_iter().collect();
        let fresh = BrokerAnnotations::default();
        assert!(matches!(fresh.with_delivery_count(&table), Cow::Borrowed(t) if std::ptr::eq(t, &table)));
        let returned = BrokerAnnotations { acquired_count: 3, ..BrokerAnnotations::default() };
        let counted = returned.with_delivery_count(&table);
        let keys: Vec<&str> = counted.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["a", "b", DELIVERY_COUNT_KEY]);
        assert_eq!(counted.get(DELIVERY_COUNT_KEY), Some(&Value::I64(3)));
        // A published entry of that name keeps its place and takes the broker's count.
        let forged: Table =
            vec![(DELIVERY_COUNT_KEY.to_owned(), Value::long_str("x")), ("z".to_owned(), Value::I32(0))]
                .into_iter()
                .collect();
        let counted = returned.with_delivery_count(&forged);
        assert_eq!(counted.0, vec![(DELIVERY_COUNT_KEY.to_owned(), Value::I64(3)), ("z".to_owned(), Value::I32(0))]);
    }

    #[test]
    fn the_redrive_count_shows_once_moved_after_the_delivery_count() {
        let table: Table = vec![("a".to_owned(), Value::I32(1))].into_iter().collect();
        let moved = BrokerAnnotations { redrive_count: 2, ..BrokerAnnotations::default() };
        assert!(moved.adds_entries());
        let counted = moved.with_delivery_count(&table);
        assert_eq!(counted.0, vec![("a".to_owned(), Value::I32(1)), (REDRIVE_COUNT_KEY.to_owned(), Value::I64(2))]);
        let both = BrokerAnnotations { redrive_count: 1, acquired_count: 4, ..BrokerAnnotations::default() };
        let counted = both.with_delivery_count(&table);
        let keys: Vec<&str> = counted.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["a", DELIVERY_COUNT_KEY, REDRIVE_COUNT_KEY]);
        assert!(!BrokerAnnotations::default().adds_entries());
    }

    #[test]
    fn default_properties_are_not_allocated() {
        let mut m = Message::default();
        m.set_properties(Properties::default());
        assert!(m.properties.is_none());
        m.properties_mut().priority = Some(3);
        assert_eq!(m.properties().priority, Some(3));
    }
}
