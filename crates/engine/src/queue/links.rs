//! What a queue task needs from outside the queue module, handed to it by its vhost at spawn:
//! the store, where its dead letters go, and whom to tell when it deletes itself. The queue
//! module knows nothing of the vhost that owns the queues, so the two do not depend on each
//! other.

use std::sync::Arc;

use super::handle::QueueRef;
use crate::dead_letter::DeadLetterSink;
use crate::persist::Persistence;

/// Called once when a queue deletes itself (auto-delete after its last consumer, `x-expires`):
/// its owner removes it from the topology (and the store).
pub(crate) type OnSelfDelete = Box<dyn FnOnce(&QueueRef) + Send>;

/// A queue task's links to the rest of the broker.
pub(crate) struct QueueLinks {
    /// The broker's store, when it has one: a durable queue journals its persistent messages
    /// there, and every queue pages out what does not fit in memory.
    pub(crate) store: Option<Arc<Persistence>>,
    /// Routes the queue's dead letters.
    pub(crate) dead_letters: Arc<dyn DeadLetterSink>,
    /// Told when the queue deletes itself.
    pub(crate) on_self_delete: OnSelfDelete,
}
