//! Queues: one task per queue owns its messages and consumers; everything else talks to it
//! through a [`QueueHandle`].
//!
//! The task loop ([`task`]) is thin: it receives commands in batches, applies them to the
//! queue's [`state::QueueState`], runs one dispatch pass and sends the resulting events. The
//! state awaits nothing, so it is testable without a runtime, and one dispatch pass per batch
//! of commands turns many publishes into one delivery event per consumer. The state is made
//! of parts that each own one job, in their own files:
//!
//! - [`entry`]: one message in the queue, with its sequence number, counts and log place;
//! - [`ready`]: the ready messages — the head in memory, the rest with the pager ([`paging`]);
//! - [`consumers`]: consumers, their credit and their unsettled deliveries;
//! - [`limits`]: TTL, length limits, delivery limit and `x-expires`;
//! - [`effects`]: what a pass produces — session events, dead letters, and the [`journal`]
//!   of log records with the confirmations that wait for them;
//! - [`counts`]: how a quorum queue's delivery counts show on the messages it hands out.
//!
//! Every message carries a queue-local sequence number (the store's key); enqueue / settle /
//! requeue are the only ways messages move; every path on which a message leaves other than by
//! an acknowledgement goes through `QueueState::discard`, where dead lettering hooks in. Dead
//! letters on their way to their targets wait in the task's [`outbox`].

pub mod args;
mod consumers;
mod counts;
mod effects;
mod entry;
mod journal;
mod limits;
mod links;
mod outbox;
mod paging;
mod ready;
pub mod settings;
mod state;
mod task;

use std::sync::Arc;

use charon_model::{Message, Table};
use charon_store::segment_log::{Placed, RecoveredQueue};
use tokio::sync::{mpsc, oneshot};

use crate::dead_letter::counts::DeadLetterCounts;
use crate::error::{EngineError, Resource};
use crate::gate::Gate;
use crate::session::{ConsumerId, Delivery, Owner, SessionId, SessionSink};

pub use args::QueueType;
pub(crate) use links::{OnSelfDelete, QueueLinks};
pub use settings::{Overflow, QueueSettings};

/// A shared reference to a live queue.
pub type QueueRef = Arc<QueueHandle>;

/// Commands buffered per queue before publishers wait: bounds memory when a queue falls behind
/// while keeping batches flowing.
const MAILBOX_CAPACITY: usize = 256;

/// Declared properties of a queue.
#[derive(Clone, Debug)]
pub struct QueueConfig {
    /// Name.
    pub name: String,
    /// Virtual host.
    pub vhost: String,
    /// Survives restarts: with a data directory the vhost commits it to the metadata store
    /// (`crate::persist`) before answering, and restores it at start.
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

/// Queue counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Ready messages.
    pub ready: u32,
    /// Delivered, not yet settled.
    pub unacked: u32,
    /// Consumers.
    pub consumers: u32,
}

pub(crate) enum QueueCmd {
    Publish {
        items: Vec<Enqueue>,
        confirm_to: Option<ConfirmTo>,
    },
    Consume(Box<ConsumeSpec>, oneshot::Sender<Result<(), EngineError>>),
    Cancel(ConsumerId, oneshot::Sender<bool>),
    Settle {
        seqs: Vec<u64>,
        how: Settle,
    },
    SettleModified {
        seqs: Vec<u64>,
        failed: bool,
        annotations: Table,
    },
    Get {
        owner: Owner,
        no_ack: bool,
        reply: oneshot::Sender<Option<GetOk>>,
    },
    Purge(oneshot::Sender<u32>),
    Stats(oneshot::Sender<QueueStats>),
    /// Stats for a (re)declare, which also counts as use for `x-expires`.
    Declared(oneshot::Sender<QueueStats>),
    Settings(QueueSettings),
    OwnerClosed(Owner),
    Delete {
        if_unused: bool,
        if_empty: bool,
        reply: oneshot::Sender<Result<u32, EngineError>>,
    },
    Resume,
    Credit(CreditGrant),
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

/// A live queue as seen from outside its task.
#[derive(Debug)]
pub struct QueueHandle {
    /// Broker-unique id; distinguishes a queue from a later one with the same name.
    pub id: u64,
    /// Declared properties.
    pub config: QueueConfig,
    /// Messages this queue dead-lettered or dropped, by reason (per-queue metrics; they go
    /// away with the queue).
    pub dead_lettered: DeadLetterCounts,
    /// Where the log wrote messages waiting to leave memory (or compaction moved paged ones);
    /// filled by the log's writer thread, taken by the task at its next pass.
    pub(crate) placements: parking_lot::Mutex<Vec<Placed>>,
    tx: mpsc::Sender<QueueCmd>,
}

impl QueueHandle {
    /// A handle on the mailbox `tx`; the task is started separately.
    pub(crate) fn new(id: u64, config: QueueConfig, tx: mpsc::Sender<QueueCmd>) -> Self {
        Self { id, config, dead_lettered: DeadLetterCounts::default(), placements: parking_lot::Mutex::default(), tx }
    }

    /// Starts a queue task, with the messages recovered from the log for it, and returns its
    /// handle.
    pub(crate) fn spawn(
        id: u64,
        config: QueueConfig,
        settings: QueueSettings,
        links: QueueLinks,
        restored: RecoveredQueue,
    ) -> QueueRef {
        let (tx, rx) = mpsc::channel(MAILBOX_CAPACITY);
        let handle = Arc::new(Self::new(id, config, tx));
        task::spawn(Arc::clone(&handle), rx, settings, links, restored);
        handle
    }

