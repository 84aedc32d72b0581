//! What the broker remembers about one 0.9.1 channel: delivery tags awaiting settlement,
//! consumers, publisher confirms and prefetch.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use charon_engine::{ConsumerId, Gate, QueueRef, WriteGrants};

use super::confirms::ConfirmTracker;
use super::tx::Transaction;
use super::{MethodError, MethodResult};
use crate::proto::ReplyCode;

/// A delivery awaiting the client's ack.
#[derive(Debug)]
pub(crate) struct PendingAck {
    pub(crate) queue: QueueRef,
    pub(crate) seq: u64,
    /// Delivered to a consumer (counts against the channel's global prefetch), not by
    /// `basic.get`.
    pub(crate) consumed: bool,
    /// When it went out (one clock read per batch of deliveries), for the consumer timeout.
    pub(crate) delivered_at: Instant,
}

/// Delivery tags of one channel, in order. Tags are dense from 1, so a deque indexed by
/// `tag - first` finds one in O(1); settled slots are emptied and trimmed from the front.
#[derive(Debug, Default)]
pub(crate) struct UnackedTags {
    first: u64,
    slots: VecDeque<Option<PendingAck>>,
}

impl UnackedTags {
    pub(crate) fn new() -> Self {
        Self { first: 1, slots: VecDeque::new() }
    }

    /// Records delivery `tag` (tags must be pushed in increasing order).
    pub(crate) fn push(&mut self, tag: u64, pending: PendingAck) {
        if self.slots.is_empty() {
            self.first = tag;
        }
        let end = self.first + self.slots.len() as u64;
        for _ in end..tag {
            self.slots.push_back(None);
        }
        self.slots.push_back(Some(pending));
    }

    fn trim(&mut self) {
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.first += 1;
        }
    }

    /// Removes `tag` (or every tag up to it with `multiple`; `0` + `multiple` means all).
    /// `None` when the tag is unknown, which RabbitMQ answers with `unknown delivery tag`.
    pub(crate) fn take(&mut self, tag: u64, multiple: bool) -> Option<Vec<PendingAck>> {
        if multiple && tag == 0 {
            return Some(self.take_all());
        }
        let index = usize::try_from(tag.checked_sub(self.first)?).ok()?;
        if self.slots.get(index).is_none_or(Option::is_none) {
            return None;
        }
        let taken: Vec<PendingAck> = if multiple {
            self.slots.iter_mut().take(index + 1).filter_map(Option::take).collect()
        } else {
            self.slots.get_mut(index).and_then(Option::take).into_iter().collect()
        };
        self.trim();
        Some(taken)
    }

    /// [`UnackedTags::take`] keeping each delivery's tag, for a transaction that may give
    /// them back.
    pub(crate) fn take_tagged(&mut self, tag: u64, multiple: bool) -> Option<Vec<(u64, PendingAck)>> {
        let first = self.first;
        let tagged = |(i, slot): (usize, &mut Option<PendingAck>)| slot.take().map(|p| (first + i as u64, p));
        if multiple && tag == 0 {
            let taken = self.slots.iter_mut().enumerate().filter_map(tagged).collect();
            self.slots.clear();
            return Some(taken);
        }
        let index = usize::try_from(tag.checked_sub(self.first)?).ok()?;
        if self.slots.get(index).is_none_or(Option::is_none) {
            return None;
        }
        let taken: Vec<(u64, PendingAck)> = if multiple {
            self.slots.iter_mut().enumerate().take(index + 1).filter_map(tagged).collect()
        } else {
            self.slots.get_mut(index).and_then(Option::take).map(|p| (tag, p)).into_iter().collect()
        };
        self.trim();
        Some(taken)
    }

    /// Puts delivery `tag` back, unacked (a rolled-back transaction's ack); tags pushed later
    /// must still be higher than any restored one, which they are, being newer deliveries.
    pub(crate) fn restore(&mut self, tag: u64, pending: PendingAck) {
        if self.slots.is_empty() {
            self.first = tag;
        }
        while tag < self.first {
            self.slots.push_front(None);
            self.first -= 1;
        }
        let end = self.first + self.slots.len() as u64;
        for _ in end..=tag {
            self.slots.push_back(None);
        }
        if let Some(slot) = usize::try_from(tag - self.first).ok().and_then(|i| self.slots.get_mut(i)) {
            *slot = Some(pending);
        }
    }

    /// How many deliveries are unacked (counted on demand, for the management API).
    pub(crate) fn count(&self) -> usize {
        self.slots.iter().flatten().count()
    }

    /// The oldest delivery still unacked: the one the consumer timeout looks at.
    pub(crate) fn oldest(&self) -> Option<&PendingAck> {
        self.slots.iter().flatten().next()
    }

    pub(crate) fn take_all(&mut self) -> Vec<PendingAck> {
        let taken: Vec<PendingAck> = self.slots.drain(..).flatten().collect();
        self.first += taken.len() as u64;
        taken
    }
}

