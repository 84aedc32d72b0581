//! What the broker remembers about one 0.9.1 channel: delivery tags awaiting settlement,
//! consumers, publisher confirms and prefetch.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use charon_engine::{ConsumerId, Gate, QueueRef, RouteCache, WriteGrants};

/// A delivery awaiting the client's ack.
#[derive(Debug)]
pub(crate) struct PendingAck {
    pub(crate) queue: QueueRef,
    pub(crate) seq: u64,
    /// Delivered to a consumer (counts against the channel's global prefetch), not by
    /// `basic.get`.
    pub(crate) consumed: bool,
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

/// Publisher confirms of one channel.
#[derive(Debug)]
pub(crate) struct ConfirmTracker {
    next: u64,
    /// Sequence number → queues that have not answered yet, and whether one refused.
    pending: BTreeMap<u64, (u32, bool)>,
    acks: Vec<u64>,
    nacks: Vec<u64>,
}

impl ConfirmTracker {
    pub(crate) fn new() -> Self {
        Self { next: 1, pending: BTreeMap::new(), acks: Vec::new(), nacks: Vec::new() }
    }

    /// Assigns the next sequence number to a publish routed to `queues` queues.
    pub(crate) fn publish(&mut self, queues: usize) -> u64 {
        let seq = self.next;
        self.next += 1;
        match u32::try_from(queues) {
            Ok(0) => self.acks.push(seq),
            Ok(n) => {
                self.pending.insert(seq, (n, false));
            }
            Err(_) => {
                self.pending.insert(seq, (u32::MAX, false));
            }
        }
        seq
    }

    /// One queue answered for `seq`.
    pub(crate) fn answer(&mut self, seq: u64, accepted: bool) {
        let Some((remaining, refused)) = self.pending.get_mut(&seq) else {
            return;
        };
        *remaining = remaining.saturating_sub(1);
        *refused |= !accepted;
        if *remaining == 0 {
            let refused = *refused;
            self.pending.remove(&seq);
            if refused { self.nacks.push(seq) } else { self.acks.push(seq) }
        }
    }

    /// The confirms to send now: nacks one by one, then acks, coalesced into one
    /// `multiple` ack for every confirmed tag below the oldest still pending.
    pub(crate) fn drain(&mut self) -> Vec<(u64, bool, bool)> {
        let mut out: Vec<(u64, bool, bool)> = Vec::new();
        self.nacks.sort_unstable();
        out.extend(self.nacks.drain(..).map(|seq| (seq, false, false)));
        if self.acks.is_empty() {
            return out;
        }
        self.acks.sort_unstable();
        let oldest_pending = self.pending.keys().next().copied().unwrap_or(u64::MAX);
        let below: Vec<u64> = self.acks.iter().copied().filter(|s| *s < oldest_pending).collect();
        match below.as_slice() {
            [] => {}
            [only] => out.push((*only, true, false)),
            [.., last] => out.push((*last, true, true)),
        }
        out.extend(self.acks.iter().copied().filter(|s| *s > oldest_pending).map(|s| (s, true, false)));
        self.acks.clear();
        out
    }
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
    pub(crate) route_cache: RouteCache,
    /// Exchanges this channel may publish to, while permissions are unchanged.
    pub(crate) write_grants: WriteGrants,
    /// For the empty-queue-name shortcuts of 0.9.1.
    pub(crate) last_queue: Option<String>,
    /// Queues this channel consumed or fetched from; told when the channel goes away.
    pub(crate) queues: Vec<QueueRef>,
    /// The direct reply-to consumer; dropping the channel forgets its address.
    pub(crate) reply: Option<super::reply_to::ChannelReply>,
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
            route_cache: RouteCache::new(),
            write_grants: WriteGrants::default(),
            last_queue: None,
            queues: Vec::new(),
            reply: None,
        }
    }

    pub(crate) fn touch(&mut self, queue: &QueueRef) {
        if !self.queues.iter().any(|q| Arc::ptr_eq(q, queue)) {
            self.queues.push(Arc::clone(queue));
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

    #[test]
    fn confirms_coalesce_below_the_oldest_pending() {
        let mut t = ConfirmTracker::new();
        let a = t.publish(1);
        let b = t.publish(1);
        let c = t.publish(0);
        assert_eq!((a, b, c), (1, 2, 3));
        // 3 is unroutable and confirmed at once, but 1 and 2 are pending: no multiple ack.
        assert_eq!(t.drain(), [(3, true, false)]);
        t.answer(2, true);
        t.answer(1, true);
        assert_eq!(t.drain(), [(2, true, true)]);
        let d = t.publish(2);
        t.answer(d, true);
        t.answer(d, false);
        assert_eq!(t.drain(), [(4, false, false)]);
    }
}
