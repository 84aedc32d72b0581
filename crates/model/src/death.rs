//! Death history: why and where a message was dead-lettered.
//!
//! Stored once, protocol-neutrally, the way RabbitMQ 4's message container keeps it
//! (`mc.erl` `record_death/3`): one record per `{queue, reason}` pair, most recent first, plus
//! the first and last death. Adapters render it as 0.9.1 `x-death` headers or 1.0
//! `x-opt-deaths` annotations.
//!
//! An entry may also carry what the consumer that refused the message said about it (a
//! [`DeathCause`], Charon's extension): it always describes the entry's most recent death, so a
//! death without a cause removes the one an earlier death of the same pair left.

use std::sync::Arc;

use crate::death_cause::DeathCause;

/// Why a message left a queue other than by being acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeathReason {
    /// Rejected or nacked with `requeue=false`, or a 1.0 `rejected` / `modified` with
    /// `undeliverable-here`.
    Rejected,
    /// Its TTL (per-message or per-queue) ran out.
    Expired,
    /// Dropped or refused by a queue length limit.
    Maxlen,
    /// Returned more often than the quorum queue's delivery limit allows.
    DeliveryLimit,
}

impl DeathReason {
    /// The reason as RabbitMQ spells it on the wire.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rejected => "rejected",
            Self::Expired => "expired",
            Self::Maxlen => "maxlen",
            Self::DeliveryLimit => "delivery_limit",
        }
    }
}

/// One `{queue, reason}` entry of the history.
#[derive(Clone, Debug, PartialEq)]
pub struct Death {
    /// The queue the message died in.
    pub queue: String,
    /// Why it died there.
    pub reason: DeathReason,
    /// How many times it died in this queue for this reason.
    pub count: u64,
    /// When it first died here for this reason (ms since epoch).
    pub first_time: i64,
    /// When it last died here for this reason (ms since epoch).
    pub last_time: i64,
    /// The exchange the message had been published to before the first such death.
    pub exchange: String,
    /// The routing keys (publish key and CC, never BCC) before the first such death.
    pub routing_keys: Vec<String>,
    /// The message's own TTL at the first such death, if it had one (never a queue TTL).
    pub original_ttl: Option<u64>,
    /// What the consumer said when it refused the message the last time it died here for this
    /// reason; `None` for most deaths (shared: one refusal of many messages is one cause).
    pub cause: Option<Arc<DeathCause>>,
}

/// The queue, reason and exchange of a single death event, used for the `x-first-death-*` and
/// `x-last-death-*` top-level fields.
#[derive(Clone, Debug, PartialEq)]
pub struct DeathEvent {
    /// Queue name.
    pub queue: String,
    /// Reason.
    pub reason: DeathReason,
    /// Exchange the message had been published to.
    pub exchange: String,
}

/// The whole history of a message.
#[derive(Clone, Debug, PartialEq)]
pub struct DeathHistory {
    /// Entries, most recent `{queue, reason}` first.
    pub entries: Vec<Death>,
    /// The first death ever; never changes.
    pub first: DeathEvent,
    /// The most recent death.
    pub last: DeathEvent,
}

/// Everything needed to record one more death.
#[derive(Clone, Debug)]
pub struct DeathRecord<'a> {
    /// The queue the message is leaving.
    pub queue: &'a str,
    /// Why.
    pub reason: DeathReason,
    /// Exchange the message was last published to.
    pub exchange: &'a str,
    /// Routing keys it was last published with (publish key and CC).
    pub routing_keys: &'a [String],
    /// The message's own TTL, if any.
    pub ttl: Option<u64>,
    /// Now, in ms since epoch.
    pub now: i64,
    /// What the refusing consumer said, if anything.
    pub cause: Option<&'a Arc<DeathCause>>,
}

impl DeathHistory {
    /// Starts a history with one death.
    #[must_use]
    pub fn new(record: &DeathRecord<'_>) -> Self {
        let event =
            DeathEvent { queue: record.queue.to_owned(), reason: record.reason, exchange: record.exchange.to_owned() };
        Self { entries: vec![Self::fresh_entry(record)], first: event.clone(), last: event }
    }

    /// Records one more death: an existing `{queue, reason}` entry is counted up and moved to
    /// the front keeping its first values, its cause replaced by this death's (removed when
    /// this one has none); a new pair is prepended.
    pub fn record(&mut self, record: &DeathRecord<'_>) {
        let existing = self.entries.iter().position(|d| d.queue == record.queue && d.reason == record.reason);
        match existing {
            Some(index) => {
                let mut entry = self.entries.remove(index);
                entry.count += 1;
                entry.last_time = record.now;
                entry.cause = record.cause.cloned();
                self.entries.insert(0, entry);
            }
            None => self.entries.insert(0, Self::fresh_entry(record)),
        }
        self.last =
            DeathEvent { queue: record.queue.to_owned(), reason: record.reason, exchange: record.exchange.to_owned() };
    }

