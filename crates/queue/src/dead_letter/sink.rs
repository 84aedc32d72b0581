//! The seam between a queue and the exchange graph its dead letters go through.
//!
//! A queue task holds a [`DeadLetterSink`] instead of its vhost: it hands over a message that
//! left it with the reason and its dead-letter settings ([`DeadLetterer`]), and gets back the
//! copy with the queues to forward it to. The queue forwards it through its outbox and learns
//! from the targets' confirms when each has the copy (see `queue/unconfirmed.rs`). The queue
//! module therefore does not depend on the vhost that owns the queues, and the vhost implements
//! routing without knowing about queue tasks.

use std::sync::Arc;

use charon_model::{DeathReason, Message};

use super::copy::{dead_lettered_copy, is_cycle, routing_headers};
use super::counts::{DeadLetterCounts, DeadLetterStrategy, count_dead_letter};
use super::drops::DropReason;
use super::events::DeadLetterEvents;
use super::events::event::Death;
use super::route::Router;
use crate::args::QueueType;
use crate::handle::QueueRef;
use crate::requests::ConfirmTo;

/// Where a queue's dead letters are routed: the vhost's exchange graph ([`Router`]), and what
/// becomes of a letter it cannot route, as a queue task sees them.
pub trait DeadLetterSink: Router {
    /// A dead letter of `queue` was dropped where RabbitMQ drops it silently: counts and logs
    /// it, and returns the fallback queue to keep it in (`None` when the fallback is off, or
    /// when `queue` is the fallback queue itself).
    fn dropped(&self, queue: &str, reason: DropReason) -> Option<QueueRef>;

    /// The vhost's dead-letter event stream, told of every death (none by default).
    fn events(&self) -> Option<&DeadLetterEvents> {
        None
    }
}

/// What became of a dead letter.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The copy goes to these queues.
    Routed(Arc<Message>, Vec<QueueRef>),
    /// The queue has no dead-letter exchange: the message is discarded, as its owner chose.
    Discarded,
    /// RabbitMQ would drop it silently: the copy (its death recorded) and why. (Boxed: a
    /// rare outcome, and the others are small.)
    Dropped(Box<Message>, DropReason),
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
    /// Where the confirm goes when not to the forwarding queue itself: a queue that refused a
    /// dead letter passes it on to the fallback queue with the source's own confirm number, so
    /// the source still learns when the copy is safe.
    pub(crate) reply_to: Option<ConfirmTo>,
}

