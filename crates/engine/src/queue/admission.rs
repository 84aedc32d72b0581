//! Whether a queue admits client publishes now.
//!
//! A queue under Charon's dead-letter guarantee keeps its dead letters until their targets
//! confirmed them, and bounds how many wait (`charon-dead-letter-pending-max`). At the bound it
//! closes its admission: a connection publishing to it waits before handing the publish over
//! (the 0.9.1 connection stops reading its socket, the 1.0 one stops taking transfers), rather
//! than the queue dropping anything. Dead letters forwarded by other queues do not pass here,
//! so queues dead-lettering into each other cannot block one another.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// Open unless the queue holds its publishers back.
#[derive(Debug, Default)]
pub struct Admission {
    closed: AtomicBool,
    opened: Notify,
}

impl Admission {
    /// Opens or closes it; opening wakes every publisher waiting.
    pub(crate) fn set_closed(&self, closed: bool) {
        if self.closed.swap(closed, Ordering::AcqRel) && !closed {
            self.opened.notify_waiters();
        }
    }

    /// Whether publishes wait now.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Returns once the queue admits publishes (at once, one atomic load, while it does).
    pub async fn admitted(&self) {
        while self.is_closed() {
            let opened = self.opened.notified();
            let mut opened = std::pin::pin!(opened);
            // Registered before the second look, so an opening in between is not missed.
            opened.as_mut().enable();
            if !self.is_closed() {
                return;
            }
            opened.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_publisher_waits_while_closed_and_goes_on_when_opened() {
        let admission = Arc::new(Admission::default());
        admission.admitted().await;
        admission.set_closed(true);
        let waiting = tokio::spawn({
            let admission = Arc::clone(&admission);
            async move { admission.admitted().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "held back while closed");
        admission.set_closed(false);
        tokio::time::timeout(Duration::from_secs(1), waiting).await.unwrap().unwrap();
    }
}
