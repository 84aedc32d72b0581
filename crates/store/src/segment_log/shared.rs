//! What the writer thread and the log's handle share.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;

use parking_lot::Mutex;

use super::{BacklogListener, Completion, HealthListener, Record, RelocationListener};

/// Message bytes waiting for the writer above which the broker stops reading publishes.
///
/// Appends return at once, so a publisher faster than the disk (1 MiB messages paged out by a
/// queue nobody consumes) piled its bodies up in front of the writer: 1.45 GB of resident
/// memory for a 3 GB flood against a virtual disk, 204 MB when the same log was on tmpfs.
pub const BACKLOG_HIGH: u64 = 64 * 1024 * 1024;
/// The backlog under which publishes are read again.
pub const BACKLOG_LOW: u64 = 32 * 1024 * 1024;

pub(super) enum Command {
    Append(Vec<Record>, Option<Completion>),
    /// Sync everything and stop, answering on `reply`; leave the clean-stop mark if `clean`.
    Close {
        reply: mpsc::Sender<Result<(), String>>,
        clean: bool,
    },
}

/// State shared with the writer thread.
pub(super) struct Shared {
    pub(super) failing: AtomicBool,
    /// Free space is below the broker's limit: spent segments are given back eagerly.
    pub(super) disk_low: AtomicBool,
    /// Message bytes appended and not yet written.
    pub(super) backlog: AtomicU64,
    /// The backlog passed [`BACKLOG_HIGH`] and has not yet fallen under [`BACKLOG_LOW`].
    pub(super) backlogged: AtomicBool,
    pub(super) backlog_listener: Mutex<Option<BacklogListener>>,
    pub(super) listener: Mutex<Option<HealthListener>>,
    pub(super) relocations: Mutex<Option<RelocationListener>>,
    /// Syncs done, for tests and statistics.
    pub(super) syncs: AtomicU64,
    /// A compaction of the oldest segment is under way (its read runs off the writer).
    pub(super) compacting: AtomicBool,
}

impl Shared {
    /// Nothing failing, nothing waiting, no listeners yet.
    pub(super) fn new() -> Self {
        Self {
            failing: AtomicBool::new(false),
            disk_low: AtomicBool::new(false),
            backlog: AtomicU64::new(0),
            backlogged: AtomicBool::new(false),
            backlog_listener: Mutex::new(None),
            listener: Mutex::new(None),
            relocations: Mutex::new(None),
            syncs: AtomicU64::new(0),
            compacting: AtomicBool::new(false),
        }
    }

    pub(super) fn set_compacting(&self, compacting: bool) {
        self.compacting.store(compacting, Ordering::SeqCst);
    }

    /// `bytes` more message bytes wait for the writer.
    pub(super) fn add_backlog(&self, bytes: u64) {
        let now = self.backlog.fetch_add(bytes, Ordering::SeqCst) + bytes;
        if now >= BACKLOG_HIGH && !self.backlogged.swap(true, Ordering::SeqCst) {
            self.tell_backlog(true);
        }
    }

    /// The writer wrote `bytes` of message bytes.
    pub(super) fn remove_backlog(&self, bytes: u64) {
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

    pub(super) fn set_failing(&self, failing: bool) {
        if self.failing.swap(failing, Ordering::SeqCst) != failing
            && let Some(listener) = self.listener.lock().as_ref()
        {
            listener(failing);
        }
    }
}
