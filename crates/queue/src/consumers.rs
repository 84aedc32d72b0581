//! A queue's consumers and the deliveries they have not settled: who may take the next
//! message (in the [`Turns`] of consumer priorities and single active consumer, within
//! prefetch, the channel's and connection's windows, and AMQP 1.0 link credit), and which
//! messages are out with whom.

use charon_model::link_credit_snd;
use foldhash::HashMap;

use super::effects::Effects;
use super::entry::Entry;
use super::handle::QueueRef;
use super::journal::Journal;
use super::limits::body_size;
use super::requests::{ConsumeSpec, CreditGrant};
use super::turns::{Seat, SingleActive, Turns};
use crate::session::{ConsumerId, Delivery, Owner, SessionEvent};

/// One consumer and what it has been handed.
#[derive(Debug)]
struct Consumer {
    spec: ConsumeSpec,
    /// Its place in the turns (`x-priority`, as [`Turns::rank`] counts it).
    rank: i64,
    /// Deliveries not yet settled.
    unacked: u32,
    /// Deliveries of this pass, sent as one event.
    batch: Vec<Delivery>,
    /// Link credit left (credit-based consumers only).
    credit: u32,
    /// Deliveries made, as a serial number starting at the link's initial delivery-count.
    delivery_count: u32,
    /// Units of the session's outbound gate taken for this pass and not used yet (see
    /// [`Gate::try_acquire_up_to`]); [`Consumers::flush`] gives them back.
    ///
    /// [`Gate::try_acquire_up_to`]: crate::gate::Gate::try_acquire_up_to
    outbound_held: u32,
    /// The last time it was offered a message, its own limits stopped it: its prefetch, its
    /// channel's, or its link credit (see [`Consumers::hungry`]). True until it is offered one
    /// (a single active consumer's waiting ones never are).
    held_by_application: bool,
}

impl Consumer {
    /// Takes the capacity for one more delivery, or says why not (registering the queue with
    /// the gate that is full so it is resumed later). `ready` messages wait for this consumer
    /// and `sharers - 1` others: the session's outbound units for as many of them as this one
    /// may take are taken at once, within its share of the room.
    fn reserve(&mut self, queue: &QueueRef, ready: usize, sharers: u32) -> bool {
        let spec = &self.spec;
        self.held_by_application = true;
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
        self.held_by_application = false;
        if self.outbound_held > 0 {
            self.outbound_held -= 1;
            return true;
        }
        let taken = spec.session.outbound.try_acquire_up_to(self.may_take(ready), sharers);
        if taken > 0 {
            self.outbound_held = taken - 1;
            return true;
        }
        if !spec.session.outbound.acquire_or_wait(queue) {
            if let Some(gate) = channel_gate {
                gate.release(1);
            }
            return false;
        }
        true
    }

    /// How many of `ready` messages this consumer may take now (at least 1), as its credit
    /// and prefetch allow.
    fn may_take(&self, ready: usize) -> u32 {
        let spec = &self.spec;
        let mut n = u32::try_from(ready).unwrap_or(u32::MAX);
        if spec.link_credit.is_some() {
            n = n.min(self.credit);
        }
        if !spec.no_ack && spec.prefetch != 0 {
            n = n.min(spec.prefetch.saturating_sub(self.unacked));
        }
        n.max(1)
    }

    /// Gives back what [`Self::reserve`] took, when there was no message to deliver after all
    /// (the outbound unit stays held until the pass ends).
    fn unreserve(&mut self) {
        let spec = &self.spec;
        if let Some(gate) = spec.channel_limit.as_ref().filter(|_| !spec.no_ack) {
            gate.release(1);
        }
        self.outbound_held += 1;
    }

    /// Gives back the outbound units taken for this pass and not used.
    fn release_held(&mut self) {
        let held = std::mem::take(&mut self.outbound_held);
        self.spec.session.outbound.release(held);
    }
}

/// A message delivered and awaiting settlement.
#[derive(Debug)]
struct Unacked {
    entry: Entry,
    /// The consumer it went to (none for `basic.get`, or once the consumer was cancelled).
    consumer: Option<ConsumerId>,
    owner: Owner,
}

