//! Settlements of delivered messages, batched per wake-up.
//!
//! A client that accepts each delivery sends one disposition per message; handed to the queue
//! one by one, each is a message to the queue task and a wake-up of it. Collected while a read
//! batch is handled and handed over once, they are one message per queue and outcome. A
//! client that sends one disposition per read (fe2o3 does, each one let go by the ACK our
//! next transfer carries) makes one batch of one message per read: the batch holds its seqs
//! inline and the list keeps its room, so that costs no allocation.

use std::sync::Arc;

use charon_engine::{QueueHandle, Settle, SettleSeqs};

/// Settlements waiting to be handed to their queues (`Arc<Q>`, a [`charon_engine::QueueRef`]
/// in the broker), in the order they were made.
#[derive(Debug)]
pub(crate) struct Settles<Q = QueueHandle> {
    pending: Vec<(Arc<Q>, Settle, SettleSeqs)>,
}

impl<Q> Default for Settles<Q> {
    fn default() -> Self {
        Self { pending: Vec::new() }
    }
}

impl<Q> Settles<Q> {
    /// Adds settlements; they join the last batch when it is for the same queue and outcome
    /// (so a queue still sees them in the order the client made them), without allocating
    /// beyond that batch's growth.
    pub(crate) fn add(&mut self, queue: Arc<Q>, how: Settle, seqs: impl IntoIterator<Item = u64>) {
        match self.pending.last_mut() {
            Some((last, last_how, batch)) if Arc::ptr_eq(last, &queue) && *last_how == how => batch.extend(seqs),
            _ => self.pending.push((queue, how, seqs.into_iter().collect())),
        }
    }

    /// The batches, oldest first, leaving none (and the list's room for the next ones).
    pub(crate) fn drain(&mut self) -> std::vec::Drain<'_, (Arc<Q>, Settle, SettleSeqs)> {
        self.pending.drain(..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_settlements_of_a_queue_and_outcome_are_one_batch_in_order() {
        let (a, b) = (Arc::new("a"), Arc::new("b"));
        let mut settles = Settles::default();
        settles.add(Arc::clone(&a), Settle::Ack, vec![1]);
        settles.add(Arc::clone(&a), Settle::Ack, vec![2, 3]);
        settles.add(Arc::clone(&b), Settle::Ack, vec![7]);
        settles.add(Arc::clone(&a), Settle::Ack, vec![4]);
        settles.add(Arc::clone(&a), Settle::Requeue, vec![5]);
        let batches: Vec<(&str, Settle, Vec<u64>)> =
            settles.drain().map(|(q, how, seqs)| (*q, how, seqs.to_vec())).collect();
        assert_eq!(
            batches,
            vec![
                ("a", Settle::Ack, vec![1, 2, 3]),
                ("b", Settle::Ack, vec![7]),
                ("a", Settle::Ack, vec![4]),
                ("a", Settle::Requeue, vec![5]),
            ]
        );
        assert_eq!(settles.drain().count(), 0);
    }
}
