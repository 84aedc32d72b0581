//! The writer thread: group commit, segment roll-over, retry on write failure, and deletion
//! of segments that no longer hold a live message.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::clean_stop;
use super::compact::Compaction;
use super::index::Index;
use super::linger::Linger;
use super::record::{HEADER_LEN, header, put_record};
use super::replay::{segment_files, segment_path, unsynced_mark_path};
use super::{Command, Completion, LogError, LogOptions, Place, Placed, Record, Shared};

/// How long to wait before retrying a failed write.
const RETRY: Duration = Duration::from_millis(500);

/// The most bytes one write takes before it syncs; what arrives meanwhile waits for the next.
const MAX_BATCH: usize = 16 * 1024 * 1024;

/// The largest batch buffer kept for the next batch: a buffer grown anew for every batch was
/// reallocated and copied several times per commit (5 % of the writer's time in S10), while
/// keeping one as large as [`MAX_BATCH`] would hold 16 MiB for a broker long idle.
const KEPT_BUFFER: usize = 1024 * 1024;

/// How far ahead of its records the writer zero-fills the segment it writes. A sync after an
/// append that grew the file also writes its inode (ext4 without a journal does it as a second
/// synchronous write), while overwriting blocks already written leaves the inode alone: on this
/// machine's disk the `fdatasync` path fell from 12.2 % to 9.9 % of the broker's CPU in S10
/// (see bench/history/until-2026-11-29.md, "Preallocated segments"). One MiB costs one such
/// sync per MiB of log.
pub(super) const PREALLOCATE: u64 = 1024 * 1024;

/// Zeros to fill ahead with, a slice at a time.
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// Where an enqueue or spill of a batch lies in its bytes.
struct Pending {
    queue: u64,
    seq: u64,
    offset: usize,
    len: usize,
}

/// One group commit: the bytes, the records (for the index), and per append its completion
/// and the places of its messages.
#[derive(Default)]
pub(super) struct Batch {
    bytes: BytesMut,
    /// Each append's records as it came: moved as one vector, not record by record.
    records: Vec<Vec<Record>>,
    appends: Vec<(Option<Completion>, Vec<Pending>)>,
    /// A compaction: the messages move, and their new places go to the relocation listener.
    relocation: bool,
    /// Whether a record needs a sync (see [`Self::needs_sync`]), kept as records come.
    sync: bool,
}

impl Batch {
    /// An empty batch that writes into `buffer`.
    fn into(buffer: BytesMut) -> Self {
        Self { bytes: buffer, ..Self::default() }
    }

    /// A compaction batch moving `records`.
    fn relocation(records: Vec<Record>) -> Self {
        let mut batch = Self { relocation: true, ..Self::default() };
        batch.push(records, None);
        batch
    }

    fn push(&mut self, records: Vec<Record>, done: Option<Completion>) {
        let mut pending = Vec::new();
        for record in &records {
            let offset = self.bytes.len();
            let len = put_record(&mut self.bytes, record);
            self.sync |= record.needs_sync();
            if let Record::Enqueue { queue, seq, .. } | Record::Spill { queue, seq, .. } = record {
                pending.push(Pending { queue: *queue, seq: *seq, offset, len });
            }
        }
        self.records.push(records);
        self.appends.push((done, pending));
    }

    /// Whether the batch must be synced before its completions run: only when it holds a
    /// record whose loss a crash would make visible as a broken promise: a message that was
    /// (or will be) confirmed, a queue's deletion, or the quorum counts that bound its
    /// redeliveries. A batch of removals (acks, expiries, dead letters leaving their source),
    /// plain delivery marks and spills is written but not synced: losing it in a crash brings
    /// a message back (at least once, as RabbitMQ's classic queues do for acks), never loses
    /// one, and the next synced batch makes it durable with it. With a consumer settling each
    /// message, this halves the syncs of a publish-and-consume stream.
    fn needs_sync(&self) -> bool {
        self.sync
    }
}

