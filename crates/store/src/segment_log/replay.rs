//! Reading the log back at start: every segment in order, the live messages rebuilt, a torn
//! tail of the last segment cut off, and the writer's index of where live messages lie.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::index::Index;
use super::record::{HEADER_LEN, Next, SEGMENT_MAGIC, next_record};
use super::{LogError, Record, RecoveredMessage, Recovery};

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

struct Live {
    message: RecoveredMessage,
}

pub(super) fn replay(dir: &Path) -> Result<Replayed, LogError> {
    let segments = segment_files(dir)?;
    let mut recovery = Recovery::default();
    let mut index = Index::default();
    let mut live: HashMap<(u64, u64), Live> = HashMap::new();
    let last = segments.last().map(|(n, _)| *n);
    for (number, path) in &segments {
        let io = |source| LogError::Io { path: path.clone(), source };
        let bytes = Bytes::from(std::fs::read(path).map_err(io)?);
        let is_last = Some(*number) == last;
        let corrupt = |offset: usize, what| LogError::Corrupt { segment: *number, offset: offset as u64, what };
        index.live.insert(*number, 0);
        recovery.segments += 1;
        let header_ok = bytes.get(..8) == Some(&SEGMENT_MAGIC[..])
            && bytes.get(8..HEADER_LEN).map(|n| n.iter().rev().fold(0u64, |a, b| (a << 8) | u64::from(*b)))
                == Some(*number);
        if !header_ok {
            if is_last && bytes.len() < HEADER_LEN {
                // Created but its header never reached the disk.
                truncate(path, 0, &mut recovery, bytes.len())?;
                std::fs::remove_file(path).map_err(io)?;
                index.forget_segment(*number);
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
                    apply(record, *number, &mut live, &mut index);
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
    for ((queue, _), entry) in live {
        recovery.queues.entry(queue).or_default().push(entry.message);
    }
    for messages in recovery.queues.values_mut() {
        messages.sort_by_key(|m| m.seq);
    }
    Ok(Replayed { recovery, index })
}

fn truncate(path: &Path, len: u64, recovery: &mut Recovery, cut: usize) -> Result<(), LogError> {
    let io = |source| LogError::Io { path: path.to_owned(), source };
    let file = std::fs::OpenOptions::new().write(true).open(path).map_err(io)?;
    file.set_len(len).map_err(io)?;
    file.sync_all().map_err(io)?;
    recovery.truncated_bytes += cut as u64;
    Ok(())
}

fn apply(record: Record, segment: u64, live: &mut HashMap<(u64, u64), Live>, index: &mut Index) {
    match record {
        Record::Enqueue { queue, seq, expires_at, payload } => {
            index.enqueued(queue, seq, segment, payload.len());
            let message = RecoveredMessage { seq, expires_at, payload, delivered: false, returned: 0, failed: 0 };
            // A re-appended enqueue (compaction) keeps the delivery state already seen.
            let previous = live.insert((queue, seq), Live { message });
            if let (Some(previous), Some(entry)) = (previous, live.get_mut(&(queue, seq))) {
                entry.message.delivered = previous.message.delivered;
                entry.message.returned = previous.message.returned;
                entry.message.failed = previous.message.failed;
            }
        }
        Record::Remove { queue, seq } => {
            live.remove(&(queue, seq));
            index.removed(queue, seq);
        }
        Record::Delivered { queue, seq, returned, failed } => {
            if let Some(entry) = live.get_mut(&(queue, seq)) {
                entry.message.delivered = true;
                entry.message.returned = returned;
                entry.message.failed = failed;
            }
            index.delivered(queue, seq, returned, failed);
        }
        Record::DropQueue { queue } => {
            live.retain(|(q, _), _| *q != queue);
            index.dropped(queue);
        }
    }
}
