//! A queue's messages and consumers, as a pure state machine.
//!
//! No channels are awaited here: operations change the state and collect outgoing
//! [`SessionEvent`]s in an outbox that the task sends after each batch of commands.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use charon_model::{DeathReason, Message, Table};

use super::journal::Journal;
use super::paging::Pager;
use super::settings::{Overflow, QueueSettings};
use super::{ConfirmTo, ConsumeSpec, Enqueue, GetOk, QueueRef, QueueStats, Settle};
use crate::error::EngineError;
use crate::session::{ConsumerId, Delivery, Owner, SessionEvent, SessionSink};

/// A message in the queue.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) seq: u64,
    pub(super) message: Arc<Message>,
    pub(super) redelivered: bool,
    /// Times the message came back from a consumer (RabbitMQ 4.0.5's quorum-queue
    /// acquired count, which its delivery limit checks: every return counts).
    pub(super) returned: u32,
    /// Returns that counted as failed deliveries (AMQP 1.0 `modified{delivery-failed}`, or
    /// the consumer's connection going away): a quorum queue's AMQP 1.0 `delivery-count`.
    pub(super) failed: u32,
    /// When its TTL runs out (ms since epoch), fixed at enqueue and kept across requeues.
    pub(super) expires_at: Option<i64>,
    /// Whether it is in the message log (its exit must be recorded there).
    pub(super) persisted: bool,
    /// Whether it was written to the log as a spill, to leave memory (its exit is reported to
    /// the log, never written).
    pub(super) spilled: bool,
    /// Where the log wrote it, once known (while it waits to leave memory).
    pub(super) place: Option<super::paging::Packed>,
}

impl Entry {
    pub(super) fn delivery(&self, quorum: bool) -> Delivery {
        Delivery {
            seq: self.seq,
            message: if quorum { super::counts::as_delivered(self) } else { Arc::clone(&self.message) },
            redelivered: self.redelivered,
            delivery_count: if quorum { self.failed } else { 0 },
        }
    }
}

/// A message delivered and awaiting settlement.
#[derive(Debug)]
pub(super) struct Unacked {
    pub(super) entry: Entry,
    pub(super) consumer: Option<ConsumerId>,
    pub(super) owner: Owner,
}

#[derive(Debug)]
pub(super) struct Consumer {
    pub(super) spec: ConsumeSpec,
    pub(super) unacked: u32,
    pub(super) batch: Vec<Delivery>,
    /// Link credit left (credit-based consumers only).
    pub(super) credit: u32,
    /// Deliveries made, as a serial number starting at the link's initial delivery-count.
    pub(super) delivery_count: u32,
}

impl Consumer {
    /// Takes the capacity for one more delivery, or says why not (registering the queue with
    /// the gate that is full so it is resumed later).
    pub(super) fn reserve(&self, queue: &QueueRef) -> bool {
        let spec = &self.spec;
        if spec.link_credit.is_some() && self.credit == 0 {
            return false;
        }
        if !spec.no_ack && spec.prefetch != 0 && self.unacked >= spec.prefetch {
            return false;
        }
        let channel_gate = spec.channel_limit.as_ref().filter(|_| !spec.no_ack);
        if let Some(gate) = channel_gate
            && !gate.acquire_or_wait(queue)
        {
            return false;
        }
        if !spec.session.outbound.acquire_or_wait(queue) {
            if let Some(gate) = channel_gate {
                gate.release(1);
            }
            return false;
        }
        true
    }

    /// Gives back what [`Self::reserve`] took, when there was no message to deliver after all.
    pub(super) fn unreserve(&self) {
        let spec = &self.spec;
        if let Some(gate) = spec.channel_limit.as_ref().filter(|_| !spec.no_ack) {
            gate.release(1);
        }
        spec.session.outbound.release(1);
    }
}

/// Messages leaving the queue other than by acknowledgement, for dead lettering.
pub(crate) type Discarded = Vec<(Arc<Message>, DeathReason)>;

