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
mod error;
mod index;
mod linger;
mod marks;
mod options;
mod place;
mod read;
mod record;
mod recovered;
mod replay;
mod shared;
mod writer;

pub use error::{LogError, LogFailure};
pub use options::{BacklogListener, Completion, FaultHook, HealthListener, LogOptions, RelocationListener};
pub use place::{Place, Placed};
pub use read::{LogReader, ReadError};
pub use record::{Record, decode_batch, encode_batch};
pub use recovered::{RecoveredMessage, RecoveredQueue, Recovery};
pub use shared::{BACKLOG_HIGH, BACKLOG_LOW};

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};

use parking_lot::Mutex;

use self::record::payload_bytes;
use self::shared::{Command, Shared};

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
        let shared = Arc::new(Shared::new());
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
