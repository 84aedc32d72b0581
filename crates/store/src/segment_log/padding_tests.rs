//! The zeros the writer fills ahead of its records: written ahead, trimmed when a segment is
//! sealed or closed, and cut by replay after a crash left them.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::path::Path;

use bytes::Bytes;

use super::record::{HEADER_LEN, Next, next_record};
use super::replay::segment_files;
use super::tests::{append_synced, enqueue, seqs};
use super::writer::PREALLOCATE;
use super::{LogError, LogOptions, MessageLog};

/// Where the records of a segment file end, and what follows them.
fn records_end(bytes: &[u8]) -> (usize, &'static str) {
    let bytes = Bytes::copy_from_slice(bytes);
    let mut offset = HEADER_LEN;
    loop {
        match next_record(&bytes.slice(offset..)) {
            Next::Record(_, len) => offset += len,
            Next::End => return (offset, "end"),
            Next::Padding => return (offset, "padding"),
            Next::Torn(_) | Next::Invalid(_) => return (offset, "bad"),
        }
    }
}

fn last_segment(dir: &Path) -> std::path::PathBuf {
    segment_files(dir).unwrap().pop().unwrap().1
}

#[test]
fn the_segment_being_written_is_zero_filled_ahead_and_trimmed_when_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = MessageLog::open(dir.path(), LogOptions::default()).unwrap();
    append_synced(&log, vec![enqueue(1, 1, b"first"), enqueue(1, 2, b"second")]);
    let path = last_segment(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    let (end, after) = records_end(&bytes);
    assert_eq!(after, "padding");
    assert_eq!(bytes.len() as u64, end as u64 + PREALLOCATE, "a MiB of zeros after the records");

    // Later appends overwrite the zeros rather than grow the file.
    append_synced(&log, vec![enqueue(1, 3, b"third")]);
    let again = std::fs::read(&path).unwrap();
    assert_eq!(again.len(), bytes.len());
    assert!(records_end(&again).0 > end);

    log.close().unwrap();
    let closed = std::fs::read(&path).unwrap();
    assert_eq!(records_end(&closed), (closed.len(), "end"), "closing trims the zeros");
    let (_log, recovery) = MessageLog::open(dir.path(), LogOptions::default()).unwrap();
    assert_eq!(seqs(&recovery, 1), [1, 2, 3]);
}

#[test]
fn a_sealed_segment_ends_with_its_last_record() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions { segment_bytes: 4096, fault: None };
    let (log, _) = MessageLog::open(dir.path(), options).unwrap();
    for seq in 0..40 {
        append_synced(&log, vec![enqueue(1, seq, &[b'x'; 300])]);
    }
    let segments = segment_files(dir.path()).unwrap();
    assert!(segments.len() >= 3, "{segments:?}");
    let (_, sealed) = segments.split_last().unwrap();
    for (number, path) in sealed {
        let bytes = std::fs::read(path).unwrap();
        assert_eq!(records_end(&bytes), (bytes.len(), "end"), "segment {number}");
    }
    let last = std::fs::read(&segments.last().unwrap().1).unwrap();
    assert_eq!(last.len(), 4096, "the segment being written is filled up to its roll-over size");
    assert_eq!(records_end(&last).1, "padding");
}

#[test]
fn a_crash_leaves_the_zeros_and_replay_cuts_them_keeping_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let crashed = {
        let (log, _) = MessageLog::open(dir.path(), LogOptions::default()).unwrap();
        append_synced(&log, vec![enqueue(1, 1, b"one"), enqueue(1, 2, b"two")]);
        // What a kill -9 leaves: the file as it is while the writer runs.
        std::fs::read(last_segment(dir.path())).unwrap()
    };
    let path = last_segment(dir.path());
    std::fs::write(&path, &crashed).unwrap();
    let (end, _) = records_end(&crashed);

    let (log, recovery) = MessageLog::open(dir.path(), LogOptions::default()).unwrap();
    assert_eq!(seqs(&recovery, 1), [1, 2]);
    assert_eq!(recovery.truncated_bytes, 0, "zeros are not a torn write");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), end as u64);
    append_synced(&log, vec![enqueue(1, 3, b"three")]);
    log.close().unwrap();
    let (_log, recovery) = MessageLog::open(dir.path(), LogOptions::default()).unwrap();
    assert_eq!(seqs(&recovery, 1), [1, 2, 3], "appends after the cut land where the records end");
}

#[test]
fn bytes_after_a_zeroed_frame_are_a_torn_tail_at_the_end_and_corruption_before_it() {
    let dir = tempfile::tempdir().unwrap();
    {
        let options = LogOptions { segment_bytes: 64, fault: None };
        let (log, _) = MessageLog::open(dir.path(), options).unwrap();
        for seq in 0..3 {
            append_synced(&log, vec![enqueue(1, seq, b"a payload that fills a segment")]);
        }
        log.close().unwrap();
    }
    let with_garbage_after_zeros = |bytes: &mut Vec<u8>| {
        bytes.extend_from_slice(&[0; 100]);
        bytes.push(7);
        bytes.extend_from_slice(&[0; 20]);
    };

    // In the last segment: a write the crash tore (its first page never reached the disk).
    let last = last_segment(dir.path());
    let mut bytes = std::fs::read(&last).unwrap();
    let whole = bytes.len();
    with_garbage_after_zeros(&mut bytes);
    std::fs::write(&last, &bytes).unwrap();
    let (log, recovery) = MessageLog::open(dir.path(), LogOptions::default()).unwrap();
    assert_eq!(seqs(&recovery, 1), [0, 1, 2]);
    assert_eq!(recovery.truncated_bytes, 121);
    assert_eq!(std::fs::metadata(&last).unwrap().len(), whole as u64);
    log.close().unwrap();

    // In a sealed segment nothing was being written: refuse to start.
    let segments = segment_files(dir.path()).unwrap();
    let (number, first) = &segments[0];
    let mut bytes = std::fs::read(first).unwrap();
    with_garbage_after_zeros(&mut bytes);
    std::fs::write(first, &bytes).unwrap();
    let error = MessageLog::open(dir.path(), LogOptions::default()).unwrap_err();
    assert!(matches!(error, LogError::Corrupt { segment, .. } if segment == *number), "{error}");
}
