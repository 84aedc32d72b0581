//! Compaction: a few long-lived messages must not pin an old segment, and with it every newer
//! one, forever (a consumer holding one message for hours would otherwise grow the log by the
//! whole traffic of those hours).
//!
//! When the oldest segment is mostly garbage, newer segments exist and its live messages have
//! stopped leaving, its live enqueues are appended again at the head, each followed by its
//! delivery state, as one synced batch; the index then moves them and the old segment is
//! deleted like any spent one. A crash in between leaves both copies: replay lets the later
//! enqueue replace the earlier one and keeps the delivery state, so nothing is lost or
//! duplicated.

use bytes::Bytes;

use super::Record;
use super::record::{HEADER_LEN, Next, next_record};
use super::replay::segment_path;
use super::writer::{Batch, Writer};

/// Segments needed before the oldest is compacted: it, one full one, and the current one.
const MIN_SEGMENTS: usize = 3;
/// The oldest segment is compacted once at most one in this many of the messages written
/// there is live.
const GARBAGE_RATIO: u64 = 4;
/// Batches through which the oldest segment's live count must hold before it is compacted.
/// A queue draining from its head empties that segment by itself within a few batches, and
/// compacting it would rewrite a quarter of it for messages about to be consumed, then make
/// each queue look up every moved message (in a reject storm of 1.5M messages, 550k reads of
/// the paged index a second). Messages that pin a segment are the ones that do not leave.
pub(super) const STABLE_BATCHES: u32 = 32;

/// The oldest segment's live count, and through how many batches it has held.
#[derive(Debug, Default)]
pub(super) struct OldestWatch {
    segment: u64,
    live: u64,
    unchanged: u32,
}

impl OldestWatch {
    /// Whether `live` messages have stayed in `segment` through [`STABLE_BATCHES`] batches.
    fn settled(&mut self, segment: u64, live: u64) -> bool {
        if (self.segment, self.live) != (segment, live) {
            *self = Self { segment, live, unchanged: 0 };
            return false;
        }
        self.unchanged = self.unchanged.saturating_add(1);
        self.unchanged >= STABLE_BATCHES
    }
}

impl Writer {
    /// Compacts the oldest segment if it is worth it.
    pub(super) fn compact_oldest(&mut self) {
        if self.index.segments.len() < MIN_SEGMENTS {
            return;
        }
        let Some((&oldest, &counts)) = self.index.segments.first_key_value() else {
            return;
        };
        if oldest == self.segment || counts.live == 0 || counts.live.saturating_mul(GARBAGE_RATIO) > counts.written {
            return;
        }
        if !self.oldest_watch.settled(oldest, counts.live) {
            return;
        }
        let path = segment_path(&self.dir, oldest);
        let bytes = match std::fs::read(&path) {
            Ok(raw) => Bytes::from(raw),
            Err(error) => {
                tracing::warn!(%error, path = %path.display(), "cannot read a segment to compact it");
                return;
            }
        };
        let moved = self.live_records(oldest, &bytes);
        tracing::debug!(segment = oldest, records = moved.len(), "compacting the oldest log segment");
        self.commit(Batch::relocation(moved));
    }

    /// The enqueues of `segment` that are still live there, each followed by its delivery
    /// state when it has one.
    fn live_records(&self, segment: u64, bytes: &Bytes) -> Vec<Record> {
        let mut moved = Vec::new();
        let mut offset = HEADER_LEN.min(bytes.len());
        while let Next::Record(record, len) = next_record(&bytes.slice(offset..)) {
            offset += len;
            let (Record::Enqueue { queue, seq, .. } | Record::Spill { queue, seq, .. }) = &record else {
                continue;
            };
            let (queue, seq) = (*queue, *seq);
            if !self.index.is_live_in(queue, seq, segment) {
                continue;
            }
            moved.push(record);
            if let Some((returned, failed)) = self.index.delivery(queue, seq) {
                moved.push(Record::Delivered { queue, seq, returned, failed });
            }
        }
        moved
    }
}
