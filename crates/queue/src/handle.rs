//! A live queue as the rest of the broker sees it: its identity and declared properties, and
//! async methods that send [`QueueCmd`]s to its task.

use std::sync::Arc;

use charon_model::{DeathCause, Table};
use charon_store::segment_log::Placed;
use tokio::sync::{mpsc, oneshot};

use super::admission::Admission;
use super::browse::{BrowsePage, BrowseRequest};
use super::command::QueueCmd;
use super::consumer_timeout::TimeoutCell;
use super::requests::{
    ConfirmTo, ConsumeSpec, CreditGrant, Enqueue, GetOk, MovedFrom, QueueConfig, QueueStats, Settle, SettleSeqs,
};
use super::settings::QueueSettings;
use crate::dead_letter::counts::DeadLetterCounts;
use crate::error::{EngineError, Resource};
use crate::session::{ConsumerId, Owner, SessionId};

/// A shared reference to a live queue.
pub type QueueRef = Arc<QueueHandle>;

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
    /// At-least-once dead letters waiting in this queue for their targets, as of its last pass
    /// (the `charon_queue_dead_letters_pending` gauge).
    pub dead_letters_pending: std::sync::atomic::AtomicU64,
    /// When its oldest ready message arrived, ms since epoch (0: none), as of its last pass
    /// (the `charon_queue_oldest_message_age_seconds` gauge).
    pub oldest_ready_at: std::sync::atomic::AtomicI64,
    /// Depth and consumers as of its last pass (Prometheus' queue families).
    pub gauges: super::gauges::QueueGauges,
    /// Where the log wrote messages waiting to leave memory (or compaction moved paged ones);
    /// filled by the log's writer thread, taken by the task at its next pass.
    pub(crate) placements: parking_lot::Mutex<Vec<Placed>>,
    /// Closed while the queue holds its publishers back (Charon's dead-letter guarantee at
    /// its bound).
    pub admission: Admission,
    /// Its consumer timeout, for the connections that hold its unacknowledged deliveries.
    pub consumer_timeout: TimeoutCell,
    /// The node the queue lives on when this handle is a proxy for it on another node of the
    /// cluster (whose task sends each command there); `None` for a queue of this node.
    pub home: Option<String>,
    /// Set when this handle no longer stands for the queue (a replicated queue moved to
    /// another node): a proxy's requests under way give up rather than wait for a node that
    /// is cut off.
    pub retired: tokio::sync::watch::Sender<bool>,
    pub(super) tx: mpsc::Sender<QueueCmd>,
}

impl QueueHandle {
    /// A handle on the mailbox `tx`; the task is started separately.
    pub(crate) fn new(id: u64, config: QueueConfig, tx: mpsc::Sender<QueueCmd>) -> Self {
        Self {
            id,
            config,
            dead_lettered: DeadLetterCounts::default(),
            dead_letters_pending: std::sync::atomic::AtomicU64::new(0),
            oldest_ready_at: std::sync::atomic::AtomicI64::new(0),
            gauges: super::gauges::QueueGauges::default(),
            placements: parking_lot::Mutex::default(),
            admission: Admission::default(),
            consumer_timeout: TimeoutCell::default(),
            home: None,
            retired: tokio::sync::watch::Sender::new(false),
            tx,
        }
    }

    /// A handle for a queue that lives on node `home`: its commands arrive on the returned
    /// mailbox (of `capacity`), for a proxy task that sends them there. Routing, channels and
    /// the management API use it as any queue.
    #[must_use]
    pub fn proxy(id: u64, config: QueueConfig, home: String, capacity: usize) -> (QueueRef, mpsc::Receiver<QueueCmd>) {
        let (tx, rx) = mpsc::channel(capacity);
        (Arc::new(Self { home: Some(home), ..Self::new(id, config, tx) }), rx)
    }

    /// A classic, transient queue `name` in vhost `/` with an unstarted mailbox of `capacity`,
    /// for tests of what holds and addresses queues rather than of what queues do.
    #[cfg(any(test, feature = "test-support"))]
    #[doc(hidden)]
    pub fn with_mailbox(id: u64, name: &str, capacity: usize) -> (QueueRef, mpsc::Receiver<QueueCmd>) {
        let (tx, rx) = mpsc::channel(capacity);
        let config = QueueConfig {
            name: name.into(),
            vhost: "/".into(),
            durable: false,
            auto_delete: false,
            exclusive_owner: None,
            arguments: charon_model::Table::new(),
            queue_type: super::args::QueueType::Classic,
        };
        (Arc::new(Self::new(id, config, tx)), rx)
    }

