//! Names taken by durable exchanges and queues whose metadata commit is still in flight.
//!
//! A durable declare validates and reserves its name under the topology lock, commits with the
//! lock released, and only then publishes the exchange or queue: nobody routes to, binds to or
//! declares-ok a resource that a crash could still take back. A second declare of a reserved
//! name waits for the first to finish ([`Reserved::wait`]) and then looks again, so it sees the
//! first one's outcome exactly as when both ran under the lock.

use tokio::sync::watch;

/// Held by the declare that reserved a name; dropping it (after publishing or giving up)
/// wakes everyone waiting for the name.
#[derive(Debug)]
pub(crate) struct Reservation {
    _holder: watch::Sender<()>,
}

/// Kept in the topology under the reserved name; cloned by declares that wait for it.
#[derive(Clone, Debug)]
pub(crate) struct Reserved(watch::Receiver<()>);

/// Reserves a name: the holder's part and the topology's part.
pub(crate) fn reserve() -> (Reservation, Reserved) {
    let (tx, rx) = watch::channel(());
    (Reservation { _holder: tx }, Reserved(rx))
}

impl Reserved {
    /// Resolves once the reservation is dropped (at once if it already was).
    pub(crate) async fn wait(mut self) {
        // Nothing is ever sent: `changed` only fails, when the holder is gone.
        while self.0.changed().await.is_ok() {}
    }
}

#[cfg(test)]
mod tests {
    use std::task::{Context, Poll, Waker};

    use super::*;

    fn poll(future: &mut std::pin::Pin<&mut impl std::future::Future<Output = ()>>) -> Poll<()> {
        future.as_mut().poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn waiters_are_released_when_the_holder_lets_go() {
        let (holder, reserved) = reserve();
        let early = reserved.clone();
        let mut waiting = std::pin::pin!(early.wait());
        assert_eq!(poll(&mut waiting), Poll::Pending);
        drop(holder);
        assert_eq!(poll(&mut waiting), Poll::Ready(()));
        // A waiter that cloned the reservation before it was dropped but waits only now.
        let mut late = std::pin::pin!(reserved.wait());
        assert_eq!(poll(&mut late), Poll::Ready(()));
    }
}
