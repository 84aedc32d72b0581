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
        self.try_acquire_up_to(1, 1) == 1
    }

    /// Takes up to `wanted` units in one atomic step, but no more than a `sharers`th of the
    /// room left (and at least one unit if there is room), and says how many it took.
    ///
    /// A queue about to deliver several messages to one consumer takes their units at once:
    /// the owner gives units back from another thread, so every step on the count is a cache
    /// miss (one per delivery was 2 % of the broker's CPU in S1b). Near the limit, the share
    /// keeps that consumer from taking the units the queue's other consumers would have had
    /// in turn, one at a time.
    pub fn try_acquire_up_to(&self, wanted: u32, sharers: u32) -> u32 {
        let mut used = self.used.load(Ordering::SeqCst);
        loop {
            let limit = self.limit.load(Ordering::SeqCst);
            let room = if limit == 0 { u32::MAX - used } else { limit.saturating_sub(used) };
            let taken = wanted.min((room / sharers.max(1)).max(1)).min(room);
            if taken == 0 {
                return 0;
            }
            match self.used.compare_exchange_weak(used, used + taken, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return taken,
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
    fn several_units_are_taken_at_once_up_to_the_room_left() {
        let gate = Gate::new(5);
        assert_eq!(gate.try_acquire_up_to(3, 1), 3);
        assert_eq!(gate.try_acquire_up_to(3, 1), 2, "only two were left");
        assert_eq!(gate.try_acquire_up_to(1, 1), 0);
        gate.release(4);
        assert_eq!((gate.used(), gate.try_acquire_up_to(0, 1)), (1, 0));
        assert_eq!(gate.try_acquire_up_to(10, 2), 2, "half of the four left");
        assert_eq!(gate.try_acquire_up_to(10, 3), 1, "a third of two, but one at least");
        let unlimited = Gate::new(0);
        assert_eq!(unlimited.try_acquire_up_to(1000, 2), 1000);
        assert_eq!(unlimited.used(), 1000);
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
