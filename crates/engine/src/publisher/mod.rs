//! Route-then-enqueue, written once: every place that publishes into queues (a 0.9.1
//! channel, a 1.0 link, the management API's publish and aliveness test, a redrive job)
//! routes through a [`Publisher`], gathers what it routed per queue, and hands each queue one
//! command per batch.
//!
//! What the callers differ in stays theirs: when to flush (a client connection after each
//! socket read, a redrive job per batch), what a confirmation means (a 0.9.1 `basic.ack`, a
//! 1.0 disposition, a source message let go), and what "the queue is gone" answers (RabbitMQ
//! confirms a client's publish to a queue deleted meanwhile; a redrive keeps the message).
//! [`Outstanding`] counts the queues yet to answer each publish for those that need it.

mod batch;
mod outstanding;

use std::collections::VecDeque;
use std::sync::Arc;

use charon_model::Message;

use self::batch::Batch;
pub use self::outstanding::{Answered, Outstanding};
use crate::error::EngineError;
use crate::queue::{Admission, ConfirmTo, Enqueue, QueueRef};
use crate::route_cache::RouteCache;
use crate::session::SessionSink;
use crate::vhost::VHost;

/// How [`Publisher::flush`] treats a queue that holds its publishers back (flow, or the
/// dead-letter guarantee's bound).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flush {
    /// Stop at that queue's batch: it and the ones after it stay, in order, and
    /// [`Publisher::held_by`] names the queue. A client connection, which must not wait inside
    /// its task (it delivers to its own consumers too), stops reading its socket instead.
    Hold,
    /// Wait until the queue admits them: a server-side publisher (management, redrive), which
    /// has nothing else to do meanwhile.
    Wait,
    /// Hand everything over regardless, a bounded amount: the channel or connection is going
    /// away, or a transaction commits what it held.
    Force,
}

/// One publisher's routes and the publishes it routed but has not handed to their queues.
#[derive(Debug)]
pub struct Publisher {
    routes: RouteCache,
    /// In the order their first message was routed; a queue's messages stay in order.
    batches: VecDeque<Batch>,
    held_by: Option<QueueRef>,
    /// Where the queues send confirmations; `None` for a publisher that asks for none.
    confirms_to: Option<SessionSink>,
}

impl Publisher {
    /// A publisher whose confirmations, if it asks for any, go to `confirms_to`.
    #[must_use]
    pub fn new(confirms_to: Option<SessionSink>) -> Self {
        Self { routes: RouteCache::new(), batches: VecDeque::new(), held_by: None, confirms_to }
    }

    /// The queues `message` routes to from its exchange, through this publisher's route cache.
    ///
    /// # Errors
    /// NOT_FOUND when the exchange does not exist.
    pub fn route(&mut self, vhost: &VHost, message: &Message) -> Result<Arc<[QueueRef]>, EngineError> {
        let routing = &message.routing;
        vhost.route(&mut self.routes, &routing.exchange, routing, &message.headers)
    }

    /// Adds `message` for each of `queues`, confirmed under `confirm` on `channel` (a 0.9.1
    /// channel; any number the caller tells its queues apart by).
    pub fn push(&mut self, queues: &[QueueRef], channel: u32, message: &Arc<Message>, confirm: Option<u64>) {
        for queue in queues {
            let item = Enqueue { message: Arc::clone(message), confirm };
            match self.batches.iter_mut().find(|b| b.takes(queue, channel, None)) {
                Some(batch) => batch.items.push(item),
                None => self.batches.push_back(Batch::new(queue, channel, None, item)),
            }
        }
    }

    /// Adds `message`, the copy of message `seq` of the queue `source` that the caller holds
    /// as a delivery, for `queue` alone: the queue's log record of it also removes it from the
    /// source ([`QueueRef::publish_moved`]), so a crash leaves it in exactly one of the two.
    /// Only for a publisher with somewhere to send confirmations: without them nothing tells
    /// the caller when to let the source go, and the copy is published as a plain one.
    pub fn push_moved(
        &mut self,
        queue: &QueueRef,
        channel: u32,
        message: Arc<Message>,
        confirm: u64,
        (source, seq): (u64, u64),
    ) {
        let item = Enqueue { message, confirm: Some(confirm) };
        match self.batches.iter_mut().find(|b| b.takes(queue, channel, Some(source))) {
            Some(batch) => batch.add_moved(item, seq),
            None => self.batches.push_back(Batch::new(queue, channel, Some((source, seq)), item)),
        }
    }

    /// Hands the batches to their queues in order (each waits while its queue's mailbox is
    /// full). Returns, per channel, the confirm numbers of queues that were gone: those will
    /// never be answered, and the caller decides what that means.
    pub async fn flush(&mut self, mode: Flush) -> Vec<(u32, Vec<u64>)> {
        self.held_by = None;
        let mut gone = Vec::new();
        while let Some(batch) = self.batches.pop_front() {
            match mode {
                Flush::Hold if batch.queue.admission.is_closed() => {
                    self.held_by = Some(Arc::clone(&batch.queue));
                    self.batches.push_front(batch);
                    break;
                }
                Flush::Wait => batch.queue.admission.admitted().await,
                Flush::Hold | Flush::Force => {}
            }
            let channel = batch.channel;
            let to = (self.confirms_to.as_ref())
                .filter(|_| batch.wants_confirms())
                .map(|session| ConfirmTo { session: session.clone(), channel });
            if let Some(unanswered) = batch.send(to).await {
                gone.push((channel, unanswered));
            }
        }
        gone
    }

    /// The queue holding this publisher's batches back since the last [`Flush::Hold`].
    #[must_use]
    pub fn held_by(&self) -> Option<&QueueRef> {
        self.held_by.as_ref()
    }

    /// Its admission, for a connection to wait on beside its inbox
    /// ([`crate::queue::until_admitted`]).
    #[must_use]
    pub fn holding(&self) -> Option<&Admission> {
        self.held_by.as_ref().map(|queue| &queue.admission)
    }

    /// Whether a queue holds this publisher's batches back.
    #[must_use]
    pub fn held(&self) -> bool {
        self.held_by.is_some()
    }
}

#[cfg(test)]
mod tests;
