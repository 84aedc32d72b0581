//! How the log is set up, and the functions it calls back.

use std::sync::Arc;

use super::{LogFailure, Placed};

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
/// [`BACKLOG_HIGH`](super::BACKLOG_HIGH), and `false` once they are back under
/// [`BACKLOG_LOW`](super::BACKLOG_LOW).
pub type BacklogListener = Box<dyn Fn(bool) + Send + Sync>;
