//! What callers hand a queue and what it answers: the values its [`super::QueueHandle`]
//! methods take and return. Plain data, so the state machine and the adapters share them
//! without depending on the handle or the task.

use std::sync::Arc;

use charon_model::{Message, Table};

use super::args::QueueType;
use crate::gate::Gate;
use crate::session::{ConsumerId, Delivery, Owner, SessionId, SessionSink};

/// Declared properties of a queue.
#[derive(Clone, Debug)]
pub struct QueueConfig {
    /// Name.
    pub name: String,
    /// Virtual host.
    pub vhost: String,
    /// Survives restarts: with a data directory the vhost commits it to the metadata store
    /// (the engine's `persist`) before answering, and restores it at start.
    pub durable: bool,
    /// Deleted when its last consumer goes (after having had one).
    pub auto_delete: bool,
    /// The connection that owns an exclusive queue.
    pub exclusive_owner: Option<SessionId>,
    /// Declare arguments (with `x-queue-type` filled in, as RabbitMQ stores them).
    pub arguments: Table,
    /// Type.
    pub queue_type: QueueType,
}

/// A publish as a queue receives it.
#[derive(Debug)]
pub struct Enqueue {
    /// The message, shared with every other queue it was routed to.
    pub message: Arc<Message>,
    /// The publisher's confirm sequence number, when it wants a confirmation.
    pub confirm: Option<u64>,
}

/// Where the messages of a [`crate::QueueHandle::publish_moved`] come from: the source queue's id
/// and each message's sequence number there, in the order of the publish's items.
#[derive(Debug)]
pub struct MovedFrom {
    /// The source queue's id ([`super::QueueHandle::id`]).
    pub queue: u64,
    /// Per item, the message's sequence number in the source.
    pub seqs: Vec<u64>,
}

/// A confirm number with this bit set is refused to its publisher when the queue is full, even
/// for a message with a death history (which a full queue otherwise passes on to the fallback
/// queue as a dead letter): redrive jobs number their copies so (bit 62; bit 63 marks the
/// queues' own at-least-once dead letters).
pub const REFUSED_TO_PUBLISHER_BIT: u64 = 1 << 62;

/// Where to send confirmations for a batch.
#[derive(Clone, Debug)]
pub struct ConfirmTo {
    /// Publisher's connection.
    pub session: SessionSink,
    /// Publisher's channel (or link).
    pub channel: u32,
}

/// A new consumer.
#[derive(Clone, Debug)]
pub struct ConsumeSpec {
    /// Broker-unique id.
    pub id: ConsumerId,
    /// The consumer tag the client knows it by (0.9.1), or the link handle (1.0, as RabbitMQ
    /// 4.0.5 tags it), for the management API.
    pub tag: String,
    /// The channel it belongs to.
    pub owner: Owner,
    /// Where deliveries go.
    pub session: SessionSink,
    /// Deliveries are settled on sending.
    pub no_ack: bool,
    /// Maximum unacknowledged deliveries for this consumer (0 = unlimited).
    pub prefetch: u32,
    /// AMQP 1.0 link credit: when set, the consumer receives only as many messages as it was
    /// granted (starting from no credit), and this is the link's initial delivery-count.
    pub link_credit: Option<u32>,
    /// Shared limit across the channel's consumers (0.9.1 `basic.qos global=true`).
    pub channel_limit: Option<Arc<Gate>>,
    /// Wants to be the only consumer.
    pub exclusive: bool,
    /// Consume arguments.
    pub arguments: Table,
}

/// The sequence numbers of one settlement: most are one message (an AMQP 1.0 client settles
/// each delivery alone), held inline so that handing it to the queue allocates nothing.
pub type SettleSeqs = smallvec::SmallVec<[u64; 2]>;

