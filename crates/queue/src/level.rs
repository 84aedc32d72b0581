//! One run of a queue's ready messages (a FIFO queue has one, a priority queue one per
//! priority; see [`super::ready`]), in sequence order: the head whole in memory, the rest — in
//! a long run, on a broker with a log — with the [`Pager`] (see [`super::paging`]). Dispatch,
//! gets, expiry and limits work on the head; the head is refilled from the pager when it runs
//! dry. The bytes of the run's messages are counted here, for `max-length-bytes`.

use std::collections::VecDeque;

use charon_store::segment_log::RecoveredQueue;

use super::browse::Collector;
use super::entry::Entry;
use super::journal::Journal;
use super::limits::{Size, body_size};
use super::paging::packed::{Packed, PagedEntry};
use super::paging::{Pager, RESIDENT_BYTES, Removed};

/// One run of ready messages.
#[derive(Debug, Default)]
pub(super) struct Level {
    /// The head: whole messages.
    head: VecDeque<Entry>,
    /// Body bytes of the run's messages (what `max-length-bytes` limits).
    bytes: u64,
    /// Body bytes of the head.
    head_bytes: u64,
    /// The ready messages behind the head, when the broker has a log to page them to.
    pager: Option<Pager>,
    /// Messages a purge that waits for the paged run to be read back has removed so far.
    taken: usize,
    /// The highest sequence number the run ever held: a message above it can join at the
    /// tail without breaking the run's sequence order.
    max_seq: u64,
}

impl Level {
    /// Pages the run's long tail with `pager` from now on.
    pub(super) fn page_with(&mut self, pager: Pager) {
        self.pager = Some(pager);
    }

    /// Whether the run pages (the broker has a log).
    pub(super) fn pages(&self) -> bool {
        self.pager.is_some()
    }

    /// The run's messages, in memory and paged.
    pub(super) fn len(&self) -> usize {
        self.head.len() + self.pager.as_ref().map_or(0, Pager::len)
    }

    /// Body bytes of the run's messages.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The head: the messages held whole in memory, and their body bytes.
    pub(super) fn resident(&self) -> Size {
        Size { count: u64::try_from(self.head.len()).unwrap_or(u64::MAX), bytes: self.head_bytes }
    }

    /// Adds a new ready message at the tail: into the head while the queue is short (it holds
    /// fewer than `resident` messages, see [`super::paging::resident_messages`]), else behind
    /// it, written to the log if it is not already (a spill).
    pub(super) fn push(&mut self, mut entry: Entry, resident: usize, journal: &mut Journal) {
        self.max_seq = self.max_seq.max(entry.seq);
        let size = body_size(&entry.message);
        self.bytes += size;
        let long = self.head.len() >= resident || self.head_bytes >= RESIDENT_BYTES;
        let Some(pager) = self.pager.as_mut().filter(|pager| long || !pager.is_empty()) else {
            self.head_bytes += size;
            self.head.push_back(entry);
            return;
        };
        if !entry.persisted {
            journal.spill(&mut entry);
        }
        pager.push(entry);
    }

    /// Puts a message back into the head (requeue), at its sequence position: a delivered
    /// message's sequence number is below every message that was never delivered.
    pub(super) fn insert(&mut self, entry: Entry) {
        self.max_seq = self.max_seq.max(entry.seq);
        let size = body_size(&entry.message);
        self.bytes += size;
        self.head_bytes += size;
        let at = self.head.partition_point(|e| e.seq < entry.seq);
        self.head.insert(at, entry);
    }

    /// Whether a message with sequence number `seq` can join at the run's tail ([`Self::push`])
    /// in sequence order: the run never held a later one.
    pub(super) fn fits_at_tail(&self, seq: u64) -> bool {
        seq > self.max_seq
    }

    /// Whether a message with sequence number `seq` can join the head at its sequence position
    /// ([`Self::insert`]): no message behind the head comes before it.
    pub(super) fn fits_in_head(&self, seq: u64) -> bool {
        match &self.pager {
            None => true,
            Some(pager) => pager.is_empty() || pager.first_seq().is_some_and(|first| first > seq),
        }
    }

    /// Takes the next ready message, refilling the head first when it ran dry (none comes
    /// back while the next page is being read: see [`Self::awaiting_read`]), and reading the
    /// next page ahead when the head runs low.
    pub(super) fn pop(&mut self, now: i64, journal: &mut Journal) -> Option<Entry> {
        if self.head.is_empty() {
            self.refill(now, journal);
        }
        let entry = self.head.pop_front()?;
        let size = body_size(&entry.message);
        self.bytes = self.bytes.saturating_sub(size);
        self.head_bytes = self.head_bytes.saturating_sub(size);
        if let Some(pager) = &mut self.pager {
            let refilled = pager.top_up(&mut self.head, now, journal);
            self.head_bytes += refilled.head_bytes;
            self.bytes = self.bytes.saturating_sub(refilled.lost_bytes);
        }
        Some(entry)
    }

