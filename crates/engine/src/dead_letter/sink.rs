//! The seam between a queue and the exchange graph its dead letters go through.
//!
//! A queue task holds a [`DeadLetterSink`] instead of its vhost: it hands over what left it with
//! the reason and its dead-letter settings, and gets back the copies to forward to their target
//! queues with a completion, [`Accepted`], that resolves once every copy was accepted by all its
//! targets. The queue module therefore does not depend on the vhost that owns the queues, and
//! the vhost implements routing without knowing about queue tasks.
//!
//! Today's strategy is RabbitMQ's at-most-once: the source forgets its dead letters as soon as
//! they are handed over, and a copy counts as accepted once its targets' mailboxes took it (or
//! the target is gone). At-least-once dead lettering keeps the source's message until
//! [`Accepted`] resolves, which will then wait for the targets' confirms instead.

use std::sync::Arc;

use charon_model::{DeathReason, Message, Routing, Table};
use tokio::sync::oneshot;

use super::copy::{dead_lettered_copy, is_cycle, routing_headers};
use super::counts::{DeadLetterCounts, DeadLetterStrategy, count_dead_letter};
use crate::clock::now_ms;
use crate::queue::args::QueueType;
use crate::queue::handle::QueueRef;

/// Where a queue's dead letters are routed: the vhost's exchange graph, as a queue task sees it.
pub(crate) trait DeadLetterSink: Send + Sync {
    /// The queues a dead letter published to `exchange` reaches, like a publish but without the
    /// `internal` check (RabbitMQ calls `rabbit_exchange:route` directly); `None` when the
    /// exchange does not exist.
    fn route(&self, exchange: &str, routing: &Routing, headers: &Table) -> Option<Vec<QueueRef>>;

    /// Dead-letters one pass's `letters` from the queue `from` describes (RabbitMQ 4.0.5's
    /// `rabbit_dead_letter:publish/5` for each): the copies to forward, in order, and the
    /// completion of their delivery.
    fn dead_letter(&self, from: &DeadLetterer<'_>, letters: Vec<(Arc<Message>, DeathReason)>) -> DeadLettered {
        let (batch, accepted) = Batch::new();
        let forwards = letters
            .into_iter()
            .filter_map(|(message, reason)| from.dead_letter(self, &message, reason))
            .map(|(message, targets)| Forward { message, targets, _batch: Arc::clone(&batch) })
            .collect();
        DeadLettered { forwards, accepted }
    }
}

/// A dead-lettered copy on its way to the queues it was routed to.
#[derive(Debug)]
pub(crate) struct Forward {
    /// The copy, shared by all its targets.
    pub(crate) message: Arc<Message>,
    /// Target queues not yet handed the copy.
    pub(crate) targets: Vec<QueueRef>,
    /// The batch it belongs to, held for its drop: the last copy of a batch to go (handed to
    /// all its targets) completes the batch.
    _batch: Arc<Batch>,
}

impl Forward {
    /// A copy in a batch of its own (outbox tests).
    #[cfg(test)]
    pub(crate) fn new(message: Arc<Message>, targets: Vec<QueueRef>) -> Self {
        Self { message, targets, _batch: Batch::new().0 }
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

/// What [`DeadLetterSink::dead_letter`] hands back to the queue.
#[derive(Debug)]
pub(crate) struct DeadLettered {
    /// The copies with their targets, for the queue's outbox.
    pub(crate) forwards: Vec<Forward>,
    /// Resolves once all of them were accepted by every target.
    pub(crate) accepted: Accepted,
}

/// The completion of one batch of dead letters.
#[derive(Debug)]
pub(crate) struct Accepted(oneshot::Receiver<()>);

impl Accepted {
    /// Waits until every copy of the batch was accepted by all its targets.
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "at-most-once drops the completion; at-least-once dead lettering waits on it")
    )]
    pub(crate) async fn wait(self) {
        // The sender goes with the batch's last copy: sent or dropped, the batch is done.
        let _ = self.0.await;
    }
}

/// Shared by the copies of one batch; the last one to go (its targets all took it) completes
/// the batch.
#[derive(Debug)]
pub(crate) struct Batch(Option<oneshot::Sender<()>>);

impl Batch {
    /// A batch and its completion.
    pub(crate) fn new() -> (Arc<Self>, Accepted) {
        let (tx, rx) = oneshot::channel();
        (Arc::new(Self(Some(tx))), Accepted(rx))
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if let Some(done) = self.0.take() {
            let _ = done.send(());
        }
    }
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

    #[tokio::test]
    async fn routes_each_letter_and_completes_when_the_last_copy_is_handed_over() {
        let (a, b) = (queue(1, "a"), queue(2, "b"));
        let sink = Exchanges(HashMap::from([("dlx", vec![Arc::clone(&a), Arc::clone(&b)])]));
        let counts = DeadLetterCounts::default();
        let mut done = sink.dead_letter(&from(&counts, Some("dlx")), vec![letter("k1"), letter("k2")]);
        assert_eq!(done.forwards.len(), 2);
        let first = done.forwards.first().unwrap();
        assert_eq!(first.targets.iter().map(|t| t.id).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(
            (first.message.routing.exchange.as_str(), first.message.routing.routing_key.as_str()),
            ("dlx", "dl")
        );
        // Not accepted while a copy still waits for a target.
        let last = done.forwards.pop().unwrap();
        drop(done.forwards);
        let mut accepted = std::pin::pin!(done.accepted.wait());
        assert!(futures_poll(&mut accepted).is_pending());
        drop(last);
        assert!(futures_poll(&mut accepted).is_ready());
    }

    #[tokio::test]
    async fn a_batch_with_nothing_to_forward_is_accepted_at_once() {
        let sink = Exchanges(HashMap::new());
        let counts = DeadLetterCounts::default();
        // No dead-letter exchange configured, and one that does not exist: both dropped.
        for exchange in [None, Some("missing")] {
            let done = sink.dead_letter(&from(&counts, exchange), vec![letter("k")]);
            assert!(done.forwards.is_empty());
            let mut accepted = std::pin::pin!(done.accepted.wait());
            assert!(futures_poll(&mut accepted).is_ready());
        }
    }

    fn futures_poll<F: std::future::Future + Unpin>(future: &mut F) -> std::task::Poll<F::Output> {
        let waker = std::task::Waker::noop();
        std::pin::Pin::new(future).poll(&mut std::task::Context::from_waker(waker))
    }
}
