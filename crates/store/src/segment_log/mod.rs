//! The message log: append-only segment files of CRC-framed records, written by one thread
//! with group commit, replayed at start.
//!
//! - [`MessageLog::append`] hands records to the writer thread and returns at once. The
//!   thread takes everything queued, writes it with one `write`, makes it durable with one
//!   `fdatasync`, then runs the completions in order: one sync covers every message that
//!   arrived meanwhile, and a publisher confirm sent from a completion means "on disk".
//! - A failed write (disk full, I/O error) is retried every 500 ms from the last synced
//!   length; meanwhile [`MessageLog::is_failing`] is true and the health listener is told, so
//!   the broker blocks publishers. Nothing is confirmed that is not on disk.
//! - Every enqueue's [`Place`] goes back to its queue with the completion: a long queue keeps
//!   only that in memory and reads the message back ([`LogReader`]) when a consumer needs it.
//!   Transient messages of long queues are written too ([`Record::Spill`]), without a sync and
//!   never recovered, so that they can leave memory as well.
//! - Replay ([`MessageLog::open`]) finds every live message and where it lies; a record cut
//!   short or failing its CRC at the tail of the last segment is a write the crash interrupted
//!   (never confirmed) and is cut off; the same anywhere else is corruption and refuses to
//!   start.
//! - Segments are deleted oldest first once none of their enqueued messages is live, and only
//!   as a prefix: a removal record always follows its enqueue, so deleting a prefix never
//!   resurrects a message. An oldest segment kept only by a few long-lived messages is
//!   compacted: they are appended again at the head (see `compact`), and their queues are
//!   told the new places.

mod clean_stop;
mod compact;
mod index;
mod linger;
mod marks;
mod read;
mod record;
mod recovered;
mod replay;
mod writer;

pub use read::{LogReader, ReadError};
pub use recovered::RecoveredQueue;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};

use bytes::Bytes;
use parking_lot::Mutex;

/// One log record.
#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    /// A message entered durable queue `queue` as its `seq`-th message; `payload` is the
    /// encoded message ([`crate::codec`]).
    Enqueue {
        /// Queue id.
        queue: u64,
        /// The queue's sequence number for the message.
        seq: u64,
        /// Its TTL deadline, ms since the epoch.
        expires_at: Option<i64>,
        /// Its size as length limits count it (so a restart need not read the message).
        size: u32,
        /// Its priority (0 when it has none), so that a restart can put it back in its
        /// priority queue's level without reading the message.
        priority: u8,
        /// Its "not before" time, ms since the epoch (the message's
        /// `BrokerAnnotations::not_before`), so that a restart can keep it delayed without
        /// reading every message.
        not_before: Option<i64>,
        /// The message this one replaces, as `(queue, seq)`: a message moved between queues
        /// (Zaqar's claim-count dead-letter queue) enters its target and leaves its source in
        /// this one record, so a crash leaves it in exactly one of them. Replay removes it from
        /// the source; a later `Remove` of it there finds nothing, and compaction drops the
        /// field (the source's enqueue lies in the same or an older segment, deleted first).
        replaces: Option<(u64, u64)>,
        /// The encoded message.
        payload: Bytes,
    },
    /// The message left the queue (acknowledged, dead-lettered, expired, dropped, purged).
    Remove {
        /// Queue id.
        queue: u64,
        /// Sequence number.
        seq: u64,
    },
    /// The message was handed to a consumer (quorum queues) or came back from one, with its
    /// counts: a restart brings it back redelivered.
    Delivered {
        /// Queue id.
        queue: u64,
        /// Sequence number.
        seq: u64,
        /// Times it came back (quorum queues).
        returned: u32,
        /// Failed deliveries (quorum queues).
        failed: u32,
    },
    /// The message died in an at-least-once queue and waits there for its dead letter's
    /// targets (RabbitMQ's quorum `at-least-once`): recovered as waiting, never as ready.
    DeadLettered {
        /// Queue id.
        queue: u64,
        /// Sequence number.
        seq: u64,
        /// Why it died (the engine's code for the reason).
        reason: u8,
    },
    /// The queue was deleted with all its messages.
    DropQueue {
        /// Queue id.
        queue: u64,
    },
    /// A transient message of a long queue, written so that it can leave memory: it is not
    /// synced for and never recovered.
    Spill {
        /// Queue id.
        queue: u64,
        /// The queue's sequence number for the message.
        seq: u64,
        /// The encoded message.
        payload: Bytes,
    },
    /// A spilled message left its queue. Never written (nothing recovers a spill): it only
    /// tells the writer that the bytes are garbage.
    Released {
        /// Queue id.
        queue: u64,
        /// Sequence number.
        seq: u64,
    },
}

