//! Dead letters RabbitMQ drops silently, and Charon's answer: the vhost's fallback queue.
//!
//! A queue with a dead-letter exchange loses a dead letter in RabbitMQ when that exchange does
//! not exist, routes it nowhere, routes it only into a cycle, or when the one target refuses it
//! (a full `reject-publish` queue). Charon sends such a letter, with its death recorded and a
//! drop reason attached, to the vhost's [`FALLBACK_QUEUE`] instead, and counts and logs every
//! drop ([`Drops`]). What clients see on the named queues does not change. A queue without a
//! dead-letter exchange is not part of this: discarding is what its owner chose.

use std::collections::HashMap;

use charon_model::{Message, Origin, Value};
use parking_lot::Mutex;

/// The vhost's fallback queue: durable, bounded, created with the vhost.
pub const FALLBACK_QUEUE: &str = "amq.charon.dead-letters";

/// Header (0.9.1-published or broker-built messages) that says why a fallback copy was dropped.
pub const DROP_REASON_HEADER: &str = "charon-drop-reason";
/// The same as a 1.0 message annotation (a 1.0 bare message is immutable; annotations are
/// where a broker adds to it, and `x-opt-` is how they are named).
pub const DROP_REASON_ANNOTATION: &str = "x-opt-charon-drop-reason";

/// How often at most a queue's drops are logged.
const LOG_EVERY_MS: i64 = 60_000;

/// Why RabbitMQ would have dropped a dead letter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DropReason {
    /// The configured dead-letter exchange does not exist (in dead-letter events also: none
    /// is configured; such a queue's drops are not kept or counted as drops).
    NoDlx,
    /// The dead-letter exchange routed the letter to no queue.
    Unroutable,
    /// Every queue it routed to was removed by the cycle rule.
    Cycle,
    /// A target queue with `reject-publish` was full.
    TargetFull,
}

impl DropReason {
    /// The label and header value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoDlx => "no-dlx",
            Self::Unroutable => "unroutable",
            Self::Cycle => "cycle",
            Self::TargetFull => "target-full",
        }
    }
}

/// `copy` (a dead-lettered copy) marked with why it was dropped, where the publishing
/// protocol keeps what a broker adds: a header for 0.9.1, an annotation for 1.0.
#[must_use]
pub fn marked_dropped(mut copy: Message, reason: DropReason) -> Message {
    let value = Value::long_str(reason.as_str());
    match copy.origin {
        Origin::Amqp10 => copy.annotations.insert(DROP_REASON_ANNOTATION, Value::Symbol(reason.as_str().into())),
        Origin::Amqp091 | Origin::Broker => {
            copy.headers.insert(DROP_REASON_HEADER, value);
            // The 0.9.1 property bytes no longer match the headers.
            copy.encoded = charon_model::Encoded::None;
        }
    }
    copy
}

/// One queue's drops for one reason.
#[derive(Debug, Default)]
struct Tally {
    count: u64,
    /// Counted since the last log line.
    unlogged: u64,
    /// When the last log line was written (ms since epoch; 0: never).
    logged_at: i64,
}

/// A vhost's dropped dead letters, by the queue they died in and the reason, for
/// `charon_dead_letters_dropped_total`. The series outlive a deleted queue (they count what was
/// lost, which deleting the queue does not undo). Drops are rare: one lock per drop is cheap.
#[derive(Debug, Default)]
pub struct Drops(Mutex<HashMap<(String, DropReason), Tally>>);

impl Drops {
    /// Counts one dead letter of `queue` dropped for `reason` at `now`, logging at most once a
    /// minute per queue and reason (with how many were dropped since the last line).
    pub fn count(&self, vhost: &str, queue: &str, reason: DropReason, fallback: bool, now: i64) {
        let mut tallies = self.0.lock();
        let tally = tallies.entry((queue.to_owned(), reason)).or_default();
        tally.count += 1;
        tally.unlogged += 1;
        if tally.logged_at == 0 || now.saturating_sub(tally.logged_at) >= LOG_EVERY_MS {
            let dropped = std::mem::take(&mut tally.unlogged);
            tally.logged_at = now;
            drop(tallies);
            let kept = if fallback { FALLBACK_QUEUE } else { "nowhere (the fallback queue is off)" };
            tracing::warn!(
                vhost,
                queue,
                drop_reason = reason.as_str(),
                dropped,
                "dead letters dropped; kept in {kept}"
            );
        }
    }

    /// Every `(queue, reason, count)`, sorted.
    #[must_use]
    pub fn counts(&self) -> Vec<(String, DropReason, u64)> {
        let mut counts: Vec<_> = self.0.lock().iter().map(|((q, r), t)| (q.clone(), *r, t.count)).collect();
        counts.sort();
        counts
    }

    #[cfg(test)]
    fn unlogged(&self, queue: &str, reason: DropReason) -> u64 {
        self.0.lock().get(&(queue.to_owned(), reason)).map_or(0, |t| t.unlogged)
    }
}

#[cfg(test)]
mod tests {
    use charon_model::{Body, Routing};

    use super::*;

    #[test]
    fn drops_are_counted_per_queue_and_reason_and_logged_once_a_minute() {
        let drops = Drops::default();
        drops.count("/", "q", DropReason::Unroutable, true, 1_000);
        drops.count("/", "q", DropReason::Unroutable, true, 2_000);
        drops.count("/", "q", DropReason::Unroutable, true, 3_000);
        drops.count("/", "q", DropReason::Cycle, true, 3_000);
        // The first drop logs; the next two wait for the minute to pass.
        assert_eq!(drops.unlogged("q", DropReason::Unroutable), 2);
        drops.count("/", "q", DropReason::Unroutable, true, 61_000);
        assert_eq!(drops.unlogged("q", DropReason::Unroutable), 0);
        assert_eq!(
            drops.counts(),
            [("q".to_owned(), DropReason::Unroutable, 4), ("q".to_owned(), DropReason::Cycle, 1)]
        );
    }

    #[test]
    fn the_drop_reason_goes_where_the_publishing_protocol_keeps_broker_additions() {
        let mut m = Message::new(Routing::default(), Body::Data("b".into()));
        m.origin = Origin::Amqp091;
        m.encoded = charon_model::Encoded::Amqp091Properties("raw".into());
        let m = marked_dropped(m, DropReason::TargetFull);
        assert_eq!(m.headers.get(DROP_REASON_HEADER).and_then(Value::as_str), Some("target-full"));
        assert!(matches!(m.encoded, charon_model::Encoded::None), "the raw properties are stale");
        let mut m = Message::new(Routing::default(), Body::Data("b".into()));
        m.origin = Origin::Amqp10;
        let m = marked_dropped(m, DropReason::NoDlx);
        assert_eq!(m.annotations.get(DROP_REASON_ANNOTATION), Some(&Value::Symbol("no-dlx".into())));
        assert!(m.headers.is_empty(), "a 1.0 message's application properties are untouched");
    }
}
