//! A queue's delayed messages: published with a "not before" time
//! ([`charon_model::BrokerAnnotations::not_before`], set only by the Zaqar gateway) that has not
//! come yet. They are kept out of the ready runs, in this part of their own, until they are
//! due; then the queue moves them to its ready messages ([`super::ready::Ready::insert_due`]).
//! Ready messages are never scanned for them: this part is indexed by sequence number (browse,
//! remove by id, drop-head) and by wake-up time (the queue's one timer looks at the earliest).
//!
//! A message wakes at its "not before" time, or earlier at its TTL deadline: a message whose
//! TTL runs out while it is delayed expires then, never having been ready (Zaqar's TTL counts
//! from the post, not from the end of the delay).
//!
//! Memory: delayed messages are held whole (they are few and short-lived in Zaqar, whose
//! delays are at most 15 minutes), and this part is bounded: at most [`MAX_MESSAGES`] messages
//! and [`MAX_BYTES`] body bytes per queue. A delayed publish beyond that is refused to its
//! publisher (the Zaqar gateway answers 503), so a flood of delayed messages costs at most that
//! much memory per queue, on top of what the ready runs keep (their heads; the rest is paged).
//! They count in the queue's `messages` and against its length limits, never in
//! `messages_ready`.

use std::collections::{BTreeMap, BTreeSet};

use charon_store::segment_log::RecoveredMessage;

use super::browse::Collector;
use super::entry::Entry;
use super::journal::Journal;
use super::limits::{Size, body_size};
use super::paging::Removed;

/// Delayed messages a queue holds at most.
pub(super) const MAX_MESSAGES: usize = 100_000;
/// Body bytes of delayed messages a queue holds at most.
pub(super) const MAX_BYTES: u64 = 128 * 1024 * 1024;

/// The delayed messages of a queue.
#[derive(Debug, Default)]
pub(super) struct Delayed {
    /// The messages by sequence number, each with its wake-up time.
    by_seq: BTreeMap<u64, (i64, Entry)>,
    /// (wake-up time, sequence number) of each message, earliest first.
    by_wake: BTreeSet<(i64, u64)>,
    /// Body bytes of the messages.
    bytes: u64,
}

/// When a delayed entry needs the queue's attention: when it is due, or when its TTL runs out
/// first.
fn wake_of(entry: &Entry) -> i64 {
    let due = entry.message.broker.not_before.unwrap_or(i64::MIN);
    entry.expires_at.map_or(due, |deadline| deadline.min(due))
}

/// Whether a message entering the queue at `now` is delayed.
pub(super) fn is_delayed(not_before: Option<i64>, now: i64) -> bool {
    not_before.is_some_and(|at| at > now)
}

impl Delayed {
    /// Delayed messages.
    pub(super) fn len(&self) -> usize {
        self.by_seq.len()
    }

    /// Delayed messages and their body bytes, as length limits count them.
    pub(super) fn size(&self) -> Size {
        Size { count: u64::try_from(self.by_seq.len()).unwrap_or(u64::MAX), bytes: self.bytes }
    }

    /// Whether a delayed message of `bytes` body bytes would not fit (see [`MAX_MESSAGES`]).
    pub(super) fn full(&self, bytes: u64) -> bool {
        self.by_seq.len() >= MAX_MESSAGES || self.bytes.saturating_add(bytes) > MAX_BYTES
    }

    /// Keeps `entry` until it is due.
    pub(super) fn push(&mut self, entry: Entry) {
        let wake = wake_of(&entry);
        self.push_until(entry, wake);
    }

    /// Keeps `entry`, which is due, until `at`: the ready runs could not take it in sequence
    /// order yet (see [`super::ready::Ready::insert_due`]).
    pub(super) fn push_until(&mut self, entry: Entry, at: i64) {
        self.bytes += body_size(&entry.message);
        self.by_wake.insert((at, entry.seq));
        if let Some((old_at, old)) = self.by_seq.insert(entry.seq, (at, entry)) {
            // Sequence numbers are unique in a queue; a replaced entry would be a bug, and its
            // accounting is undone so that the counts stay true.
            self.by_wake.remove(&(old_at, old.seq));
            self.bytes = self.bytes.saturating_sub(body_size(&old.message));
        }
    }

    /// The earliest wake-up time, if any message is delayed.
    pub(super) fn next_wake(&self) -> Option<i64> {
        self.by_wake.first().map(|&(at, _)| at)
    }

    /// Takes the next message whose wake-up time is at or before `now` (due or expired), the
    /// earliest first, equal times in sequence order.
    pub(super) fn pop_woken(&mut self, now: i64) -> Option<Entry> {
        let &(at, seq) = self.by_wake.first()?;
        if at > now {
            return None;
        }
        self.by_wake.remove(&(at, seq));
        self.take(seq)
    }

