//! Where a browsing pass is in its source: the durable cursor of a filtered job.
//!
//! A job with a filter (or a dry run) does not consume its source: it reads it page by page
//! without taking anything ([`crate::queue::QueueHandle::browse`], oldest first, by sequence
//! number) and removes only the messages it moved. Its [`Sweep`] says how far it got: every
//! ready message with a sequence number at or below `after` was decided — moved, skipped by the
//! filter, or failed for good — so a job that is resumed, or restarted after a crash, continues
//! above it. Sequence numbers survive a restart (the log recovers them), which is what makes
//! the cursor durable.
//!
//! The cursor never passes a message that is selected and not yet confirmed by its
//! destination, nor one a destination refused (it is tried again on resume): [`Cursor`] keeps
//! those open and commits only below the first of them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A filtered job's position, kept with its record in the store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sweep {
    /// Every ready message at or below this sequence number was decided (`None`: nothing yet).
    pub after: Option<u64>,
    /// Messages the filter skipped at or below `after` (the job's `skipped` count resumes
    /// from it).
    pub skipped: u64,
}

/// A pass's cursor: how far it read, which selected messages are still open, and what it can
/// commit.
#[derive(Debug, Default)]
pub(super) struct Cursor {
    /// The last sequence number read (the next page starts above it).
    read: Option<u64>,
    /// Messages skipped so far (with those of the sweep it resumed).
    skipped: u64,
    /// Selected messages not decided yet, each with the skipped count below it.
    open: BTreeMap<u64, u64>,
}

impl Cursor {
    /// A cursor continuing `sweep`.
    pub(super) fn resume(sweep: Sweep) -> Self {
        Self { read: sweep.after, skipped: sweep.skipped, open: BTreeMap::new() }
    }

    /// Where the next page starts (above this).
    pub(super) fn read(&self) -> Option<u64> {
        self.read
    }

    /// `seq` was read and skipped by the filter.
    pub(super) fn skip(&mut self, seq: u64) {
        self.read = Some(seq);
        self.skipped += 1;
    }

    /// `seq` was read and selected: open until [`Self::close`].
    pub(super) fn select(&mut self, seq: u64) {
        self.read = Some(seq);
        self.open.insert(seq, self.skipped);
    }

    /// `seq` was read and is decided at once (a dry run counted it, or it cannot be addressed).
    pub(super) fn pass(&mut self, seq: u64) {
        self.read = Some(seq);
    }

    /// `seq` is decided (moved, gone, or failed for good).
    pub(super) fn close(&mut self, seq: u64) {
        self.open.remove(&seq);
    }

    /// What may be recorded: up to just below the first open message, or all that was read.
    pub(super) fn committed(&self) -> Sweep {
        match self.open.iter().next() {
            Some((&seq, &skipped)) => Sweep { after: seq.checked_sub(1), skipped },
            None => Sweep { after: self.read, skipped: self.skipped },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cursor_commits_below_the_first_open_message_only() {
        let mut cursor = Cursor::resume(Sweep { after: Some(4), skipped: 2 });
        assert_eq!(cursor.read(), Some(4));
        cursor.skip(5);
        cursor.select(7);
        cursor.skip(8);
        cursor.select(9);
        cursor.pass(10);
        // 7 is open: only up to 6 is decided, with the three skipped below it.
        assert_eq!(cursor.committed(), Sweep { after: Some(6), skipped: 3 });
        cursor.close(9);
        assert_eq!(cursor.committed(), Sweep { after: Some(6), skipped: 3 });
        cursor.close(7);
        assert_eq!(cursor.committed(), Sweep { after: Some(10), skipped: 4 });
        assert_eq!(cursor.read(), Some(10));
    }
}