/// Groups settled deliveries by queue, keeping delivery-tag order within each queue.
pub(crate) fn by_queue(pending: Vec<PendingAck>) -> Vec<(QueueRef, Vec<u64>)> {
    let mut groups: Vec<(QueueRef, Vec<u64>)> = Vec::new();
    for p in pending {
        match groups.iter_mut().find(|(q, _)| Arc::ptr_eq(q, &p.queue)) {
            Some((_, seqs)) => seqs.push(p.seq),
            None => groups.push((p.queue, vec![p.seq])),
        }
    }
    groups
}

/// A consumer on this channel.
#[derive(Debug)]
pub(crate) struct ChannelConsumer {
    pub(crate) id: ConsumerId,
    pub(crate) queue: QueueRef,
}

/// Broker-side state of an open channel.
#[derive(Debug)]
pub(crate) struct ChannelState {
    pub(crate) next_tag: u64,
    pub(crate) unacked: UnackedTags,
    pub(crate) consumers: HashMap<String, ChannelConsumer>,
    /// `basic.qos global=false`: prefetch for consumers created from now on.
    pub(crate) consumer_prefetch: u32,
    /// `basic.qos global=true`: shared by all consumers of the channel (limit 0 = none).
    pub(crate) global_limit: Arc<Gate>,
    pub(crate) confirms: Option<ConfirmTracker>,
    /// Set by `tx.select` (never together with `confirms`): publishes and settlements wait in
    /// it for `tx.commit`.
    pub(crate) tx: Option<Transaction>,
    /// Exchanges this channel may publish to, while permissions are unchanged.
    pub(crate) write_grants: WriteGrants,
    /// For the empty-queue-name shortcuts of 0.9.1.
    pub(crate) last_queue: Option<String>,
    /// Queues this channel consumed or fetched from; told when the channel goes away.
    pub(crate) queues: Vec<QueueRef>,
    /// The direct reply-to consumer; dropping the channel forgets its address.
    pub(crate) reply: Option<super::reply_to::ChannelReply>,
    /// Whether it published: 4.0.5 counts a channel as a publisher (`rabbitmq_global_publishers`)
    /// from its first `basic.publish` until it closes.
    pub(crate) published: bool,
    /// The client closed it; `close-ok` goes out once its last confirm has.
    pub(crate) closing: bool,
}

impl ChannelState {
    pub(crate) fn new() -> Self {
        Self {
            next_tag: 1,
            unacked: UnackedTags::new(),
            consumers: HashMap::new(),
            consumer_prefetch: 0,
            global_limit: Gate::new(0),
            confirms: None,
            tx: None,
            write_grants: WriteGrants::default(),
            last_queue: None,
            queues: Vec::new(),
            reply: None,
            published: false,
            closing: false,
        }
    }