    /// The next ready message, refilling the head first if need be (see [`Self::pop`]).
    pub(super) fn head(&mut self, now: i64, journal: &mut Journal) -> Option<&Entry> {
        if self.head.is_empty() {
            self.refill(now, journal);
        }
        self.head.front()
    }

    /// The sequence number of the next ready message, when known without reading it.
    pub(super) fn head_seq(&self) -> Option<u64> {
        match self.head.front() {
            Some(entry) => Some(entry.seq),
            None => self.pager.as_ref()?.first_seq(),
        }
    }

    /// Whether the next ready message is being read off the queue task: the head is empty
    /// though messages are ready, and the read's completion wakes the queue.
    pub(super) fn awaiting_read(&self) -> bool {
        self.head.is_empty() && self.pager.as_ref().is_some_and(Pager::reading)
    }

    /// The TTL deadline of the next ready message (without reading it), or when to read again
    /// after a failed read.
    pub(super) fn head_deadline(&self) -> Option<i64> {
        match self.head.front() {
            Some(entry) => entry.expires_at,
            None => self.pager.as_ref()?.head_deadline(),
        }
    }

    /// Removes every ready message, oldest first, recording each exit; returns how many there
    /// were, or `None` when the rest of the paged run is being read back off the queue task:
    /// then call again once the read is done (see [`Self::awaiting_read`]) and the count goes on.
    pub(super) fn take_all(&mut self, journal: &mut Journal) -> Option<usize> {
        for entry in std::mem::take(&mut self.head) {
            journal.removed(&entry);
            self.taken += 1;
        }
        if let Some(pager) = &mut self.pager {
            let (count, all) = pager.take_all(journal);
            self.taken += count;
            if !all {
                return None;
            }
        }
        self.bytes = 0;
        self.head_bytes = 0;
        Some(std::mem::take(&mut self.taken))
    }

    /// Hands the run's messages in the browse window to `collector`, in its order.
    pub(super) fn browse(&self, collector: &mut Collector) {
        if collector.newest_first() {
            if let Some(pager) = &self.pager {
                pager.browse(collector);
            }
            for entry in self.head.iter().rev() {
                if collector.done() {
                    break;
                }
                collector.entry(entry, false);
            }
        } else {
            for entry in self.head.iter() {
                if collector.done() {
                    break;
                }
                collector.entry(entry, false);
            }
            if let Some(pager) = self.pager.as_ref().filter(|_| !collector.done()) {
                pager.browse(collector);
            }
        }
    }

    /// Removes the run's messages with sequence numbers `seqs` (sorted) that are at hand,
    /// recording each exit; those that may be in the paged run's index file come back as
    /// checks (see [`Pager::remove`]). `run`: this run's index in the queue.
    pub(super) fn remove(&mut self, seqs: &[u64], run: usize, journal: &mut Journal, into: &mut Removed) {
        let before = into.bytes;
        for &seq in seqs {
            if let Ok(at) = self.head.binary_search_by_key(&seq, |e| e.seq)
                && let Some(entry) = self.head.remove(at)
            {
                let size = body_size(&entry.message);
                self.head_bytes = self.head_bytes.saturating_sub(size);
                journal.removed(&entry);
                into.note(seq, size);
            }
        }
        if let Some(pager) = &mut self.pager {
            pager.remove(seqs, run, journal, into);
        }
        self.bytes = self.bytes.saturating_sub(into.bytes - before);
    }

    /// Removes what a check of chunk `id` of the paged run found in its index file.
    pub(super) fn remove_checked(
        &mut self,
        id: u64,
        found: Vec<PagedEntry>,
        journal: &mut Journal,
        into: &mut Removed,
    ) {
        let before = into.bytes;
        if let Some(pager) = &mut self.pager {
            pager.remove_checked(id, found, journal, into);
        }
        self.bytes = self.bytes.saturating_sub(into.bytes - before);
    }

    /// Takes the places the log reported for messages of this run waiting for theirs out of
    /// `places` (see [`Pager::take_places`]).
    pub(super) fn take_places(&mut self, places: &mut Vec<(u64, Packed)>) {
        if let Some(pager) = &mut self.pager {
            pager.take_places(places);
        }
    }

    /// Paged messages compaction moved get their new places (see [`Pager::relocate`]).
    pub(super) fn relocate(&mut self, moves: &[(u64, Packed)]) {
        if let Some(pager) = &mut self.pager {
            pager.relocate(moves);
        }
    }

    /// Whether the log's places of this pass's messages are wanted for this run.
    pub(super) fn wants_places(&self) -> bool {
        self.pager.as_ref().is_some_and(Pager::wants_places)
    }

    /// Whether messages were spilled to the log (a non-durable queue drops them when it goes).
    pub(super) fn spilled_any(&self) -> bool {
        self.pager.as_ref().is_some_and(Pager::spilled_any)
    }