    /// The message's own TTL when it first died, if it had one. Dead lettering clears the TTL,
    /// so only the entry of the first death can hold one.
    #[must_use]
    pub fn original_ttl(&self) -> Option<u64> {
        self.entries.iter().find_map(|d| d.original_ttl)
    }

    /// The `x-first-death-*` and `x-last-death-*` fields, in key order (how RabbitMQ's
    /// annotation map yields them): exchange, queue, reason for the first death, then the last.
    #[must_use]
    pub fn summary_fields(&self) -> [(&'static str, String); 6] {
        let (first, last) = (&self.first, &self.last);
        [
            ("x-first-death-exchange", first.exchange.clone()),
            ("x-first-death-queue", first.queue.clone()),
            ("x-first-death-reason", first.reason.as_str().to_owned()),
            ("x-last-death-exchange", last.exchange.clone()),
            ("x-last-death-queue", last.queue.clone()),
            ("x-last-death-reason", last.reason.as_str().to_owned()),
        ]
    }

    fn fresh_entry(record: &DeathRecord<'_>) -> Death {
        Death {
            queue: record.queue.to_owned(),
            reason: record.reason,
            count: 1,
            first_time: record.now,
            last_time: record.now,
            exchange: record.exchange.to_owned(),
            routing_keys: record.routing_keys.to_vec(),
            original_ttl: record.ttl,
            cause: record.cause.cloned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec<'a>(queue: &'a str, reason: DeathReason, keys: &'a [String], now: i64) -> DeathRecord<'a> {
        DeathRecord { queue, reason, exchange: "", routing_keys: keys, ttl: None, now, cause: None }
    }

    fn cause(condition: &str) -> Arc<DeathCause> {
        Arc::new(DeathCause::new(Some(condition.to_owned()), None, None, None).unwrap())
    }

    fn causes(h: &DeathHistory) -> Vec<(&str, Option<&str>)> {
        h.entries.iter().map(|d| (d.queue.as_str(), d.cause.as_deref().and_then(DeathCause::condition))).collect()
    }

    #[test]
    fn an_entry_keeps_the_cause_of_its_latest_death() {
        let keys = vec!["k".to_owned()];
        let (first, second) = (cause("app:first"), cause("app:second"));
        let mut h =
            DeathHistory::new(&DeathRecord { cause: Some(&first), ..rec("q1", DeathReason::Rejected, &keys, 1) });
        assert_eq!(causes(&h), [("q1", Some("app:first"))]);
        // Another pair has its own cause (here none); the first entry keeps its own.
        h.record(&rec("q2", DeathReason::Rejected, &keys, 2));
        assert_eq!(causes(&h), [("q2", None), ("q1", Some("app:first"))]);
        // The same pair again: the new cause replaces the old one.
        h.record(&DeathRecord { cause: Some(&second), ..rec("q1", DeathReason::Rejected, &keys, 3) });
        assert_eq!(causes(&h), [("q1", Some("app:second")), ("q2", None)]);
        // And a death without a cause removes it: the entry describes its most recent death.
        h.record(&rec("q1", DeathReason::Rejected, &keys, 4));
        assert_eq!(causes(&h), [("q1", None), ("q2", None)]);
        assert_eq!(h.entries.first().map(|d| d.count), Some(3));
    }

    #[test]
    fn repeated_pair_is_counted_and_moved_to_front() {
        let keys = vec!["k".to_owned()];
        let mut h = DeathHistory::new(&rec("q1", DeathReason::Rejected, &keys, 1));
        h.record(&rec("q2", DeathReason::Expired, &keys, 2));
        h.record(&rec("q1", DeathReason::Rejected, &keys, 3));
        let order: Vec<_> = h.entries.iter().map(|d| (d.queue.as_str(), d.count)).collect();
        assert_eq!(order, [("q1", 2), ("q2", 1)]);
        assert_eq!(h.entries.first().map(|d| (d.first_time, d.last_time)), Some((1, 3)));
        assert_eq!(h.first.queue, "q1");
        assert_eq!(h.last.queue, "q1");
    }

    #[test]
    fn original_ttl_is_the_one_recorded_at_the_first_death() {
        let keys = vec!["k".to_owned()];
        let mut h = DeathHistory::new(&DeathRecord { ttl: Some(5), ..rec("q1", DeathReason::Expired, &keys, 1) });
        h.record(&rec("q2", DeathReason::Rejected, &keys, 2));
        h.record(&rec("q1", DeathReason::Expired, &keys, 3));
        assert_eq!(h.original_ttl(), Some(5));
        assert_eq!(DeathHistory::new(&rec("q", DeathReason::Rejected, &keys, 1)).original_ttl(), None);
    }
}
