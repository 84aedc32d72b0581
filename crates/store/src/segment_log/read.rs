//! Reading messages back from the log, for queues whose messages live on disk.
//!
//! A queue asks for many places at once, in its order; places that lie close together in one
//! segment are read with one `pread` of the span that covers them (a queue's messages are
//! mostly written back to back), so reading a long queue back costs a few syscalls per
//! thousand messages. Each record's CRC is checked again: a message read back is exactly the
//! one written.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::record::{Next, next_record};
use super::replay::segment_path;
use super::{Place, Record};

/// Places further apart than this are read separately (reading the gap would cost more).
const MAX_GAP: u64 = 64 * 1024;
/// The largest span read at once.
const MAX_SPAN: u64 = 8 * 1024 * 1024;

/// Why a message could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The segment is gone: compaction moved the message, and its new place is on its way to
    /// the queue.
    #[error("message log segment {segment} is gone")]
    Gone {
        /// The segment number.
        segment: u64,
    },
    /// The read failed.
    #[error("reading message log segment {segment}: {source}")]
    Io {
        /// The segment number.
        segment: u64,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// What lies there is not the message's record.
    #[error("message log segment {segment} at byte {offset}: {what}")]
    Corrupt {
        /// The segment number.
        segment: u64,
        /// Where.
        offset: u64,
        /// What was wrong.
        what: &'static str,
    },
}

/// Reads enqueued and spilled messages back; cheap to clone.
#[derive(Clone, Debug)]
pub struct LogReader {
    dir: Arc<PathBuf>,
}

impl LogReader {
    pub(super) fn new(dir: &Path) -> Self {
        Self { dir: Arc::new(dir.to_owned()) }
    }

    /// The log's directory (where a queue may keep files of its own that never outlive it).
    #[must_use]
    pub fn directory(&self) -> &Path {
        &self.dir
    }

    /// The encoded messages at `places`, in the same order.
    #[must_use]
    pub fn read(&self, places: &[Place]) -> Vec<Result<Bytes, ReadError>> {
        let mut out = Vec::with_capacity(places.len());
        let mut open: Option<(u64, File)> = None;
        let mut rest = places;
        while let Some(first) = rest.first() {
            let group = span_len(rest);
            let (now, later) = rest.split_at(group);
            rest = later;
            match self.read_span(first.segment, now, &mut open) {
                Ok(span) => out.extend(now.iter().map(|place| payload(&span, first.offset, place))),
                Err(error) => {
                    let segment = first.segment;
                    out.extend(now.iter().map(|_| Err(copy_error(&error, segment))));
                }
            }
        }
        out
    }

    /// Reads the bytes covering `places` (all in `segment`, increasing offsets).
    fn read_span(&self, segment: u64, places: &[Place], open: &mut Option<(u64, File)>) -> Result<Bytes, ReadError> {
        let (Some(first), Some(last)) = (places.first(), places.last()) else {
            return Ok(Bytes::new());
        };
        let start = first.offset;
        let end = last.offset + u64::from(last.len);
        if open.as_ref().is_none_or(|(number, _)| *number != segment) {
            let file = File::open(segment_path(&self.dir, segment)).map_err(|source| match source.kind() {
                std::io::ErrorKind::NotFound => ReadError::Gone { segment },
                _ => ReadError::Io { segment, source },
            })?;
            *open = Some((segment, file));
        }
        let Some((_, file)) = open.as_ref() else {
            return Ok(Bytes::new());
        };
        let len = usize::try_from(end - start).unwrap_or(usize::MAX);
        let mut buffer = BytesMut::zeroed(len);
        file.read_exact_at(&mut buffer, start).map_err(|source| match source.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                ReadError::Corrupt { segment, offset: start, what: "a record beyond the end of its segment" }
            }
            _ => ReadError::Io { segment, source },
        })?;
        Ok(buffer.freeze())
    }
}

/// How many places from the front of `places` one read covers.
fn span_len(places: &[Place]) -> usize {
    let Some(first) = places.first() else {
        return 0;
    };
    let mut end = first.offset + u64::from(first.len);
    let mut count = 1;
    for place in places.iter().skip(1) {
        let next_end = place.offset + u64::from(place.len);
        let close = place.segment == first.segment && place.offset >= end && place.offset - end <= MAX_GAP;
        if !close || next_end - first.offset > MAX_SPAN {
            break;
        }
        end = next_end;
        count += 1;
    }
    count
}

/// The message in `span` (read from `span_start`) at `place`.
fn payload(span: &Bytes, span_start: u64, place: &Place) -> Result<Bytes, ReadError> {
    let corrupt = |what| ReadError::Corrupt { segment: place.segment, offset: place.offset, what };
    let from = usize::try_from(place.offset - span_start).unwrap_or(usize::MAX);
    let to = from.saturating_add(place.len as usize);
    if to > span.len() {
        return Err(corrupt("a record beyond the span read"));
    }
    match next_record(&span.slice(from..to)) {
        Next::Record(Record::Enqueue { payload, .. } | Record::Spill { payload, .. }, _) => Ok(payload),
        Next::Record(..) => Err(corrupt("not a message record")),
        Next::End | Next::Padding => Err(corrupt("no record")),
        Next::Torn(what) | Next::Invalid(what) => Err(corrupt(what)),
    }
}

/// `ReadError` is not `Clone` (it holds an `io::Error`): each place of a failed span gets its
/// own copy.
fn copy_error(error: &ReadError, segment: u64) -> ReadError {
    match error {
        ReadError::Gone { .. } => ReadError::Gone { segment },
        ReadError::Io { source, .. } => {
            ReadError::Io { segment, source: std::io::Error::new(source.kind(), source.to_string()) }
        }
        ReadError::Corrupt { offset, what, .. } => ReadError::Corrupt { segment, offset: *offset, what },
    }
}