pub(crate) struct QueueState {
    pub(super) handle: QueueRef,
    /// The head of the ready messages, in memory ([`super::paging`] has the rest).
    pub(super) ready: VecDeque<Entry>,
    /// Body bytes of all ready messages (what `max-length-bytes` limits).
    pub(super) ready_bytes: u64,
    /// Body bytes of the head.
    pub(super) head_bytes: u64,
    /// The ready messages behind the head, when the broker has a log to page them to.
    pub(super) pager: Option<Pager>,
    /// Effective settings: arguments merged with the applicable policy.
    pub(super) settings: QueueSettings,
    /// The task's clock for this pass, ms since epoch.
    pub(super) now: i64,
    /// Quorum `reject-publish`: refusing publishes until back under 80 % of the limit.
    pub(super) refusing: bool,
    /// When the queue was last used (consumers, gets, declares), for `x-expires`.
    pub(super) last_used: i64,
    pub(super) unacked: HashMap<u64, Unacked>,
    pub(super) consumers: Vec<Consumer>,
    pub(super) next_consumer: usize,
    pub(super) next_seq: u64,
    had_consumer: bool,
    pub(super) outbox: Vec<(SessionSink, SessionEvent)>,
    pub(super) discarded: Discarded,
    /// How many more messages expiry may dead-letter before the queue's dead letters waiting
    /// for their targets have drained (see [`QueueState::set_expiry_room`]).
    pub(super) expiry_room: usize,
    pub(super) journal: Journal,
}

impl QueueState {
    pub(crate) fn new(handle: QueueRef, settings: QueueSettings, now: i64) -> Self {
        Self {
            handle,
            ready: VecDeque::new(),
            ready_bytes: 0,
            head_bytes: 0,
            pager: None,
            settings,
            now,
            refusing: false,
            last_used: now,
            unacked: HashMap::new(),
            consumers: Vec::new(),
            next_consumer: 0,
            next_seq: 1,
            had_consumer: false,
            outbox: Vec::new(),
            discarded: Vec::new(),
            expiry_room: usize::MAX,
            journal: Journal::default(),
        }
    }

    pub(crate) fn publish(&mut self, items: Vec<Enqueue>, confirm_to: Option<ConfirmTo>) {
        let mut accepted = Vec::new();
        let mut refused = Vec::new();
        let logged_before = self.journal.records.len();
        for item in items {
            if self.refuses(&item.message) {
                refused.extend(item.confirm);
                if self.settings.overflow == Overflow::RejectPublishDlx {
                    self.discarded.push((item.message, DeathReason::Maxlen));
                }
                continue;
            }
            let seq = self.next_seq;
            self.next_seq += 1;
            let expires_at = self.expiry_of(&item.message);
            let persisted = self.persists(&item.message);
            let entry = Entry {
                seq,
                message: item.message,
                redelivered: false,
                returned: 0,
                failed: 0,
                expires_at,
                persisted,
                spilled: false,
                place: None,
            };
            if persisted {
                self.journal_enqueue(&entry);
            }
            self.push_ready(entry);
            accepted.extend(item.confirm);
            self.enforce_limits();
        }
        if let Some(to) = confirm_to.filter(|_| !accepted.is_empty() || !refused.is_empty()) {
            let event = SessionEvent::Confirms { channel: to.channel, accepted, refused };
            // Held back until the log has synced this pass when anything was written.
            if self.journal.records.len() == logged_before {
                self.outbox.push((to.session, event));
            } else {
                self.journal.confirms.push((to.session, event));
            }
        }
    }

    pub(crate) fn consume(&mut self, spec: ConsumeSpec) -> Result<(), EngineError> {
        let exclusive_taken = self.consumers.iter().any(|c| c.spec.exclusive);
        if exclusive_taken || (spec.exclusive && !self.consumers.is_empty()) {
            return Err(EngineError::ExclusiveConsumeUnavailable(self.handle.resource()));
        }
        self.had_consumer = true;
        self.last_used = self.now;
        let delivery_count = spec.link_credit.unwrap_or(0);
        self.consumers.push(Consumer { spec, unacked: 0, batch: Vec::new(), credit: 0, delivery_count });
        Ok(())
    }

    /// Removes a consumer. Its unacknowledged messages stay with its channel.
    pub(crate) fn cancel(&mut self, consumer: ConsumerId) -> bool {
        let before = self.consumers.len();
        self.consumers.retain(|c| c.spec.id != consumer);
        for unacked in self.unacked.values_mut() {
            if unacked.consumer == Some(consumer) {
                unacked.consumer = None;
            }
        }
        before != self.consumers.len()
    }

    /// Whether an auto-delete queue has lost its last consumer.
    pub(crate) fn should_auto_delete(&self) -> bool {
        self.handle.config.auto_delete && self.had_consumer && self.consumers.is_empty()
    }

