//! A queue's ready messages, in sequence order: the head whole in memory, the rest — in a long
//! queue, on a broker with a log — with the [`Pager`] (see [`super::paging`]). Dispatch, gets,
//! expiry and limits work on the head; the head is refilled from the pager when it runs dry.
//! The bytes of all ready messages are counted here, for `max-length-bytes`.

use std::collections::VecDeque;

use charon_store::segment_log::{LogReader, Placed, RecoveredQueue};

use super::entry::Entry;
use super::handle::QueueRef;
use super::journal::Journal;
use super::limits::{Size, body_size};
use super::paging::{IDLE_RESIDENT_MESSAGES, Pager, RESIDENT_BYTES, RESIDENT_MESSAGES};

/// The ready messages of a queue.
#[derive(Debug, Default)]
pub(super) struct Ready {
    /// The head: whole messages.
    head: VecDeque<Entry>,
    /// Body bytes of all ready messages (what `max-length-bytes` limits).
    bytes: u64,
    /// Body bytes of the head.
    head_bytes: u64,
    /// The ready messages behind the head, when the broker has a log to page them to.
    pager: Option<Pager>,
    /// Messages a purge that waits for the paged run to be read back has removed so far.
    taken: usize,
}

impl Ready {
    /// Turns paging on: the broker has a log that long queues can keep their messages in.
    pub(super) fn enable_paging(&mut self, reader: LogReader, queue: &QueueRef) {
        self.pager = Some(Pager::new(reader, queue));
    }

    /// Ready messages in all runs.
    pub(super) fn len(&self) -> usize {
        self.head.len() + self.pager.as_ref().map_or(0, Pager::len)
    }

    /// Ready messages and their bytes, as length limits count them.
    pub(super) fn size(&self) -> Size {
        Size { count: u64::try_from(self.len()).unwrap_or(u64::MAX), bytes: self.bytes }
    }

    /// Adds a new ready message at the tail: into the head while the queue is short, else
    /// behind it, written to the log if it is not already (a spill). `idle`: nobody consumes,
    /// so the head is kept shorter.
    pub(super) fn push(&mut self, mut entry: Entry, idle: bool, journal: &mut Journal) {
        let size = body_size(&entry.message);
        self.bytes += size;
        let resident = if idle { IDLE_RESIDENT_MESSAGES } else { RESIDENT_MESSAGES };
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
        let size = body_size(&entry.message);
        self.bytes += size;
        self.head_bytes += size;
        let at = self.head.partition_point(|e| e.seq < entry.seq);
        self.head.insert(at, entry);
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

    /// Signalled whenever a read made off the queue task is done; `None` without paging.
    pub(super) fn read_signal(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        self.pager.as_ref().map(Pager::signal)
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

    /// Takes the places the log reported for messages behind the head.
    pub(super) fn placed(&mut self, placed: Vec<Placed>) {
        if let Some(pager) = &mut self.pager {
            pager.placed(placed);
        }
    }

    /// Whether the log's places of this pass's messages are wanted.
    pub(super) fn wants_places(&self) -> bool {
        self.pager.as_ref().is_some_and(Pager::wants_places)
    }

    /// Whether messages were spilled to the log (a non-durable queue drops them when it goes).
    pub(super) fn spilled_any(&self) -> bool {
        self.pager.as_ref().is_some_and(Pager::spilled_any)
    }

    /// Restores messages the log recovered: the head read back now, the rest left on disk
    /// (paging must be on: they are read back from the log). This reads the disk: the queue
    /// task runs it on the blocking pool before it takes its first command.
    pub(super) fn restore(&mut self, restored: RecoveredQueue, journal: &mut Journal, queue_name: &str) {
        if restored.is_empty() {
            return;
        }
        let Some(pager) = &mut self.pager else {
            tracing::error!(queue = queue_name, "recovered messages but no log to read them from");
            return;
        };
        let restored = pager.restore(restored, &mut self.head, journal);
        self.head_bytes += restored.head_bytes;
        self.bytes += restored.head_bytes + restored.paged_bytes;
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

    /// Bytes of all ready messages.
    #[cfg(test)]
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use charon_model::{Body, Message, Routing};

    use super::*;

    fn entry(seq: u64, body: &str) -> Entry {
        Entry::new(seq, Arc::new(Message::new(Routing::default(), Body::Data(body.to_owned().into()))), None, false)
    }

    fn seqs(ready: &Ready) -> Vec<u64> {
        ready.head_entries().map(|e| e.seq).collect()
    }

    #[test]
    fn without_a_log_everything_stays_in_the_head_and_bytes_are_counted() {
        let mut ready = Ready::default();
        let mut journal = Journal::new(1);
        for seq in 1..=(RESIDENT_MESSAGES as u64 + 5) {
            ready.push(entry(seq, "ab"), true, &mut journal);
        }
        assert_eq!(ready.runs(), (RESIDENT_MESSAGES + 5, 0, 0));
        assert_eq!(
            ready.size(),
            Size { count: RESIDENT_MESSAGES as u64 + 5, bytes: 2 * (RESIDENT_MESSAGES as u64 + 5) }
        );
        assert_eq!(journal.written(), 0, "nothing spilled");
        assert!(!ready.wants_places() && !ready.spilled_any());
    }

    #[test]
    fn requeued_messages_go_back_to_their_sequence_position() {
        let mut ready = Ready::default();
        let mut journal = Journal::new(1);
        for seq in [2, 4, 6] {
            ready.push(entry(seq, "m"), false, &mut journal);
        }
        let first = ready.pop(0, &mut journal).unwrap();
        assert_eq!(first.seq, 2);
        ready.insert(entry(5, "m"));
        ready.insert(first);
        assert_eq!(seqs(&ready), [2, 4, 5, 6]);
        assert_eq!(ready.size(), Size { count: 4, bytes: 4 });
    }

    #[test]
    fn the_head_deadline_is_the_first_message_ttl_and_take_all_records_every_exit() {
        let mut ready = Ready::default();
        let mut journal = Journal::new(1);
        let mut e = entry(1, "m");
        e.expires_at = Some(50);
        e.persisted = true;
        ready.push(e, false, &mut journal);
        ready.push(entry(2, "m"), false, &mut journal);
        assert_eq!(ready.head_deadline(), Some(50));
        assert_eq!(ready.head(0, &mut journal).map(|e| e.seq), Some(1));
        assert_eq!(ready.take_all(&mut journal), Some(2));
        assert_eq!(ready.size(), Size::default());
        assert_eq!(ready.head_deadline(), None);
        assert_eq!(journal.written(), 1, "only the persisted one is in the log");
    }
}
