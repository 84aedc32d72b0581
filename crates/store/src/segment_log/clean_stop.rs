//! The mark a closed log leaves when the broker stopped cleanly, so that the next start knows
//! whether it follows a crash.
//!
//! RabbitMQ 4.0.5's classic queues keep no per-delivery mark: after a crash they bring every
//! recovered message back redelivered, after a clean stop only those that had come back from
//! a consumer (observed, see `conformance/OBSERVED-0.9.1.md`). Charon does the same, and the
//! mark is how a start tells the two apart; it spares a log record per delivery.
//!
//! The mark is written after the last sync of [`super::MessageLog::close`] and taken away
//! (durably: the directory is synced) when the log is opened again, before anything is
//! appended, so a crash of the new run can never find the old run's mark.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// The mark's file name in the log's directory (no `.seg` suffix: replay does not read it).
const FILE_NAME: &str = "clean-stop";

fn path(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

/// Leaves the mark: everything appended is on disk and nothing the broker owed the log is
/// missing.
pub(super) fn mark(dir: &Path) -> io::Result<()> {
    File::create(path(dir))?.sync_all()?;
    sync_dir(dir)
}

/// Whether the last run left the mark; takes it away, durably.
pub(super) fn take(dir: &Path) -> io::Result<bool> {
    match std::fs::remove_file(path(dir)) {
        Ok(()) => sync_dir(dir).map(|()| true),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(error),
    }
}

/// Makes the directory's entries (a mark created or removed) durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_found_once() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!take(dir.path()).unwrap(), "a new directory follows no clean stop");
        mark(dir.path()).unwrap();
        assert!(take(dir.path()).unwrap());
        assert!(!take(dir.path()).unwrap(), "taking it removes it");
    }
}
