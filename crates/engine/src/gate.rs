//! Capacity shared between queues and a consumer-side owner.
//!
//! Two limits span several queues at once: a channel's `global` prefetch (unacknowledged
//! deliveries across all its consumers) and a connection's outbound backlog (deliveries handed
//! to the connection but not yet written to its socket, which bounds memory for slow or no-ack
//! consumers). Queues take units before delivering; the owner gives them back. A queue that
//! finds a gate full registers itself as a [`Waiter`] and is resumed when units come back, so
//! nobody polls. Waiters are a trait here, not queue handles, so the gate depends on nothing in
//! the engine (queues use gates; a gate only needs to wake them).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use parking_lot::Mutex;

/// Someone to wake when units come back (a queue, which then runs a dispatch pass).
pub trait Waiter: Send + Sync + std::fmt::Debug {
    /// Called once per registration, after units were released.
    fn resume(&self);
}

/// A counting gate. A limit of 0 means unlimited.
#[derive(Debug, Default)]
pub struct Gate {
    limit: AtomicU32,
    used: AtomicU32,
    has_waiters: AtomicBool,
    waiters: Mutex<Vec<Arc<dyn Waiter>>>,
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

    /// Takes one unit, or registers `waiter` to be resumed when room appears.
    pub fn acquire_or_wait<W: Waiter + 'static>(&self, waiter: &Arc<W>) -> bool {
        if self.try_acquire() {
            return true;
        }
        {
            let mut waiters = self.waiters.lock();
            let address = Arc::as_ptr(waiter).cast::<()>();
            if !waiters.iter().any(|w| std::ptr::eq(Arc::as_ptr(w).cast::<()>(), address)) {
                waiters.push(Arc::clone(waiter) as Arc<dyn Waiter>);
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
        for waiter in waiters {
            waiter.resume();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[derive(Debug, Default)]
    struct Counting(AtomicUsize);

    impl Waiter for Counting {
        fn resume(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_full_gate_registers_a_waiter_once_and_resumes_it_once_on_release() {
        let gate = Gate::new(1);
        let waiter = Arc::new(Counting::default());
        assert!(gate.acquire_or_wait(&waiter));
        assert!(!gate.acquire_or_wait(&waiter));
        assert!(!gate.acquire_or_wait(&waiter), "still full; registered only once");
        gate.release(1);
        assert_eq!(waiter.0.load(Ordering::SeqCst), 1);
        gate.release(1);
        assert_eq!(waiter.0.load(Ordering::SeqCst), 1, "a release with nobody waiting wakes nobody");
        assert_eq!(gate.used(), 0);
    }

    #[test]
    fn growing_the_limit_wakes_waiters_and_zero_means_unlimited() {
        let gate = Gate::new(1);
        let waiter = Arc::new(Counting::default());
        assert!(gate.try_acquire());
        assert!(!gate.acquire_or_wait(&waiter));
        gate.set_limit(0);
        assert_eq!(waiter.0.load(Ordering::SeqCst), 1);
        assert!((0..100).all(|_| gate.try_acquire()));
    }
}