    pub(crate) fn settle(&mut self, seqs: &[u64], how: Settle) {
        let mut requeue = Vec::new();
        let failed = matches!(how, Settle::RequeueFailed);
        for seq in seqs {
            let Some(unacked) = self.unacked.remove(seq) else {
                continue;
            };
            if let Some(id) = unacked.consumer
                && let Some(c) = self.consumers.iter_mut().find(|c| c.spec.id == id)
            {
                c.unacked = c.unacked.saturating_sub(1);
            }
            match how {
                Settle::Ack => self.journal_removed(&unacked.entry),
                Settle::Requeue | Settle::RequeueFailed => requeue.push(unacked.entry),
                Settle::Discard => {
                    let mut entry = unacked.entry;
                    entry.failed = entry.failed.saturating_add(1);
                    self.discard(entry, DeathReason::Rejected);
                }
                Settle::DiscardUndeliverable => self.discard(unacked.entry, DeathReason::Rejected),
            }
        }
        self.requeue(requeue, failed);
    }

    /// Requeues with AMQP 1.0's `modified` outcome; a quorum queue first merges the
    /// annotations into each message.
    pub(crate) fn settle_modified(&mut self, seqs: &[u64], failed: bool, annotations: &Table) {
        if self.quorum() && !annotations.is_empty() {
            for seq in seqs {
                if let Some(unacked) = self.unacked.get_mut(seq) {
                    let mut message = Message::clone(&unacked.entry.message);
                    for (key, value) in annotations.iter() {
                        message.annotations.insert(key, value.clone());
                    }
                    unacked.entry.message = Arc::new(message);
                }
            }
        }
        self.settle(seqs, if failed { Settle::RequeueFailed } else { Settle::Requeue });
    }

    /// The one exit for messages that leave unacknowledged: dead lettering hooks in here.
    pub(super) fn discard(&mut self, entry: Entry, reason: DeathReason) {
        self.journal_removed(&entry);
        let message = if self.quorum() { super::counts::as_discarded(entry) } else { entry.message };
        self.discarded.push((message, reason));
    }

    /// Puts messages back at their original positions, marked redelivered, `failed` saying
    /// whether the return counts as a failed delivery. A quorum queue dead-letters a message
    /// returned more often than its delivery limit (4.0.5 counts every return) instead of
    /// requeueing it.
    fn requeue(&mut self, mut entries: Vec<Entry>, failed: bool) {
        entries.sort_by_key(|e| e.seq);
        let limit = if self.quorum() { self.settings.delivery_limit } else { None };
        for mut entry in entries {
            entry.redelivered = true;
            entry.returned = entry.returned.saturating_add(1);
            if failed {
                entry.failed = entry.failed.saturating_add(1);
            }
            if limit.is_some_and(|limit| u64::from(entry.returned) > limit) {
                self.discard(entry, DeathReason::DeliveryLimit);
                continue;
            }
            if self.quorum() {
                self.journal_delivered(&entry);
            }
            self.insert_ready(entry);
        }
    }

    pub(crate) fn get(&mut self, owner: Owner, no_ack: bool) -> Option<GetOk> {
        self.last_used = self.now;
        self.expire(false);
        if self.head_expired() {
            // Its dead-lettering waits for room (see `set_expiry_room`); it is not handed out.
            return None;
        }
        let entry = self.pop_ready()?;
        let delivery = entry.delivery(self.quorum());
        if no_ack {
            self.journal_removed(&entry);
        } else {
            self.journal_delivered(&entry);
            self.unacked.insert(entry.seq, Unacked { entry, consumer: None, owner });
        }
        let remaining = u32::try_from(self.ready_len()).unwrap_or(u32::MAX);
        Some(GetOk { delivery, remaining })
    }

    pub(crate) fn purge(&mut self) -> u32 {
        u32::try_from(self.take_all_ready()).unwrap_or(u32::MAX)
    }

    pub(crate) fn stats(&self) -> QueueStats {
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        QueueStats {
            ready: count(self.ready_len()),
            unacked: count(self.unacked.len()),
            consumers: count(self.consumers.len()),
        }
    }

    /// A channel went away: drop its consumers and requeue everything it had not settled,
    /// including deliveries that were still on their way to it. Like a quorum queue's consumer
    /// going down, this counts as a failed delivery.
    pub(crate) fn owner_closed(&mut self, owner: Owner) {
        self.consumers.retain(|c| c.spec.owner != owner);
        let seqs: Vec<u64> = self.unacked.iter().filter(|(_, u)| u.owner == owner).map(|(s, _)| *s).collect();
        let entries = seqs.iter().filter_map(|s| self.unacked.remove(s)).map(|u| u.entry).collect();
        self.requeue(entries, true);
    }

