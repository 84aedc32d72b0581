//! The writer thread: group commit, segment roll-over, retry on write failure, and deletion
//! of segments that no longer hold a live message.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::time::Duration;

use bytes::BytesMut;

use super::index::Index;
use super::record::{HEADER_LEN, header, put_record};
use super::replay::{segment_files, segment_path};
use super::{Command, Completion, LogError, LogOptions, Record, Shared};

/// How long to wait before retrying a failed write.
const RETRY: Duration = Duration::from_millis(500);

/// One group commit: the bytes, the records (for the index) and the completions.
pub(super) struct Batch {
    pub(super) bytes: BytesMut,
    pub(super) records: Vec<Record>,
    pub(super) done: Vec<Completion>,
}

pub(super) struct Writer {
    pub(super) dir: PathBuf,
    options: LogOptions,
    pub(super) index: Index,
    shared: Arc<Shared>,
    pub(super) segment: u64,
    file: File,
    /// Bytes of the current segment known to be on disk.
    synced_len: u64,
}

impl Writer {
    /// Opens the last segment for appending (or starts the first one).
    pub(super) fn start(dir: &Path, options: LogOptions, index: Index, shared: Arc<Shared>) -> Result<Self, LogError> {
        let last = segment_files(dir)?.last().map(|(n, _)| *n);
        let (segment, file) = match last {
            Some(n) => (n, open_append(&segment_path(dir, n))?),
            None => (1, create_segment(dir, 1)?),
        };
        let path = segment_path(dir, segment);
        let synced_len = file.metadata().map_err(|source| LogError::Io { path, source })?.len();
        let mut writer = Self { dir: dir.to_owned(), options, index, shared, segment, file, synced_len };
        writer.index.live.entry(segment).or_default();
        writer.reclaim();
        Ok(writer)
    }

    pub(super) fn run(mut self, rx: mpsc::Receiver<Command>) {
        let mut closing = None;
        while closing.is_none() {
            let Ok(first) = rx.recv() else { break };
            let mut batch = Batch { bytes: BytesMut::new(), records: Vec::new(), done: Vec::new() };
            for command in std::iter::once(first).chain(rx.try_iter()) {
                match command {
                    Command::Append(records, done) => {
                        for record in &records {
                            put_record(&mut batch.bytes, record);
                        }
                        batch.records.extend(records);
                        batch.done.extend(done);
                    }
                    Command::Close(reply) => {
                        closing = Some(reply);
                        break;
                    }
                }
            }
            self.commit(batch);
            self.compact_oldest();
        }
        if let Some(reply) = closing {
            let _ = reply.send(Ok(()));
        }
    }

    /// Writes and syncs a batch, retrying until it is on disk, then completes it.
    pub(super) fn commit(&mut self, batch: Batch) {
        if batch.bytes.is_empty() {
            for done in batch.done {
                done(Ok(()));
            }
            return;
        }
        if self.synced_len > HEADER_LEN as u64
            && self.synced_len + batch.bytes.len() as u64 > self.options.segment_bytes
        {
            self.roll();
        }
        loop {
            match self.write(&batch.bytes) {
                Ok(()) => break,
                Err(error) => {
                    if !self.shared.failing.load(Ordering::SeqCst) {
                        tracing::error!(%error, "message log write failed; publishers blocked until it succeeds");
                    }
                    self.shared.set_failing(true);
                    std::thread::sleep(RETRY);
                }
            }
        }
        self.shared.set_failing(false);
        for record in batch.records {
            match record {
                Record::Enqueue { queue, seq, payload, .. } => {
                    self.index.enqueued(queue, seq, self.segment, payload.len());
                }
                Record::Remove { queue, seq } => self.index.removed(queue, seq),
                Record::Delivered { queue, seq, returned, failed } => {
                    self.index.delivered(queue, seq, returned, failed)
                }
                Record::DropQueue { queue } => self.index.dropped(queue),
            }
        }
        for done in batch.done {
            done(Ok(()));
        }
        self.reclaim();
    }

    /// One write of the whole batch and one `fdatasync`; on failure the segment is cut back
    /// to its synced length so a retry rewrites the batch whole.
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let result = match self.options.fault.as_ref().and_then(|fault| fault()) {
            Some(error) => Err(error),
            None => self.file.write_all(bytes).and_then(|()| self.file.sync_data()),
        };
        match result {
            Ok(()) => {
                self.shared.syncs.fetch_add(1, Ordering::Relaxed);
                self.synced_len += bytes.len() as u64;
                Ok(())
            }
            Err(error) => {
                let _ = self.file.set_len(self.synced_len);
                let _ = self.file.seek(SeekFrom::Start(self.synced_len));
                Err(error)
            }
        }
    }

    /// Starts the next segment (the old one is already synced).
    fn roll(&mut self) {
        let next = self.segment + 1;
        loop {
            match create_segment(&self.dir, next) {
                Ok(file) => {
                    self.file = file;
                    self.segment = next;
                    self.synced_len = HEADER_LEN as u64;
                    self.index.live.entry(next).or_default();
                    return;
                }
                Err(error) => {
                    tracing::error!(%error, "message log cannot start a new segment");
                    self.shared.set_failing(true);
                    std::thread::sleep(RETRY);
                }
            }
        }
    }

    /// Deletes the oldest segments while none of their messages is live.
    fn reclaim(&mut self) {
        while let Some((&oldest, &count)) = self.index.live.first_key_value() {
            if oldest == self.segment || count > 0 {
                break;
            }
            let path = segment_path(&self.dir, oldest);
            if let Err(error) = std::fs::remove_file(&path) {
                tracing::warn!(%error, path = %path.display(), "could not delete a spent log segment");
                break;
            }
            self.index.forget_segment(oldest);
        }
    }
}

fn open_append(path: &Path) -> Result<File, LogError> {
    OpenOptions::new().append(true).open(path).map_err(|source| LogError::Io { path: path.to_owned(), source })
}

/// Creates segment `number` with its header, synced with its directory entry.
fn create_segment(dir: &Path, number: u64) -> Result<File, LogError> {
    let path = segment_path(dir, number);
    let io = |source| LogError::Io { path: path.clone(), source };
    // A leftover from a roll that failed half-way is never valid data: the log only grows
    // from the last segment, so starting this one afresh loses nothing.
    let mut file = OpenOptions::new().create(true).truncate(true).write(true).open(&path).map_err(io)?;
    file.write_all(&header(number)).and_then(|()| file.sync_all()).map_err(io)?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
    Ok(file)
}
