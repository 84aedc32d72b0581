//! Dead lettering, at most once, as RabbitMQ 4.0.5 does it (`rabbit_dead_letter:publish/5`).
//!
//! A queue hands every message that leaves it other than by acknowledgement to its
//! [`DeadLetterSink`] with a [`DeathReason`] and its settings ([`DeadLetterer`]). Without a dead-letter exchange, or when
//! that exchange does not exist, the message is dropped and counted under the `disabled`
//! strategy. Otherwise its copy gets one more death in its history, loses its TTL, takes the
//! dead-letter exchange as its exchange (and the dead-letter routing key, when set, as its only
//! routing key), is routed through the exchange graph (internal exchanges allowed, alternate
//! exchanges honoured), and goes to every target queue except those where the cycle rule drops
//! it. The queue then forwards the copies through its own outbox ([`crate::queue`]), so a slow
//! target pushes back on the dead-lettering queue only.

mod sink;

use std::sync::Arc;

use charon_model::{DeathHistory, DeathReason, DeathRecord, Encoded, Message, Value};

use crate::clock::now_ms;
use crate::metrics::{DeadLetterCounts, DeadLetterStrategy, count_dead_letter};
use crate::queue::{QueueRef, QueueType};

pub(crate) use sink::DeadLetterSink;

/// A dead-lettered copy on its way to the queues it was routed to.
#[derive(Debug)]
pub(crate) struct Forward {
    /// The copy, shared by all its targets.
    pub(crate) message: Arc<Message>,
    /// Target queues not yet handed the copy.
    pub(crate) targets: Vec<QueueRef>,
    /// The batch it belongs to, held for its drop: the last copy of a batch to go (handed to
    /// all its targets) completes the batch.
    _batch: Arc<sink::Batch>,
}

impl Forward {
    /// A copy in a batch of its own (outbox tests).
    #[cfg(test)]
    pub(crate) fn new(message: Arc<Message>, targets: Vec<QueueRef>) -> Self {
        Self { message, targets, _batch: sink::Batch::new().0 }
    }
}

/// What a queue needs to dead-letter its messages.
#[derive(Clone, Debug)]
pub(crate) struct DeadLetterer<'a> {
    /// The dead-lettering queue's name.
    pub(crate) queue: &'a str,
    /// Its per-queue counts.
    pub(crate) counts: &'a DeadLetterCounts,
    /// Its type (metrics label).
    pub(crate) queue_type: QueueType,
    /// The dead-letter exchange, if configured.
    pub(crate) exchange: Option<&'a str>,
    /// The dead-letter routing key, if configured.
    pub(crate) routing_key: Option<&'a str>,
}

impl DeadLetterer<'_> {
    /// Dead-letters one message through `sink`: returns the copy and its targets, or `None` when
    /// it is dropped (no dead-letter exchange, a missing one, no route, or only cyclic routes).
    fn dead_letter<S: DeadLetterSink + ?Sized>(
        &self,
        sink: &S,
        message: &Message,
        reason: DeathReason,
    ) -> Option<(Arc<Message>, Vec<QueueRef>)> {
        let routed = self.exchange.and_then(|exchange| {
            let copy = dead_lettered_copy(message, self.queue, reason, exchange, self.routing_key, now_ms());
            let headers = routing_headers(&copy);
            sink.route(exchange, &copy.routing, &headers).map(|targets| (copy, targets))
        });
        let strategy = if routed.is_some() { DeadLetterStrategy::AtMostOnce } else { DeadLetterStrategy::Disabled };
        count_dead_letter(self.queue_type, strategy, reason, self.counts);
        let (copy, mut targets) = routed?;
        if reason != DeathReason::Rejected
            && let Some(history) = copy.broker.deaths.as_deref()
        {
            targets.retain(|target| {
                let cycle = is_cycle(history, target.name());
                if cycle {
                    tracing::warn!(
                        queue = target.name(),
                        "message dropped: its death history contains a dead letter cycle without reason 'rejected'"
                    );
                }
                !cycle
            });
        }
        if targets.is_empty() {
            return None;
        }
        Some((Arc::new(copy), targets))
    }
}

