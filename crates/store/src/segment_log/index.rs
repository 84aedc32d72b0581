//! Which messages are live in which segment, and what the log last said about the deliveries
//! of those that were delivered: the writer deletes a segment once none of its messages is
//! live, and compaction re-appends the few that pin an old segment together with their
//! delivery state.
//!
//! It must stay small next to a queue of ten million messages: per queue and segment the live
//! sequence numbers are a compressed bitmap (a queue's sequence numbers are dense, so a bit or
//! two per message), and only messages with a `Delivered` record (a quorum queue's deliveries, a
//! classic queue's returns) have an entry of their own.

use std::collections::BTreeMap;

use foldhash::HashMap;

use roaring::RoaringTreemap;

use super::marks::Marks;

/// Message counts of one segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct SegmentCounts {
    /// Messages written there that are still live.
    pub(super) live: u64,
    /// Messages ever written there (compaction weighs the two).
    pub(super) written: u64,
}

#[derive(Debug, Default)]
pub(super) struct Index {
    /// Every existing segment, oldest first.
    pub(super) segments: BTreeMap<u64, SegmentCounts>,
    /// Per queue, per segment, the sequence numbers live there. (foldhash: the keys are the
    /// broker's own queue ids and sequence numbers, touched for every record.)
    queues: HashMap<u64, BTreeMap<u64, RoaringTreemap>>,
    /// Deliveries and waiting dead letters among the live messages.
    marks: Marks,
}

impl Index {
    /// Records a message written to `segment`.
    pub(super) fn enqueued(&mut self, queue: u64, seq: u64, segment: u64) {
        let fresh = self.queues.entry(queue).or_default().entry(segment).or_default().insert(seq);
        let counts = self.segments.entry(segment).or_default();
        counts.written += 1;
        if fresh {
            counts.live += 1;
        }
    }

    /// Records a live message written again to `segment` (compaction): it moves there with
    /// its delivery state.
    pub(super) fn moved(&mut self, queue: u64, seq: u64, segment: u64) {
        if let Some(from) = self.segment_of(queue, seq).filter(|from| *from != segment) {
            self.release(queue, seq, from);
        }
        self.enqueued(queue, seq, segment);
    }

    /// The segment where a live message lies. Scans the queue's segments oldest first: the
    /// messages that leave are nearly always in the oldest ones.
    pub(super) fn segment_of(&self, queue: u64, seq: u64) -> Option<u64> {
        let segments = self.queues.get(&queue)?;
        segments.iter().find(|(_, live)| live.contains(seq)).map(|(segment, _)| *segment)
    }

    /// The messages live in `segment`, per queue: what a compaction's read keeps (see
    /// `compact::Reading`). A copy, so that the read can run off the writer's thread.
    pub(super) fn live_in(&self, segment: u64) -> HashMap<u64, RoaringTreemap> {
        self.queues
            .iter()
            .filter_map(|(&queue, segments)| segments.get(&segment).map(|live| (queue, live.clone())))
            .collect()
    }

    /// Whether a message is live in `segment`.
    pub(super) fn is_live_in(&self, queue: u64, seq: u64, segment: u64) -> bool {
        self.queues.get(&queue).and_then(|s| s.get(&segment)).is_some_and(|live| live.contains(seq))
    }

    /// The delivery state of a live message, once it was delivered.
    pub(super) fn delivery(&self, queue: u64, seq: u64) -> Option<(u32, u32)> {
        self.marks.delivery(queue, seq)
    }

    /// Why a live message waits as an at-least-once dead letter, if it does.
    pub(super) fn dead_letter_reason(&self, queue: u64, seq: u64) -> Option<u8> {
        self.marks.dead_letter_reason(queue, seq)
    }

    /// Records that a live message waits as an at-least-once dead letter.
    pub(super) fn dead_lettered(&mut self, queue: u64, seq: u64, reason: u8) {
        if self.segment_of(queue, seq).is_some() {
            self.marks.dead_lettered(queue, seq, reason);
        }
    }

    /// Records a delivery of a live message.
    pub(super) fn delivered(&mut self, queue: u64, seq: u64, returned: u32, failed: u32) {
        if self.segment_of(queue, seq).is_some() {
            self.marks.delivered(queue, seq, returned, failed);
        }
    }

    /// Records that a message is gone.
    pub(super) fn removed(&mut self, queue: u64, seq: u64) {
        if let Some(segment) = self.segment_of(queue, seq) {
            self.release(queue, seq, segment);
        }
        self.marks.removed(queue, seq);
    }

    fn release(&mut self, queue: u64, seq: u64, segment: u64) {
        let Some(segments) = self.queues.get_mut(&queue) else {
            return;
        };
        let Some(live) = segments.get_mut(&segment) else {
            return;
        };
        if live.remove(seq)
            && let Some(counts) = self.segments.get_mut(&segment)
        {
            counts.live = counts.live.saturating_sub(1);
        }
        if live.is_empty() {
            segments.remove(&segment);
        }
        if segments.is_empty() {
            self.queues.remove(&queue);
        }
    }

    /// Records that a queue is gone.
    pub(super) fn dropped(&mut self, queue: u64) {
        for (segment, live) in self.queues.remove(&queue).unwrap_or_default() {
            if let Some(counts) = self.segments.get_mut(&segment) {
                counts.live = counts.live.saturating_sub(live.len());
            }
        }
        self.marks.dropped(queue);
    }

    /// Compresses the bitmaps of a segment no new message goes to: a queue's messages there are
    /// runs of consecutive sequence numbers, a few bytes each as runs instead of a bit per
    /// message (10M queued messages kept 1.3 MB of bitmaps). Removals still work on them.
    pub(super) fn seal(&mut self, segment: u64) {
        for live in self.queues.values_mut().filter_map(|segments| segments.get_mut(&segment)) {
            live.optimize();
        }
    }

    /// Seals every segment: after replay, all of them are written.
    pub(super) fn seal_all(&mut self) {
        for live in self.queues.values_mut().flat_map(BTreeMap::values_mut) {
            live.optimize();
        }
    }

    /// Forgets a deleted segment.
    pub(super) fn forget_segment(&mut self, segment: u64) {
        self.segments.remove(&segment);
    }

    /// Bytes of memory the bitmaps take (for the memory tests).
    #[cfg(test)]
    pub(super) fn bitmap_bytes(&self) -> u64 {
        self.queues.values().flat_map(BTreeMap::values).map(|b| b.serialized_size() as u64).sum()
    }
}
