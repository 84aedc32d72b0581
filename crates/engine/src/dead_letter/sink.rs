//! The seam between a queue and the exchange graph its dead letters go through.
//!
//! A queue task holds a [`DeadLetterSink`] instead of its vhost: it hands over a message that
//! left it with the reason and its dead-letter settings ([`DeadLetterer`]), and gets back the
//! copy with the queues to forward it to. The queue forwards it through its outbox and learns
//! from the targets' confirms when each has the copy (see `queue/unconfirmed.rs`). The queue
//! module therefore does not depend on the vhost that owns the queues, and the vhost implements
//! routing without knowing about queue tasks.

use std::sync::Arc;

use charon_model::{DeathReason, Message, Routing, Table};

use super::copy::{dead_lettered_copy, is_cycle, routing_headers};
use super::counts::{DeadLetterCounts, DeadLetterStrategy, count_dead_letter};
use super::events::event::Death;
use super::events::{DeadLetterEvents, DropReason};
use crate::clock::now_ms;
use crate::queue::args::QueueType;
use crate::queue::handle::QueueRef;

/// Where a queue's dead letters are routed: the vhost's exchange graph, as a queue task sees it.
pub(crate) trait DeadLetterSink: Send + Sync {
    /// The queues a dead letter published to `exchange` reaches, like a publish but without the
    /// `internal` check (RabbitMQ calls `rabbit_exchange:route` directly); `None` when the
    /// exchange does not exist.
    fn route(&self, exchange: &str, routing: &Routing, headers: &Table) -> Option<Vec<QueueRef>>;

    /// The vhost's dead-letter event stream, told of every death (none by default).
    fn events(&self) -> Option<&DeadLetterEvents> {
        None
    }
}

/// A dead-lettered copy on its way to the queues it was routed to.
#[derive(Debug)]
pub(crate) struct Forward {
    /// The copy, shared by all its targets.
    pub(crate) message: Arc<Message>,
    /// Target queues not yet handed the copy.
    pub(crate) targets: Vec<QueueRef>,
    /// The number each target confirms the copy with, when the source waits for that before
    /// removing the message from the log.
    pub(crate) confirm: Option<u64>,
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
    /// Dead-letters one message through `sink` (RabbitMQ 4.0.5's `rabbit_dead_letter:publish/5`),
    /// counting it at most once (or `disabled`): returns the copy and its targets, or `None`
    /// when it is dropped (no dead-letter exchange, a missing one, no route, or only cyclic
    /// routes).
    pub(crate) fn dead_letter<S: DeadLetterSink + ?Sized>(
        &self,
        sink: &S,
        message: &Message,
        reason: DeathReason,
    ) -> Option<(Arc<Message>, Vec<QueueRef>)> {
        let routed = self.copy(message, reason).and_then(|copy| {
            let targets =
                self.exchange.and_then(|exchange| sink.route(exchange, &copy.routing, &routing_headers(&copy)));
            targets.map(|targets| (copy, targets))
        });
        let strategy = if routed.is_some() { DeadLetterStrategy::AtMostOnce } else { DeadLetterStrategy::Disabled };
        count_dead_letter(self.queue_type, strategy, reason, self.counts);
        let Some((copy, targets)) = routed else {
            self.report(sink, message, reason, Some(DropReason::NoDlx));
            return None;
        };
        let routed_somewhere = !targets.is_empty();
        let targets = without_cycles(&copy, reason, targets);
        let dropped = match (routed_somewhere, targets.is_empty()) {
            (false, _) => Some(DropReason::Unroutable),
            (true, true) => Some(DropReason::Cycle),
            (true, false) => None,
        };
        self.report(sink, message, reason, dropped);
        (!targets.is_empty()).then(|| (Arc::new(copy), targets))
    }

    /// Reports the deaths of messages an at-least-once queue now keeps as dead letters (once
    /// each, when they die: not at every attempt to forward them).
    pub(crate) fn report_held<S: DeadLetterSink + ?Sized>(&self, sink: &S, held: &[(Arc<Message>, DeathReason)]) {
        for (message, reason) in held {
            self.report(sink, message, *reason, None);
        }
    }

    /// Tells the vhost's event stream of one death (a flag check when nothing listens).
    fn report<S: DeadLetterSink + ?Sized>(
        &self,
        sink: &S,
        message: &Message,
        reason: DeathReason,
        drop_reason: Option<DropReason>,
    ) {
        if let Some(events) = sink.events() {
            events.offer(Death {
                queue: self.queue,
                message,
                reason,
                dead_letter_exchange: self.exchange,
                drop_reason,
            });
        }
    }