impl Record {
    /// Whether a crash may not lose this record once its batch completed: an enqueue (its
    /// publisher is confirmed), a queue's deletion, and delivery counts that bound a quorum
    /// queue's redeliveries. Removals, plain delivery marks and spills may be lost: the
    /// message comes back, none is lost.
    #[must_use]
    pub fn needs_sync(&self) -> bool {
        match self {
            Self::Enqueue { .. } | Self::DropQueue { .. } | Self::DeadLettered { .. } => true,
            Self::Delivered { returned, failed, .. } => *returned > 0 || *failed > 0,
            Self::Remove { .. } | Self::Spill { .. } | Self::Released { .. } => false,
        }
    }
}

/// Where a record lies: its segment, and the offset and length of the framed record there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// Segment number.
    pub segment: u64,
    /// Byte offset of the record's frame in the segment.
    pub offset: u64,
    /// Framed length.
    pub len: u32,
}

/// Where an enqueued or spilled message was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    /// Queue id.
    pub queue: u64,
    /// Sequence number.
    pub seq: u64,
    /// Where.
    pub place: Place,
}

/// A message the log still holds, as replay found it.
#[derive(Clone, Debug, PartialEq)]
pub struct RecoveredMessage {
    /// The queue's sequence number.
    pub seq: u64,
    /// Its TTL deadline, ms since the epoch.
    pub expires_at: Option<i64>,
    /// Its size as length limits count it.
    pub size: u32,
    /// Its priority (0 when it has none).
    pub priority: u8,
    /// Not deliverable before this moment, ms since the epoch.
    pub not_before: Option<i64>,
    /// Where its enqueue record lies ([`LogReader::read`] gives the message back).
    pub place: Place,
    /// Whether it had been handed to a consumer.
    pub delivered: bool,
    /// It died in an at-least-once queue and waits for its dead letter's targets, for this
    /// reason (see [`Record::DeadLettered`]).
    pub dead_lettered: Option<u8>,
    /// Times it came back.
    pub returned: u32,
    /// Failed deliveries.
    pub failed: u32,
}

/// What replay found.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Live messages per queue id, in sequence order.
    pub queues: HashMap<u64, RecoveredQueue>,
    /// Segment files read.
    pub segments: usize,
    /// Records read.
    pub records: u64,
    /// Bytes of a torn tail cut off the last segment.
    pub truncated_bytes: u64,
    /// Whether the last run did not stop cleanly (see [`MessageLog::close`]). A new log
    /// follows no run, and no crash.
    pub after_crash: bool,
}

/// A failure the writer reports to completions that can no longer succeed.
#[derive(Clone, Debug, thiserror::Error)]
#[error("message log: {0}")]
pub struct LogFailure(pub String);

/// Runs once the records of an append are durable (or can never be), with the places of its
/// enqueues and spills, in order.
pub type Completion = Box<dyn FnOnce(Result<Vec<Placed>, LogFailure>) + Send>;

/// Told where compaction moved live messages (their old segment is deleted right after).
pub type RelocationListener = Box<dyn Fn(Vec<Placed>) + Send + Sync>;

/// Makes a write fail, for tests of disk-full handling.
pub type FaultHook = Arc<dyn Fn() -> Option<std::io::Error> + Send + Sync>;

/// Told `true` when writes start failing and `false` when they succeed again.
pub type HealthListener = Box<dyn Fn(bool) + Send + Sync>;

/// Told `true` when the bytes handed to the writer and not yet written pass
/// [`BACKLOG_HIGH`], and `false` once they are back under [`BACKLOG_LOW`].
pub type BacklogListener = Box<dyn Fn(bool) + Send + Sync>;

/// Message bytes waiting for the writer above which the broker stops reading publishes.
///
/// Appends return at once, so a publisher faster than the disk (1 MiB messages paged out by a
/// queue nobody consumes) piled its bodies up in front of the writer: 1.45 GB of resident
/// memory for a 3 GB flood against a virtual disk, 204 MB when the same log was on tmpfs.
pub const BACKLOG_HIGH: u64 = 64 * 1024 * 1024;
/// The backlog under which publishes are read again.
pub const BACKLOG_LOW: u64 = 32 * 1024 * 1024;

/// The message bytes (enqueue and spill payloads) of `records`: what the backlog counts.
pub(super) fn payload_bytes(records: &[Record]) -> u64 {
    records
        .iter()
        .map(|r| match r {
            Record::Enqueue { payload, .. } | Record::Spill { payload, .. } => payload.len() as u64,
            _ => 0,
        })
        .sum()
}