pub(super) struct Writer {
    dir: PathBuf,
    options: LogOptions,
    index: Index,
    shared: Arc<Shared>,
    segment: u64,
    file: File,
    /// Bytes of the current segment written whole (on disk up to the last sync).
    written_len: u64,
    /// The current segment's length on disk: its records, then the zeros written ahead of
    /// them (see [`PREALLOCATE`]); trimmed back to `written_len` when it is sealed or closed.
    allocated_len: u64,
    /// Bytes appended to the log since it was opened (how fast it grows, for compaction).
    appended: u64,
    /// The compaction of the oldest segment.
    compaction: Compaction,
    /// The buffer the next batch is written into (see [`KEPT_BUFFER`]).
    buffer: BytesMut,
    /// Records that recovery reads were written to the current segment since its last sync
    /// (a batch of removals needs none): a roll-over and closing sync them, so only the last
    /// segment can end torn.
    unsynced: bool,
    /// How much of the current segment is known to be on disk: what follows was written
    /// without a sync (only spills, or `unsynced` is set). A roll-over that leaves such a tail
    /// unsynced marks the sealed segment (see [`unsynced_mark_path`]).
    synced_len: u64,
    /// How long a batch waits for more under a stream.
    linger: Linger,
}

impl Writer {
    /// Opens the last segment for appending (or starts the first one).
    pub(super) fn start(dir: &Path, options: LogOptions, index: Index, shared: Arc<Shared>) -> Result<Self, LogError> {
        let last = segment_files(dir)?.last().map(|(n, _)| *n);
        let (segment, file) = match last {
            Some(n) => (n, open_write(&segment_path(dir, n))?),
            None => (1, create_segment(dir, 1)?),
        };
        let path = segment_path(dir, segment);
        let written_len = file.metadata().map_err(|source| LogError::Io { path, source })?.len();
        // What an earlier run wrote to the segment reopened here may never have been synced.
        let synced_len = if file.sync_data().is_ok() { written_len } else { HEADER_LEN as u64 };
        let mut writer = Self {
            dir: dir.to_owned(),
            options,
            index,
            shared,
            segment,
            file,
            written_len,
            allocated_len: written_len,
            appended: 0,
            compaction: Compaction::default(),
            unsynced: false,
            synced_len,
            buffer: BytesMut::new(),
            linger: Linger::default(),
        };
        writer.index.segments.entry(segment).or_default();
        writer.reclaim();
        Ok(writer)
    }

    pub(super) fn run(mut self, rx: mpsc::Receiver<Command>) {
        let mut closing = None;
        while closing.is_none() {
            // Records already waiting arrived while the last commit ran: a stream.
            let (first, streaming) = match rx.try_recv() {
                Ok(first) => (first, true),
                Err(_) => match rx.recv() {
                    Ok(first) => (first, false),
                    Err(_) => break,
                },
            };
            let mut batch = Batch::into(std::mem::take(&mut self.buffer));
            let mut next = Some(first);
            let mut lingered = false;
            while let Some(command) = next.take() {
                match command {
                    Command::Append(records, done) => batch.push(records, done),
                    Command::Close { reply, clean } => {
                        closing = Some((reply, clean));
                        break;
                    }
                }
                if batch.bytes.len() >= MAX_BATCH {
                    break;
                }
                next = rx.try_recv().ok();
                if next.is_none() && !lingered && batch.needs_sync() {
                    // See `linger`: under a stream, sleep about a sync's time, then take what
                    // came meanwhile. A sleep, not a timed receive: records arriving meanwhile
                    // need not wake the writer one by one.
                    lingered = true;
                    let wait = self.linger.wait(streaming);
                    if !wait.is_zero() {
                        std::thread::sleep(wait);
                        next = rx.try_recv().ok();
                    }
                }
            }
            self.commit(batch);
            self.compact_oldest();
        }
        if let Some((reply, clean)) = closing {
            let mut synced = self.trim().map_err(|error| format!("{}: {error}", self.path().display()));
            if clean && synced.is_ok() {
                synced = clean_stop::mark(&self.dir).map_err(|error| format!("{}: {error}", self.dir.display()));
            }
            let _ = reply.send(synced);
        }
    }

    /// Steps the compaction of the oldest segment, and appends what it moves.
    fn compact_oldest(&mut self) {
        let moved =
            self.compaction.step(&self.index, &self.dir, self.segment, self.appended, self.options.segment_bytes);
        if let Some(moved) = moved {
            self.commit(Batch::relocation(moved));
        }
        self.shared.set_compacting(self.compaction.is_reading());
    }