    /// Queue name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The queue as an error-text resource.
    #[must_use]
    pub fn resource(&self) -> Resource {
        Resource::queue(&self.config.vhost, &self.config.name)
    }

    /// Whether `session` may use the queue (exclusive queues belong to one connection).
    ///
    /// # Errors
    /// RESOURCE_LOCKED when another connection owns it.
    pub fn check_access(&self, session: SessionId) -> Result<(), EngineError> {
        match self.config.exclusive_owner {
            Some(owner) if owner != session => Err(EngineError::ExclusiveLocked(self.resource())),
            _ => Ok(()),
        }
    }

    async fn send(&self, cmd: QueueCmd) -> Result<(), EngineError> {
        self.tx.send(cmd).await.map_err(|_| EngineError::NotFound(self.resource()))
    }

    async fn call<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> QueueCmd) -> Result<T, EngineError> {
        let (reply, rx) = oneshot::channel();
        self.send(make(reply)).await?;
        rx.await.map_err(|_| EngineError::NotFound(self.resource()))
    }

    /// Enqueues messages. Waits while the queue's mailbox is full, which is how a slow queue
    /// pushes back on its publishers. Returns false if the queue is gone.
    pub async fn publish(&self, items: Vec<Enqueue>, confirm_to: Option<ConfirmTo>) -> bool {
        self.send(QueueCmd::Publish { items, confirm_to }).await.is_ok()
    }

    /// Adds a consumer.
    ///
    /// # Errors
    /// ACCESS_REFUSED when exclusivity conflicts; NOT_FOUND when the queue is gone.
    pub async fn consume(&self, spec: ConsumeSpec) -> Result<(), EngineError> {
        self.call(|reply| QueueCmd::Consume(Box::new(spec), reply)).await?
    }

    /// Removes a consumer; its unacknowledged messages stay with their channel. Every delivery
    /// the queue made to it was sent before this returns. False if it did not exist.
    pub async fn cancel(&self, consumer: ConsumerId) -> bool {
        self.call(|reply| QueueCmd::Cancel(consumer, reply)).await.unwrap_or(false)
    }

    /// Settles delivered messages by sequence number.
    pub async fn settle(&self, seqs: Vec<u64>, how: Settle) {
        let _ = self.send(QueueCmd::Settle { seqs, how }).await;
    }

    /// Requeues delivered messages with AMQP 1.0's `modified` outcome, counting a failed
    /// delivery when `failed`. A quorum queue merges `annotations` into the stored messages, so
    /// they stay with them from then on; a classic queue ignores them (RabbitMQ 4.0.5).
    pub async fn settle_modified(&self, seqs: Vec<u64>, failed: bool, annotations: Table) {
        let _ = self.send(QueueCmd::SettleModified { seqs, failed, annotations }).await;
    }

    /// Takes one message (`basic.get`).
    ///
    /// # Errors
    /// NOT_FOUND when the queue is gone.
    pub async fn get(&self, owner: Owner, no_ack: bool) -> Result<Option<GetOk>, EngineError> {
        self.call(|reply| QueueCmd::Get { owner, no_ack, reply }).await
    }

    /// Removes all ready messages, returning how many.
    ///
    /// # Errors
    /// NOT_FOUND when the queue is gone.
    pub async fn purge(&self) -> Result<u32, EngineError> {
        self.call(QueueCmd::Purge).await
    }

    /// Current counters.
    ///
    /// # Errors
    /// NOT_FOUND when the queue is gone.
    pub async fn stats(&self) -> Result<QueueStats, EngineError> {
        self.call(QueueCmd::Stats).await
    }

    /// Counters for a declare: like [`Self::stats`], and the declare counts as use of the
    /// queue (it resets the `x-expires` timer, as in RabbitMQ).
    ///
    /// # Errors
    /// NOT_FOUND when the queue is gone.
    pub async fn declared(&self) -> Result<QueueStats, EngineError> {
        self.call(QueueCmd::Declared).await
    }

    /// Applies new effective settings (a policy was set or removed).
    pub async fn apply_settings(&self, settings: QueueSettings) {
        let _ = self.send(QueueCmd::Settings(settings)).await;
    }

    /// A channel or link went away: its consumers are removed and its unsettled messages
    /// requeued.
    pub async fn owner_closed(&self, owner: Owner) {
        let _ = self.send(QueueCmd::OwnerClosed(owner)).await;
    }

    /// Asks the queue to stop; used by the vhost, which also removes it from the topology.
    pub(crate) async fn delete(&self, if_unused: bool, if_empty: bool) -> Result<u32, EngineError> {
        match self.call(|reply| QueueCmd::Delete { if_unused, if_empty, reply }).await {
            Ok(result) => result,
            // Already gone: deleting it again is not an error, as in RabbitMQ.
            Err(EngineError::NotFound(_)) => Ok(0),
            Err(other) => Err(other),
        }
    }

    /// Applies a 1.0 receiver's credit to a consumer link.
    pub async fn credit(&self, grant: CreditGrant) {
        let _ = self.send(QueueCmd::Credit(grant)).await;
    }

    /// Nudges a queue waiting on a [`Gate`]. Never blocks: a full mailbox means the queue will
    /// run a dispatch pass anyway.
    pub(crate) fn resume(&self) {
        let _ = self.tx.try_send(QueueCmd::Resume);
    }

    /// Hands the queue places of its messages in the log (from the log's writer thread).
    pub(crate) fn placed(&self, placed: Vec<Placed>) {
        if placed.is_empty() {
            return;
        }
        self.placements.lock().extend(placed);
        self.resume();
    }
}

impl crate::gate::Waiter for QueueHandle {
    fn resume(&self) {
        QueueHandle::resume(self);
    }
}