    /// Takes the oldest delayed message (by sequence number): a `drop-head` over the limit with
    /// no ready message left drops it.
    pub(super) fn pop_oldest(&mut self) -> Option<Entry> {
        let (seq, (at, entry)) = self.by_seq.pop_first()?;
        self.by_wake.remove(&(at, seq));
        self.bytes = self.bytes.saturating_sub(body_size(&entry.message));
        Some(entry)
    }

    fn take(&mut self, seq: u64) -> Option<Entry> {
        let (_, entry) = self.by_seq.remove(&seq)?;
        self.bytes = self.bytes.saturating_sub(body_size(&entry.message));
        Some(entry)
    }

    /// Removes every delayed message, recording each exit; returns how many there were.
    pub(super) fn take_all(&mut self, journal: &mut Journal) -> usize {
        let all = std::mem::take(&mut self.by_seq);
        self.by_wake.clear();
        self.bytes = 0;
        for (_, entry) in all.values() {
            journal.removed(entry);
        }
        all.len()
    }

    /// Removes the messages with sequence numbers `seqs`, recording each exit.
    pub(super) fn remove(&mut self, seqs: &[u64], journal: &mut Journal, into: &mut Removed) {
        for &seq in seqs {
            if let Some((at, entry)) = self.by_seq.remove(&seq) {
                self.by_wake.remove(&(at, seq));
                let size = body_size(&entry.message);
                self.bytes = self.bytes.saturating_sub(size);
                journal.removed(&entry);
                into.note(seq, size);
            }
        }
    }

    /// Hands the delayed messages in the browse window to `collector`, in its order, marked
    /// delayed.
    pub(super) fn browse(&self, collector: &mut Collector) {
        let walk: Box<dyn Iterator<Item = &(i64, Entry)>> = if collector.newest_first() {
            Box::new(self.by_seq.values().rev())
        } else {
            Box::new(self.by_seq.values())
        };
        for (_, entry) in walk {
            if collector.done() {
                break;
            }
            collector.delayed(entry);
        }
    }

    /// Whether a recovered message is still delayed at `now` (it is read back and kept here
    /// rather than restored as ready).
    pub(super) fn recovered_delayed(message: &RecoveredMessage, now: i64) -> bool {
        !message.delivered && message.dead_lettered.is_none() && is_delayed(message.not_before, now)
    }

    /// The messages held, for the memory estimate: all of them are whole.
    pub(super) fn resident(&self) -> Size {
        self.size()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use charon_model::{Body, Message, Routing};

    use super::*;

    fn entry(seq: u64, not_before: i64, expires_at: Option<i64>) -> Entry {
        let mut message = Message::new(Routing::default(), Body::Data(vec![0u8; 10].into()));
        message.broker.not_before = Some(not_before);
        Entry::new(seq, Arc::new(message), expires_at, false)
    }

    #[test]
    fn messages_wake_in_due_order_then_by_sequence_and_an_earlier_ttl_wakes_first() {
        let mut d = Delayed::default();
        d.push(entry(1, 300, None));
        d.push(entry(2, 100, None));
        d.push(entry(3, 100, None));
        d.push(entry(4, 500, Some(200)));
        assert_eq!((d.len(), d.size().bytes), (4, 40));
        assert_eq!(d.next_wake(), Some(100));
        assert!(d.pop_woken(99).is_none());
        let woken: Vec<u64> = std::iter::from_fn(|| d.pop_woken(250)).map(|e| e.seq).collect();
        assert_eq!(woken, [2, 3, 4], "due at 100 in sequence order, then the one whose TTL ran out at 200");
        assert_eq!(d.next_wake(), Some(300));
        assert_eq!((d.len(), d.size().bytes), (1, 10));
    }

    #[test]
    fn the_oldest_goes_first_on_drop_head_and_the_part_is_bounded() {
        let mut d = Delayed::default();
        d.push(entry(7, 100, None));
        d.push(entry(5, 900, None));
        assert_eq!(d.pop_oldest().map(|e| e.seq), Some(5));
        assert_eq!(d.next_wake(), Some(100));
        let due = d.pop_woken(100).unwrap();
        d.push_until(due, 150);
        assert_eq!((d.next_wake(), d.len()), (Some(150), 1), "kept until it can join in order");
        assert!(d.pop_woken(149).is_none());
        assert_eq!(d.pop_woken(150).map(|e| e.seq), Some(7));
        assert!(!d.full(10));
        assert!(d.full(MAX_BYTES + 1), "a body the part cannot hold");
        assert!(is_delayed(Some(11), 10) && !is_delayed(Some(10), 10) && !is_delayed(None, 10));
    }
}