/// How to settle delivered messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settle {
    /// Done with them.
    Ack,
    /// Put them back where they were, marked redelivered.
    Requeue,
    /// Put them back, counting a failed delivery (AMQP 1.0 `modified{delivery-failed}`): a
    /// quorum queue's AMQP 1.0 delivery-count grows by one.
    RequeueFailed,
    /// Refused: removed, and dead-lettered as `rejected` where configured. Counts as a failed
    /// delivery (0.9.1 reject/nack requeue=false, AMQP 1.0 `rejected`): a quorum queue's dead
    /// letter carries the grown delivery-count (4.0.5's `discard` with delivery_failed=true).
    Discard,
    /// AMQP 1.0 `modified{undeliverable-here=true}` without delivery-failed: discarded like
    /// [`Settle::Discard`], but not counted as a failed delivery.
    DiscardUndeliverable,
}

/// Answer to `basic.get`.
#[derive(Debug)]
pub struct GetOk {
    /// The message.
    pub delivery: Delivery,
    /// Ready messages left behind it.
    pub remaining: u32,
}

/// One consumer of a queue, as the management API's `/api/consumers` reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct ConsumerReport {
    /// The consumer tag (0.9.1) or link handle (1.0).
    pub tag: String,
    /// Its channel (or link) and connection.
    pub owner: Owner,
    /// Deliveries wait for the client's settlement.
    pub ack_required: bool,
    /// Its prefetch (0: none).
    pub prefetch_count: u32,
    /// Asked to be the only consumer.
    pub exclusive: bool,
    /// Receives messages now (false: waiting to become a single active consumer).
    pub active: bool,
    /// RabbitMQ's `activity_status`: `up`, `single_active` or `waiting`.
    pub activity_status: &'static str,
    /// Its consume arguments.
    pub arguments: Table,
}

/// Queue counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueStats {
    /// Ready messages.
    pub ready: u32,
    /// Delivered, not yet settled.
    pub unacked: u32,
    /// Delayed: published with a "not before" time that has not come (Zaqar's `delay`). Not
    /// ready, but counted in `messages` and against the length limits.
    pub delayed: u32,
    /// Their body bytes.
    pub message_bytes_delayed: u64,
    /// Consumers.
    pub consumers: u32,
    /// At-least-once dead letters waiting for their targets (RabbitMQ's `messages_dlx`): not
    /// ready, but counted in `messages`.
    pub dead_letters_pending: u32,
    /// Their body bytes (RabbitMQ's `message_bytes_dlx`).
    pub dead_letters_pending_bytes: u64,
    /// A single-active-consumer queue's active consumer, by its tag (`None` for other queues
    /// and while nobody consumes).
    pub single_active_consumer_tag: Option<String>,
    /// Whether the queue has a single active consumer.
    pub single_active_consumer: bool,
    /// The tag of the consumer holding the queue exclusively, if one does.
    pub exclusive_consumer_tag: Option<String>,
    /// Body bytes of the ready messages.
    pub message_bytes_ready: u64,
    /// Body bytes of the delivered, unsettled messages.
    pub message_bytes_unacknowledged: u64,
    /// What the queue has done since it started (RabbitMQ's `message_stats` counts).
    pub counters: MessageCounters,
    /// RabbitMQ's `consumer_utilisation`: the share of time, averaged with a one-second
    /// half-life, that the consumers could take what was ready (0 to 1).
    pub consumer_utilisation: f64,
    /// An estimate of the bytes the queue holds in memory (RabbitMQ's `memory`).
    pub memory: u64,
}

/// A queue's running message counts, kept by its task in plain fields (nothing shared is
/// touched per message) and read with its stats; RabbitMQ's management names in brackets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessageCounters {
    /// Messages accepted into the queue (`publish`).
    pub published: u64,
    /// Messages handed to consumers or fetched by `basic.get` (`deliver_get`).
    pub delivered: u64,
    /// Of those, the ones handed out again after a requeue (`redeliver`).
    pub redelivered: u64,
    /// Deliveries acknowledged (`ack`).
    pub acked: u64,
}

/// A 1.0 receiver's flow for a consumer link, as the queue applies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreditGrant {
    /// The consumer.
    pub consumer: ConsumerId,
    /// The receiver's delivery-count (what it has seen), or the link's initial count.
    pub delivery_count: u32,
    /// Credit relative to that delivery-count.
    pub link_credit: u32,
    /// Use up the credit: send what is available, then advance the delivery-count.
    pub drain: bool,
    /// Report the resulting link state even without drain.
    pub echo: bool,
}