    /// `basic.qos`: with `global` the channel's shared prefetch, otherwise that of consumers
    /// created from now on. RabbitMQ quirk kept on purpose: a per-consumer qos removes the
    /// channel's global limit (`rabbit_limiter:unlimit_prefetch` in rabbit_channel).
    pub(crate) fn qos(&mut self, prefetch_count: u16, global: bool) {
        if global {
            self.global_limit.set_limit(u32::from(prefetch_count));
        } else {
            self.consumer_prefetch = u32::from(prefetch_count);
            self.global_limit.set_limit(0);
        }
    }

    /// `confirm.select`; a second one changes nothing.
    pub(crate) fn select_confirms(&mut self) -> MethodResult {
        if self.tx.is_some() {
            return Err(MethodError::new(ReplyCode::PreconditionFailed, "cannot switch from tx to confirm mode"));
        }
        self.confirms.get_or_insert_with(ConfirmTracker::new);
        Ok(())
    }

    /// `tx.select`; a second one keeps the transaction (and what it holds).
    pub(crate) fn select_tx(&mut self) -> MethodResult {
        if self.confirms.is_some() {
            return Err(MethodError::new(ReplyCode::PreconditionFailed, "cannot switch from confirm to tx mode"));
        }
        self.tx.get_or_insert_with(Transaction::new);
        Ok(())
    }

    /// The queue name a method refers to, with 0.9.1's "empty means the last declared queue"
    /// shortcut.
    pub(crate) fn queue_name(&self, name: &str) -> Result<String, MethodError> {
        if !name.is_empty() {
            return Ok(name.to_owned());
        }
        self.last_queue.clone().ok_or_else(|| MethodError::new(ReplyCode::NotFound, "no previously declared queue"))
    }

    pub(crate) fn touch(&mut self, queue: &QueueRef) {
        if !self.queues.iter().any(|q| Arc::ptr_eq(q, queue)) {
            self.queues.push(Arc::clone(queue));
        }
    }

    /// A queue answered for publish `seq` of this channel: in confirm mode a publisher
    /// confirm, in a transaction part of a commit.
    pub(crate) fn answer_confirm(&mut self, seq: u64, accepted: bool) {
        if let Some(tracker) = self.confirms.as_mut() {
            tracker.answer(seq, accepted);
        } else if let Some(tx) = self.tx.as_mut() {
            tx.answer(seq, accepted);
        }
    }

