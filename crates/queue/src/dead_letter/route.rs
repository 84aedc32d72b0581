//! How a dead letter, or a dead-letter event, finds its queues: the vhost's exchange graph as
//! the queue task and the event publisher see it, so that neither depends on the vhost (and
//! the event buffer, which the sink hands deaths to, does not depend on the sink).

use charon_model::{Routing, Table};

use crate::handle::QueueRef;

/// Routes by a vhost's exchanges.
pub trait Router: Send + Sync {
    /// The queues a message published to `exchange` reaches, like a publish but without the
    /// `internal` check (RabbitMQ calls `rabbit_exchange:route` directly); `None` when the
    /// exchange does not exist.
    fn route(&self, exchange: &str, routing: &Routing, headers: &Table) -> Option<Vec<QueueRef>>;
}