    /// Restores messages the log recovered for this run: the head read back now, the rest left
    /// on disk (paging must be on: they are read back from the log). This reads the disk: the
    /// queue task runs it on the blocking pool before it takes its first command.
    pub(super) fn restore(&mut self, restored: RecoveredQueue, journal: &mut Journal, queue_name: &str) {
        if restored.is_empty() {
            return;
        }
        let Some(pager) = &mut self.pager else {
            tracing::error!(queue = queue_name, "recovered messages but no log to read them from");
            return;
        };
        self.max_seq = self.max_seq.max(restored.last().map_or(0, |m| m.seq));
        let restored = pager.restore(restored, &mut self.head, journal);
        self.head_bytes += restored.head_bytes;
        self.bytes += restored.head_bytes + restored.paged_bytes;
    }

    /// Takes the pager's finished reads (see [`Pager::collect_finished`]).
    pub(super) fn collect_reads(&mut self, now: i64, journal: &mut Journal) {
        if let Some(pager) = &mut self.pager {
            let refilled = pager.collect_finished(&mut self.head, now, journal);
            self.head_bytes += refilled.head_bytes;
            self.bytes = self.bytes.saturating_sub(refilled.lost_bytes);
        }
    }

    /// Refills the empty head from the pager.
    fn refill(&mut self, now: i64, journal: &mut Journal) {
        if let Some(pager) = &mut self.pager {
            let refilled = pager.refill(&mut self.head, now, journal);
            self.head_bytes += refilled.head_bytes;
            self.bytes = self.bytes.saturating_sub(refilled.lost_bytes);
        }
    }

    /// The three runs' lengths: head, paged, waiting for their places.
    #[cfg(test)]
    pub(super) fn runs(&self) -> (usize, usize, usize) {
        let (paged, incoming) = self.pager.as_ref().map_or((0, 0), Pager::runs);
        (self.head.len(), paged, incoming)
    }

    /// The messages in the head.
    #[cfg(test)]
    pub(super) fn head_entries(&self) -> impl Iterator<Item = &Entry> {
        self.head.iter()
    }

    /// Whether the next page is being read off the queue task.
    #[cfg(test)]
    pub(super) fn reading(&self) -> bool {
        self.pager.as_ref().is_some_and(Pager::reading)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::paging::{IDLE_RESIDENT_MESSAGES, RESIDENT_MESSAGES};
    use charon_model::{Body, Message, Routing};

    use super::*;

    fn entry(seq: u64, body: &str) -> Entry {
        Entry::new(seq, Arc::new(Message::new(Routing::default(), Body::Data(body.to_owned().into()))), None, false)
    }

    fn seqs(ready: &Level) -> Vec<u64> {
        ready.head_entries().map(|e| e.seq).collect()
    }

    #[test]
    fn without_a_log_everything_stays_in_the_head_and_bytes_are_counted() {
        let mut ready = Level::default();
        let mut journal = Journal::new(1);
        for seq in 1..=(RESIDENT_MESSAGES as u64 + 5) {
            ready.push(entry(seq, "ab"), IDLE_RESIDENT_MESSAGES, &mut journal);
        }
        assert_eq!(ready.runs(), (RESIDENT_MESSAGES + 5, 0, 0));
        assert_eq!((ready.len(), ready.bytes()), (RESIDENT_MESSAGES + 5, 2 * (RESIDENT_MESSAGES as u64 + 5)));
        assert!(journal.take().0.is_empty(), "nothing spilled");
        assert!(!ready.wants_places() && !ready.spilled_any());
    }

    #[test]
    fn requeued_messages_go_back_to_their_sequence_position() {
        let mut ready = Level::default();
        let mut journal = Journal::new(1);
        for seq in [2, 4, 6] {
            ready.push(entry(seq, "m"), RESIDENT_MESSAGES, &mut journal);
        }
        let first = ready.pop(0, &mut journal).unwrap();
        assert_eq!(first.seq, 2);
        ready.insert(entry(5, "m"));
        ready.insert(first);
        assert_eq!(seqs(&ready), [2, 4, 5, 6]);
        assert_eq!((ready.len(), ready.bytes()), (4, 4));
    }

    #[test]
    fn the_head_deadline_is_the_first_message_ttl_and_take_all_records_every_exit() {
        let mut ready = Level::default();
        let mut journal = Journal::new(1);
        let mut e = entry(1, "m");
        e.expires_at = Some(50);
        e.persisted = true;
        ready.push(e, RESIDENT_MESSAGES, &mut journal);
        ready.push(entry(2, "m"), RESIDENT_MESSAGES, &mut journal);
        assert_eq!(ready.head_deadline(), Some(50));
        assert_eq!(ready.head(0, &mut journal).map(|e| e.seq), Some(1));
        assert_eq!(ready.take_all(&mut journal), Some(2));
        assert_eq!((ready.len(), ready.bytes()), (0, 0));
        assert_eq!(ready.head_deadline(), None);
        assert_eq!(journal.take().0.len(), 1, "only the persisted one is in the log");
    }
}
