//! Where the live messages lie, and what the log last said about their deliveries: the writer
//! deletes a segment once none of its enqueues is live, and compaction re-appends the few that
//! pin an old segment together with their delivery state.

use std::collections::{BTreeMap, HashMap};

/// One live message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Location {
    /// The segment holding its enqueue.
    pub(super) segment: u64,
    /// Its payload's size.
    pub(super) bytes: u32,
    /// `(returned, failed)` once it has been delivered.
    pub(super) delivered: Option<(u32, u32)>,
}

#[derive(Debug, Default)]
pub(super) struct Index {
    /// Live enqueues per segment, oldest segment first (every existing segment is a key).
    pub(super) live: BTreeMap<u64, u64>,
    /// Payload bytes ever enqueued per segment, and those still live: how much is garbage.
    pub(super) written: HashMap<u64, u64>,
    pub(super) live_bytes: HashMap<u64, u64>,
    /// Per queue, per sequence number, where the live message lies.
    pub(super) locations: HashMap<u64, HashMap<u64, Location>>,
}

impl Index {
    /// Records an enqueue in `segment`; a later enqueue of the same message (compaction) moves
    /// it and keeps its delivery state.
    pub(super) fn enqueued(&mut self, queue: u64, seq: u64, segment: u64, bytes: usize) {
        let bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
        let slot = self.locations.entry(queue).or_default().entry(seq);
        let previous = match slot {
            std::collections::hash_map::Entry::Occupied(mut e) => {
                let old = *e.get();
                *e.get_mut() = Location { segment, bytes, delivered: old.delivered };
                Some(old)
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(Location { segment, bytes, delivered: None });
                None
            }
        };
        if let Some(old) = previous {
            self.release(old);
        }
        *self.live.entry(segment).or_default() += 1;
        *self.written.entry(segment).or_default() += u64::from(bytes);
        *self.live_bytes.entry(segment).or_default() += u64::from(bytes);
    }

    /// Records a delivery of a live message.
    pub(super) fn delivered(&mut self, queue: u64, seq: u64, returned: u32, failed: u32) {
        if let Some(location) = self.locations.get_mut(&queue).and_then(|q| q.get_mut(&seq)) {
            location.delivered = Some((returned, failed));
        }
    }

    /// Records that a message is gone.
    pub(super) fn removed(&mut self, queue: u64, seq: u64) {
        let location = self.locations.get_mut(&queue).and_then(|q| q.remove(&seq));
        if let Some(location) = location {
            self.release(location);
        }
    }

    /// Records that a queue is gone.
    pub(super) fn dropped(&mut self, queue: u64) {
        for (_, location) in self.locations.remove(&queue).unwrap_or_default() {
            self.release(location);
        }
    }

    /// Where a live message lies.
    pub(super) fn location(&self, queue: u64, seq: u64) -> Option<Location> {
        self.locations.get(&queue).and_then(|q| q.get(&seq)).copied()
    }

    fn release(&mut self, location: Location) {
        if let Some(count) = self.live.get_mut(&location.segment) {
            *count = count.saturating_sub(1);
        }
        if let Some(bytes) = self.live_bytes.get_mut(&location.segment) {
            *bytes = bytes.saturating_sub(u64::from(location.bytes));
        }
    }

    /// Forgets a deleted segment.
    pub(super) fn forget_segment(&mut self, segment: u64) {
        self.live.remove(&segment);
        self.written.remove(&segment);
        self.live_bytes.remove(&segment);
    }
}
