//! The node's global counters: RabbitMQ's `rabbit_global_counters` (messages received, routed,
//! delivered... per protocol and queue type) and its churn counters (connections, channels and
//! queues opened and closed), read by the Prometheus endpoint and the management overview.
//!
//! One set per process, as one RabbitMQ node has one (`rabbit_global_counters` is a node-wide
//! `counters` reference too): a Charon process runs one broker. Connection tasks count in their
//! own [`LocalCounters`] (plain integers, no atomics) and [`LocalCounters::fold`] them into the
//! shared atomics once per read or write batch, so a message costs no contended atomic.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use crate::queue::QueueType;

/// The protocols RabbitMQ labels its global counters with (`protocol`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// `amqp091`.
    Amqp091,
    /// `amqp10`.
    Amqp10,
}

impl Protocol {
    /// Both, in RabbitMQ's exposition order.
    pub const ALL: [Self; 2] = [Self::Amqp091, Self::Amqp10];

    /// The `protocol` label value.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Amqp091 => "amqp091",
            Self::Amqp10 => "amqp10",
        }
    }

    fn index(self) -> usize {
        match self {
            Self::Amqp091 => 0,
            Self::Amqp10 => 1,
        }
    }
}

/// Counters labelled by protocol only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// Messages received from publishers.
    Received,
    /// Messages received from publishers expecting confirmations.
    ReceivedConfirm,
    /// Messages routed to at least one queue.
    Routed,
    /// Non-mandatory messages dropped as unroutable.
    UnroutableDropped,
    /// Mandatory messages returned as unroutable.
    UnroutableReturned,
    /// Messages confirmed to publishers.
    Confirmed,
}