/// Errors opening or closing the log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A file operation failed.
    #[error("message log {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A record or header that cannot be a torn tail does not read back.
    #[error("message log segment {segment} corrupt at byte {offset}: {what}")]
    Corrupt {
        /// The segment number.
        segment: u64,
        /// Where.
        offset: u64,
        /// What was wrong.
        what: &'static str,
    },
    /// The writer stopped before it could flush everything.
    #[error("message log: {0}")]
    Writer(String),
}

/// Settings.
#[derive(Clone)]
pub struct LogOptions {
    /// A segment is rolled over once it holds this many bytes.
    pub segment_bytes: u64,
    /// Consulted before each write: `Some(error)` makes it fail (fault injection).
    pub fault: Option<FaultHook>,
}

impl Default for LogOptions {
    fn default() -> Self {
        Self { segment_bytes: 64 * 1024 * 1024, fault: None }
    }
}

impl std::fmt::Debug for LogOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogOptions").field("segment_bytes", &self.segment_bytes).finish_non_exhaustive()
    }
}

enum Command {
    Append(Vec<Record>, Option<Completion>),
    /// Sync everything and stop, answering on `reply`; leave the clean-stop mark if `clean`.
    Close {
        reply: mpsc::Sender<Result<(), String>>,
        clean: bool,
    },
}

/// State shared with the writer thread.
struct Shared {
    failing: AtomicBool,
    /// Free space is below the broker's limit: spent segments are given back eagerly.
    disk_low: AtomicBool,
    /// Message bytes appended and not yet written.
    backlog: AtomicU64,
    /// The backlog passed [`BACKLOG_HIGH`] and has not yet fallen under [`BACKLOG_LOW`].
    backlogged: AtomicBool,
    backlog_listener: Mutex<Option<BacklogListener>>,
    listener: Mutex<Option<HealthListener>>,
    relocations: Mutex<Option<RelocationListener>>,
    /// Syncs done, for tests and statistics.
    syncs: std::sync::atomic::AtomicU64,
    /// A compaction of the oldest segment is under way (its read runs off the writer).
    compacting: AtomicBool,
}

impl Shared {
    fn set_compacting(&self, compacting: bool) {
        self.compacting.store(compacting, Ordering::SeqCst);
    }

    /// `bytes` more message bytes wait for the writer.
    fn add_backlog(&self, bytes: u64) {
        let now = self.backlog.fetch_add(bytes, Ordering::SeqCst) + bytes;
        if now >= BACKLOG_HIGH && !self.backlogged.swap(true, Ordering::SeqCst) {
            self.tell_backlog(true);
        }
    }

    /// The writer wrote `bytes` of message bytes.
    fn remove_backlog(&self, bytes: u64) {
        let now = self.backlog.fetch_sub(bytes, Ordering::SeqCst).saturating_sub(bytes);
        if now < BACKLOG_LOW && self.backlogged.swap(false, Ordering::SeqCst) {
            self.tell_backlog(false);
        }
    }

    fn tell_backlog(&self, backlogged: bool) {
        if let Some(listener) = self.backlog_listener.lock().as_ref() {
            listener(backlogged);
        }
    }

    fn set_failing(&self, failing: bool) {
        if self.failing.swap(failing, Ordering::SeqCst) != failing
            && let Some(listener) = self.listener.lock().as_ref()
        {
            listener(failing);
        }
    }
}

/// The message log.
pub struct MessageLog {
    commands: Mutex<Option<mpsc::Sender<Command>>>,
    reader: LogReader,
    shared: Arc<Shared>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for MessageLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageLog").field("failing", &self.is_failing()).finish_non_exhaustive()
    }
}