impl Forward {
    /// A copy for `targets`, confirmed (if `confirm`) to the forwarding queue.
    pub(crate) fn new(message: Arc<Message>, targets: Vec<QueueRef>, confirm: Option<u64>) -> Self {
        Self { message, targets, confirm, reply_to: None }
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
    /// When the letters die (ms since the epoch): the queue's time for the pass, an input like
    /// every time the queue machine uses, so that two machines make the same copies.
    pub(crate) at: i64,
}

impl DeadLetterer<'_> {
    /// Dead-letters one message through `sink` (RabbitMQ 4.0.5's `rabbit_dead_letter:publish/5`),
    /// counting it at most once (or `disabled`): the copy and its targets, or why it is not
    /// routed (no dead-letter exchange; a missing one, no route, or only cyclic routes).
    pub(crate) fn dead_letter<S: DeadLetterSink + ?Sized>(
        &self,
        sink: &S,
        message: &Message,
        reason: DeathReason,
    ) -> Outcome {
        let Some(copy) = self.copy(message, reason) else {
            count_dead_letter(self.queue_type, DeadLetterStrategy::Disabled, reason, self.counts);
            self.report(sink, message, reason, Some(DropReason::NoDlx));
            return Outcome::Discarded;
        };
        let targets = self.exchange.and_then(|exchange| sink.route(exchange, &copy.routing, &routing_headers(&copy)));
        let strategy = if targets.is_some() { DeadLetterStrategy::AtMostOnce } else { DeadLetterStrategy::Disabled };
        count_dead_letter(self.queue_type, strategy, reason, self.counts);
        let drop_reason = match &targets {
            None => Some(DropReason::NoDlx),
            Some(targets) if targets.is_empty() => Some(DropReason::Unroutable),
            Some(_) => None,
        };
        let targets = targets.map(|targets| without_cycles(&copy, reason, targets)).unwrap_or_default();
        let drop_reason = drop_reason.or_else(|| targets.is_empty().then_some(DropReason::Cycle));
        self.report(sink, message, reason, drop_reason);
        match drop_reason {
            Some(why) => Outcome::Dropped(Box::new(copy), why),
            None => Outcome::Routed(Arc::new(copy), targets),
        }
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

    /// The dead-lettered copy of `message` (one more death at [`Self::at`], no TTL, the
    /// dead-letter exchange and routing key), or `None` without a dead-letter exchange.
    pub(crate) fn copy(&self, message: &Message, reason: DeathReason) -> Option<Message> {
        self.copy_at(message, reason, self.at)
    }

    /// [`Self::copy`] with its death recorded at `at` (ms since the epoch): an at-least-once
    /// letter that waited on disk is copied again with its first copy's death time.
    pub(crate) fn copy_at(&self, message: &Message, reason: DeathReason, at: i64) -> Option<Message> {
        let exchange = self.exchange?;
        Some(dead_lettered_copy(message, self.queue, reason, exchange, self.routing_key, at))
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

    use charon_model::{Body, Routing, Table};

    use super::*;
    use crate::handle::QueueHandle;

    /// Exchanges by name, each with the queues it routes every message to.
    struct Exchanges(HashMap<&'static str, Vec<QueueRef>>);

    impl Router for Exchanges {
        fn route(&self, exchange: &str, _routing: &Routing, _headers: &Table) -> Option<Vec<QueueRef>> {
            self.0.get(exchange).cloned()
        }
    }

    impl DeadLetterSink for Exchanges {
        fn dropped(&self, _queue: &str, _reason: DropReason) -> Option<QueueRef> {
            None
        }
    }

    fn queue(id: u64, name: &str) -> QueueRef {
        QueueHandle::detached(id, name)
    }

    fn letter(key: &str) -> (Arc<Message>, DeathReason) {
        let routing = Routing { exchange: "x".into(), routing_key: key.into(), ..Routing::default() };
        (Arc::new(Message::new(routing, Body::Data("m".into()))), DeathReason::Expired)
    }

    fn from<'a>(counts: &'a DeadLetterCounts, exchange: Option<&'a str>) -> DeadLetterer<'a> {
        DeadLetterer {
            queue: "src",
            counts,
            queue_type: QueueType::Classic,
            exchange,
            routing_key: Some("dl"),
            at: 1_700_000_000_000,
        }
    }

    #[test]
    fn routes_a_letter_to_every_target_with_the_dead_letter_exchange_and_key() {
        let (a, b) = (queue(1, "a"), queue(2, "b"));
        let sink = Exchanges(HashMap::from([("dlx", vec![Arc::clone(&a), Arc::clone(&b)])]));
        let counts = DeadLetterCounts::default();
        let (message, reason) = letter("k1");
        let Outcome::Routed(copy, targets) = from(&counts, Some("dlx")).dead_letter(&sink, &message, reason) else {
            panic!("not routed");
        };
        assert_eq!(targets.iter().map(|t| t.id).collect::<Vec<_>>(), [1, 2]);
        assert_eq!((copy.routing.exchange.as_str(), copy.routing.routing_key.as_str()), ("dlx", "dl"));
        let deaths = copy.broker.deaths.as_deref().unwrap();
        assert_eq!(deaths.entries.iter().map(|d| d.queue.as_str()).collect::<Vec<_>>(), ["src"]);
        // It died at the queue's time for the pass, not at a clock read of its own.
        assert_eq!((deaths.entries[0].first_time, deaths.entries[0].last_time), (1_700_000_000_000, 1_700_000_000_000));
    }

    #[test]
    fn a_letter_without_a_dead_letter_exchange_or_route_is_not_routed_and_says_why() {
        let src = queue(3, "src");
        let sink = Exchanges(HashMap::from([("empty", Vec::new()), ("loop", vec![src])]));
        let counts = DeadLetterCounts::default();
        let (message, reason) = letter("k");
        assert!(matches!(from(&counts, None).dead_letter(&sink, &message, reason), Outcome::Discarded));
        // A dead letter that already died in `src` (expired) and is routed back only there.
        let (message, reason) = letter("k");
        let Outcome::Dropped(died_once, _) = from(&counts, Some("missing")).dead_letter(&sink, &message, reason) else {
            panic!("not dropped");
        };
        let cases = [(Some("missing"), &message, DropReason::NoDlx), (Some("empty"), &message, DropReason::Unroutable)];
        for (exchange, message, why) in cases {
            let Outcome::Dropped(copy, reason) = from(&counts, exchange).dead_letter(&sink, message, reason) else {
                panic!("not dropped");
            };
            assert_eq!(reason, why);
            assert_eq!(copy.broker.deaths.as_deref().map(|h| h.entries.len()), Some(1), "its death is recorded");
        }
        let outcome = from(&counts, Some("loop")).dead_letter(&sink, &died_once, DeathReason::Expired);
        assert!(matches!(outcome, Outcome::Dropped(_, DropReason::Cycle)));
        // Rejected letters are exempt from the cycle rule.
        assert!(matches!(
            from(&counts, Some("loop")).dead_letter(&sink, &died_once, DeathReason::Rejected),
            Outcome::Routed(..)
        ));
    }
}