    /// The dead-lettered copy of `message` (one more death, no TTL, the dead-letter exchange
    /// and routing key), or `None` without a dead-letter exchange.
    pub(crate) fn copy(&self, message: &Message, reason: DeathReason) -> Option<Message> {
        let exchange = self.exchange?;
        Some(dead_lettered_copy(message, self.queue, reason, exchange, self.routing_key, now_ms()))
    }

    /// The queues `copy` goes to now (the cycle rule applied); empty when its exchange is
    /// missing or routes it nowhere.
    pub(crate) fn route<S: DeadLetterSink + ?Sized>(
        &self,
        sink: &S,
        copy: &Message,
        reason: DeathReason,
    ) -> Vec<QueueRef> {
        let targets = self.exchange.and_then(|exchange| sink.route(exchange, &copy.routing, &routing_headers(copy)));
        without_cycles(copy, reason, targets.unwrap_or_default())
    }
}

/// Drops the targets the cycle rule excludes: a queue already in the copy's death history,
/// unless the message was rejected (RabbitMQ logs each).
fn without_cycles(copy: &Message, reason: DeathReason, mut targets: Vec<QueueRef>) -> Vec<QueueRef> {
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
    targets
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use charon_model::Body;
    use tokio::sync::mpsc;

    use super::*;
    use crate::queue::handle::QueueHandle;
    use crate::queue::requests::QueueConfig;

    /// Exchanges by name, each with the queues it routes every message to.
    struct Exchanges(HashMap<&'static str, Vec<QueueRef>>);

    impl DeadLetterSink for Exchanges {
        fn route(&self, exchange: &str, _routing: &Routing, _headers: &Table) -> Option<Vec<QueueRef>> {
            self.0.get(exchange).cloned()
        }
    }

    fn queue(id: u64, name: &str) -> QueueRef {
        let (tx, _rx) = mpsc::channel(1);
        let config = QueueConfig {
            name: name.into(),
            vhost: "/".into(),
            durable: false,
            auto_delete: false,
            exclusive_owner: None,
            arguments: Table::new(),
            queue_type: QueueType::Classic,
        };
        Arc::new(QueueHandle::new(id, config, tx))
    }

    fn letter(key: &str) -> (Arc<Message>, DeathReason) {
        let routing = Routing { exchange: "x".into(), routing_key: key.into(), ..Routing::default() };
        (Arc::new(Message::new(routing, Body::Data("m".into()))), DeathReason::Expired)
    }

    fn from<'a>(counts: &'a DeadLetterCounts, exchange: Option<&'a str>) -> DeadLetterer<'a> {
        DeadLetterer { queue: "src", counts, queue_type: QueueType::Classic, exchange, routing_key: Some("dl") }
    }

    #[test]
    fn routes_a_letter_to_every_target_with_the_dead_letter_exchange_and_key() {
        let (a, b) = (queue(1, "a"), queue(2, "b"));
        let sink = Exchanges(HashMap::from([("dlx", vec![Arc::clone(&a), Arc::clone(&b)])]));
        let counts = DeadLetterCounts::default();
        let (message, reason) = letter("k1");
        let (copy, targets) = from(&counts, Some("dlx")).dead_letter(&sink, &message, reason).unwrap();
        assert_eq!(targets.iter().map(|t| t.id).collect::<Vec<_>>(), [1, 2]);
        assert_eq!((copy.routing.exchange.as_str(), copy.routing.routing_key.as_str()), ("dlx", "dl"));
        let deaths = copy.broker.deaths.as_deref().unwrap();
        assert_eq!(deaths.entries.iter().map(|d| d.queue.as_str()).collect::<Vec<_>>(), ["src"]);
    }

    #[test]
    fn a_letter_without_a_dead_letter_exchange_or_route_is_dropped() {
        let sink = Exchanges(HashMap::from([("empty", Vec::new())]));
        let counts = DeadLetterCounts::default();
        // No dead-letter exchange configured, one that does not exist, and one with no route.
        for exchange in [None, Some("missing"), Some("empty")] {
            let (message, reason) = letter("k");
            assert!(from(&counts, exchange).dead_letter(&sink, &message, reason).is_none());
        }
    }
}
