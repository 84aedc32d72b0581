//! A queue's state: the parts that own its messages, consumers, limits and the effects of a
//! pass, and the operations that move messages between them.
//!
//! No channel is awaited here, so the state is testable without a runtime. A long queue's head
//! is refilled from the message log by the [`Pager`](super::paging::Pager), off the queue
//! task, on the runtime's blocking pool (on the caller's thread only when there is no runtime,
//! as in tests of the state alone). While a read runs, the head stays empty: dispatch and
//! expiry simply wait for the read's completion to wake the queue, and the operations that
//! must answer with the message being read — a `basic.get`, a drop-head — say so
//! ([`ReadPending`], [`QueueState::owes_drops`]) so that the task waits before it goes on
//! with the next command. Everything meant for
//! the outside world — session events, dead letters, log records — is collected in
//! [`Effects`] for the task to send after each pass.
//!
//! The parts, each in its own file:
//! - [`Ready`]: the ready messages, the head in memory and the rest with the pager;
//! - [`Consumers`]: consumers, their credit and their unsettled deliveries;
//! - [`Limits`]: TTL, length limits, delivery limit and `x-expires`;
//! - [`Effects`]: events, dead letters, and the [`Journal`](super::journal::Journal) of log
//!   records with the confirmations waiting for them.

use std::sync::Arc;

use charon_model::{DeathCause, DeathReason, Message, Table};
use charon_store::codec::decode_message;
use charon_store::segment_log::{LogReader, Place, Placed, Record, RecoveredQueue};

use super::arrivals::Arrivals;
use super::browse::{BrowseRequest, Plan};
use super::consumers::Consumers;
use super::delayed::{Delayed, is_delayed};
use super::dlx_parked::Parked;
use super::dlx_pending::{DlxPending, Due, NUMBER_BIT as DLX_NUMBER_BIT};
use super::effects::{Discarded, Effects, Events, Held, RefusedDeadLetter};
use super::entry::Entry;
use super::flow::Flow;
use super::handle::QueueRef;
use super::journal::LETTER_LOG_KEY;
use super::journal::reason_of;
use super::limits::{Limits, Size, body_size};
use super::order::Order;
use super::paging::packed::{Packed, PagedEntry};
use super::paging::{Removed, Wake, packed_places, resident_messages};
use super::ready::Ready;
use super::requests::{
    ConfirmTo, ConsumeSpec, CreditGrant, Enqueue, GetOk, MessageCounters, MovedFrom, QueueStats, Settle,
};
use super::settings::QueueSettings;
use super::turns::SingleActive;
use super::unconfirmed::Removal;
use super::utilisation::Utilisation;
use crate::dead_letter::counts::{DeadLetterStrategy, count_confirmed, count_dead_letter};
use crate::error::EngineError;
use crate::session::{ConsumerId, Owner};

/// The next ready message is being read off the queue task: the operation answered nothing
/// and is to be asked again once the read is done ([`QueueState::read_signal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadPending;

/// One queue's state.
pub(crate) struct QueueState {
    handle: QueueRef,
    /// Quorum semantics: delivery counts, limits and returns differ.
    quorum: bool,
    /// The task's clock for this pass, ms since epoch.
    now: i64,
    /// The sequence number of the next message.
    next_seq: u64,
    /// Messages numbered below this were recovered after a crash: a classic queue delivers
    /// them redelivered, as RabbitMQ 4.0.5's do (see [`Self::enable_journal`]). 0 otherwise.
    recovered_before: u64,
    ready: Ready,
    /// Messages whose "not before" time has not come: out of the ready runs until then.
    delayed: Delayed,
    consumers: Consumers,
    limits: Limits,
    effects: Effects,
    /// At-least-once dead letters waiting for their targets.
    dlx: DlxPending,
    /// When stuck at-least-once dead letters are tried again, ms since epoch.
    dlx_retry_at: Option<i64>,
    /// Delayed messages a purge that waits for paged runs to be read back has removed so far.
    purged_delayed: usize,
    /// Reads the log (restore), once paging is on.
    reader: Option<LogReader>,
    /// When the ready messages arrived, roughly (the oldest one's age).
    arrivals: Arrivals,
    /// Running message counts for the management API.
    counters: MessageCounters,
    /// How well the consumers keep up (`consumer_utilisation`).
    utilisation: Utilisation,
    /// Whether the queue holds its publishers back for flow.
    flow: Flow,
}

/// How long at-least-once dead letters that could not be forwarded wait before they are tried
/// again without a topology or policy change (RabbitMQ's
/// `dead_letter_worker_publisher_confirm_timeout`, 180 s).
const DLX_RETRY_MS: i64 = 180_000;
/// The same under Charon's guarantee: a full target may have room again without any change
/// to the topology, and its publishers may be waiting for these letters to leave.
const GUARANTEE_RETRY_MS: i64 = 5_000;
/// How long a due message of a classic queue waits before it tries again to join the ready
/// messages in sequence order (see [`Ready::insert_due`]).
const DUE_RETRY_MS: i64 = 1_000;

impl QueueState {
    pub(crate) fn new(handle: QueueRef, settings: QueueSettings, now: i64) -> Self {
        let quorum = handle.config.queue_type == super::args::QueueType::Quorum;
        let order = Order::new(quorum, super::args::max_priority(&handle.config.arguments));
        let single_active = super::args::single_active_consumer(&handle.config.arguments).then_some(if quorum {
            SingleActive::HighestPriority
        } else {
            SingleActive::FirstRegistered
        });
        let effects = Effects::new(handle.id);
        Self {
            handle,
            quorum,
            now,
            next_seq: 1,
            recovered_before: 0,
            ready: Ready::new(order),
            delayed: Delayed::default(),
            consumers: Consumers::new(single_active, quorum),
            limits: Limits::new(settings, quorum, now),
            effects,
            dlx: DlxPending::default(),
            dlx_retry_at: None,
            purged_delayed: 0,
            reader: None,
            arrivals: Arrivals::default(),
            counters: MessageCounters::default(),
            utilisation: Utilisation::new(now),
            flow: Flow::default(),
        }
    }