impl Counter {
    /// Every counter, in RabbitMQ's exposition order.
    pub const ALL: [Self; 6] = [
        Self::Received,
        Self::ReceivedConfirm,
        Self::Routed,
        Self::UnroutableDropped,
        Self::UnroutableReturned,
        Self::Confirmed,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// Counters labelled by protocol and queue type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TypedCounter {
    /// Delivered to a consumer that acknowledges.
    ConsumeManualAck,
    /// Delivered to a no-ack consumer.
    ConsumeAutoAck,
    /// Fetched with `basic.get`, to be acknowledged.
    GetManualAck,
    /// Fetched with `basic.get` no-ack.
    GetAutoAck,
    /// `basic.get` on an empty queue.
    GetEmpty,
    /// Deliveries with the redelivered flag.
    Redelivered,
    /// Messages acknowledged by consumers.
    Acknowledged,
}

impl TypedCounter {
    /// Every counter.
    pub const ALL: [Self; 7] = [
        Self::ConsumeManualAck,
        Self::ConsumeAutoAck,
        Self::GetManualAck,
        Self::GetAutoAck,
        Self::GetEmpty,
        Self::Redelivered,
        Self::Acknowledged,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// RabbitMQ's `queue_type` label values; Charon has no streams, whose series stay at zero.
pub const QUEUE_TYPES: [&str; 3] = ["rabbit_classic_queue", "rabbit_quorum_queue", "rabbit_stream_queue"];

fn type_index(queue_type: QueueType) -> usize {
    match queue_type {
        QueueType::Classic => 0,
        QueueType::Quorum => 1,
    }
}

const PLAIN: usize = Counter::ALL.len();
const TYPED: usize = TypedCounter::ALL.len();
const TYPES: usize = QUEUE_TYPES.len();

/// One connection's counts since its last fold: plain integers, owned by its task.
#[derive(Debug)]
pub struct LocalCounters {
    protocol: Protocol,
    plain: [u64; PLAIN],
    typed: [[u64; TYPED]; TYPES],
    dirty: bool,
    /// This connection's consumers and publishers now, and as the node last heard of them.
    gauges: [i64; 2],
    reported: [i64; 2],
}

impl LocalCounters {
    /// Zero counts for a connection of `protocol`.
    #[must_use]
    pub fn new(protocol: Protocol) -> Self {
        Self { protocol, plain: [0; PLAIN], typed: [[0; TYPED]; TYPES], dirty: false, gauges: [0; 2], reported: [0; 2] }
    }

    /// This connection's consumers now (reported to the node at the next fold).
    pub fn set_consumers(&mut self, n: usize) {
        self.gauges[0] = i64::try_from(n).unwrap_or(i64::MAX);
    }

    /// This connection's publishers now (0.9.1 channels that published, 1.0 sending links).
    pub fn set_publishers(&mut self, n: usize) {
        self.gauges[1] = i64::try_from(n).unwrap_or(i64::MAX);
    }

    /// Counts `n` for `counter`.
    pub fn add(&mut self, counter: Counter, n: u64) {
        if let Some(slot) = self.plain.get_mut(counter.index()) {
            *slot += n;
            self.dirty = true;
        }
    }

    /// Counts `n` for `counter` on a queue of `queue_type`.
    pub fn add_typed(&mut self, queue_type: QueueType, counter: TypedCounter, n: u64) {
        if let Some(slot) = self.typed.get_mut(type_index(queue_type)).and_then(|row| row.get_mut(counter.index())) {
            *slot += n;
            self.dirty = true;
        }
    }

    /// Adds the counts to the node's and zeroes them: one atomic per counter that moved, once
    /// per batch.
    pub fn fold(&mut self) {
        let Some(shared) = global().protocols.get(self.protocol.index()) else {
            return;
        };
        if self.gauges != self.reported {
            shared.consumers.fetch_add(self.gauges[0] - self.reported[0], Relaxed);
            shared.publishers.fetch_add(self.gauges[1] - self.reported[1], Relaxed);
            self.reported = self.gauges;
        }
        if !std::mem::take(&mut self.dirty) {
            return;
        }
        for (count, atomic) in self.plain.iter_mut().zip(&shared.plain) {
            if *count != 0 {
                atomic.fetch_add(std::mem::take(count), Relaxed);
            }
        }
        for (row, atomics) in self.typed.iter_mut().zip(&shared.typed) {
            for (count, atomic) in row.iter_mut().zip(atomics) {
                if *count != 0 {
                    atomic.fetch_add(std::mem::take(count), Relaxed);
                }
            }
        }
    }
}

/// A connection that ends reports its last counts, and its consumers and publishers go.
impl Drop for LocalCounters {
    fn drop(&mut self) {
        self.gauges = [0; 2];
        self.fold();
    }
}

/// One protocol's shared counters.
#[derive(Debug)]
struct Shared {
    plain: [AtomicU64; PLAIN],
    typed: [[AtomicU64; TYPED]; TYPES],
    publishers: AtomicI64,
    consumers: AtomicI64,
}

impl Shared {
    const fn new() -> Self {
        Self {
            plain: [const { AtomicU64::new(0) }; PLAIN],
            typed: [const { [const { AtomicU64::new(0) }; TYPED] }; TYPES],
            publishers: AtomicI64::new(0),
            consumers: AtomicI64::new(0),
        }
    }
}

/// RabbitMQ's churn counters (`rabbit_core_metrics`' `connection_churn_metrics`) and the
/// current connection and channel counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Churn {
    /// Connections opened (AMQP connections admitted to a vhost: counted with the connection
    /// limits' slot, so that opened minus closed is the open connections).
    ConnectionsOpened,
    /// Connections closed or terminated.
    ConnectionsClosed,
    /// 0.9.1 channels opened (4.0.5's AMQP 1.0 sessions are no channels).
    ChannelsOpened,
    /// Channels closed.
    ChannelsClosed,
    /// Successful queue declarations.
    QueuesDeclared,
    /// Queues created by a declaration.
    QueuesCreated,
    /// Queues deleted (by a client, auto-delete, exclusivity or expiry).
    QueuesDeleted,
}

impl Churn {
    /// Every churn counter, in RabbitMQ's exposition order.
    pub const ALL: [Self; 7] = [
        Self::ConnectionsOpened,
        Self::ConnectionsClosed,
        Self::ChannelsOpened,
        Self::ChannelsClosed,
        Self::QueuesDeclared,
        Self::QueuesCreated,
        Self::QueuesDeleted,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// The node's counters. Get them with [`global`].
#[derive(Debug)]
pub struct GlobalCounters {
    protocols: [Shared; 2],
    churn: [AtomicU64; Churn::ALL.len()],
}

static GLOBAL: GlobalCounters =
    GlobalCounters { protocols: [Shared::new(), Shared::new()], churn: [const { AtomicU64::new(0) }; 7] };

/// The node's counters.
#[must_use]
pub fn global() -> &'static GlobalCounters {
    &GLOBAL
}

/// A protocol's counters at one instant (for `/api/overview`'s `message_stats` and the
/// Prometheus families).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessageCounts {
    plain: [u64; PLAIN],
    typed: [[u64; TYPED]; TYPES],
    /// Current publishers (0.9.1 channels that published, 1.0 sending links, as 4.0.5).
    pub publishers: u64,
    /// Current consumers.
    pub consumers: u64,
}

impl MessageCounts {
    /// A protocol-only counter.
    #[must_use]
    pub fn get(&self, counter: Counter) -> u64 {
        self.plain.get(counter.index()).copied().unwrap_or(0)
    }