    /// Checks `if-unused` / `if-empty`; on success returns the ready count the delete reports.
    pub(crate) fn check_delete(&self, if_unused: bool, if_empty: bool) -> Result<u32, EngineError> {
        if if_unused && !self.consumers.is_empty() {
            return Err(EngineError::InUse(self.handle.resource()));
        }
        if if_empty && self.ready_len() > 0 {
            return Err(EngineError::NotEmpty(self.handle.resource()));
        }
        Ok(self.stats().ready)
    }

    /// The queue is going away: tell every consumer.
    pub(crate) fn cancel_all_consumers(&mut self) {
        for consumer in self.consumers.drain(..) {
            let event = SessionEvent::ConsumerCancelled { consumer: consumer.spec.id };
            self.outbox.push((consumer.spec.session, event));
        }
    }

    /// Whether this is a quorum queue (delivery counts, limits and returns differ).
    pub(super) fn quorum(&self) -> bool {
        self.handle.config.queue_type == super::QueueType::Quorum
    }

    pub(crate) fn take_outbox(&mut self) -> Vec<(SessionSink, SessionEvent)> {
        std::mem::take(&mut self.outbox)
    }

    pub(crate) fn take_discarded(&mut self) -> Discarded {
        std::mem::take(&mut self.discarded)
    }
}

#[cfg(test)]
mod tests {
    use charon_model::{Body, Routing, Table};
    use tokio::sync::mpsc;

    use super::super::{CreditGrant, QueueConfig, QueueHandle, QueueType};
    use super::*;
    use crate::gate::Gate;

    fn handle() -> QueueRef {
        let (tx, _rx) = mpsc::channel(1);
        let config = QueueConfig {
            name: "q".into(),
            vhost: "/".into(),
            durable: false,
            auto_delete: false,
            exclusive_owner: None,
            arguments: Table::new(),
            queue_type: QueueType::Classic,
        };
        Arc::new(QueueHandle::new(1, config, tx))
    }

    fn msg(n: u8) -> Enqueue {
        Enqueue { message: Arc::new(Message::new(Routing::default(), Body::Data(vec![n].into()))), confirm: None }
    }

    fn consumer(id: u64, session: &SessionSink, prefetch: u32) -> ConsumeSpec {
        ConsumeSpec {
            id,
            owner: Owner { session: session.id, channel: 1 },
            session: session.clone(),
            no_ack: false,
            prefetch,
            link_credit: None,
            channel_limit: None,
            exclusive: false,
            arguments: Table::new(),
        }
    }