impl MessageLog {
    /// Replays the log in `dir` (creating the directory), cuts off a torn tail and starts the
    /// writer thread.
    ///
    /// # Errors
    /// I/O errors and corruption that a crash cannot explain.
    pub fn open(dir: &Path, options: LogOptions) -> Result<(Self, Recovery), LogError> {
        std::fs::create_dir_all(dir).map_err(|source| LogError::Io { path: dir.to_owned(), source })?;
        let mut replayed = replay::replay(dir)?;
        // Before the writer starts: no append of this run may meet the last run's mark.
        let clean = clean_stop::take(dir).map_err(|source| LogError::Io { path: dir.to_owned(), source })?;
        let after_crash = !clean && replayed.recovery.segments > 0;
        replayed.recovery.after_crash = after_crash;
        for queue in replayed.recovery.queues.values_mut() {
            queue.after_crash = after_crash;
        }
        let shared = Arc::new(Shared {
            failing: AtomicBool::new(false),
            disk_low: AtomicBool::new(false),
            backlog: AtomicU64::new(0),
            backlogged: AtomicBool::new(false),
            backlog_listener: Mutex::new(None),
            listener: Mutex::new(None),
            relocations: Mutex::new(None),
            syncs: std::sync::atomic::AtomicU64::new(0),
            compacting: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::channel();
        let writer = writer::Writer::start(dir, options, replayed.index, Arc::clone(&shared))?;
        let handle = std::thread::Builder::new()
            .name("charon-log-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(|source| LogError::Io { path: dir.to_owned(), source })?;
        let reader = LogReader::new(dir);
        let log = Self { commands: Mutex::new(Some(tx)), reader, shared, writer: Mutex::new(Some(handle)) };
        Ok((log, replayed.recovery))
    }

    /// Hands records to the writer; `done` runs on the writer thread once they are written,
    /// after an `fdatasync` if any of them [needs one](Record::needs_sync) (or with an error if
    /// the log was closed).
    pub fn append(&self, records: Vec<Record>, done: Option<Completion>) {
        let bytes = payload_bytes(&records);
        if bytes > 0 {
            self.shared.add_backlog(bytes);
        }
        let refused = match self.commands.lock().as_ref() {
            Some(tx) => tx.send(Command::Append(records, done)).err().map(|e| e.0),
            None => Some(Command::Append(records, done)),
        };
        if let Some(Command::Append(_, Some(done))) = refused {
            done(Err(LogFailure("closed".into())));
        }
    }

    /// Writes and syncs everything appended so far and stops the writer; later appends fail.
    /// The stop is clean: the broker has appended everything it owed the log (requeued
    /// messages' marks included), so the next start does not treat it as a crash (see
    /// `clean_stop`).
    ///
    /// # Errors
    /// When the last writes could not be made durable.
    pub fn close(&self) -> Result<(), LogError> {
        self.close_as(true)
    }

    /// [`Self::close`] after a stop that could not finish what it owed the log (connections
    /// that would not close in time): the next start treats it as a crash.
    ///
    /// # Errors
    /// When the last writes could not be made durable.
    pub fn close_unclean(&self) -> Result<(), LogError> {
        self.close_as(false)
    }

    fn close_as(&self, clean: bool) -> Result<(), LogError> {
        let Some(tx) = self.commands.lock().take() else {
            return Ok(());
        };
        let (reply_tx, reply_rx) = mpsc::channel();
        let sent = tx.send(Command::Close { reply: reply_tx, clean }).is_ok();
        let result = if sent { reply_rx.recv().unwrap_or(Ok(())) } else { Ok(()) };
        if let Some(handle) = self.writer.lock().take() {
            let _ = handle.join();
        }
        result.map_err(LogError::Writer)
    }

    /// Whether writes are currently failing (publishers should be blocked).
    #[must_use]
    pub fn is_failing(&self) -> bool {
        self.shared.failing.load(Ordering::SeqCst)
    }

    /// Tells the writer whether free space is below the broker's limit. While it is, a
    /// segment that holds nothing live is deleted even if it is the one being written (the
    /// writer rolls over to a fresh one), so draining the queues gives the space back.
    pub fn set_disk_low(&self, low: bool) {
        if self.shared.disk_low.swap(low, Ordering::SeqCst) != low && low {
            // Wake the writer, which reclaims after every batch (an empty one writes nothing).
            self.append(Vec::new(), None);
        }
    }

    /// Sets the function told about every change of [`Self::is_failing`].
    pub fn set_health_listener(&self, listener: HealthListener) {
        *self.shared.listener.lock() = Some(listener);
    }

    /// Sets the function told when the writer's backlog passes [`BACKLOG_HIGH`] (publishers
    /// should be held) and when it falls under [`BACKLOG_LOW`] again.
    pub fn set_backlog_listener(&self, listener: BacklogListener) {
        *self.shared.backlog_listener.lock() = Some(listener);
    }

    /// Sets the function told where compaction moved live messages.
    pub fn set_relocation_listener(&self, listener: RelocationListener) {
        *self.shared.relocations.lock() = Some(listener);
    }

    /// Reads messages back from their places.
    #[must_use]
    pub fn reader(&self) -> &LogReader {
        &self.reader
    }

    /// `fdatasync` calls made so far.
    #[must_use]
    pub fn syncs(&self) -> u64 {
        self.shared.syncs.load(Ordering::Relaxed)
    }

    /// Whether a compaction of the oldest segment is under way: its read, or its commit,
    /// which the writer makes on the next batch it is handed after the read.
    #[must_use]
    pub fn compacting(&self) -> bool {
        self.shared.compacting.load(Ordering::SeqCst)
    }
}

/// A log dropped without [`MessageLog::close`] syncs what it was given, but nothing says the
/// broker finished what it owed it: the next start treats it as a crash.
impl Drop for MessageLog {
    fn drop(&mut self) {
        let _ = self.close_unclean();
    }
}

#[cfg(test)]
mod padding_tests;
#[cfg(test)]
mod tests;
