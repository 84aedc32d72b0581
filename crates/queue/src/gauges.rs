//! A queue's depth as the Prometheus endpoint and the management API read it without asking
//! the queue: atomics its task stores once per pass, so a scrape of many queues costs loads,
//! not messages to every queue task.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The queue's gauges as of its last pass.
#[derive(Debug, Default)]
pub struct QueueGauges {
    ready: AtomicU64,
    unacked: AtomicU64,
    ready_bytes: AtomicU64,
    unacked_bytes: AtomicU64,
    delayed: AtomicU64,
    delayed_bytes: AtomicU64,
    consumers: AtomicU64,
}

/// One reading of [`QueueGauges`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GaugeValues {
    /// Ready messages (RabbitMQ's `messages_ready`).
    pub ready: u64,
    /// Delivered, not yet settled (`messages_unacked`).
    pub unacked: u64,
    /// Body bytes of the ready messages.
    pub ready_bytes: u64,
    /// Body bytes of the unacknowledged messages.
    pub unacked_bytes: u64,
    /// Delayed messages (Zaqar's `delay`): not ready, but in the queue's depth.
    pub delayed: u64,
    /// Their body bytes.
    pub delayed_bytes: u64,
    /// Consumers.
    pub consumers: u64,
}

impl GaugeValues {
    /// Ready, unacknowledged and delayed: RabbitMQ's queue depth (`messages`), with the
    /// delayed messages the management API also counts there.
    #[must_use]
    pub fn messages(&self) -> u64 {
        self.ready + self.unacked + self.delayed
    }

    /// Their bytes (`messages_bytes`).
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.ready_bytes + self.unacked_bytes + self.delayed_bytes
    }

    /// Adds `other`, for the aggregated families.
    pub fn add(&mut self, other: &Self) {
        self.ready += other.ready;
        self.unacked += other.unacked;
        self.ready_bytes += other.ready_bytes;
        self.unacked_bytes += other.unacked_bytes;
        self.delayed += other.delayed;
        self.delayed_bytes += other.delayed_bytes;
        self.consumers += other.consumers;
    }
}

impl QueueGauges {
    /// Stores the task's figures (relaxed: a scrape wants recent values, not an instant).
    pub(crate) fn store(&self, values: GaugeValues) {
        self.ready.store(values.ready, Relaxed);
        self.unacked.store(values.unacked, Relaxed);
        self.ready_bytes.store(values.ready_bytes, Relaxed);
        self.unacked_bytes.store(values.unacked_bytes, Relaxed);
        self.delayed.store(values.delayed, Relaxed);
        self.delayed_bytes.store(values.delayed_bytes, Relaxed);
        self.consumers.store(values.consumers, Relaxed);
    }

    /// The figures of the queue's last pass.
    #[must_use]
    pub fn load(&self) -> GaugeValues {
        GaugeValues {
            ready: self.ready.load(Relaxed),
            unacked: self.unacked.load(Relaxed),
            ready_bytes: self.ready_bytes.load(Relaxed),
            unacked_bytes: self.unacked_bytes.load(Relaxed),
            delayed: self.delayed.load(Relaxed),
            delayed_bytes: self.delayed_bytes.load(Relaxed),
            consumers: self.consumers.load(Relaxed),
        }
    }
}
