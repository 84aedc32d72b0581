//! Reading the log back at start: every segment in order, the live messages and their places
//! found, a torn tail of the last segment cut off, and the writer's index of where live
//! messages lie.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::index::{Index, SegmentCounts};
use super::record::{HEADER_LEN, Next, SEGMENT_MAGIC, next_record};
use super::{LogError, Place, Record, RecoveredMessage, Recovery};

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
                Next::Record(record, len) => {
                    recovery.records += 1;
                    let place =
                        Place { segment: *number, offset: offset as u64, len: u32::try_from(len).unwrap_or(u32::MAX) };
                    state.apply(record, place);
                    offset += len;
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
}

impl ReplayState {
    fn apply(&mut self, record: Record, place: Place) {
        match record {
            Record::Enqueue { queue, seq, expires_at, size, .. } => {
                let replay = self.queues.entry(queue).or_default();
                // A queue's enqueues come in sequence order; one that does not is a message
                // compaction wrote again (the earlier copy may be gone with its segment).
                if replay.is_new(seq) {
                    self.index.enqueued(queue, seq, place.segment);
                } else {
                    self.index.moved(queue, seq, place.segment);
                }
                let message =
                    RecoveredMessage { seq, expires_at, size, place, delivered: false, returned: 0, failed: 0 };
                replay.enqueued(message);
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

/// One queue's messages during replay: a vector in sequence order (removed ones marked, and
/// swept out once they are the majority), plus the compaction copies whose first copy was
/// already deleted.
#[derive(Default)]
struct QueueReplay {
    messages: Vec<(RecoveredMessage, bool)>,
    removed: usize,
    late: BTreeMap<u64, RecoveredMessage>,
}

impl QueueReplay {
    fn is_new(&self, seq: u64) -> bool {
        self.messages.last().is_none_or(|(last, _)| last.seq < seq) && !self.late.contains_key(&seq)
    }

    fn enqueued(&mut self, message: RecoveredMessage) {
        if self.is_new(message.seq) {
            self.messages.push((message, true));
        } else if let Some(existing) = self.find(message.seq) {
            // A copy keeps the delivery state its message had.
            existing.place = message.place;
            existing.expires_at = message.expires_at;
        } else {
            self.late.insert(message.seq, message);
        }
    }

    fn position(&self, seq: u64) -> Option<usize> {
        let at = self.messages.binary_search_by_key(&seq, |(m, _)| m.seq).ok()?;
        self.messages.get(at).is_some_and(|(_, live)| *live).then_some(at)
    }

    fn find(&mut self, seq: u64) -> Option<&mut RecoveredMessage> {
        match self.position(seq) {
            Some(at) => self.messages.get_mut(at).map(|(m, _)| m),
            None => self.late.get_mut(&seq),
        }
    }

    fn removed(&mut self, seq: u64) {
        let Some(at) = self.position(seq) else {
            self.late.remove(&seq);
            return;
        };
        if let Some((_, live)) = self.messages.get_mut(at) {
            *live = false;
            self.removed += 1;
        }
        if self.removed > 4096 && self.removed * 2 > self.messages.len() {
            self.messages.retain(|(_, live)| *live);
            self.removed = 0;
        }
    }

    /// The live messages in sequence order.
    fn finish(self) -> Vec<RecoveredMessage> {
        let mut out: Vec<RecoveredMessage> =
            self.messages.into_iter().filter(|(_, live)| *live).map(|(m, _)| m).collect();
        if !self.late.is_empty() {
            out.extend(self.late.into_values());
            out.sort_by_key(|m| m.seq);
        }
        out
    }
}