    /// Turns paging on: the broker has a log that long queues can keep their messages in.
    pub(crate) fn enable_paging(&mut self, reader: LogReader) {
        self.reader = Some(reader.clone());
        self.dlx.enable_parking(reader.clone(), Wake::new(&self.handle));
        self.ready.enable_paging(reader, &self.handle);
    }

    /// Turns journalling on (the queue is durable and the broker has a store) and restores the
    /// messages the log recovered for it, in their order (paging must be on: they are read
    /// back from the log). Sequence numbers continue above anything an earlier run can have
    /// written (the log's accounting relies on a queue's sequence numbers growing): the larger
    /// of the last recovered one and the clock in ms × 2^20.
    pub(crate) fn enable_journal(&mut self, restored: RecoveredQueue) {
        self.effects.journal().enable();
        let clock_floor = u64::try_from(self.now).unwrap_or(0) << 20;
        let last = restored.last().map_or(0, |m| m.seq);
        // RabbitMQ 4.0.5's classic queues keep no delivery marks: after a crash every
        // recovered message may have been delivered, and goes out redelivered. A clean stop
        // wrote a mark for each message that came back from a consumer (see `requeue`).
        if restored.after_crash() && !self.quorum {
            self.recovered_before = last.saturating_add(1);
        }
        let restored = self.restore_waiting(restored);
        let restored = self.restore_delayed(restored);
        // Their arrival is not in the log: their age counts from the restart.
        if let Some(first) = restored.iter().next() {
            self.arrivals.arrived(first.seq, self.now);
        }
        self.ready.restore(restored, self.effects.journal(), self.handle.name());
        self.next_seq = clock_floor.max(last.saturating_add(1));
    }

    /// Messages that were waiting as at-least-once dead letters wait again (and are forwarded
    /// at once); if the queue left the strategy meanwhile they are deleted, as a switch deletes
    /// them. Returns the rest. Runs with the restore, off the runtime's workers.
    fn restore_waiting(&mut self, restored: RecoveredQueue) -> RecoveredQueue {
        if !restored.iter().any(|m| m.dead_lettered.is_some()) {
            return restored;
        }
        let (waiting, rest): (Vec<_>, Vec<_>) = restored.into_iter().partition(|m| m.dead_lettered.is_some());
        // A quorum queue that left RabbitMQ's strategy deletes them, as a switch does; a
        // classic queue only ever kept them under Charon's guarantee, which promised them.
        let keep = self.limits.settings().keeps_dead_letters() || !self.quorum;
        // They wait parked at their records and are read back for their first attempt;
        // without a log to park them in (never, in the broker) they are read back here.
        let mut unparked = Vec::new();
        for recovered in waiting {
            match recovered.dead_lettered.and_then(reason_of) {
                Some(reason) if keep => {
                    if !self.dlx.park_recovered(&recovered, reason) {
                        unparked.push((recovered, reason));
                    }
                    self.dlx_retry_at = Some(self.now);
                }
                _ => self.effects.journal().left(recovered.seq, true, false),
            }
        }
        let places: Vec<Place> = unparked.iter().map(|(m, _)| m.place).collect();
        let read = self.reader.as_ref().map(|reader| reader.read(&places)).unwrap_or_default();
        let mut read = read.into_iter();
        for (recovered, reason) in unparked {
            match read.next().and_then(Result::ok).and_then(|bytes| decode_message(bytes).ok()) {
                Some(message) => {
                    let mut entry = Entry::new(recovered.seq, Arc::new(message), recovered.expires_at, true);
                    (entry.returned, entry.failed) = (recovered.returned, recovered.failed);
                    self.dlx.hold(entry, reason);
                }
                None => self.effects.journal().left(recovered.seq, true, false),
            }
        }
        RecoveredQueue::from(rest)
    }

    /// Messages still delayed (their "not before" time, kept in their log records, has not
    /// come) are read back and wait in the delayed part again; returns the rest. A delayed
    /// message that cannot be read back is lost to the queue and leaves the log. Runs with the
    /// restore, off the runtime's workers.
    fn restore_delayed(&mut self, restored: RecoveredQueue) -> RecoveredQueue {
        let now = self.now;
        if !restored.iter().any(|m| Delayed::recovered_delayed(m, now)) {
            return restored;
        }
        let (delayed, rest): (Vec<_>, Vec<_>) = restored.into_iter().partition(|m| Delayed::recovered_delayed(m, now));
        let places: Vec<Place> = delayed.iter().map(|m| m.place).collect();
        let read = self.reader.as_ref().map(|reader| reader.read(&places)).unwrap_or_default();
        let mut read = read.into_iter();
        for recovered in delayed {
            match read.next().and_then(Result::ok).and_then(|bytes| decode_message(bytes).ok()) {
                Some(message) => {
                    let mut entry = Entry::new(recovered.seq, Arc::new(message), recovered.expires_at, true);
                    (entry.returned, entry.failed) = (recovered.returned, recovered.failed);
                    self.delayed.push(entry);
                }
                None => {
                    tracing::error!(
                        queue = self.handle.name(),
                        seq = recovered.seq,
                        "a delayed message could not be read back"
                    );
                    self.effects.journal().left(recovered.seq, true, false);
                }
            }
        }
        RecoveredQueue::from(rest)
    }

    /// The clock for this pass.
    pub(crate) fn set_now(&mut self, now: i64) {
        self.now = now;
    }

    /// This pass's time (ms since the epoch), as [`Self::set_now`] gave it.
    pub(crate) fn now(&self) -> i64 {
        self.now
    }

    /// The effective settings.
    pub(crate) fn settings(&self) -> &QueueSettings {
        self.limits.settings()
    }

