//! What a queue task needs from outside the queue machine, handed to it by its vhost at spawn:
//! the message log, where its dead letters go, and whom to tell when it deletes itself. The
//! queue machine knows nothing of the vhost that owns the queues or of the metadata store, so
//! they do not depend on each other.

use std::sync::Arc;

use super::handle::QueueRef;
use crate::dead_letter::DeadLetterSink;
use charon_store::segment_log::{MessageLog, RecoveredQueue};

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
    /// A replicated quorum queue's group, which its journal goes through too.
    pub replica: Option<Arc<dyn Replicate>>,
}

/// Runs once the members of a replicated queue committed a batch (true), or once they never
/// will (false: another node became the queue's home).
pub type Replicated = Box<dyn FnOnce(bool) + Send>;

/// Where a replicated quorum queue's journal goes besides its node's log: the queue's Raft
/// group ([`crate::replica`]), whose members keep it to restore the queue should this node
/// go. A publisher's confirm waits for the group's commit (the node's log only pages the
/// queue's messages: a replicated queue is always restored from its group).
pub trait Replicate: Send + Sync {
    /// Hands over a pass's records (those a restart must find, framed by
    /// [`charon_store::segment_log::encode_batch`]); `done` runs once a majority of the
    /// members have them on disk, in the order the batches were handed over.
    fn replicate(&self, records: bytes::Bytes, done: Replicated);

    /// Whether so much waits for the members that the queue holds its publishers back (a
    /// group without a majority commits nothing, and what waits must stay bounded).
    fn is_behind(&self) -> bool;

    /// Makes this node the queue's home in a new epoch and gives back its messages as the
    /// members have them, written again to `log` as queue `queue`'s (what the log held of it
    /// before is dropped: a later home may have changed it). The queue task awaits it before
    /// its first command, as a restart awaits its restore.
    ///
    /// # Errors
    /// The queue's messages could not be written to the log.
    fn take_over(&self, queue: u64, log: Arc<MessageLog>) -> TakingOver;
}

/// A [`Replicate::take_over`] under way.
pub type TakingOver = std::pin::Pin<Box<dyn std::future::Future<Output = Result<RecoveredQueue, String>> + Send>>;
