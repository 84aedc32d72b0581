//! Reading the log back at start: every segment in order, the live messages and their places
//! found, a torn tail of the last segment cut off, and the writer's index of where live
//! messages lie.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::index::{Index, SegmentCounts};
use super::record::{HEADER_LEN, Next, SEGMENT_MAGIC, next_record};
use super::{LogError, Place, Record, RecoveredMessage, RecoveredQueue, Recovery};

pub(super) struct Replayed {
    pub(super) recovery: Recovery,
    pub(super) index: Index,
}

/// The segment files of `dir`, by number.
pub(super) fn segment_files(dir: &Path) -> Result<Vec<(u64, PathBuf)>, LogError> {
    let io = |source| LogError::Io { path: dir.to_owned(), source };
    let mut segments = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        let number = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".seg"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(number) = number {
            segments.push((number, path));
        }
    }
    segments.sort();
    Ok(segments)
}

/// The file name of segment `number`.
pub(super) fn segment_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:016}.seg"))
}

/// The mark that segment `number` was sealed without a sync of its tail, because that tail
/// held only spills (transient messages, never recovered); the mark holds the offset the
/// tail begins at. A power loss can tear such a tail anywhere: replay then keeps what comes
/// before the tear instead of refusing to start, as it must for a tear anywhere else but in
/// the last segment. The mark is made (its directory entry synced) before the next segment
/// exists, and goes with its segment.
pub(super) fn unsynced_mark_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:016}.unsynced"))
}

/// Where segment `number`'s unsynced tail of spills begins, when it is marked so.
fn unsynced_tail(dir: &Path, number: u64) -> Option<u64> {
    std::fs::read_to_string(unsynced_mark_path(dir, number)).ok()?.trim().parse().ok()
}

pub(super) fn replay(dir: &Path) -> Result<Replayed, LogError> {
    let segments = segment_files(dir)?;
    let mut recovery = Recovery::default();
    let mut state = ReplayState::default();
    let last = segments.last().map(|(n, _)| *n);
    for (number, path) in &segments {
        let io = |source| LogError::Io { path: path.clone(), source };
        // One segment at a time: nothing of it is kept but where its live messages lie.
        let bytes = Bytes::from(std::fs::read(path).map_err(io)?);
        let is_last = Some(*number) == last;
        let unsynced_from = if is_last { None } else { unsynced_tail(dir, *number) };
        let corrupt = |offset: usize, what| LogError::Corrupt { segment: *number, offset: offset as u64, what };
        state.index.segments.insert(*number, SegmentCounts::default());
        recovery.segments += 1;
        let header_ok = bytes.get(..8) == Some(&SEGMENT_MAGIC[..])
            && bytes.get(8..HEADER_LEN).map(|n| n.iter().rev().fold(0u64, |a, b| (a << 8) | u64::from(*b)))
                == Some(*number);
        if !header_ok {
            if is_last && bytes.len() < HEADER_LEN {
                // Created but its header never reached the disk.
                truncate(path, 0, &mut recovery, bytes.len())?;
                std::fs::remove_file(path).map_err(io)?;
                state.index.forget_segment(*number);
                continue;
            }
            return Err(corrupt(0, "bad segment header"));
        }
        let mut offset = HEADER_LEN;
        loop {
            let rest = bytes.slice(offset..);
            match next_record(&rest) {
                Next::End => break,
                // The writer allocates ahead of its records; it finds the end of the last
                // segment from the file's length, so the zeros go (they held nothing).
                Next::Padding if is_last => {
                    truncate(path, offset as u64, &mut recovery, 0)?;
                    break;
                }
                Next::Padding => break,
                Next::Record(record, len) => {
                    recovery.records += 1;
                    let place =
                        Place { segment: *number, offset: offset as u64, len: u32::try_from(len).unwrap_or(u32::MAX) };
                    state.apply(record, place);
                    offset += len;
                }
                Next::Torn(what) | Next::Invalid(what) if unsynced_from.is_some_and(|from| offset as u64 >= from) => {
                    tracing::warn!(segment = number, offset, what, "message log: spills never synced, torn, left out");
                    break;
                }
                Next::Torn(what) if !is_last => return Err(corrupt(offset, what)),
                Next::Torn(what) => {
                    tracing::warn!(segment = number, offset, what, "message log: torn tail cut off");
                    truncate(path, offset as u64, &mut recovery, bytes.len() - offset)?;
                    break;
                }
                Next::Invalid(what) => return Err(corrupt(offset, what)),
            }
        }
    }
    recovery.queues = state.queues.into_iter().map(|(queue, replay)| (queue, replay.finish())).collect();
    recovery.queues.retain(|_, messages| !messages.is_empty());
    state.index.seal_all();
    Ok(Replayed { recovery, index: state.index })
}

