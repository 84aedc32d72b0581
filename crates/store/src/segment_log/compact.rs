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
//!
//! Reading the old segment (up to its whole size, 64 MiB by default) runs on a thread of its
//! own ([`Reading`]): on the writer's thread it held every sync behind it, and with it every
//! confirm and persistent delivery of the broker (S1b at 10k msg/s: p99 65 ms and p99.9
//! 148 ms in the round that compacted one segment, against 0.5 and 1.3 ms). The writer
//! commits what the read found on its next batch, keeping only what is still live then.

use std::path::{Path, PathBuf};
use std::sync::mpsc;

use bytes::Bytes;
use foldhash::HashMap;
use roaring::RoaringTreemap;

use super::Record;
use super::index::Index;
use super::record::{HEADER_LEN, Next, next_record};
use super::replay::segment_path;

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
struct OldestWatch {
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

/// The compaction of the oldest segment, which the writer steps after each batch.
#[derive(Debug, Default)]
pub(super) struct Compaction {
    /// How fast the oldest segment empties.
    oldest_watch: OldestWatch,
    /// The read of a segment being compacted, while it runs.
    reading: Option<Reading>,
}

impl Compaction {
    /// Whether a segment is being read for compaction.
    pub(super) fn is_reading(&self) -> bool {
        self.reading.is_some()
    }

    /// Compacts the oldest segment of `index` if it is worth it: starts reading it, or returns
    /// what a finished read found, for the writer to append as one relocation batch. `head` is
    /// the segment being written, `appended` the bytes written to the log since it opened.
    pub(super) fn step(
        &mut self,
        index: &Index,
        dir: &Path,
        head: u64,
        appended: u64,
        segment_bytes: u64,
    ) -> Option<Vec<Record>> {
        if let Some(reading) = self.reading.take() {
            match reading.result.try_recv() {
                Ok(found) => return still_live(index, dir, reading.segment, found),
                Err(mpsc::TryRecvError::Empty) => self.reading = Some(reading),
                Err(mpsc::TryRecvError::Disconnected) => {}
            }
            return None;
        }
        if index.segments.len() < MIN_SEGMENTS {
            return None;
        }
        let (&oldest, &counts) = index.segments.first_key_value()?;
        if oldest == head || counts.live == 0 || counts.live.saturating_mul(GARBAGE_RATIO) > counts.written {
            return None;
        }
        if self.oldest_watch.empties_too_slowly(oldest, counts.live, appended, segment_bytes) {
            self.reading = Some(Reading::start(segment_path(dir, oldest), oldest, index.live_in(oldest)));
        }
        None
    }
}

/// The enqueues the read of `segment` found that are still live there, each followed by its
/// delivery state when it has one. Messages removed since the read began are left out.
fn still_live(index: &Index, dir: &Path, segment: u64, found: std::io::Result<Vec<Record>>) -> Option<Vec<Record>> {
    if !index.segments.contains_key(&segment) {
        // It emptied and was deleted meanwhile (perhaps before the read could open it).
        return None;
    }
    let found = match found {
        Ok(found) => found,
        Err(error) => {
            let path = segment_path(dir, segment);
            tracing::warn!(%error, path = %path.display(), "cannot read a segment to compact it");
            return None;
        }
    };
    let mut moved = Vec::with_capacity(found.len());
    for record in found {
        let (Record::Enqueue { queue, seq, .. } | Record::Spill { queue, seq, .. }) = &record else {
            continue;
        };
        let (queue, seq) = (*queue, *seq);
        if !index.is_live_in(queue, seq, segment) {
            continue;
        }
        moved.push(record);
        if let Some((returned, failed)) = index.delivery(queue, seq) {
            moved.push(Record::Delivered { queue, seq, returned, failed });
        }
        if let Some(reason) = index.dead_letter_reason(queue, seq) {
            moved.push(Record::DeadLettered { queue, seq, reason });
        }
    }
    if moved.is_empty() {
        return None;
    }
    tracing::debug!(segment, records = moved.len(), "compacting the oldest log segment");
    Some(moved)
}

/// A read of the segment being compacted, on a thread of its own.
#[derive(Debug)]
struct Reading {
    segment: u64,
    /// The enqueues it found live (as of the writer's index when it began).
    result: mpsc::Receiver<std::io::Result<Vec<Record>>>,
}

impl Reading {
    /// Starts reading `segment` at `path`, keeping the enqueues of the messages in `live`.
    fn start(path: PathBuf, segment: u64, live: HashMap<u64, RoaringTreemap>) -> Self {
        let (tx, result) = mpsc::channel();
        let spawned = std::thread::Builder::new().name("charon-compact".to_owned()).spawn(move || {
            let found = std::fs::read(&path).map(|raw| live_enqueues(&Bytes::from(raw), &live));
            let _ = tx.send(found);
        });
        if let Err(error) = spawned {
            // The receiver then reports the sender gone: no compaction this time.
            tracing::warn!(%error, "cannot start a thread to compact a log segment");
        }
        Self { segment, result }
    }
}

/// The enqueues in a segment's `bytes` of the messages in `live`, each without the removal it
/// carried: written again, that removal must not be replayed after newer records of its queue
/// (see `Record::Enqueue`).
fn live_enqueues(bytes: &Bytes, live: &HashMap<u64, RoaringTreemap>) -> Vec<Record> {
    let mut found = Vec::new();
    let mut offset = HEADER_LEN.min(bytes.len());
    while let Next::Record(mut record, len) = next_record(&bytes.slice(offset..)) {
        offset += len;
        let (Record::Enqueue { queue, seq, .. } | Record::Spill { queue, seq, .. }) = &record else {
            continue;
        };
        if !live.get(queue).is_some_and(|seqs| seqs.contains(*seq)) {
            continue;
        }
        if let Record::Enqueue { replaces, .. } = &mut record {
            *replaces = None;
        }
        found.push(record);
    }
    found
}