    /// A counter for one queue type (index into [`QUEUE_TYPES`]).
    #[must_use]
    pub fn typed(&self, type_index: usize, counter: TypedCounter) -> u64 {
        self.typed.get(type_index).and_then(|row| row.get(counter.index())).copied().unwrap_or(0)
    }

    /// A counter summed over queue types.
    #[must_use]
    pub fn total(&self, counter: TypedCounter) -> u64 {
        (0..TYPES).map(|t| self.typed(t, counter)).sum()
    }

    /// Every delivery for one queue type: RabbitMQ's `messages_delivered_total` counts
    /// consumes and gets, with or without acknowledgement.
    #[must_use]
    pub fn delivered(&self, type_index: usize) -> u64 {
        [
            TypedCounter::ConsumeManualAck,
            TypedCounter::ConsumeAutoAck,
            TypedCounter::GetManualAck,
            TypedCounter::GetAutoAck,
        ]
        .into_iter()
        .map(|c| self.typed(type_index, c))
        .sum()
    }
}

impl GlobalCounters {
    /// One protocol's counters now.
    #[must_use]
    pub fn snapshot(&self, protocol: Protocol) -> MessageCounts {
        let mut counts = MessageCounts::default();
        if let Some(shared) = self.protocols.get(protocol.index()) {
            for (count, atomic) in counts.plain.iter_mut().zip(&shared.plain) {
                *count = atomic.load(Relaxed);
            }
            for (row, atomics) in counts.typed.iter_mut().zip(&shared.typed) {
                for (count, atomic) in row.iter_mut().zip(atomics) {
                    *count = atomic.load(Relaxed);
                }
            }
            counts.publishers = u64::try_from(shared.publishers.load(Relaxed)).unwrap_or(0);
            counts.consumers = u64::try_from(shared.consumers.load(Relaxed)).unwrap_or(0);
        }
        counts
    }

    /// Counts one churn event (connections, channels and queues come and go rarely enough
    /// for one atomic each).
    pub fn churn(&self, event: Churn) {
        if let Some(atomic) = self.churn.get(event.index()) {
            atomic.fetch_add(1, Relaxed);
        }
    }

    /// A churn counter's value.
    #[must_use]
    pub fn churned(&self, event: Churn) -> u64 {
        self.churn.get(event.index()).map_or(0, |a| a.load(Relaxed))
    }

    /// Open connections: opened minus closed.
    #[must_use]
    pub fn connections(&self) -> u64 {
        self.churned(Churn::ConnectionsOpened).saturating_sub(self.churned(Churn::ConnectionsClosed))
    }

    /// Open channels: opened minus closed.
    #[must_use]
    pub fn channels(&self) -> u64 {
        self.churned(Churn::ChannelsOpened).saturating_sub(self.churned(Churn::ChannelsClosed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_counts_reach_the_node_on_fold_only() {
        // The node's counters are shared by every test in this process: compare deltas.
        let before = global().snapshot(Protocol::Amqp10);
        let mut local = LocalCounters::new(Protocol::Amqp10);
        local.add(Counter::Received, 3);
        local.add_typed(QueueType::Quorum, TypedCounter::ConsumeAutoAck, 2);
        local.add_typed(QueueType::Quorum, TypedCounter::GetManualAck, 1);
        let unfolded = global().snapshot(Protocol::Amqp10);
        assert!(unfolded.get(Counter::Received) >= before.get(Counter::Received));
        local.fold();
        let after = global().snapshot(Protocol::Amqp10);
        assert!(after.get(Counter::Received) >= before.get(Counter::Received) + 3);
        assert!(after.delivered(1) >= before.delivered(1) + 3);
        assert!(after.typed(1, TypedCounter::ConsumeAutoAck) >= before.typed(1, TypedCounter::ConsumeAutoAck) + 2);
        // Folding twice adds nothing more from this task.
        local.fold();
        assert_eq!(local.plain, [0; PLAIN]);
    }
}
