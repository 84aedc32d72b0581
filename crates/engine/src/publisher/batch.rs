//! One queue's share of what a [`super::Publisher`] routed.

use std::sync::Arc;

use crate::queue::{ConfirmTo, Enqueue, MovedFrom, QueueRef};

/// Messages for one queue, confirmed on one channel; with `moved_from`, copies of messages
/// of that source queue, each moved out of it by its enqueue record.
#[derive(Debug)]
pub(super) struct Batch {
    pub(super) queue: QueueRef,
    pub(super) channel: u32,
    pub(super) items: Vec<Enqueue>,
    moved_from: Option<u64>,
    /// With `moved_from`: each item's sequence number in the source.
    moved_seqs: Vec<u64>,
}

impl Batch {
    /// A batch of `first`; with `moved`, the source queue it is moved out of and its seq there.
    pub(super) fn new(queue: &QueueRef, channel: u32, moved: Option<(u64, u64)>, first: Enqueue) -> Self {
        let (moved_from, moved_seqs) = match moved {
            Some((source, seq)) => (Some(source), vec![seq]),
            None => (None, Vec::new()),
        };
        Self { queue: Arc::clone(queue), channel, items: vec![first], moved_from, moved_seqs }
    }

    /// Whether a message for `queue` on `channel` (moved out of `moved_from`) joins this batch.
    pub(super) fn takes(&self, queue: &QueueRef, channel: u32, moved_from: Option<u64>) -> bool {
        self.channel == channel && self.moved_from == moved_from && Arc::ptr_eq(&self.queue, queue)
    }

    /// Whether any of its messages asks for a confirmation (else the queue is told nowhere
    /// to send one).
    pub(super) fn wants_confirms(&self) -> bool {
        self.items.iter().any(|item| item.confirm.is_some())
    }

    pub(super) fn add_moved(&mut self, item: Enqueue, seq: u64) {
        self.items.push(item);
        self.moved_seqs.push(seq);
    }

    /// Hands the batch to its queue without waiting for its admission (the caller decided),
    /// its confirmations going `to`; `None` once it did, or the confirm numbers the queue will
    /// never answer when it is gone.
    pub(super) async fn send(self, to: Option<ConfirmTo>) -> Option<Vec<u64>> {
        let Self { queue, items, moved_from, moved_seqs, .. } = self;
        // Read before the items go: a gone queue does not hand them back.
        let unanswered: Vec<u64> =
            if to.is_some() { items.iter().filter_map(|item| item.confirm).collect() } else { Vec::new() };
        let sent = match (moved_from, to) {
            (Some(source), Some(to)) => {
                queue.publish_moved(items, MovedFrom { queue: source, seqs: moved_seqs }, to).await
            }
            (_, to) => queue.publish_checked(items, to).await,
        };
        (!sent).then_some(unanswered)
    }
}
