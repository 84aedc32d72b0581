//! Whether a queue admits client publishes now.
//!
//! A queue under Charon's dead-letter guarantee keeps its dead letters until their targets
//! confirmed them, and bounds how many wait (`charon-dead-letter-pending-max`). At the bound it
//! closes its admission: a connection publishing to it waits before handing the publish over
//! (the 0.9.1 connection stops reading its socket, the 1.0 one stops taking transfers), rather
//! than the queue dropping anything. Dead letters forwarded by other queues do not wait for that
//! hold, so queues dead-lettering into each other cannot block one another.
//!
//! A queue also holds what is published to it for flow (`flow.rs`): then client publishes and
//! dead letters wait alike. That hold ends as the queue's own consumers catch up, whatever
//! other queues do, so it cannot deadlock either.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// Open unless the queue holds its publishers back.
#[derive(Debug, Default)]
pub struct Admission {
    /// Held for flow (see `flow.rs`): also dead letters wait.
    flow: AtomicBool,
    /// Held under the dead-letter guarantee: only client publishes wait.
    guarantee: AtomicBool,
    /// Notified whenever either hold ends.
    opened: Notify,
}

impl Admission {
    /// Sets both holds; one that ends wakes everything waiting.
    pub(crate) fn set(&self, flow: bool, guarantee: bool) {
        let flow_ended = self.flow.swap(flow, Ordering::AcqRel) && !flow;
        let guarantee_ended = self.guarantee.swap(guarantee, Ordering::AcqRel) && !guarantee;
        if flow_ended || guarantee_ended {
            self.opened.notify_waiters();
        }
    }

    /// [`Self::set`], for other crates' tests of what waits on a queue's admission.
    #[cfg(feature = "test-support")]
    #[doc(hidden)]
    pub fn set_for_tests(&self, flow: bool, guarantee: bool) {
        self.set(flow, guarantee);
    }

    /// Whether client publishes wait now.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.flow.load(Ordering::Acquire) || self.guarantee.load(Ordering::Acquire)
    }

    /// Whether the queue holds back what is published to it for flow, dead letters included.
    #[must_use]
    pub fn held_for_flow(&self) -> bool {
        self.flow.load(Ordering::Acquire)
    }

    /// Returns once the queue admits client publishes (at once, two atomic loads, while it
    /// does).
    pub async fn admitted(&self) {
        self.until(Self::is_closed).await;
    }

    /// Returns once the queue no longer holds back for flow (what dead letters wait for).
    pub async fn flow_let_go(&self) {
        self.until(Self::held_for_flow).await;
    }

    async fn until(&self, holding: impl Fn(&Self) -> bool) {
        while holding(self) {
            let opened = self.opened.notified();
            let mut opened = std::pin::pin!(opened);
            // Registered before the second look, so an opening in between is not missed.
            opened.as_mut().enable();
            if !holding(self) {
                return;
            }
            opened.await;
        }
    }
}

/// Returns once `admission` (that of the queue holding a connection's publishes back) admits
/// publishes again; never while there is none. Cancel-safe: a connection polls it beside its
/// inbox.
pub async fn until_admitted(admission: Option<&Admission>) {
    match admission {
        Some(admission) => admission.admitted().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    // Paused time: each sleep below lets the spawned waiters run until they block, then moves
    // the clock on at once, so "still waiting" is checked without a real delay.
    #[tokio::test(start_paused = true)]
    async fn a_publisher_waits_while_closed_and_goes_on_when_opened() {
        let admission = Arc::new(Admission::default());
        admission.admitted().await;
        admission.set(false, true);
        let waiting = tokio::spawn({
            let admission = Arc::clone(&admission);
            async move { admission.admitted().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "held back while closed");
        admission.set(false, false);
        tokio::time::timeout(Duration::from_secs(1), waiting).await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn dead_letters_wait_for_flow_only() {
        let admission = Arc::new(Admission::default());
        admission.set(true, true);
        assert!(admission.is_closed() && admission.held_for_flow());
        let letters = tokio::spawn({
            let admission = Arc::clone(&admission);
            async move { admission.flow_let_go().await }
        });
        let publishes = tokio::spawn({
            let admission = Arc::clone(&admission);
            async move { admission.admitted().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!letters.is_finished());
        admission.set(false, true);
        tokio::time::timeout(Duration::from_secs(1), letters).await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!publishes.is_finished(), "still held under the guarantee");
        admission.set(false, false);
        tokio::time::timeout(Duration::from_secs(1), publishes).await.unwrap().unwrap();
    }
}