    /// Takes the next delivery tag.
    pub(crate) fn tag(&mut self) -> u64 {
        let tag = self.next_tag;
        self.next_tag += 1;
        tag
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    use super::super::test_queue::queue;

    #[test]
    fn an_empty_queue_name_means_the_last_declared_queue() {
        let mut state = ChannelState::new();
        let refused = state.queue_name("").unwrap_err();
        assert_eq!((refused.code, refused.explanation.as_str()), (ReplyCode::NotFound, "no previously declared queue"));
        state.last_queue = Some("q1".to_owned());
        assert_eq!(state.queue_name("").unwrap(), "q1");
        assert_eq!(state.queue_name("other").unwrap(), "other");
    }

    #[test]
    fn a_consumer_qos_sets_the_next_consumers_prefetch_and_lifts_the_global_one() {
        let mut state = ChannelState::new();
        state.qos(10, true);
        assert_eq!((state.consumer_prefetch, state.global_limit.limit()), (0, 10));
        state.qos(5, false);
        assert_eq!((state.consumer_prefetch, state.global_limit.limit()), (5, 0), "RabbitMQ's unlimit_prefetch");
    }

    #[test]
    fn confirms_and_transactions_exclude_each_other_and_a_second_select_keeps_what_is_there() {
        let mut confirming = ChannelState::new();
        confirming.select_confirms().unwrap();
        confirming.confirms.as_mut().unwrap().publish(1);
        confirming.select_confirms().unwrap();
        assert_eq!(confirming.confirms.as_ref().map(ConfirmTracker::unconfirmed), Some(1));
        let refused = confirming.select_tx().unwrap_err();
        assert_eq!(
            (refused.code, refused.explanation.as_str()),
            (ReplyCode::PreconditionFailed, "cannot switch from confirm to tx mode")
        );
        let mut transactional = ChannelState::new();
        transactional.select_tx().unwrap();
        transactional.select_tx().unwrap();
        let refused = transactional.select_confirms().unwrap_err();
        assert_eq!(refused.explanation, "cannot switch from tx to confirm mode");
        assert!(transactional.confirms.is_none() && transactional.tx.is_some());
    }

    /// Tags 1..=n, each delivery's queue sequence number ten times its tag.
    fn tags(queue: &QueueRef, n: u64) -> UnackedTags {
        let mut unacked = UnackedTags::new();
        for tag in 1..=n {
            unacked.push(
                tag,
                PendingAck { queue: Arc::clone(queue), seq: tag * 10, consumed: true, delivered_at: Instant::now() },
            );
        }
        unacked
    }

    fn seqs(taken: &[(u64, PendingAck)]) -> Vec<(u64, u64)> {
        taken.iter().map(|(tag, p)| (*tag, p.seq)).collect()
    }

    #[tokio::test]
    async fn tagged_takes_keep_each_delivery_tag() {
        let q = queue().await;
        let mut unacked = tags(&q, 5);
        assert_eq!(seqs(&unacked.take_tagged(2, false).unwrap()), [(2, 20)]);
        assert!(unacked.take_tagged(2, false).is_none(), "taken already: unknown");
        assert_eq!(seqs(&unacked.take_tagged(3, true).unwrap()), [(1, 10), (3, 30)]);
        assert!(unacked.take_tagged(9, false).is_none());
        assert_eq!(seqs(&unacked.take_tagged(0, true).unwrap()), [(4, 40), (5, 50)]);
        assert!(unacked.take_all().is_empty());
    }

    #[tokio::test]
    async fn restored_tags_are_unacked_again_under_the_same_tag() {
        let q = queue().await;
        let mut unacked = tags(&q, 4);
        let first = unacked.take_tagged(2, true).unwrap();
        let last = unacked.take_tagged(4, false).unwrap();
        // Restored behind the front (1, 2) and past the end (4), then a new delivery.
        for (tag, pending) in first.into_iter().chain(last) {
            unacked.restore(tag, pending);
        }
        unacked.push(5, PendingAck { queue: Arc::clone(&q), seq: 50, consumed: true, delivered_at: Instant::now() });
        assert_eq!(seqs(&unacked.take_tagged(4, false).unwrap()), [(4, 40)]);
        let all: Vec<u64> = unacked.take_all().iter().map(|p| p.seq).collect();
        assert_eq!(all, [10, 20, 30, 50]);

        // Into an empty set.
        let mut empty = UnackedTags::new();
        empty.restore(7, PendingAck { queue: Arc::clone(&q), seq: 70, consumed: false, delivered_at: Instant::now() });
        empty.restore(3, PendingAck { queue: Arc::clone(&q), seq: 30, consumed: false, delivered_at: Instant::now() });
        assert_eq!(seqs(&empty.take_tagged(7, true).unwrap()), [(3, 30), (7, 70)]);
    }

    #[tokio::test]
    async fn the_oldest_is_the_lowest_unacked_tag_including_a_restored_one() {
        let q = queue().await;
        let mut unacked = tags(&q, 3);
        assert_eq!(unacked.oldest().map(|p| p.seq), Some(10));
        let first = unacked.take_tagged(1, false).unwrap();
        assert_eq!(unacked.oldest().map(|p| p.seq), Some(20));
        for (tag, pending) in first {
            unacked.restore(tag, pending);
        }
        assert_eq!(unacked.oldest().map(|p| p.seq), Some(10));
        unacked.take(2, true).unwrap();
        assert_eq!(unacked.oldest().map(|p| p.seq), Some(30));
        unacked.take_all();
        assert!(unacked.oldest().is_none());
    }
}