/// The consumers of a queue and its unsettled deliveries.
#[derive(Debug, Default)]
pub(super) struct Consumers {
    /// Highest rank first, in registration order within a rank.
    list: Vec<Consumer>,
    /// Whose turn it is.
    turns: Turns,
    /// Whether the queue ever had a consumer (auto-delete waits for the first).
    had_consumer: bool,
    /// A quorum queue: consumer exclusivity does not apply (RabbitMQ 4.0.5 ignores it).
    quorum: bool,
    /// Deliveries not yet settled, by the queue's sequence number (its own numbers, so
    /// foldhash rather than SipHash: nothing a client chooses is hashed here).
    unacked: HashMap<u64, Unacked>,
    /// Body bytes of the unsettled deliveries (RabbitMQ's `message_bytes_unacknowledged`).
    unacked_bytes: u64,
}

impl Consumers {
    /// No consumers yet; `single_active` for a queue with `x-single-active-consumer`.
    pub(super) fn new(single_active: Option<SingleActive>, quorum: bool) -> Self {
        Self { turns: Turns::new(single_active), quorum, ..Self::default() }
    }

    /// Whether one consumer at a time receives.
    pub(super) fn single_active(&self) -> bool {
        self.turns.single_active()
    }

    /// The tag of a single-active-consumer queue's active consumer.
    pub(super) fn active_tag(&self) -> Option<&str> {
        let active = self.turns.active()?;
        self.list.iter().find(|c| c.spec.id == active).map(|c| c.spec.tag.as_str())
    }

    /// The consumers for the management API, highest priority first.
    pub(super) fn report(&self) -> Vec<super::requests::ConsumerReport> {
        let single_active = self.single_active();
        let active = self.turns.active();
        self.list
            .iter()
            .map(|c| {
                let (is_active, status) = match (single_active, active == Some(c.spec.id)) {
                    (false, _) => (true, "up"),
                    (true, true) => (true, "single_active"),
                    (true, false) => (false, "waiting"),
                };
                super::requests::ConsumerReport {
                    tag: c.spec.tag.clone(),
                    owner: c.spec.owner,
                    ack_required: !c.spec.no_ack,
                    prefetch_count: c.spec.prefetch,
                    exclusive: c.spec.exclusive,
                    active: is_active,
                    activity_status: status,
                    arguments: c.spec.arguments.clone(),
                }
            })
            .collect()
    }

    /// Consumers.
    pub(super) fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether nobody consumes.
    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Deliveries awaiting settlement.
    pub(super) fn unacked_len(&self) -> usize {
        self.unacked.len()
    }

    /// Body bytes of the deliveries awaiting settlement.
    pub(super) fn unacked_bytes(&self) -> u64 {
        self.unacked_bytes
    }

    /// Hands the unsettled deliveries in the browse window to `collector`, in its order.
    pub(super) fn browse(&self, collector: &mut super::browse::Collector) {
        let mut held: Vec<&Entry> = self.unacked.values().map(|u| &u.entry).collect();
        held.sort_unstable_by_key(|entry| entry.seq);
        if collector.newest_first() {
            held.reverse();
        }
        for entry in held.into_iter() {
            if collector.done() {
                break;
            }
            collector.entry(entry, true);
        }
    }

    /// Records an unsettled delivery.
    fn hold(&mut self, unacked: Unacked) {
        self.unacked_bytes += body_size(&unacked.entry.message);
        self.unacked.insert(unacked.entry.seq, unacked);
    }

    /// Takes an unsettled delivery back.
    fn release(&mut self, seq: u64) -> Option<Unacked> {
        let unacked = self.unacked.remove(&seq)?;
        self.unacked_bytes = self.unacked_bytes.saturating_sub(body_size(&unacked.entry.message));
        Some(unacked)
    }

    /// The tag of the consumer that holds the queue exclusively, if one does.
    pub(super) fn exclusive_tag(&self) -> Option<&str> {
        self.list.iter().find(|c| c.spec.exclusive).map(|c| c.spec.tag.as_str())
    }

    /// Whether the queue ever had a consumer.
    pub(super) fn had_consumer(&self) -> bool {
        self.had_consumer
    }

