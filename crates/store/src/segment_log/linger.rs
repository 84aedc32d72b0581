//! How long the writer waits for more records before it syncs a batch.
//!
//! The writer syncs whatever has arrived as soon as it is free, which is right for a publisher
//! that waits for each confirm (nothing else is coming). Under a stream it is not: records
//! that arrive while a sync runs are synced on their own the moment it ends, and each sync's
//! confirms release a burst as small as the last.
//!
//! So when records were already waiting as the last commit ended (a stream), the writer sleeps
//! as long as that commit's sync took before it syncs them: about as many again arrive, and
//! the sync is shared by twice as many. It sleeps rather than waiting on its channel, so the
//! records that arrive meanwhile do not wake it one by one (a timed receive did, and cost S10
//! with `TCP_NODELAY` a quarter more CPU). A publisher that waits for each confirm never finds
//! records waiting, so it never waits. The wait is bounded by [`MAX_LINGER`].

use std::time::Duration;

/// The longest the writer waits for more records (a slow disk's sync is not waited for
/// twice over).
pub(super) const MAX_LINGER: Duration = Duration::from_millis(1);

/// What the writer knows of its last commit.
#[derive(Debug, Default)]
pub(super) struct Linger {
    /// How long the last synced write took.
    last_sync: Duration,
}

impl Linger {
    /// A synced write took `took`.
    pub(super) fn synced(&mut self, took: Duration) {
        self.last_sync = took;
    }

    /// How long to wait for more before syncing a batch: `streaming` says records were already
    /// waiting when the last commit ended.
    pub(super) fn wait(&self, streaming: bool) -> Duration {
        if streaming { self.last_sync.min(MAX_LINGER) } else { Duration::ZERO }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_stream_waits_and_never_longer_than_a_sync_or_the_cap() {
        let mut linger = Linger::default();
        assert_eq!(linger.wait(true), Duration::ZERO, "no sync measured yet");
        linger.synced(Duration::from_micros(120));
        assert_eq!(linger.wait(false), Duration::ZERO, "a publisher waiting for each confirm");
        assert_eq!(linger.wait(true), Duration::from_micros(120));
        linger.synced(Duration::from_millis(30));
        assert_eq!(linger.wait(true), MAX_LINGER);
    }
}