    fn delivered(state: &mut QueueState) -> Vec<(u64, Vec<u64>, bool)> {
        state
            .take_outbox()
            .into_iter()
            .filter_map(|(_, e)| match e {
                SessionEvent::Deliveries { consumer, items, .. } => {
                    Some((consumer, items.iter().map(|d| d.seq).collect(), items.iter().any(|d| d.redelivered)))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn round_robin_one_message_at_a_time() {
        let (session, _rx) = SessionSink::new(1, 0);
        let mut s = QueueState::new(handle(), QueueSettings::default(), 0);
        s.consume(consumer(10, &session, 0)).unwrap();
        s.consume(consumer(11, &session, 0)).unwrap();
        s.publish((0..4).map(msg).collect(), None);
        s.dispatch();
        assert_eq!(delivered(&mut s), [(10, vec![1, 3], false), (11, vec![2, 4], false)]);
    }

    #[test]
    fn prefetch_limits_unacked_and_ack_frees_room() {
        let (session, _rx) = SessionSink::new(1, 0);
        let mut s = QueueState::new(handle(), QueueSettings::default(), 0);
        s.consume(consumer(10, &session, 2)).unwrap();
        s.publish((0..3).map(msg).collect(), None);
        s.dispatch();
        assert_eq!(delivered(&mut s), [(10, vec![1, 2], false)]);
        s.settle(&[1], Settle::Ack);
        s.dispatch();
        assert_eq!(delivered(&mut s), [(10, vec![3], false)]);
    }

    #[test]
    fn requeue_restores_original_position_with_redelivered() {
        let (session, _rx) = SessionSink::new(1, 0);
        let mut s = QueueState::new(handle(), QueueSettings::default(), 0);
        s.publish((0..4).map(msg).collect(), None);
        let owner = Owner { session: 1, channel: 1 };
        let a = s.get(owner, false).unwrap();
        let b = s.get(owner, false).unwrap();
        assert_eq!((a.delivery.seq, b.delivery.seq, b.remaining), (1, 2, 2));
        s.settle(&[2], Settle::Requeue);
        s.owner_closed(owner);
        s.consume(consumer(10, &session, 0)).unwrap();
        s.dispatch();
        let out = delivered(&mut s);
        assert_eq!(out.first().map(|(_, seqs, _)| seqs.clone()), Some(vec![1, 2, 3, 4]));
    }

    #[test]
    fn discard_goes_through_the_dead_letter_seam() {
        let mut s = QueueState::new(handle(), QueueSettings::default(), 0);
        s.publish(vec![msg(1)], None);
        let owner = Owner { session: 1, channel: 1 };
        let got = s.get(owner, false).unwrap();
        s.settle(&[got.delivery.seq], Settle::Discard);
        assert_eq!(s.take_discarded().iter().map(|(_, r)| *r).collect::<Vec<_>>(), [DeathReason::Rejected]);
        assert_eq!(s.stats(), QueueStats { ready: 0, unacked: 0, consumers: 0 });
    }

    #[test]
    fn credit_limits_deliveries_and_drain_delivers_before_advancing() {
        let (session, _rx) = SessionSink::new(1, 0);
        let mut s = QueueState::new(handle(), QueueSettings::default(), 0);
        let mut c = consumer(10, &session, 0);
        c.link_credit = Some(100);
        s.consume(c).unwrap();
        s.publish((0..3).map(msg).collect(), None);
        s.dispatch();
        assert!(delivered(&mut s).is_empty(), "no credit, no delivery");
        let grant = CreditGrant { consumer: 10, delivery_count: 100, link_credit: 2, drain: false, echo: false };
        s.credit(grant);
        assert_eq!(delivered(&mut s), [(10, vec![1, 2], false)]);
        // One credit with drain while a message waits: it is delivered, nothing is left to drain.
        s.credit(CreditGrant { consumer: 10, delivery_count: 102, link_credit: 1, drain: true, echo: false });
        let out = s.take_outbox();
        assert!(matches!(out.first(), Some((_, SessionEvent::Deliveries { items, .. })) if items.len() == 1));
        assert!(matches!(
            out.get(1),
            Some((_, SessionEvent::CreditState { delivery_count: 103, credit: 0, available: 0, drain: true, .. }))
        ));
        // Drain with credit and nothing waiting advances the delivery-count.
        s.credit(CreditGrant { consumer: 10, delivery_count: 103, link_credit: 5, drain: true, echo: false });
        let out = s.take_outbox();
        assert!(matches!(out.as_slice(), [(_, SessionEvent::CreditState { delivery_count: 108, credit: 0, .. })]));
    }

    #[test]
    fn exclusive_consumer_blocks_others() {
        let (session, _rx) = SessionSink::new(1, 0);
        let mut s = QueueState::new(handle(), QueueSettings::default(), 0);
        let mut c = consumer(10, &session, 0);
        c.exclusive = true;
        s.consume(c).unwrap();
        let err = s.consume(consumer(11, &session, 0)).unwrap_err();
        assert_eq!(err.to_string(), "queue 'q' in vhost '/' in exclusive use");
    }

    #[test]
    fn full_outbound_gate_stops_dispatch_until_released() {
        let (session, _rx) = SessionSink::new(1, 2);
        let mut s = QueueState::new(handle(), QueueSettings::default(), 0);
        let mut c = consumer(10, &session, 0);
        c.no_ack = true;
        s.consume(c).unwrap();
        s.publish((0..5).map(msg).collect(), None);
        s.dispatch();
        assert_eq!(delivered(&mut s), [(10, vec![1, 2], false)]);
        assert_eq!(s.stats().ready, 3);
        session.outbound.release(2);
        s.dispatch();
        assert_eq!(delivered(&mut s), [(10, vec![3, 4], false)]);
    }

    #[test]
    fn channel_gate_is_shared_and_released_by_owner() {
        let (session, _rx) = SessionSink::new(1, 0);
        let gate = Gate::new(1);
        let mut s = QueueState::new(handle(), QueueSettings::default(), 0);
        let mut c = consumer(10, &session, 0);
        c.channel_limit = Some(Arc::clone(&gate));
        s.consume(c).unwrap();
        s.publish((0..2).map(msg).collect(), None);
        s.dispatch();
        assert_eq!(delivered(&mut s), [(10, vec![1], false)]);
        gate.release(1);
        s.dispatch();
        assert_eq!(delivered(&mut s), [(10, vec![2], false)]);
    }
}