    /// Adds a consumer of `priority` (`x-priority`); false when an exclusive consumer is in
    /// the way (or it wants to be exclusive and is not alone, or the queue has a single active
    /// consumer). As on RabbitMQ 4.0.5, only classic queues refuse: a quorum queue accepts
    /// exclusive consumers beside others.
    pub(super) fn add(&mut self, spec: ConsumeSpec, priority: i64) -> bool {
        let exclusive_taken = self.list.iter().any(|c| c.spec.exclusive);
        let refused = exclusive_taken || (spec.exclusive && (!self.list.is_empty() || self.turns.single_active()));
        if refused && !self.quorum {
            return false;
        }
        self.had_consumer = true;
        let delivery_count = spec.link_credit.unwrap_or(0);
        let rank = self.turns.rank(priority);
        let at = self.list.partition_point(|c| c.rank >= rank);
        self.list.insert(
            at,
            Consumer {
                spec,
                rank,
                unacked: 0,
                batch: Vec::new(),
                credit: 0,
                delivery_count,
                outbound_held: 0,
                held_by_application: true,
            },
        );
        self.regroup();
        true
    }

    /// Tells the turns what the list is now.
    fn regroup(&mut self) {
        let seats: Vec<Seat> = self.list.iter().map(|c| (c.spec.id, c.rank, c.unacked)).collect();
        self.turns.regroup(&seats);
    }

    /// Removes a consumer. Its unacknowledged messages stay with its channel.
    pub(super) fn cancel(&mut self, consumer: ConsumerId) -> bool {
        let before = self.list.len();
        self.list.retain(|c| c.spec.id != consumer);
        for unacked in self.unacked.values_mut() {
            if unacked.consumer == Some(consumer) {
                unacked.consumer = None;
            }
        }
        self.regroup();
        before != self.list.len()
    }

    /// The queue is going away: every consumer hears that it was cancelled.
    pub(super) fn cancel_all(&mut self, effects: &mut Effects) {
        for consumer in self.list.drain(..) {
            effects.send(consumer.spec.session, SessionEvent::ConsumerCancelled { consumer: consumer.spec.id });
        }
        self.regroup();
    }

    /// A channel went away: drops its consumers and returns everything it had not settled
    /// (in no particular order).
    pub(super) fn owner_closed(&mut self, owner: Owner) -> Vec<Entry> {
        self.list.retain(|c| c.spec.owner != owner);
        let seqs: Vec<u64> = self.unacked.iter().filter(|(_, u)| u.owner == owner).map(|(s, _)| *s).collect();
        let back = seqs.iter().filter_map(|s| self.release(*s)).map(|u| u.entry).collect();
        self.regroup();
        back
    }

    /// Takes a delivery being settled, freeing its consumer's prefetch room.
    pub(super) fn settle(&mut self, seq: u64) -> Option<Entry> {
        let unacked = self.release(seq)?;
        if let Some(id) = unacked.consumer
            && let Some(c) = self.list.iter_mut().find(|c| c.spec.id == id)
        {
            c.unacked = c.unacked.saturating_sub(1);
            if c.unacked == 0 && self.turns.switching() {
                // The active consumer may hand over now.
                self.regroup();
            }
        }
        Some(unacked.entry)
    }

    /// An unsettled delivery, to change its message before it comes back.
    pub(super) fn unsettled_mut(&mut self, seq: u64) -> Option<&mut Entry> {
        self.unacked.get_mut(&seq).map(|u| &mut u.entry)
    }

    /// A message handed out by `basic.get`, awaiting settlement by `owner`.
    pub(super) fn got(&mut self, entry: Entry, owner: Owner) {
        self.hold(Unacked { entry, consumer: None, owner });
    }

    /// Reserves a delivery with the next consumer in turn that can take one, while `ready`
    /// messages wait; returns its index, or none when no consumer can. Each consumer reserves
    /// ahead for its share of `ready` and of the gate's room at most (so that consumers on
    /// one session leave each other room); [`Self::flush`], which must end the pass, gives
    /// back what was not used.
    pub(super) fn reserve_next(&mut self, queue: &QueueRef, ready: usize) -> Option<usize> {
        let sharers = self.list.len().max(1);
        let share = ready.div_ceil(sharers);
        let sharers = u32::try_from(sharers).unwrap_or(u32::MAX);
        let list = &mut self.list;
        self.turns.next(|index| list.get_mut(index).is_some_and(|c| c.reserve(queue, share, sharers)))
    }

    /// Whether a consumer would take messages faster than it gets them: the last time it was
    /// offered one, its own prefetch or credit did not stop it (its connection's outbound
    /// window did, or it took one, or none was in memory to take). A backlog behind such a
    /// consumer is the broker's pipeline falling behind its publishers, not an application
    /// consuming slowly (which its prefetch or credit shows).
    pub(super) fn hungry(&self) -> bool {
        self.list.iter().any(|c| !c.held_by_application)
    }