/// The copy of `message` that leaves `queue` for the dead-letter exchange.
#[must_use]
pub fn dead_lettered_copy(
    message: &Message,
    queue: &str,
    reason: DeathReason,
    exchange: &str,
    routing_key: Option<&str>,
    now: i64,
) -> Message {
    let mut copy = message.clone();
    let keys = copy.routing.visible_keys();
    let record = DeathRecord {
        queue,
        reason,
        exchange: &copy.routing.exchange,
        routing_keys: &keys,
        ttl: copy.properties().ttl,
        now,
    };
    // A history carried in client headers (`x-death`) is opaque since RabbitMQ 4.0: only the
    // broker's own record counts, and rendering replaces the header.
    match copy.broker.deaths.as_deref_mut() {
        Some(history) => history.record(&record),
        None => copy.broker.deaths = Some(Box::new(DeathHistory::new(&record))),
    }
    if copy.properties().ttl.is_some() {
        copy.properties_mut().ttl = None;
    }
    copy.routing.exchange = exchange.to_owned();
    if let Some(key) = routing_key {
        copy.routing.routing_key = key.to_owned();
        copy.routing.cc.clear();
        copy.routing.bcc.clear();
    }
    // The failed-delivery count a quorum queue put on the message travels with the dead letter
    // (`rabbit_fifo:annotate_msg/2` sets the `delivery_count` annotation, which 1.0 consumers see
    // as `header.delivery-count`); the acquired count is queue-internal and does not.
    copy.broker.acquired_count = 0;
    // 0.9.1 property bytes no longer match (expiration and x-death change); a 1.0 bare message
    // is immutable and stays as it was, the history going into its annotations.
    if matches!(copy.encoded, Encoded::Amqp091Properties(_)) {
        copy.encoded = Encoded::None;
    }
    copy
}

/// The headers a headers exchange sees for a dead letter: the message's own headers plus the
/// `x-first-death-*` and `x-last-death-*` fields (RabbitMQ routes on its annotations too).
fn routing_headers(message: &Message) -> charon_model::Table {
    let mut headers = message.headers.clone();
    if let Some(history) = message.broker.deaths.as_deref() {
        for (key, value) in history.summary_fields() {
            headers.insert(key, Value::long_str(&value));
        }
    }
    headers
}

/// RabbitMQ's cycle rule (`mc:is_death_cycle/2`, applied for every reason but `rejected`): walk
/// the history, most recent first, to the first death in `target`; it is a cycle when no death
/// up to and including that one was a rejection.
#[must_use]
pub fn is_cycle(history: &DeathHistory, target: &str) -> bool {
    let Some(position) = history.entries.iter().position(|d| d.queue == target) else {
        return false;
    };
    history.entries.iter().take(position + 1).all(|d| d.reason != DeathReason::Rejected)
}

#[cfg(test)]
mod tests {
    use charon_model::{Body, Properties, Routing};

    use super::*;

    fn message() -> Message {
        let routing =
            Routing { exchange: "x".into(), routing_key: "k".into(), cc: vec!["c".into()], bcc: vec!["b".into()] };
        let mut m = Message::new(routing, Body::Data("body".into()));
        m.set_properties(Properties { ttl: Some(500), priority: Some(3), ..Properties::default() });
        m
    }

    #[test]
    fn copy_records_the_death_clears_ttl_and_takes_the_dlx() {
        let copy = dead_lettered_copy(&message(), "q", DeathReason::Rejected, "dlx", None, 1_000);
        let history = copy.broker.deaths.as_deref().unwrap();
        let death = history.entries.first().unwrap();
        assert_eq!(
            (death.queue.as_str(), death.exchange.as_str(), death.routing_keys.clone(), death.original_ttl),
            ("q", "x", vec!["k".to_owned(), "c".to_owned()], Some(500))
        );
        assert_eq!(copy.properties().ttl, None);
        assert_eq!(copy.properties().priority, Some(3));
        assert_eq!(copy.routing.exchange, "dlx");
        assert_eq!(copy.routing.all_keys().collect::<Vec<_>>(), ["k", "c", "b"]);
    }

    #[test]
    fn the_failed_delivery_count_travels_with_the_dead_letter() {
        let mut m = message();
        m.broker.delivery_count = 2;
        m.broker.acquired_count = 3;
        let copy = dead_lettered_copy(&m, "q", DeathReason::Rejected, "dlx", None, 1);
        assert_eq!((copy.broker.delivery_count, copy.broker.acquired_count), (2, 0));
    }

    #[test]
    fn a_dead_letter_routing_key_replaces_every_key() {
        let copy = dead_lettered_copy(&message(), "q", DeathReason::Expired, "dlx", Some("dl"), 1);
        assert_eq!(copy.routing.all_keys().collect::<Vec<_>>(), ["dl"]);
        // The history keeps the keys the message had before.
        assert_eq!(copy.broker.deaths.as_deref().unwrap().entries.first().unwrap().routing_keys, ["k", "c"]);
    }

    #[test]
    fn cycles_are_automatic_loops_back_to_the_target() {
        let m = dead_lettered_copy(&message(), "q1", DeathReason::Expired, "", None, 1);
        let h = m.broker.deaths.as_deref().unwrap();
        assert!(is_cycle(h, "q1"));
        assert!(!is_cycle(h, "q2"));
        // q1 -rejected-> q2 -expired-> q3 -expired-> back to q1: the rejection breaks the cycle.
        let m = dead_lettered_copy(&message(), "q1", DeathReason::Rejected, "", None, 1);
        let m = dead_lettered_copy(&m, "q2", DeathReason::Expired, "", None, 2);
        let m = dead_lettered_copy(&m, "q3", DeathReason::Expired, "", None, 3);
        let h = m.broker.deaths.as_deref().unwrap();
        assert!(!is_cycle(h, "q1"));
        assert!(is_cycle(h, "q2"));
    }
}