    /// [`Self::with_mailbox`] whose mailbox goes nowhere.
    #[cfg(any(test, feature = "test-support"))]
    #[doc(hidden)]
    pub fn detached(id: u64, name: &str) -> QueueRef {
        Self::with_mailbox(id, name, 1).0
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

    /// Resolves once the queue's task has stopped: the queue was deleted (or the broker is
    /// stopping). A 1.0 session detaches the links that publish to it by name.
    pub async fn gone(&self) {
        self.tx.closed().await;
    }

    async fn send(&self, cmd: QueueCmd) -> Result<(), EngineError> {
        self.tx.send(cmd).await.map_err(|_| self.unanswered())
    }

    async fn call<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> QueueCmd) -> Result<T, EngineError> {
        let (reply, rx) = oneshot::channel();
        self.send(make(reply)).await?;
        rx.await.map_err(|_| self.unanswered())
    }

    /// A request the queue did not answer: it is gone, or (a proxy's) its node did not answer.
    fn unanswered(&self) -> EngineError {
        match &self.home {
            Some(node) => EngineError::HomeNodeDown { node: node.clone(), queue: self.resource() },
            None => EngineError::NotFound(self.resource()),
        }
    }

    /// Enqueues messages. Waits while the queue's mailbox is full, which is how a slow queue
    /// pushes back on its publishers, and while the queue holds them back ([`Admission`]).
    /// Returns false if the queue is gone.
    pub async fn publish(&self, items: Vec<Enqueue>, confirm_to: Option<ConfirmTo>) -> bool {
        self.admission.admitted().await;
        self.send(QueueCmd::Publish { items, confirm_to }).await.is_ok()
    }

    /// Enqueues messages without waiting for the queue to admit them: for a client connection,
    /// which does not wait inside its task (it would stop delivering to its own consumers) but
    /// checks [`Admission::is_closed`] first and holds its publishes, and its socket, while the
    /// queue holds its publishers; or which hands over what it holds as it goes away. Waits
    /// while the mailbox is full; false if the queue is gone.
    pub async fn publish_checked(&self, items: Vec<Enqueue>, confirm_to: Option<ConfirmTo>) -> bool {
        self.send(QueueCmd::Publish { items, confirm_to }).await.is_ok()
    }

    /// Enqueues messages as [`Self::publish`] does and answers, once the queue has taken them
    /// (before their confirms), the sequence number each one got, in order: `None` for one the
    /// queue did not keep (refused, or dead-lettered at once by its overflow mode). Zaqar's
    /// message ids are these numbers. Answers `None` when the queue is gone, including one
    /// that stops with the publish still in its mailbox: that publish is refused, not
    /// confirmed as [`Self::publish`]'s would be.
    pub async fn publish_numbered(&self, items: Vec<Enqueue>, confirm_to: ConfirmTo) -> Option<Vec<Option<u64>>> {
        self.admission.admitted().await;
        self.call(|numbers| QueueCmd::PublishNumbered { items, confirm_to, numbers }).await.ok()
    }