    /// Gives back a reservation that found no message.
    pub(super) fn unreserve(&mut self, index: usize) {
        if let Some(consumer) = self.list.get_mut(index) {
            consumer.unreserve();
        }
    }

    /// Hands `entry` to the consumer that reserved it; a quorum queue records it in the log
    /// (a classic queue records a delivery only when the message comes back: see
    /// `QueueState::requeue`).
    pub(super) fn hand_out(&mut self, index: usize, entry: Entry, quorum: bool, journal: &mut Journal) {
        let Some(consumer) = self.list.get_mut(index) else {
            return;
        };
        if consumer.spec.link_credit.is_some() {
            consumer.credit = consumer.credit.saturating_sub(1);
            consumer.delivery_count = consumer.delivery_count.wrapping_add(1);
        }
        consumer.batch.push(entry.delivery(quorum));
        if consumer.spec.no_ack {
            journal.removed(&entry);
        } else {
            consumer.unacked += 1;
            let (owner, id) = (consumer.spec.owner, consumer.spec.id);
            if quorum {
                journal.delivered(&entry);
            }
            self.hold(Unacked { entry, consumer: Some(id), owner });
        }
    }

    /// Sends each consumer's deliveries of this pass as one event, and gives back the
    /// outbound units reserved for deliveries the pass did not make.
    pub(super) fn flush(&mut self, effects: &mut Effects) {
        for consumer in &mut self.list {
            consumer.release_held();
            if consumer.batch.is_empty() {
                continue;
            }
            let event =
                SessionEvent::Deliveries { consumer: consumer.spec.id, items: std::mem::take(&mut consumer.batch) };
            effects.send(consumer.spec.session.clone(), event);
        }
    }

    /// Applies a receiver's flow to a credit-based consumer, returning its index: the credit
    /// it may use now is what the receiver granted beyond what it has seen, minus what is
    /// already on its way (2.6.7: link-credit-snd = delivery-count-rcv + link-credit-rcv -
    /// delivery-count-snd), in serial-number arithmetic as RabbitMQ computes it: a receiver
    /// that starts its count at 0 (rhea) gets credit across the wrap, not none.
    pub(super) fn grant(&mut self, grant: &CreditGrant) -> Option<usize> {
        let index = self.list.iter().position(|c| c.spec.id == grant.consumer)?;
        let consumer = self.list.get_mut(index)?;
        consumer.credit = link_credit_snd(grant.delivery_count, grant.link_credit, consumer.delivery_count);
        Some(index)
    }

