//! What a queue task needs from outside the queue machine, handed to it by its vhost at spawn:
//! the message log, where its dead letters go, and whom to tell when it deletes itself. The
//! queue machine knows nothing of the vhost that owns the queues or of the metadata store, so
//! they do not depend on each other.

use std::sync::Arc;

use super::handle::QueueRef;
use crate::dead_letter::DeadLetterSink;
use charon_store::segment_log::MessageLog;

/// Called once when a queue deletes itself (auto-delete after its last consumer, `x-expires`):
/// its owner removes it from the topology (and the store).
pub type OnSelfDelete = Box<dyn FnOnce(&QueueRef) + Send>;

/// A queue task's links to the rest of the broker.
pub struct QueueLinks {
    /// The broker's message log, when it has a store: a durable queue journals its persistent
    /// messages there, and every queue pages out what does not fit in memory.
    pub log: Option<Arc<MessageLog>>,
    /// Routes the queue's dead letters.
    pub dead_letters: Arc<dyn DeadLetterSink>,
    /// Told when the queue deletes itself.
    pub on_self_delete: OnSelfDelete,
}