    /// Writes (and syncs, unless it only spills) a batch, retrying until it is on disk, then
    /// completes it with the places of its messages.
    fn commit(&mut self, batch: Batch) {
        let Batch { mut bytes, records, appends, relocation, sync } = batch;
        let full = self.written_len + bytes.len() as u64 > self.options.segment_bytes;
        if !bytes.is_empty() && self.written_len > HEADER_LEN as u64 && full {
            self.roll();
        }
        let base = self.written_len;
        while !bytes.is_empty() {
            match self.write(&bytes, sync) {
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
        // Spills are never recovered, so only other records left unsynced matter.
        if !sync && records.iter().flatten().any(|r| !matches!(r, Record::Spill { .. } | Record::Released { .. })) {
            self.unsynced = true;
        }
        if !relocation {
            self.shared.remove_backlog(records.iter().map(|r| super::payload_bytes(r)).sum());
        }
        for record in records.into_iter().flatten() {
            match record {
                Record::Enqueue { queue, seq, .. } | Record::Spill { queue, seq, .. } if relocation => {
                    self.index.moved(queue, seq, self.segment);
                }
                Record::Enqueue { queue, seq, replaces, .. } => {
                    self.index.enqueued(queue, seq, self.segment);
                    if let Some((from, from_seq)) = replaces {
                        self.index.removed(from, from_seq);
                    }
                }
                Record::Spill { queue, seq, .. } => self.index.enqueued(queue, seq, self.segment),
                Record::Remove { queue, seq } | Record::Released { queue, seq } => self.index.removed(queue, seq),
                Record::Delivered { queue, seq, returned, failed } => {
                    self.index.delivered(queue, seq, returned, failed)
                }
                Record::DropQueue { queue } => self.index.dropped(queue),
                Record::DeadLettered { queue, seq, reason } => self.index.dead_lettered(queue, seq, reason),
            }
        }
        let segment = self.segment;
        let place = |p: Pending| Placed {
            queue: p.queue,
            seq: p.seq,
            place: Place { segment, offset: base + p.offset as u64, len: u32::try_from(p.len).unwrap_or(u32::MAX) },
        };
        for (done, pending) in appends {
            let placed: Vec<Placed> = pending.into_iter().map(place).collect();
            if relocation {
                if let Some(listener) = self.shared.relocations.lock().as_ref() {
                    listener(placed);
                }
            } else if let Some(done) = done {
                done(Ok(placed));
            }
        }
        if bytes.capacity() <= KEPT_BUFFER {
            bytes.clear();
            self.buffer = bytes;
        }
        self.reclaim();
    }

    /// One write of the whole batch (and one `fdatasync` when `sync`); on failure the segment
    /// is cut back to what was written before so a retry rewrites the batch whole.
    fn write(&mut self, bytes: &[u8], sync: bool) -> std::io::Result<()> {
        let result = match self.options.fault.as_ref().and_then(|fault| fault()) {
            Some(error) => Err(error),
            None => {
                self.preallocate(bytes.len() as u64);
                let started = Instant::now();
                let written = self
                    .file
                    .write_all_at(bytes, self.written_len)
                    .and_then(|()| if sync { self.file.sync_data() } else { Ok(()) });
                if sync {
                    self.linger.synced(started.elapsed());
                }
                written
            }
        };
        match result {
            Ok(()) => {
                self.written_len += bytes.len() as u64;
                self.appended += bytes.len() as u64;
                if sync {
                    self.shared.syncs.fetch_add(1, Ordering::Relaxed);
                    self.unsynced = false;
                    self.synced_len = self.written_len;
                }
                Ok(())
            }
            Err(error) => {
                // Gives back what the zeros took too: the disk may be full.
                let _ = self.file.set_len(self.written_len);
                self.allocated_len = self.written_len;
                Err(error)
            }
        }
    }

    /// Zero-fills the segment [`PREALLOCATE`] bytes ahead when a write of `len` bytes would
    /// go past what is filled, never past the roll-over size. It only saves the inode write of
    /// later syncs, so a failure (a full disk) is left to the write itself to report; the next
    /// sync makes the zeros durable with the records.
    fn preallocate(&mut self, len: u64) {
        let end = self.written_len + len;
        if end <= self.allocated_len {
            return;
        }
        let target = (end + PREALLOCATE).min(self.options.segment_bytes.max(end));
        let mut at = self.allocated_len.max(self.written_len);
        while at < target {
            let n = usize::try_from(target - at).unwrap_or(usize::MAX).min(ZEROS.len());
            if self.file.write_all_at(ZEROS.get(..n).unwrap_or_default(), at).is_err() {
                break;
            }
            at += n as u64;
        }
        self.allocated_len = at;
    }

    /// Cuts the zeros off the current segment, then syncs what needs it: a sealed or closed
    /// segment ends with its last record. The cut itself is not synced for: if a crash loses
    /// it, replay takes the zeros for what they are.
    fn trim(&mut self) -> std::io::Result<()> {
        if self.allocated_len > self.written_len {
            self.file.set_len(self.written_len)?;
            self.allocated_len = self.written_len;
        }
        self.sync_written()
    }

    /// Syncs what batches that needed no sync left unsynced in the current segment.
    fn sync_written(&mut self) -> std::io::Result<()> {
        if self.unsynced {
            self.file.sync_data()?;
            self.shared.syncs.fetch_add(1, Ordering::Relaxed);
            self.unsynced = false;
            self.synced_len = self.written_len;
        }
        Ok(())
    }

    fn path(&self) -> PathBuf {
        segment_path(&self.dir, self.segment)
    }

    /// Starts the next segment, once the old one is synced whole.
    fn roll(&mut self) {
        let next = self.segment + 1;
        while let Err(error) = self.trim() {
            tracing::error!(%error, "message log cannot sync a segment before rolling over");
            self.shared.set_failing(true);
            std::thread::sleep(RETRY);
        }
        if self.written_len > self.synced_len {
            self.mark_sealed_unsynced();
        }
        loop {
            match create_segment(&self.dir, next) {
                Ok(file) => {
                    self.file = file;
                    self.index.seal(self.segment);
                    self.segment = next;
                    self.written_len = HEADER_LEN as u64;
                    self.allocated_len = self.written_len;
                    self.synced_len = self.written_len;
                    self.index.segments.entry(next).or_default();
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

    /// Marks the segment being sealed as ending with spills never synced, from `synced_len`
    /// on (see [`unsynced_mark_path`]): a sync of up to a whole segment here would hold every
    /// commit behind it. The mark is synced, and the next segment's creation syncs the
    /// directory, so the mark is on disk before anything written after it. Without the mark
    /// the segment is synced instead.
    fn mark_sealed_unsynced(&mut self) {
        let mark = unsynced_mark_path(&self.dir, self.segment);
        let marked = File::create(&mark)
            .and_then(|mut file| file.write_all(self.synced_len.to_string().as_bytes()).and_then(|()| file.sync_all()));
        if let Err(error) = marked {
            tracing::warn!(%error, path = %mark.display(), "cannot mark a log segment of spills; syncing it instead");
            if let Err(error) = self.file.sync_data() {
                tracing::error!(%error, "message log cannot sync a segment of spills");
            }
        }
    }

    /// Deletes the oldest segments while none of their messages is live; while the disk is low,
    /// the segment being written too, once it is the only one and holds nothing live (it is
    /// rolled over first). Without that, a disk smaller than a segment stayed full after
    /// consumers drained it, and the disk alarm never cleared.
    fn reclaim(&mut self) {
        let only_current =
            self.index.segments.first_key_value().is_some_and(|(&n, c)| n == self.segment && c.live == 0);
        if only_current && self.written_len > HEADER_LEN as u64 && self.shared.disk_low.load(Ordering::SeqCst) {
            self.roll();
        }
        while let Some((&oldest, counts)) = self.index.segments.first_key_value() {
            if oldest == self.segment || counts.live > 0 {
                break;
            }
            let path = segment_path(&self.dir, oldest);
            if let Err(error) = std::fs::remove_file(&path) {
                tracing::warn!(%error, path = %path.display(), "could not delete a spent log segment");
                break;
            }
            // Most segments have no mark: not finding one is the usual case.
            let _ = std::fs::remove_file(unsynced_mark_path(&self.dir, oldest));
            self.index.forget_segment(oldest);
        }
    }
}

/// Opens a segment for the writer, which writes at its own offsets (`write_all_at`): not
/// `O_APPEND`, which would put every write after the zeros filled ahead.
fn open_write(path: &Path) -> Result<File, LogError> {
    OpenOptions::new().write(true).open(path).map_err(|source| LogError::Io { path: path.to_owned(), source })
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