    /// After the dispatch that follows a grant: a drain uses up the credit left (advancing the
    /// delivery-count), and a drain or echo reports the link's state, `available` messages
    /// waiting.
    pub(super) fn settle_grant(&mut self, index: usize, grant: &CreditGrant, available: u32, effects: &mut Effects) {
        let Some(consumer) = self.list.get_mut(index) else {
            return;
        };
        if grant.drain && consumer.credit > 0 {
            consumer.delivery_count = consumer.delivery_count.wrapping_add(consumer.credit);
            consumer.credit = 0;
        }
        if grant.drain || grant.echo {
            let event = SessionEvent::CreditState {
                consumer: consumer.spec.id,
                delivery_count: consumer.delivery_count,
                credit: consumer.credit,
                available,
                drain: grant.drain,
            };
            effects.send(consumer.spec.session.clone(), event);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use charon_model::{Body, Message, Routing, Table};

    use super::super::handle::QueueHandle;
    use super::*;
    use crate::gate::Gate;
    use crate::session::SessionSink;

    fn queue() -> QueueRef {
        QueueHandle::detached(1, "q")
    }

    fn spec(id: u64, session: &SessionSink, channel: u32, prefetch: u32) -> ConsumeSpec {
        ConsumeSpec {
            id,
            tag: format!("ctag-{id}"),
            owner: Owner { session: session.id, channel },
            session: session.clone(),
            no_ack: false,
            prefetch,
            link_credit: None,
            channel_limit: None,
            exclusive: false,
            arguments: Table::new(),
        }
    }

    fn entry(seq: u64) -> Entry {
        Entry::new(seq, Arc::new(Message::new(Routing::default(), Body::Data("m".into()))), None, false)
    }

    /// Hands out `seqs` round-robin as dispatch does; returns who got what.
    fn dispatch(consumers: &mut Consumers, queue: &QueueRef, seqs: &[u64]) -> Vec<(ConsumerId, Vec<u64>)> {
        let mut journal = Journal::new(1);
        for (i, &seq) in seqs.iter().enumerate() {
            let Some(index) = consumers.reserve_next(queue, seqs.len() - i) else {
                break;
            };
            consumers.hand_out(index, entry(seq), false, &mut journal);
        }
        let mut effects = Effects::new(1);
        consumers.flush(&mut effects);
        effects
            .take_events()
            .into_iter()
            .filter_map(|(_, e)| match e {
                SessionEvent::Deliveries { consumer, items, .. } => {
                    Some((consumer, items.iter().map(|d| d.seq).collect()))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn round_robin_within_prefetch_and_settling_frees_room() {
        let q = queue();
        let (session, _rx) = SessionSink::new(1, 0);
        let mut consumers = Consumers::new(None, false);
        assert!(consumers.add(spec(10, &session, 1, 2), 0));
        assert!(consumers.add(spec(11, &session, 1, 1), 0));
        assert_eq!(dispatch(&mut consumers, &q, &[1, 2, 3, 4]), [(10, vec![1, 3]), (11, vec![2])]);
        assert_eq!(consumers.unacked_len(), 3);
        assert_eq!(consumers.settle(2).map(|e| e.seq), Some(2));
        assert!(consumers.settle(2).is_none(), "settled once");
        assert_eq!(dispatch(&mut consumers, &q, &[4]), [(11, vec![4])]);
    }

    #[test]
    fn exclusivity_is_refused_both_ways() {
        let (session, _rx) = SessionSink::new(1, 0);
        let mut consumers = Consumers::new(None, false);
        assert!(!consumers.had_consumer());
        let mut exclusive = spec(10, &session, 1, 0);
        exclusive.exclusive = true;
        assert!(consumers.add(exclusive.clone(), 0));
        assert!(!consumers.add(spec(11, &session, 1, 0), 0));
        assert!(consumers.cancel(10) && !consumers.cancel(10));
        assert!(consumers.add(spec(11, &session, 1, 0), 0));
        exclusive.id = 12;
        assert!(!consumers.add(exclusive, 0), "not alone");
        assert!(consumers.had_consumer() && consumers.len() == 1);
    }

    #[test]
    fn a_closed_owner_takes_back_its_deliveries_and_gets_alike() {
        let q = queue();
        let (session, _rx) = SessionSink::new(1, 0);
        let mut consumers = Consumers::new(None, false);
        consumers.add(spec(10, &session, 1, 0), 0);
        consumers.add(spec(11, &session, 2, 0), 0);
        dispatch(&mut consumers, &q, &[1, 2, 3]);
        consumers.got(entry(4), Owner { session: 1, channel: 1 });
        let mut back: Vec<u64> =
            consumers.owner_closed(Owner { session: 1, channel: 1 }).iter().map(|e| e.seq).collect();
        back.sort_unstable();
        assert_eq!(back, [1, 3, 4]);
        assert_eq!((consumers.len(), consumers.unacked_len()), (1, 1));
        assert!(consumers.unsettled_mut(2).is_some() && consumers.unsettled_mut(1).is_none());
    }

    #[test]
    fn a_cancelled_consumer_leaves_its_deliveries_with_the_channel() {
        let q = queue();
        let (session, _rx) = SessionSink::new(1, 0);
        let mut consumers = Consumers::new(None, false);
        consumers.add(spec(10, &session, 1, 0), 0);
        dispatch(&mut consumers, &q, &[1]);
        consumers.cancel(10);
        assert_eq!(consumers.unacked_len(), 1);
        let mut effects = Effects::new(1);
        consumers.add(spec(11, &session, 2, 0), 0);
        consumers.cancel_all(&mut effects);
        assert!(matches!(effects.take_events().as_slice(), [(_, SessionEvent::ConsumerCancelled { consumer: 11 })]));
        assert_eq!(consumers.owner_closed(Owner { session: 1, channel: 1 }).len(), 1);
    }

    #[test]
    fn credit_is_what_the_receiver_granted_beyond_what_is_on_its_way() {
        let q = queue();
        let (session, _rx) = SessionSink::new(1, 0);
        let mut consumers = Consumers::new(None, false);
        let mut c = spec(10, &session, 1, 0);
        c.link_credit = Some(100);
        consumers.add(c, 0);
        assert!(dispatch(&mut consumers, &q, &[1]).is_empty(), "no credit, no delivery");
        let grant = CreditGrant { consumer: 10, delivery_count: 100, link_credit: 3, drain: false, echo: true };
        assert_eq!(consumers.grant(&grant), Some(0));
        assert_eq!(dispatch(&mut consumers, &q, &[1, 2]), [(10, vec![1, 2])]);
        // The receiver has not seen those two yet: granting 3 from 100 again leaves 1.
        consumers.grant(&grant);
        let mut effects = Effects::new(1);
        consumers.settle_grant(0, &grant, 7, &mut effects);
        assert!(matches!(
            effects.take_events().as_slice(),
            [(_, SessionEvent::CreditState { delivery_count: 102, credit: 1, available: 7, drain: false, .. })]
        ));
        let drain = CreditGrant { drain: true, echo: false, ..grant };
        consumers.grant(&drain);
        consumers.settle_grant(0, &drain, 0, &mut effects);
        assert!(matches!(
            effects.take_events().as_slice(),
            [(_, SessionEvent::CreditState { delivery_count: 103, credit: 0, drain: true, .. })]
        ));
        assert_eq!(consumers.grant(&CreditGrant { consumer: 99, ..grant }), None);
    }

    #[test]
    fn credit_wraps_as_a_serial_number() {
        let q = queue();
        let (session, _rx) = SessionSink::new(1, 0);
        let mut consumers = Consumers::new(None, false);
        let mut c = spec(10, &session, 1, 0);
        c.link_credit = Some(u32::MAX - 4); // RabbitMQ's initial delivery-count, 2^32 - 5
        consumers.add(c, 0);
        // A receiver that counts from 0 (rhea): (0 + 2) - (2^32 - 5) wraps to 7.
        let grant = CreditGrant { consumer: 10, delivery_count: 0, link_credit: 2, drain: false, echo: false };
        consumers.grant(&grant);
        let sent = dispatch(&mut consumers, &q, &[1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(sent, [(10, vec![1, 2, 3, 4, 5, 6, 7])]);
        // Behind the sender's count: no credit, not 2^32 - something.
        consumers.grant(&CreditGrant { delivery_count: u32::MAX - 10, ..grant });
        assert!(dispatch(&mut consumers, &q, &[8, 9]).is_empty());
    }

    #[test]
    fn a_full_channel_gate_is_given_back_when_there_is_nothing_to_deliver() {
        let q = queue();
        let (session, _rx) = SessionSink::new(1, 0);
        let gate = Gate::new(1);
        let mut consumers = Consumers::new(None, false);
        let mut c = spec(10, &session, 1, 0);
        c.channel_limit = Some(Arc::clone(&gate));
        consumers.add(c, 0);
        let index = consumers.reserve_next(&q, 1);
        assert_eq!(index, Some(0));
        assert_eq!(consumers.reserve_next(&q, 1), None, "the gate is full");
        consumers.unreserve(0);
        assert_eq!(consumers.reserve_next(&q, 1), Some(0));
    }

    #[test]
    fn a_pass_takes_the_sessions_units_at_once_and_gives_back_the_rest() {
        let q = queue();
        let (session, _rx) = SessionSink::new(1, 100);
        let mut consumers = Consumers::new(None, false);
        consumers.add(spec(10, &session, 1, 3), 0);
        assert_eq!(consumers.reserve_next(&q, 5), Some(0));
        assert_eq!(session.outbound.used(), 3, "as many as the prefetch of 3 lets it take, in one step");
        consumers.unreserve(0);
        consumers.flush(&mut Effects::new(1));
        assert_eq!(session.outbound.used(), 0, "nothing was delivered: every unit is back");
        let sent = dispatch(&mut consumers, &q, &[1, 2, 3, 4, 5]);
        assert_eq!(sent, [(10, vec![1, 2, 3])]);
        assert_eq!(session.outbound.used(), 3, "one unit per delivery, none held after the pass");
    }

    #[test]
    fn consumers_of_one_session_near_its_limit_still_take_turns() {
        let q = queue();
        let (session, _rx) = SessionSink::new(1, 4);
        let mut consumers = Consumers::new(None, false);
        consumers.add(spec(10, &session, 1, 0), 0);
        consumers.add(spec(11, &session, 1, 0), 0);
        let mut sent = dispatch(&mut consumers, &q, &[1, 2, 3, 4, 5, 6, 7, 8]);
        sent.sort();
        assert_eq!(sent, [(10, vec![1, 3]), (11, vec![2, 4])]);
        assert_eq!(session.outbound.used(), 4);
    }
}