    pub(crate) fn publish(&mut self, items: Vec<Enqueue>, confirm_to: Option<ConfirmTo>) {
        self.admit(items, confirm_to, None, None);
    }

    /// Publishes as [`Self::publish`] does and returns the sequence number each message got,
    /// in order, `None` where it was not kept here.
    pub(crate) fn publish_numbered(&mut self, items: Vec<Enqueue>, confirm_to: ConfirmTo) -> Vec<Option<u64>> {
        let mut numbers = Vec::with_capacity(items.len());
        self.admit(items, Some(confirm_to), None, Some(&mut numbers));
        numbers
    }

    /// Publishes messages moved out of queue `from.queue`: each persisted one's enqueue record
    /// also removes it there (see `Record::Enqueue::replaces`). One this queue has no room
    /// for is refused, neither dead-lettered nor passed on, so that it stays in its source.
    pub(crate) fn publish_moved(&mut self, items: Vec<Enqueue>, from: &MovedFrom, confirm_to: ConfirmTo) {
        self.admit(items, Some(confirm_to), Some(from), None);
    }

    /// Takes `items` in, pushing the sequence number each got (or `None`) to `numbers`.
    fn admit(
        &mut self,
        items: Vec<Enqueue>,
        confirm_to: Option<ConfirmTo>,
        from: Option<&MovedFrom>,
        mut numbers: Option<&mut Vec<Option<u64>>>,
    ) {
        let mut accepted = Vec::new();
        let mut refused = Vec::new();
        let before = self.effects.journal_ref().mark();
        let mut published = 0;
        for (index, item) in items.into_iter().enumerate() {
            let number = 'item: {
                let replaces = from.and_then(|from| Some((from.queue, *from.seqs.get(index)?)));
                let delayed = is_delayed(item.message.broker.not_before, self.now);
                if delayed && self.delayed.full(body_size(&item.message)) {
                    // The delayed part is bounded (see `delayed.rs`): the publisher hears of it.
                    refused.extend(item.confirm);
                    break 'item None;
                }
                if self.limits.refuses(&item.message, self.queued_size()) {
                    if from.is_some() {
                        // A move this queue cannot take stays in its source, whole.
                        refused.extend(item.confirm);
                    } else if self.limits.dead_letters_refused() {
                        refused.extend(item.confirm);
                        self.effects.discard(item.message, DeathReason::Maxlen, None);
                    } else if passed_on_when_refused(&item) {
                        let confirm = confirm_to.as_ref().zip(item.confirm).map(|(to, n)| (to.clone(), n));
                        self.effects.refused_dead_letter(item.message, confirm);
                    } else {
                        refused.extend(item.confirm);
                    }
                    break 'item None;
                }
                let seq = self.next_seq;
                self.next_seq += 1;
                self.arrivals.arrived(seq, self.now);
                let expires_at = self.limits.expiry_of(&item.message, self.now);
                let persisted = self.effects.journal_ref().persists(&item.message, self.quorum);
                let entry = Entry::new(seq, item.message, expires_at, persisted);
                if persisted {
                    self.effects.journal().enqueue(&entry, replaces);
                }
                if delayed {
                    self.delayed.push(entry);
                } else {
                    let resident = resident_messages(self.consumers.is_empty(), expires_at, self.now);
                    self.ready.push(entry, resident, self.effects.journal());
                }
                accepted.extend(item.confirm);
                published += 1;
                self.enforce_limits();
                Some(seq)
            };
            if let Some(numbers) = numbers.as_deref_mut() {
                numbers.push(number);
            }
        }
        self.counters.published += published;
        if let Some(to) = confirm_to {
            // Held back until the log has synced this pass when anything was written.
            self.effects.confirm(to, accepted, refused, before);
        }
    }

    pub(crate) fn consume(&mut self, spec: ConsumeSpec) -> Result<(), EngineError> {
        let priority = super::args::consumer_priority(&spec.arguments).map_err(|reason| {
            EngineError::Precondition(format!("invalid arg 'x-priority' for {}: {reason}", self.handle.resource()))
        })?;
        if !self.consumers.add(spec, priority) {
            return Err(EngineError::ExclusiveConsumeUnavailable(self.handle.resource()));
        }
        self.limits.used(self.now);
        Ok(())
    }

    /// Removes a consumer. Its unacknowledged messages stay with its channel.
    pub(crate) fn cancel(&mut self, consumer: ConsumerId) -> bool {
        self.consumers.cancel(consumer)
    }

    /// Whether an auto-delete queue has lost its last consumer.
    pub(crate) fn should_auto_delete(&self) -> bool {
        self.handle.config.auto_delete && self.consumers.had_consumer() && self.consumers.is_empty()
    }

    pub(crate) fn settle(&mut self, seqs: &[u64], how: Settle) {
        let mut requeue = Vec::new();
        let failed = matches!(how, Settle::RequeueFailed);
        let mut acked = 0;
        for &seq in seqs {
            let Some(mut entry) = self.consumers.settle(seq) else {
                continue;
            };
            match how {
                Settle::Ack => {
                    acked += 1;
                    self.effects.journal().removed(&entry);
                }
                Settle::Requeue | Settle::RequeueFailed => requeue.push(entry),
                Settle::Discard => {
                    entry.failed = entry.failed.saturating_add(1);
                    self.discard(entry, DeathReason::Rejected);
                }
                Settle::DiscardUndeliverable => self.discard(entry, DeathReason::Rejected),
            }
        }
        self.counters.acked += acked;
        self.requeue(requeue, failed);
    }

    /// Requeues with AMQP 1.0's `modified` outcome; a quorum queue first merges the
    /// annotations into each message.
    pub(crate) fn settle_modified(&mut self, seqs: &[u64], failed: bool, annotations: &Table) {
        self.merge_annotations(seqs, annotations);
        self.settle(seqs, if failed { Settle::RequeueFailed } else { Settle::Requeue });
    }

    /// Settles with what the refusing consumer said (`cause`): a discard hands each message to
    /// dead lettering carrying it (`BrokerAnnotations::refusal`, the message copied when it is
    /// shared), which records it with the death. A quorum queue first merges the annotations
    /// of a `modified{undeliverable-here}` into the message, as RabbitMQ's does, so its dead
    /// letter carries them. Other settles ignore the cause.
    pub(crate) fn settle_refused(&mut self, seqs: &[u64], how: Settle, cause: &Arc<DeathCause>) {
        if matches!(how, Settle::Discard | Settle::DiscardUndeliverable) {
            if let Some(annotations) = cause.annotations() {
                self.merge_annotations(seqs, annotations);
            }
            for &seq in seqs {
                if let Some(entry) = self.consumers.unsettled_mut(seq) {
                    Arc::make_mut(&mut entry.message).broker.refusal = Some(Arc::clone(cause));
                }
            }
        }
        self.settle(seqs, how);
    }

    /// A consumer's `modified` annotations into its unsettled messages `seqs` (quorum queues
    /// only: RabbitMQ's classic queues ignore them).
    fn merge_annotations(&mut self, seqs: &[u64], annotations: &Table) {
        if !self.quorum || annotations.is_empty() {
            return;
        }
        for &seq in seqs {
            if let Some(entry) = self.consumers.unsettled_mut(seq) {
                let message = Arc::make_mut(&mut entry.message);
                for (key, value) in annotations.iter() {
                    message.annotations.insert(key, value.clone());
                }
            }
        }
    }

    /// The one exit for messages that leave unacknowledged: dead lettering hooks in here. The
    /// message's log record is removed by the task once its dead letter is safe
    /// ([`Self::remove_from_log`]).
    fn discard(&mut self, mut entry: Entry, reason: DeathReason) {
        let removal = Removal { seq: entry.seq, persisted: entry.persisted, spilled: entry.spilled };
        let message =
            if self.quorum { super::counts::as_discarded(entry.message, entry.failed) } else { entry.message };
        if self.limits.settings().keeps_dead_letters() {
            let (queue_type, counts) = (self.handle.config.queue_type, &self.handle.dead_lettered);
            count_dead_letter(queue_type, DeadLetterStrategy::AtLeastOnce, reason, counts);
            self.effects.held(Arc::clone(&message), reason);
            entry.message = message;
            self.effects.journal().dead_lettered(&entry, reason);
            self.dlx.hold(entry, reason);
            return;
        }
        self.effects.discard(message, reason, Some(removal));
    }

    /// Removes the log record of a message that left the queue (see [`Self::discard`]).
    pub(crate) fn remove_from_log(&mut self, removal: Removal) {
        self.effects.journal().left(removal.seq, removal.persisted, removal.spilled);
    }

    /// Puts messages back at their original positions, marked redelivered, `failed` saying
    /// whether the return counts as a failed delivery. A quorum queue dead-letters a message
    /// returned more often than its delivery limit (4.0.5 counts every return) instead of
    /// requeueing it.
    fn requeue(&mut self, mut entries: Vec<Entry>, failed: bool) {
        entries.sort_by_key(|e| e.seq);
        for mut entry in entries {
            entry.returned(failed);
            if self.limits.past_delivery_limit(entry.returned) {
                self.discard(entry, DeathReason::DeliveryLimit);
                continue;
            }
            // Its mark (with a quorum queue's counts) is what a restart after a clean stop
            // knows of its having been delivered.
            self.effects.journal().delivered(&entry);
            self.ready.insert(entry);
        }
    }

    /// `basic.get`: the next ready message, or `None` when there is none. Fails with
    /// [`ReadPending`], having answered nothing, when the next message is being read off the
    /// task: the answer is only known once it is (a get must not come back empty while
    /// messages are ready). Messages that expired at the head on the way are dead-lettered
    /// either way, as they would be by the next pass.
    pub(crate) fn try_get(&mut self, owner: Owner, no_ack: bool) -> Result<Option<GetOk>, ReadPending> {
        self.limits.used(self.now);
        self.release_due();
        self.expire_head(false);
        if self.head_expired() {
            // Its dead-lettering waits for room (see `set_expiry_room`); it is not handed out.
            return Ok(None);
        }
        let Some(mut entry) = self.ready.pop(self.now, self.effects.journal()) else {
            return if self.ready.awaiting_read() { Err(ReadPending) } else { Ok(None) };
        };
        self.mark_recovered(&mut entry);
        let delivery = entry.delivery(self.quorum);
        self.counters.delivered += 1;
        self.counters.redelivered += u64::from(delivery.redelivered);
        if no_ack {
            self.effects.journal().removed(&entry);
        } else {
            if self.quorum {
                self.effects.journal().delivered(&entry);
            }
            self.consumers.got(entry, owner);
        }
        let remaining = u32::try_from(self.ready.len()).unwrap_or(u32::MAX);
        Ok(Some(GetOk { delivery, remaining }))
    }

    /// [`Self::try_get`], waiting for a read in flight as the task does.
    #[cfg(test)]
    pub(crate) fn get(&mut self, owner: Owner, no_ack: bool) -> Option<GetOk> {
        for _ in 0..10_000 {
            match self.try_get(owner, no_ack) {
                Ok(got) => return got,
                Err(ReadPending) => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
        panic!("the read never completed");
    }

    /// Removes every ready message; returns how many there were. A purge that reaches paged
    /// entries still being read back off the task answers [`ReadPending`]: what it removed so
    /// far is counted, and asking again once the read is done goes on where it stopped.
    pub(crate) fn try_purge(&mut self) -> Result<u32, ReadPending> {
        let delayed = self.delayed.take_all(self.effects.journal());
        self.purged_delayed += delayed;
        let count = self.ready.take_all(self.effects.journal()).ok_or(ReadPending)?;
        let count = count + std::mem::take(&mut self.purged_delayed);
        Ok(u32::try_from(count).unwrap_or(u32::MAX))
    }

    /// [`Self::try_purge`], waiting for the reads as the task does.
    #[cfg(test)]
    pub(crate) fn purge(&mut self) -> u32 {
        for _ in 0..10_000 {
            match self.try_purge() {
                Ok(count) => return count,
                Err(ReadPending) => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
        panic!("the read never completed");
    }

    /// Plans a page of the queue's messages (ready ones, and unsettled ones when asked), to be
    /// resolved off the task ([`Plan::resolve`]).
    pub(crate) fn browse(&self, request: BrowseRequest) -> Plan {
        let mut plan = Plan::new(request, self.reader.clone(), self.recovered_before);
        self.ready.browse(&mut plan);
        if request.include_unacked {
            plan.run(|collector| self.consumers.browse(collector));
        }
        if request.include_delayed {
            plan.run(|collector| self.delayed.browse(collector));
        }
        plan
    }

    /// Removes the ready messages with sequence numbers `seqs` that are at hand; the index
    /// chunks that may hold others come back as checks to read off the task and hand to
    /// [`Self::remove_checked`]. Messages delivered to a consumer stay (they are its to settle).
    pub(crate) fn remove(&mut self, seqs: &[u64]) -> Removed {
        let mut removed = Removed::default();
        self.ready.remove(seqs, self.effects.journal(), &mut removed);
        self.delayed.remove(seqs, self.effects.journal(), &mut removed);
        removed
    }

    /// Removes what a check of chunk `id` of run `run` found in its index file.
    pub(crate) fn remove_checked(&mut self, run: usize, id: u64, found: Vec<PagedEntry>) -> Removed {
        let mut removed = Removed::default();
        self.ready.remove_checked(run, id, found, self.effects.journal(), &mut removed);
        removed
    }

    /// When the oldest ready message arrived (ms since epoch, to within a second), if any.
    pub(crate) fn oldest_ready_at(&mut self) -> Option<i64> {
        self.arrivals.oldest(self.ready.head_seq(), self.ready.len() > 0)
    }

    pub(crate) fn consumer_reports(&self) -> Vec<super::requests::ConsumerReport> {
        self.consumers.report()
    }

    /// The figures the queue's gauges publish after each pass (no allocation).
    pub(crate) fn gauges(&self) -> super::gauges::GaugeValues {
        let ready = self.ready.size();
        super::gauges::GaugeValues {
            ready: ready.count,
            unacked: u64::try_from(self.consumers.unacked_len()).unwrap_or(u64::MAX),
            ready_bytes: ready.bytes,
            unacked_bytes: self.consumers.unacked_bytes(),
            delayed: self.delayed.size().count,
            delayed_bytes: self.delayed.size().bytes,
            consumers: u64::try_from(self.consumers.len()).unwrap_or(u64::MAX),
        }
    }

    /// The dead letters waiting for their targets (every pass publishes it: cheaper than
    /// [`Self::stats`]).
    pub(crate) fn dead_letters_pending(&self) -> u64 {
        self.dlx.size().count
    }

    pub(crate) fn stats(&self) -> QueueStats {
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        QueueStats {
            ready: count(self.ready.len()),
            unacked: count(self.consumers.unacked_len()),
            delayed: count(self.delayed.len()),
            message_bytes_delayed: self.delayed.size().bytes,
            consumers: count(self.consumers.len()),
            dead_letters_pending: u32::try_from(self.dlx.size().count).unwrap_or(u32::MAX),
            dead_letters_pending_bytes: self.dlx.size().bytes,
            single_active_consumer_tag: self.consumers.active_tag().map(str::to_owned),
            single_active_consumer: self.consumers.single_active(),
            exclusive_consumer_tag: self.consumers.exclusive_tag().map(str::to_owned),
            message_bytes_ready: self.ready.size().bytes,
            message_bytes_unacknowledged: self.consumers.unacked_bytes(),
            counters: self.counters,
            consumer_utilisation: self.consumer_utilisation(),
            memory: self.memory_estimate(),
        }
    }

    /// An estimate of the bytes the queue holds in memory (RabbitMQ's `memory` is its Erlang
    /// process's; Charon's queue has none): each message held whole — ready in a run's head,
    /// delivered and unsettled, or a dead letter waiting for its targets — costs its body and
    /// its structs, each paged ready message its 32-byte place in the log.
    fn memory_estimate(&self) -> u64 {
        const WHOLE: u64 = (std::mem::size_of::<Entry>() + std::mem::size_of::<Message>()) as u64;
        const PAGED: u64 = std::mem::size_of::<Packed>() as u64;
        let resident = self.ready.resident();
        let paged = self.ready.size().count.saturating_sub(resident.count);
        const PARKED: u64 = std::mem::size_of::<Parked>() as u64;
        let unacked = u64::try_from(self.consumers.unacked_len()).unwrap_or(u64::MAX);
        let (waiting, parked) = self.dlx.resident();
        let delayed = self.delayed.resident();
        (resident.count + unacked + waiting.count + delayed.count) * WHOLE
            + resident.bytes
            + delayed.bytes
            + self.consumers.unacked_bytes()
            + waiting.bytes
            + paged * PAGED
            + parked * PARKED
    }

    /// After a pass: the consumers kept up unless messages are left ready (every consumer at
    /// its limit, or none).
    pub(crate) fn note_utilisation(&mut self) {
        self.utilisation.note(self.ready.len() == 0, self.now);
    }

    /// RabbitMQ 4.0.5's `consumer_utilisation`: 0 without consumers; a quorum queue reports 1
    /// whenever it has consumers (observed, blocked or not); a classic queue its average.
    fn consumer_utilisation(&self) -> f64 {
        if self.consumers.is_empty() {
            0.0
        } else if self.quorum {
            1.0
        } else {
            self.utilisation.at(self.now).clamp(0.0, 1.0)
        }
    }

    /// A channel went away: drop its consumers and requeue everything it had not settled,
    /// including deliveries that were still on their way to it. Like a quorum queue's consumer
    /// going down, this counts as a failed delivery.
    pub(crate) fn owner_closed(&mut self, owner: Owner) {
        let entries = self.consumers.owner_closed(owner);
        self.requeue(entries, true);
    }

    /// Checks `if-unused` / `if-empty` (delayed messages make a queue not empty); on success
    /// returns the count the delete reports: the ready messages and the delayed ones, which go
    /// with it.
    pub(crate) fn check_delete(&self, if_unused: bool, if_empty: bool) -> Result<u32, EngineError> {
        if if_unused && !self.consumers.is_empty() {
            return Err(EngineError::InUse(self.handle.resource()));
        }
        if if_empty && self.ready.len() + self.delayed.len() > 0 {
            return Err(EngineError::NotEmpty(self.handle.resource()));
        }
        let stats = self.stats();
        Ok(stats.ready.saturating_add(stats.delayed))
    }

    /// The queue is going away: tell every consumer.
    pub(crate) fn cancel_all_consumers(&mut self) {
        self.consumers.cancel_all(&mut self.effects);
    }

    /// Hands ready messages to consumers that can take them, round-robin, one message at a
    /// time, and batches each consumer's deliveries into one event.
    pub(crate) fn dispatch(&mut self) {
        let (mut delivered, mut redelivered) = (0, 0);
        while self.ready.len() > 0 {
            let Some(index) = self.consumers.reserve_next(&self.handle, self.ready.len()) else {
                break;
            };
            let entry = if self.head_expired() { None } else { self.ready.pop(self.now, self.effects.journal()) };
            let Some(mut entry) = entry else {
                // Expired (its dead-lettering waits for room), or the next page is being read
                // (its completion wakes the queue), or reading it failed; the queue tries
                // again later.
                self.consumers.unreserve(index);
                break;
            };
            self.mark_recovered(&mut entry);
            delivered += 1;
            redelivered += u64::from(entry.redelivered);
            self.consumers.hand_out(index, entry, self.quorum, self.effects.journal());
        }
        self.counters.delivered += delivered;
        self.counters.redelivered += redelivered;
        self.consumers.flush(&mut self.effects);
    }

    /// A message recovered after a crash goes out redelivered (see `recovered_before`).
    fn mark_recovered(&self, entry: &mut Entry) {
        entry.redelivered |= entry.seq < self.recovered_before;
    }

    /// Applies a receiver's flow to a credit-based consumer. A drain runs after dispatch, so
    /// a waiting message is delivered before the credit is used up.
    pub(crate) fn credit(&mut self, grant: CreditGrant) {
        let Some(index) = self.consumers.grant(&grant) else {
            return;
        };
        self.dispatch();
        let available = u32::try_from(self.ready.len()).unwrap_or(u32::MAX);
        self.consumers.settle_grant(index, &grant, available, &mut self.effects);
    }

    /// After an enqueue or a settings change: `drop-head` drops (and dead-letters) the oldest
    /// messages while over the limit; quorum `reject-publish` starts refusing. A drop that
    /// needs a message being read off the task waits for it: the queue then owes drops (see
    /// [`Self::owes_drops`]) and the task makes them before anything else.
    fn enforce_limits(&mut self) {
        while self.limits.drops_head(self.queued_size()) {
            // The next ready message goes first; delayed ones (oldest first) once none is ready.
            let entry = match self.ready.pop(self.now, self.effects.journal()) {
                Some(entry) => Some(entry),
                None if self.ready.len() == 0 => self.delayed.pop_oldest(),
                None => None,
            };
            let Some(entry) = entry else {
                break;
            };
            self.discard(entry, DeathReason::Maxlen);
        }
        self.limits.enforced(self.queued_size() + self.counted_dead_letters());
    }

    /// The messages the length limits count: the ready ones and the delayed ones.
    fn queued_size(&self) -> Size {
        self.ready.size() + self.delayed.size()
    }

    /// Moves the delayed messages that are due to the ready runs, in due order (see
    /// [`Ready::insert_due`]); those whose TTL ran out while they were delayed expire instead.
    /// Only the delayed part's earliest wake-up is looked at: nothing else is scanned.
    pub(crate) fn release_due(&mut self) {
        let now = self.now;
        let mut blocked = Vec::new();
        while let Some(entry) = self.delayed.pop_woken(now) {
            if entry.expires_at.is_some_and(|deadline| deadline <= now) {
                self.discard(entry, DeathReason::Expired);
                self.limits.expired_one();
                continue;
            }
            let resident = resident_messages(self.consumers.is_empty(), entry.expires_at, now);
            if let Err(entry) = self.ready.insert_due(entry, resident, self.effects.journal()) {
                blocked.push(entry);
            }
        }
        for entry in blocked {
            // A classic queue's paged messages come before it: tried again shortly.
            self.delayed.push_until(entry, now.saturating_add(DUE_RETRY_MS));
        }
    }

    /// Whether `drop-head` has messages left to drop that are being read off the task. Limits
    /// hold when a command's answer goes out (a publisher's confirmation comes after the dead
    /// letters of what its publish dropped), so the task holds the pass — its events, its
    /// dead letters, the next commands — until the drops are made ([`Self::make_owed_drops`]).
    /// Dropping later rather than after each message of a publish drops the same messages:
    /// whatever is over the limit is the oldest, and stays so as more arrive.
    pub(crate) fn owes_drops(&self) -> bool {
        self.limits.drops_head(self.queued_size()) && self.ready.awaiting_read()
    }

    /// Makes the drops the queue owes, as far as the reads allow; returns whether it still owes
    /// some.
    pub(crate) fn make_owed_drops(&mut self) -> bool {
        if self.limits.drops_head(self.queued_size()) {
            self.enforce_limits();
        }
        self.owes_drops()
    }

    /// Signalled whenever a read made off the queue task is done (the task waits on it while
    /// a get or drops wait for a read); `None` when the queue does not page.
    pub(crate) fn read_signal(&self) -> Option<Arc<tokio::sync::Notify>> {
        self.ready.read_signal()
    }

    /// Ends a quorum queue's refusal once it is back under 80 % of its limit.
    pub(crate) fn refresh_refusing(&mut self) {
        self.limits.refresh_refusing(self.queued_size() + self.counted_dead_letters());
    }

    /// The waiting dead letters the length limits count: RabbitMQ's at-least-once letters are
    /// in `messages` and count; Charon's guarantee bounds its own separately
    /// ([`Self::holds_for_guarantee`]).
    fn counted_dead_letters(&self) -> Size {
        if self.limits.settings().at_least_once { self.dlx.size() } else { Size::default() }
    }

    /// Whether the queue holds what is published to it for flow ([`Flow`], decided by
    /// [`Self::refresh_flow`]).
    pub(crate) fn held_for_flow(&self) -> bool {
        self.flow.held()
    }

    /// Whether a queue under Charon's guarantee has as many dead letters waiting as its bound
    /// allows: its publishers are held back until some are confirmed.
    pub(crate) fn holds_for_guarantee(&self) -> bool {
        let settings = self.limits.settings();
        let waiting = self.dlx.size();
        settings.guaranteed
            && (waiting.count >= settings.pending_max.messages || waiting.bytes >= settings.pending_max.bytes)
    }

    /// Decides, after a pass's dispatch, whether the queue holds its publishers for flow.
    pub(crate) fn refresh_flow(&mut self) {
        self.flow.update(self.ready.len(), self.consumers.hungry());
    }

    /// Dead-letters expired messages at the head. `inclusive` also expires messages whose
    /// deadline is exactly now: a message with TTL 0 survives until the dispatch pass after its
    /// publish (a consumer that can take it at once gets it) and expires right after.
    ///
    /// At most [`QueueState::set_expiry_room`] messages per pass: the rest wait, past their
    /// deadline but never delivered (see [`QueueState::head_expired`]), until the dead letters
    /// already made have room in their targets.
    ///
    /// Messages of a page being read expire once it is read (its completion wakes the queue).
    pub(crate) fn expire(&mut self, inclusive: bool) {
        self.expire_head(inclusive);
    }

    fn expire_head(&mut self, inclusive: bool) {
        let now = self.now;
        // Also when expiry has no room: the deadline the queue sleeps until needs them.
        self.ready.collect_reads(now, self.effects.journal());
        while self.limits.has_expiry_room()
            && let Some(deadline) = self.ready.head(now, self.effects.journal()).and_then(|e| e.expires_at)
        {
            let expired = if inclusive { deadline <= now } else { deadline < now };
            if !expired {
                break;
            }
            if let Some(entry) = self.ready.pop(now, self.effects.journal()) {
                self.discard(entry, DeathReason::Expired);
                self.limits.expired_one();
            }
        }
    }

    /// Bounds what expiry dead-letters until the next pass (see [`Limits::set_expiry_room`]).
    pub(crate) fn set_expiry_room(&mut self, room: usize) {
        self.limits.set_expiry_room(room);
    }

    /// Whether the next ready message's TTL has run out (its expiry waits for room): it must
    /// not be delivered.
    pub(crate) fn head_expired(&mut self) -> bool {
        let now = self.now;
        self.ready.head(now, self.effects.journal()).and_then(|e| e.expires_at).is_some_and(|deadline| deadline < now)
    }

    /// The next moment the queue must act without a command: the head's expiry (unless
    /// expiry has no room: the outbox's room wakes the queue then), or the deadline of
    /// `x-expires` when the queue is unused.
    pub(crate) fn next_deadline(&self) -> Option<i64> {
        let head = if self.limits.has_expiry_room() { self.ready.head_deadline() } else { None };
        let unused = self.limits.unused_deadline(self.consumers.is_empty());
        [head, unused, self.dlx_retry_at, self.delayed.next_wake()].into_iter().flatten().min()
    }

    /// Whether `x-expires` has run out: the queue is deleted, its messages are not
    /// dead-lettered.
    pub(crate) fn has_expired(&self) -> bool {
        self.limits.unused_deadline(self.consumers.is_empty()).is_some_and(|deadline| deadline <= self.now)
    }

    /// A declare (also a passive one) counts as use of a classic queue, not of a quorum queue.
    pub(crate) fn touch(&mut self) {
        self.limits.declared(self.now);
    }

    /// Applies new settings (a policy changed): a lowered limit drops the head at once.
    /// Leaving RabbitMQ's at-least-once dead lettering deletes the dead letters still waiting,
    /// as RabbitMQ 4.0.5 does (`rabbit_fifo_dlx:switch_from`); letters kept under Charon's
    /// guarantee stay until delivered, whatever the new settings (they were promised). Letters
    /// that stay are tried again at once.
    pub(crate) fn apply_settings(&mut self, settings: QueueSettings) {
        let leaves_rabbit = self.limits.settings().at_least_once && !settings.keeps_dead_letters();
        self.limits.apply(settings, self.now);
        if leaves_rabbit {
            let deleted = self.dlx.take_all(self.effects.journal());
            if deleted > 0 {
                tracing::info!(queue = self.handle.name(), count = deleted, "Deleted dead-lettered messages");
            }
            self.dlx_retry_at = None;
        } else {
            self.dlx.retry_all();
        }
        self.enforce_limits();
        self.refresh_refusing();
    }

    /// The exchange graph changed (a binding or a queue was added): stuck at-least-once dead
    /// letters are tried again at once rather than at the next timer.
    pub(crate) fn topology_changed(&mut self) {
        self.dlx.retry_all();
    }

    /// At-least-once dead letters due for an attempt (all of them when the retry timer fired).
    pub(crate) fn dlx_due(&mut self) -> Vec<Due> {
        if self.dlx_retry_at.is_some_and(|at| at <= self.now) {
            self.dlx_retry_at = None;
            self.dlx.retry_all();
        }
        self.dlx.unpark();
        if self.dlx.any_due() { self.dlx.due() } else { Vec::new() }
    }

    /// The copy of dead letter `id` goes to target queue `target`: its confirm number.
    pub(crate) fn dlx_sent(&mut self, id: u64, copy: &Arc<Message>, copied_at: i64, target: u64) -> Option<u64> {
        self.dlx.sent(id, copy, copied_at, target)
    }

    /// Dead letter `id` has nowhere to go now: it waits for the next attempt (or is done, if
    /// targets confirmed it before).
    pub(crate) fn dlx_unroutable(&mut self, id: u64) {
        match self.dlx.unroutable(id, self.effects.journal()) {
            Some(entry) => self.dlx_done(&entry),
            None => self.retry_dlx_later(),
        }
    }

    /// A target answered an at-least-once copy.
    pub(crate) fn dlx_answered(&mut self, number: u64, accepted: bool) {
        if let Some(entry) = self.dlx.answered(number, accepted, self.effects.journal()) {
            self.dlx_done(&entry);
        } else if !accepted {
            self.retry_dlx_later();
        }
    }

    fn dlx_done(&mut self, entry: &Entry) {
        count_confirmed(self.handle.config.queue_type, &self.handle.dead_lettered);
        self.effects.journal().removed(entry);
        self.refresh_refusing();
    }

    fn retry_dlx_later(&mut self) {
        let wait = if self.limits.settings().at_least_once { DLX_RETRY_MS } else { GUARANTEE_RETRY_MS };
        self.dlx_retry_at.get_or_insert(self.now.saturating_add(wait));
    }

    /// Takes the places the log reported for messages behind the head.
    /// Places of dead letters' spills go to the waiting letters; compaction's moves of the
    /// queue's own records to the ready runs and to the letters parked at them.
    pub(crate) fn placed(&mut self, placed: Vec<Placed>) {
        let (letters, own): (Vec<Placed>, Vec<Placed>) =
            placed.into_iter().partition(|p| p.queue & LETTER_LOG_KEY != 0);
        if !letters.is_empty() {
            let mut places = packed_places(letters);
            places.sort_unstable_by_key(|&(seq, _)| seq);
            self.dlx.placed(true, &places, self.effects.journal());
        }
        if own.is_empty() {
            return;
        }
        // Only letters recovered after a restart wait at their original records; checking every
        // placement batch against the letters otherwise cost S5 a third of its rate.
        if self.dlx.at_originals() && self.dlx.size().count > 0 {
            let mut places = packed_places(own.clone());
            places.sort_unstable_by_key(|&(seq, _)| seq);
            self.dlx.placed(false, &places, self.effects.journal());
        }
        self.ready.placed(own);
    }

    /// Whether the log's places of this pass's messages are wanted.
    pub(crate) fn wants_places(&self) -> bool {
        self.ready.wants_places() || self.dlx.wants_places()
    }

    /// Dead letters held whole in memory, and those parked on disk.
    #[cfg(test)]
    pub(crate) fn dlx_resident(&self) -> (Size, u64) {
        self.dlx.resident()
    }

    /// Whether dead letters were spilled under the queue's letter key, which go with it.
    pub(crate) fn spilled_letters(&self) -> bool {
        self.dlx.spilled_any()
    }

    /// Whether a non-durable queue wrote spills, which it must drop from the log when it goes.
    pub(crate) fn spilled_any(&self) -> bool {
        self.ready.spilled_any()
    }

    pub(crate) fn take_outbox(&mut self) -> Events {
        self.effects.take_events()
    }

    pub(crate) fn take_discarded(&mut self) -> Discarded {
        self.effects.take_discarded()
    }

    /// Takes the dead letters this queue refused in the pass (see [`passed_on_when_refused`]).
    pub(crate) fn take_refused_dead_letters(&mut self) -> Vec<RefusedDeadLetter> {
        self.effects.take_refused_dead_letters()
    }

    /// The messages this pass kept as at-least-once dead letters, with why they died.
    pub(crate) fn take_held(&mut self) -> Held {
        self.effects.take_held()
    }

    /// Takes the pass's records and the confirmations that wait for them.
    pub(crate) fn take_journal(&mut self) -> (Vec<Record>, Events) {
        self.effects.take_journal()
    }

    /// The ready messages, for tests that look at the runs.
    #[cfg(test)]
    pub(super) fn ready(&self) -> &Ready {
        &self.ready
    }

    /// The limits, for tests that look at refusals.
    #[cfg(test)]
    pub(super) fn limits(&self) -> &Limits {
        &self.limits
    }
}

/// Whether a refused message is passed on to the fallback queue rather than refused to its
/// publisher: a dead letter (only the broker gives a message a death history) whose source does
/// not keep it anyway (RabbitMQ's at-least-once letters wait in their quorum queue), and not a
/// redrive's copy (its source keeps it too, and the job pauses on the refusal).
fn passed_on_when_refused(item: &Enqueue) -> bool {
    item.message.broker.deaths.is_some()
        && item.confirm.is_none_or(|n| n & (DLX_NUMBER_BIT | super::requests::REFUSED_TO_PUBLISHER_BIT) == 0)
}

#[cfg(test)]
mod delayed_tests;
#[cfg(test)]
mod determinism_tests;
#[cfg(test)]
mod priority_tests;
#[cfg(test)]
mod single_active_tests;
#[cfg(test)]
mod tests;
