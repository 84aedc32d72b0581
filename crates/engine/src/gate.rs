//! Capacity shared between queues and a consumer-side owner.
//!
//! Two limits span several queues at once: a channel's `global` prefetch (unacknowledged
//! deliveries across all its consumers) and a connection's outbound backlog (deliveries handed
//! to the connection but not yet written to its socket, which bounds memory for slow or no-ack
//! consumers). Queues take units before delivering; the owner gives them back. A queue that
//! finds a gate full registers itself and is sent [`crate::queue::QueueCmd::Resume`] when units
//! come back, so nobody polls.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use parking_lot::Mutex;

use crate::queue::QueueRef;

/// A counting gate. A limit of 0 means unlimited.
#[derive(Debug, Default)]
pub struct Gate {
    limit: AtomicU32,
    used: AtomicU32,
    has_waiters: AtomicBool,
    waiters: Mutex<Vec<QueueRef>>,
}

impl Gate {
    /// A gate with `limit` units (0 = unlimited).
    #[must_use]
    pub fn new(limit: u32) -> Arc<Self> {
        Arc::new(Self { limit: AtomicU32::new(limit), ..Self::default() })
    }

    /// Changes the limit; waiters are woken if it grew.
    pub fn set_limit(&self, limit: u32) {
        self.limit.store(limit, Ordering::SeqCst);
        self.wake();
    }

    /// The current limit (0 = unlimited).
    #[must_use]
    pub fn limit(&self) -> u32 {
        self.limit.load(Ordering::SeqCst)
    }

    /// Units currently taken.
    #[must_use]
    pub fn used(&self) -> u32 {
        self.used.load(Ordering::SeqCst)
    }

    /// Sets the number of taken units, for an owner that already holds deliveries when it
    /// starts enforcing a limit (RabbitMQ counts existing unacked messages against a new
    /// global prefetch).
    pub fn set_used(&self, used: u32) {
        self.used.store(used, Ordering::SeqCst);
    }

    /// Takes one unit if there is room.
    pub fn try_acquire(&self) -> bool {
        let mut used = self.used.load(Ordering::SeqCst);
        loop {
            let limit = self.limit.load(Ordering::SeqCst);
            if limit != 0 && used >= limit {
                return false;
            }
            match self.used.compare_exchange_weak(used, used + 1, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return true,
                Err(actual) => used = actual,
            }
        }
    }

    /// Takes one unit, or registers `queue` to be resumed when room appears.
    pub fn acquire_or_wait(&self, queue: &QueueRef) -> bool {
        if self.try_acquire() {
            return true;
        }
        {
            let mut waiters = self.waiters.lock();
            if !waiters.iter().any(|w| Arc::ptr_eq(w, queue)) {
                waiters.push(Arc::clone(queue));
            }
            self.has_waiters.store(true, Ordering::SeqCst);
        }
        // Units may have come back between the failed attempt and the registration; the SeqCst
        // store above and the load in `release` guarantee one side sees the other.
        if self.try_acquire() {
            return true;
        }
        false
    }

    /// Gives back `n` units and resumes waiting queues.
    pub fn release(&self, n: u32) {
        if n == 0 {
            return;
        }
        let mut used = self.used.load(Ordering::SeqCst);
        loop {
            let next = used.saturating_sub(n);
            match self.used.compare_exchange_weak(used, next, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => break,
                Err(actual) => used = actual,
            }
        }
        self.wake();
    }

    fn wake(&self) {
        if !self.has_waiters.load(Ordering::SeqCst) {
            return;
        }
        let waiters = {
            let mut waiters = self.waiters.lock();
            self.has_waiters.store(false, Ordering::SeqCst);
            std::mem::take(&mut *waiters)
        };
        for queue in waiters {
            queue.resume();
        }
    }
}