fn truncate(path: &Path, len: u64, recovery: &mut Recovery, cut: usize) -> Result<(), LogError> {
    let io = |source| LogError::Io { path: path.to_owned(), source };
    let file = std::fs::OpenOptions::new().write(true).open(path).map_err(io)?;
    file.set_len(len).map_err(io)?;
    file.sync_all().map_err(io)?;
    recovery.truncated_bytes += cut as u64;
    Ok(())
}

#[derive(Default)]
struct ReplayState {
    index: Index,
    queues: HashMap<u64, QueueReplay>,
    /// Messages a move replaced before their own enqueue was replayed, as `(queue, seq)`.
    ///
    /// A queue hands deliveries to its consumers before its pass writes the pass's records
    /// (gets were answered before them too, until the engine test `moved.rs` caught it), so a
    /// message taken and moved at once can have its move written ahead of its enqueue into the
    /// source. Its enqueue, when it comes, is the message leaving again: seqs are never reused.
    replaced: HashSet<(u64, u64)>,
}

impl ReplayState {
    fn apply(&mut self, record: Record, place: Place) {
        match record {
            Record::Enqueue { queue, seq, expires_at, size, priority, not_before, replaces, .. } => {
                if let Some((from, from_seq)) = replaces {
                    if self.queues.get(&from).is_none_or(|source| source.is_new(from_seq)) {
                        self.replaced.insert((from, from_seq));
                    }
                    self.apply(Record::Remove { queue: from, seq: from_seq }, place);
                }
                let replay = self.queues.entry(queue).or_default();
                // A queue's enqueues come in sequence order; one that does not is a message
                // compaction wrote again (the earlier copy may be gone with its segment).
                if replay.is_new(seq) {
                    self.index.enqueued(queue, seq, place.segment);
                } else {
                    self.index.moved(queue, seq, place.segment);
                }
                let message = RecoveredMessage {
                    seq,
                    expires_at,
                    size,
                    priority,
                    not_before,
                    place,
                    delivered: false,
                    dead_lettered: None,
                    returned: 0,
                    failed: 0,
                };
                replay.enqueued(message);
                if self.replaced.remove(&(queue, seq)) {
                    self.apply(Record::Remove { queue, seq }, place);
                }
            }
            Record::Remove { queue, seq } => {
                if let Some(replay) = self.queues.get_mut(&queue) {
                    replay.removed(seq);
                }
                self.index.removed(queue, seq);
            }
            Record::Delivered { queue, seq, returned, failed } => {
                if let Some(message) = self.queues.get_mut(&queue).and_then(|r| r.find(seq)) {
                    message.delivered = true;
                    message.returned = returned;
                    message.failed = failed;
                }
                self.index.delivered(queue, seq, returned, failed);
            }
            Record::DeadLettered { queue, seq, reason } => {
                if let Some(message) = self.queues.get_mut(&queue).and_then(|r| r.find(seq)) {
                    message.dead_lettered = Some(reason);
                }
                self.index.dead_lettered(queue, seq, reason);
            }
            Record::DropQueue { queue } => {
                self.queues.remove(&queue);
                self.index.dropped(queue);
            }
            // Spilled messages were transient: nothing of them survives a restart, and their
            // bytes are garbage from now on.
            Record::Spill { .. } | Record::Released { .. } => {}
        }
    }
}

/// Messages per chunk of a queue's replay.
const REPLAY_CHUNK: usize = 65_536;

/// Messages in sequence order, each with whether it is still live.
#[derive(Default)]
struct Chunk {
    messages: Vec<RecoveredMessage>,
    live: Vec<bool>,
}

impl Chunk {
    /// Drops the messages no longer live, in place.
    fn sweep(&mut self) {
        let mut live = self.live.iter();
        self.messages.retain(|_| live.next().copied().unwrap_or(false));
        self.live.retain(|live| *live);
    }
}

/// One queue's messages during replay: chunks in sequence order (removed ones marked, and
/// swept out once they are the majority), plus the compaction copies whose first copy was
/// already deleted. Chunks, not one vector, so that nothing is copied on the way to the queue
/// (see [`RecoveredQueue`]).
#[derive(Default)]
struct QueueReplay {
    chunks: Vec<Chunk>,
    live: usize,
    removed: usize,
    late: BTreeMap<u64, RecoveredMessage>,
}

impl QueueReplay {
    fn is_new(&self, seq: u64) -> bool {
        let last = self.chunks.last().and_then(|chunk| chunk.messages.last());
        last.is_none_or(|last| last.seq < seq) && !self.late.contains_key(&seq)
    }

