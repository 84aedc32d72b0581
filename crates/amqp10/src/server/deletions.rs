//! Queues a session published to by name, watched for their deletion.
//!
//! RabbitMQ detaches a sending link whose target is a queue (`/queues/q`) with
//! `amqp:resource-deleted` when that queue is deleted, once the session has published to it
//! (the queue's `eol`). Without it the link would stay attached and every later message be
//! `released`, and the application would never learn that its target is gone.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use charon_engine::QueueRef;
use foldhash::HashSet as FastSet;
use foldhash::HashSetExt;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

type Gone = Pin<Box<dyn Future<Output = (u64, String)> + Send + Sync>>;

/// The queues being watched and a future per queue that resolves when it is gone.
pub(crate) struct Deletions {
    watched: FastSet<u64>,
    pending: FuturesUnordered<Gone>,
}

impl Deletions {
    pub(crate) fn new() -> Self {
        Self { watched: FastSet::new(), pending: FuturesUnordered::new() }
    }

    /// Watches `queue` unless it already is (one hash lookup per publish otherwise).
    pub(crate) fn watch(&mut self, queue: &QueueRef) {
        if self.watched.insert(queue.id) {
            let queue = Arc::clone(queue);
            self.pending.push(Box::pin(async move {
                queue.gone().await;
                (queue.id, queue.config.name.clone())
            }));
        }
    }

    /// The name of the next watched queue to be deleted; pending while none is watched.
    /// Cancel-safe: a deletion not taken stays for the next call.
    pub(crate) async fn next(&mut self) -> String {
        match self.pending.next().await {
            Some((id, name)) => {
                self.watched.remove(&id);
                name
            }
            None => std::future::pending().await,
        }
    }
}
