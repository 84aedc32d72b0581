//! Compaction: a few long-lived messages must not pin an old segment, and with it every newer
//! one, forever (a consumer holding one message for hours would otherwise grow the log by the
//! whole traffic of those hours).
//!
//! When the oldest segment is mostly garbage, newer segments exist and its live messages leave
//! too slowly to empty it soon (see [`OldestWatch`]), its live enqueues are appended again at
//! the head, each followed by its delivery state, as one synced batch; the index then moves
//! them and the old segment is deleted like any spent one. A crash in between leaves both
//! copies: replay lets the later enqueue replace the earlier one and keeps the delivery state,
//! so nothing is lost or duplicated.

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
/// Batches over which the oldest segment is watched before compaction decides, and the window
/// over which how fast it empties and how fast the log grows are measured.
pub(super) const WATCH_BATCHES: u32 = 32;
/// The oldest segment is compacted when, at the rates of the last window, the log would grow
/// by more than this many segments before the segment empties by itself.
const GROWTH_SEGMENTS: u64 = 2;

/// How fast the oldest segment empties while the log grows.
///
/// A queue draining from its head empties that segment by itself, and compacting it would
/// rewrite up to a quarter of it for messages about to be consumed, then make each queue look
/// up every moved message (in a reject storm of 1.5M messages, 550k reads of the paged index
/// a second). Compaction is for the segments that empty too slowly for the traffic: messages
/// that never leave, or a consumer so slow that the log would grow by several segments first.
#[derive(Debug, Default)]
pub(super) struct OldestWatch {
    segment: u64,
    /// Its live messages, and the log's appended bytes, when the window began.
    live: u64,
    appended: u64,
    batches: u32,
}

impl OldestWatch {
    /// Whether `segment` (with `live` messages left; `appended` bytes written to the log so
    /// far) empties too slowly, judged at the end of each window of [`WATCH_BATCHES`] batches.
    fn empties_too_slowly(&mut self, segment: u64, live: u64, appended: u64, segment_bytes: u64) -> bool {
        if self.segment != segment {
            *self = Self { segment, live, appended, batches: 0 };
            return false;
        }
        self.batches += 1;
        if self.batches < WATCH_BATCHES {
            return false;
        }
        let left = self.live.saturating_sub(live);
        let grown = appended.saturating_sub(self.appended);
        *self = Self { segment, live, appended, batches: 0 };
        // The log grows by `grown` while `left` messages leave: by grown × live / left before
        // the last one does.
        let limit = segment_bytes.saturating_mul(GROWTH_SEGMENTS);
        left == 0 || u128::from(grown) * u128::from(live) > u128::from(left) * u128::from(limit)
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
        if !self.oldest_watch.empties_too_slowly(oldest, counts.live, self.appended, self.options.segment_bytes) {
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
        while let Next::Record(mut record, len) = next_record(&bytes.slice(offset..)) {
            offset += len;
            let (Record::Enqueue { queue, seq, .. } | Record::Spill { queue, seq, .. }) = &record else {
                continue;
            };
            let (queue, seq) = (*queue, *seq);
            if !self.index.is_live_in(queue, seq, segment) {
                continue;
            }
            // Written again without the message it replaced: that removal must not be replayed
            // after newer records of its queue (see `Record::Enqueue`).
            if let Record::Enqueue { replaces, .. } = &mut record {
                *replaces = None;
            }
            moved.push(record);
            if let Some((returned, failed)) = self.index.delivery(queue, seq) {
                moved.push(Record::Delivered { queue, seq, returned, failed });
            }
            if let Some(reason) = self.index.dead_letter_reason(queue, seq) {
                moved.push(Record::DeadLettered { queue, seq, reason });
            }
        }
        moved
    }
}