    fn enqueued(&mut self, message: RecoveredMessage) {
        if self.is_new(message.seq) {
            if self.chunks.last().is_none_or(|chunk| chunk.messages.len() >= REPLAY_CHUNK) {
                let chunk =
                    Chunk { messages: Vec::with_capacity(REPLAY_CHUNK), live: Vec::with_capacity(REPLAY_CHUNK) };
                self.chunks.push(chunk);
            }
            if let Some(chunk) = self.chunks.last_mut() {
                chunk.messages.push(message);
                chunk.live.push(true);
                self.live += 1;
            }
        } else if let Some(existing) = self.find(message.seq) {
            // A copy keeps the delivery state its message had.
            existing.place = message.place;
            existing.expires_at = message.expires_at;
        } else {
            self.late.insert(message.seq, message);
        }
    }

    /// The chunk and index of a live message.
    fn position(&self, seq: u64) -> Option<(usize, usize)> {
        let after = self.chunks.partition_point(|chunk| chunk.messages.first().is_some_and(|m| m.seq <= seq));
        let chunk_at = after.checked_sub(1)?;
        let chunk = self.chunks.get(chunk_at)?;
        let at = chunk.messages.binary_search_by_key(&seq, |m| m.seq).ok()?;
        chunk.live.get(at).is_some_and(|live| *live).then_some((chunk_at, at))
    }

    fn find(&mut self, seq: u64) -> Option<&mut RecoveredMessage> {
        match self.position(seq) {
            Some((chunk, at)) => self.chunks.get_mut(chunk).and_then(|c| c.messages.get_mut(at)),
            None => self.late.get_mut(&seq),
        }
    }

    fn removed(&mut self, seq: u64) {
        let Some((chunk, at)) = self.position(seq) else {
            self.late.remove(&seq);
            return;
        };
        if let Some(live) = self.chunks.get_mut(chunk).and_then(|c| c.live.get_mut(at)) {
            *live = false;
            self.live -= 1;
            self.removed += 1;
        }
        if self.removed > 4096 && self.removed > self.live {
            self.chunks.iter_mut().for_each(Chunk::sweep);
            self.chunks.retain(|chunk| !chunk.messages.is_empty());
            self.removed = 0;
        }
    }

    /// The live messages in sequence order, swept in place.
    fn finish(self) -> RecoveredQueue {
        let chunks = self.chunks.into_iter().map(|mut chunk| {
            chunk.sweep();
            chunk.messages
        });
        if self.late.is_empty() {
            return RecoveredQueue::from_chunks(chunks.collect());
        }
        // Copies of messages whose first copy is gone: rare enough to merge by sorting.
        let mut all: Vec<RecoveredMessage> = chunks.flatten().collect();
        all.extend(self.late.into_values());
        all.sort_by_key(|m| m.seq);
        RecoveredQueue::from(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(seq: u64) -> RecoveredMessage {
        let place = Place { segment: 1, offset: seq, len: 10 };
        RecoveredMessage {
            seq,
            expires_at: None,
            size: 1,
            priority: 0,
            not_before: None,
            place,
            delivered: false,
            dead_lettered: None,
            returned: 0,
            failed: 0,
        }
    }

    #[test]
    fn chunks_keep_sequence_order_through_removals_sweeps_and_moved_copies() {
        let total = REPLAY_CHUNK as u64 * 3 + 5;
        let mut replay = QueueReplay::default();
        for seq in 0..total {
            replay.enqueued(message(seq));
        }
        assert_eq!(replay.chunks.len(), 4);
        // The whole first chunk and every other message of the next two: enough to sweep.
        let chunk = REPLAY_CHUNK as u64;
        for seq in (0..chunk).chain((chunk..chunk * 3).step_by(2)) {
            replay.removed(seq);
        }
        let kept = replay.chunks.iter().map(|c| c.messages.len()).sum::<usize>();
        assert!(kept < total as usize - chunk as usize, "swept once removed ones were the majority: {kept}");
        assert!(replay.chunks.iter().all(|c| !c.messages.is_empty() && c.messages.len() == c.live.len()));
        // A compaction copy of a live message moves it, keeping its place in the order; a
        // message removed after the sweep is not found again.
        let moved = total - 2;
        replay.enqueued(RecoveredMessage { place: Place { segment: 7, offset: 0, len: 10 }, ..message(moved) });
        replay.removed(chunk + 1);
        assert!(replay.find(chunk + 1).is_none());
        assert!(replay.find(chunk + 3).is_some());
        let out: Vec<RecoveredMessage> = replay.finish().into_iter().collect();
        let expected: Vec<u64> = (chunk + 3..chunk * 3).step_by(2).chain(chunk * 3..total).collect();
        assert_eq!(out.iter().map(|m| m.seq).collect::<Vec<_>>(), expected);
        assert_eq!(out.iter().find(|m| m.seq == moved).map(|m| m.place.segment), Some(7));
    }
}
