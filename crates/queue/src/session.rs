//! How queues talk back to the connections that use them.
//!
//! This module sits below both: queues name a connection only through the [`SessionSink`]
//! and the ids here, and connections (the protocol adapters' sessions) use queues. It names no
//! queue type: a [`SessionEvent::Deliveries`] says which consumer the messages are for, and the
//! connection settles them through the queue it subscribed that consumer to (it holds that
//! queue anyway, to cancel the consumer). So the queue module, whose commands carry a
//! [`SessionSink`], does not depend back on this one.
//!
//! Each client connection owns one unbounded event channel. Queues push deliveries, consumer
//! cancellations and publish confirmations into it; the connection's task drains it in batches.
//! Unbounded is safe because every producer is bounded elsewhere: deliveries by prefetch and the
//! connection's outbound [`Gate`], confirmations by the publisher's own reads.

use std::sync::Arc;

use charon_model::Message;
use tokio::sync::mpsc;

use crate::gate::Gate;

/// Identifies a client connection for the lifetime of the broker.
pub type SessionId = u64;

/// Identifies a consumer for the lifetime of the broker (never reused, unlike consumer tags).
pub type ConsumerId = u64;

/// The owner of deliveries awaiting settlement: a channel (0.9.1) or a link (1.0) of one
/// connection. When the owner goes away its unsettled messages are requeued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Owner {
    /// The connection.
    pub session: SessionId,
    /// Channel number or link handle within it.
    pub channel: u32,
}

/// One message handed to a consumer or a `basic.get`.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// The queue's handle for the message, used to settle it.
    pub seq: u64,
    /// The message.
    pub message: Arc<Message>,
    /// Whether it was delivered before (0.9.1 `redelivered`).
    pub redelivered: bool,
    /// How often it came back from consumers, for queues that count it (quorum queues);
    /// 0 otherwise. AMQP 1.0 `header.delivery-count`.
    pub delivery_count: u32,
}

/// What a queue tells a connection.
#[derive(Debug)]
pub enum SessionEvent {
    /// Messages for one consumer, in queue order. They are settled through the queue the
    /// consumer was subscribed to.
    Deliveries {
        /// The consumer.
        consumer: ConsumerId,
        /// The messages.
        items: Vec<Delivery>,
    },
    /// The queue was deleted; the consumer no longer exists.
    ConsumerCancelled {
        /// The consumer.
        consumer: ConsumerId,
    },
    /// The state of a credit-based consumer after a drain or an echo request.
    CreditState {
        /// The consumer.
        consumer: ConsumerId,
        /// The queue's delivery-count for it.
        delivery_count: u32,
        /// Credit left.
        credit: u32,
        /// Ready messages in the queue.
        available: u32,
        /// Whether this answers a drain.
        drain: bool,
    },
    /// The broker closes the connection (its vhost or user was deleted): 0.9.1 with 320
    /// CONNECTION_FORCED and `reason`, 1.0 as RabbitMQ 4.0.5 does.
    ForceClose {
        /// RabbitMQ's text, e.g. `vhost 'dev' is deleted`.
        reason: String,
    },
    /// A message for a direct reply-to consumer (the engine's `reply_to`): no queue holds it and
    /// nobody settles it. It took one unit of the connection's outbound window, which the
    /// connection gives back once it has written (or dropped) it.
    Reply {
        /// Channel (or link) of the consumer.
        channel: u32,
        /// The consumer; a reply for a consumer the channel no longer has is dropped.
        consumer: ConsumerId,
        /// The message.
        message: Arc<Message>,
    },
    /// The management API asks what the connection is doing (its channels or sessions): the
    /// connection answers from its own state, so nothing is kept up to date per message.
    Report(tokio::sync::oneshot::Sender<crate::connection_info::ConnectionReport>),
    /// Outcome of publishes that asked for confirmation.
    Confirms {
        /// Channel (or link) that published.
        channel: u32,
        /// Publish sequence numbers the queue accepted.
        accepted: Vec<u64>,
        /// Publish sequence numbers the queue refused.
        refused: Vec<u64>,
    },
}

/// A connection's inbox, as held by queues.
#[derive(Clone, Debug)]
pub struct SessionSink {
    /// Which connection.
    pub id: SessionId,
    tx: mpsc::UnboundedSender<SessionEvent>,
    /// Deliveries handed over but not yet written to the socket.
    pub outbound: Arc<Gate>,
}

impl SessionSink {
    /// Creates the inbox of a new connection; the receiver goes to the connection's task.
    /// `outbound_window` bounds deliveries in flight towards its socket.
    #[must_use]
    pub fn new(id: SessionId, outbound_window: u32) -> (Self, mpsc::UnboundedReceiver<SessionEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self { id, tx, outbound: Gate::new(outbound_window) }, rx)
    }

    /// Sends an event; a connection that has gone away is ignored (its owner cleanup requeues
    /// whatever was in flight).
    pub fn send(&self, event: SessionEvent) {
        let _ = self.tx.send(event);
    }

    /// Whether the connection has gone away (what is sent to it is dropped).
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}