    /// Enqueues messages moved out of another queue (Zaqar's claim-count dead-letter queue),
    /// as [`Self::publish`] does, except that a persisted message's log record here also
    /// removes it from its source: after a crash it is in exactly one of the two queues, never
    /// in both, never in neither. The caller still acknowledges the source's deliveries once
    /// confirmed (the log ignores that second removal). A queue that is gone, or has no room
    /// for a message (any overflow mode), refuses it.
    pub async fn publish_moved(&self, items: Vec<Enqueue>, from: MovedFrom, confirm_to: ConfirmTo) -> bool {
        self.admission.admitted().await;
        self.send(QueueCmd::PublishMoved { items, from, confirm_to }).await.is_ok()
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
    pub async fn settle(&self, seqs: impl Into<SettleSeqs>, how: Settle) {
        let _ = self.send(QueueCmd::Settle { seqs: seqs.into(), how }).await;
    }

    /// Requeues delivered messages with AMQP 1.0's `modified` outcome, counting a failed
    /// delivery when `failed`. A quorum queue merges `annotations` into the stored messages, so
    /// they stay with them from then on; a classic queue ignores them (RabbitMQ 4.0.5).
    pub async fn settle_modified(&self, seqs: Vec<u64>, failed: bool, annotations: Table) {
        let _ = self.send(QueueCmd::SettleModified { seqs, failed, annotations }).await;
    }

    /// Settles delivered messages like [`Self::settle`], with what the consumer said about them
    /// (an AMQP 1.0 `rejected` error, the annotations of `modified{undeliverable-here}`): a
    /// discard records it with the death of each message it dead-letters. Only for what a
    /// consumer said; a settle without a cause goes through [`Self::settle`], at no cost.
    pub async fn settle_refused(&self, seqs: Vec<u64>, how: Settle, cause: Arc<DeathCause>) {
        let _ = self.send(QueueCmd::SettleRefused { seqs, how, cause }).await;
    }

    /// Takes one message (`basic.get`).
    ///
    /// # Errors
    /// NOT_FOUND when the queue is gone.
    pub async fn get(&self, owner: Owner, no_ack: bool) -> Result<Option<GetOk>, EngineError> {
        self.call(|reply| QueueCmd::Get { owner, no_ack, reply }).await
    }

    /// Returns once the queue has applied everything sent to it before and handed the log
    /// records that produced (see [`QueueCmd::Flush`]): true when none of its dead letters
    /// still waits to be handed to a target or for a target's confirm. Until then the log
    /// records that remove their messages are still to come (a stop that closed the log
    /// before them would find the messages back in this queue at the next start).
    ///
    /// # Errors
    /// NOT_FOUND when the queue is gone.
    pub async fn flush(&self) -> Result<bool, EngineError> {
        self.call(QueueCmd::Flush).await
    }

    /// Removes all ready messages, returning how many.
    ///
    /// # Errors
    /// NOT_FOUND when the queue is gone.
    pub async fn purge(&self) -> Result<u32, EngineError> {
        self.call(QueueCmd::Purge).await
    }

    /// A page of its messages without taking them (see [`super::browse`]): planned by the
    /// queue task, read from the disk off it.
    ///
    /// # Errors
    /// NOT_FOUND when the queue is gone.
    pub async fn browse(&self, request: BrowseRequest) -> Result<BrowsePage, EngineError> {
        let plan = self.call(|reply| QueueCmd::Browse { request, reply }).await?;
        tokio::task::spawn_blocking(move || plan.resolve())
            .await
            .map_err(|error| EngineError::Store(format!("browsing {} failed: {error}", self.resource())))
    }

    /// Removes the ready messages with sequence numbers `seqs` (as [`Self::browse`] names them)
    /// and returns those it removed, in order: a message delivered to a consumer, or gone
    /// already, is not. Each exit is recorded in the log like an acknowledgement's (not synced:
    /// after a crash a removed message may come back, never one that was not removed).
    ///
    /// # Errors
    /// NOT_FOUND when the queue is gone.
    pub async fn remove(&self, seqs: Vec<u64>) -> Result<Vec<u64>, EngineError> {
        let first = self.call(|reply| QueueCmd::Remove { seqs, reply }).await?;
        let mut removed = first.seqs;
        for (run, check) in first.checks {
            let id = check.id;
            let found = tokio::task::spawn_blocking(move || check.found())
                .await
                .map_err(|error| EngineError::Store(format!("removing from {} failed: {error}", self.resource())))?;
            if found.is_empty() {
                continue;
            }
            let more = self.call(|reply| QueueCmd::RemoveChecked { run, id, found, reply }).await?;
            removed.extend(more.seqs);
        }
        removed.sort_unstable();
        Ok(removed)
    }

    /// Current counters.
    ///
    /// # Errors
    /// NOT_FOUND when the queue is gone.
    pub async fn stats(&self) -> Result<QueueStats, EngineError> {
        self.call(QueueCmd::Stats).await
    }

    /// Its consumers, for the management API's `/api/consumers`.
    ///
    /// # Errors
    /// NOT_FOUND when the queue is gone.
    pub async fn consumers(&self) -> Result<Vec<super::requests::ConsumerReport>, EngineError> {
        self.call(QueueCmd::Consumers).await
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
        self.consumer_timeout.set(settings.consumer_timeout);
        let _ = self.send(QueueCmd::Settings(settings)).await;
    }

    /// A channel or link went away: its consumers are removed and its unsettled messages
    /// requeued.
    pub async fn owner_closed(&self, owner: Owner) {
        let _ = self.send(QueueCmd::OwnerClosed(owner)).await;
    }

    /// Asks the queue to stop; used by the vhost, which also removes it from the topology.
    pub async fn delete(&self, if_unused: bool, if_empty: bool) -> Result<u32, EngineError> {
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

    /// Tells a queue the exchange graph grew (see [`QueueCmd::TopologyChanged`]). Never blocks:
    /// a full mailbox means the queue runs a pass anyway, and its retry timer stays.
    pub fn topology_changed(&self) {
        let _ = self.tx.try_send(QueueCmd::TopologyChanged);
    }

    /// Nudges a queue waiting on a [`Gate`]. Never blocks: a full mailbox means the queue will
    /// run a dispatch pass anyway.
    pub(crate) fn resume(&self) {
        let _ = self.tx.try_send(QueueCmd::Resume);
    }

    /// Hands the queue places of its messages in the log (from the log's writer thread).
    pub fn placed(&self, placed: Vec<Placed>) {
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
