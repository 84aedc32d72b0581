//! A queue's dead letters on their way to their target queues.
//!
//! The dead-lettering queue forwards its own dead letters, without ever waiting inside a
//! command: a target whose mailbox is full keeps the forwards queued here (in order) and the
//! queue's task waits for room in that mailbox while it goes on serving its own commands. A
//! dead-letter storm therefore slows only the queue that causes it, and two queues
//! dead-lettering into each other cannot deadlock. Messages held here are whole, even those the
//! queue had paged out, so expiry — the one source the queue drives itself — stops while the
//! outbox is full ([`Outbox::room`]). At-least-once dead lettering will keep forwards here until
//! their targets confirm them.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::mpsc::error::TrySendError;

use super::command::QueueCmd;
use super::handle::QueueRef;
use super::requests::Enqueue;
use crate::dead_letter::Forward;

/// Forwards handed to one target in one mailbox command at most.
const BATCH: usize = 64;
/// Dead letters waiting here before expiry stops making more (see [`Outbox::room`]).
const LIMIT_MESSAGES: usize = 4096;
/// Body bytes of the dead letters waiting here before expiry stops making more.
const LIMIT_BYTES: usize = 16 * 1024 * 1024;

#[derive(Debug, Default)]
pub(super) struct Outbox {
    pending: VecDeque<Forward>,
    /// Body bytes of `pending`.
    bytes: usize,
}

impl Outbox {
    pub(super) fn push(&mut self, forward: Forward) {
        self.bytes += forward.message.body.len();
        self.pending.push_back(forward);
    }

    /// How many more dead letters the queue's own expiry may add. Rejects and overflow still
    /// add theirs whatever this says: they come with a client's command.
    pub(super) fn room(&self) -> usize {
        if self.bytes >= LIMIT_BYTES { 0 } else { LIMIT_MESSAGES.saturating_sub(self.pending.len()) }
    }

    /// Hands as many forwards to their targets as their mailboxes take, in order. Returns the
    /// target that is full, if any: nothing more moves until it has room.
    pub(super) fn pump(&mut self) -> Option<QueueRef> {
        loop {
            let target = self.pending.front()?.targets.first()?.clone();
            // The run of forwards, from the front, whose next target is this queue.
            let run = self
                .pending
                .iter()
                .take(BATCH)
                .take_while(|f| f.targets.first().is_some_and(|t| t.id == target.id))
                .count();
            let items = self
                .pending
                .iter()
                .take(run)
                .map(|f| Enqueue { message: Arc::clone(&f.message), confirm: None })
                .collect();
            match target.tx.try_send(QueueCmd::Publish { items, confirm_to: None }) {
                // A deleted target simply does not get its copies, as in RabbitMQ.
                Ok(()) | Err(TrySendError::Closed(_)) => self.advance(run),
                Err(TrySendError::Full(_)) => return Some(target),
            }
        }
    }

    /// Removes the first target of the first `run` forwards, and the forwards left without
    /// targets.
    fn advance(&mut self, run: usize) {
        for forward in self.pending.iter_mut().take(run) {
            if !forward.targets.is_empty() {
                forward.targets.remove(0);
            }
        }
        while self.pending.front().is_some_and(|f| f.targets.is_empty()) {
            if let Some(done) = self.pending.pop_front() {
                self.bytes = self.bytes.saturating_sub(done.message.body.len());
            }
        }
    }
}

/// Resolves when `target` has room in its mailbox (or is gone).
pub(super) async fn room_in(target: &QueueRef) {
    let _ = target.tx.reserve().await;
}

#[cfg(test)]
mod tests {
    use charon_model::{Message, Table};
    use tokio::sync::mpsc;

    use super::super::args::QueueType;
    use super::super::handle::QueueHandle;
    use super::super::requests::QueueConfig;
    use super::*;

    fn queue(id: u64, capacity: usize) -> (QueueRef, mpsc::Receiver<QueueCmd>) {
        let (tx, rx) = mpsc::channel(capacity);
        let config = QueueConfig {
            name: format!("q{id}"),
            vhost: "/".into(),
            durable: false,
            auto_delete: false,
            exclusive_owner: None,
            arguments: Table::new(),
            queue_type: QueueType::Classic,
        };
        (Arc::new(QueueHandle::new(id, config, tx)), rx)
    }

    fn forward(targets: &[&QueueRef]) -> Forward {
        Forward::new(Arc::new(Message::default()), targets.iter().map(|t| Arc::clone(t)).collect())
    }

    fn published(rx: &mut mpsc::Receiver<QueueCmd>) -> Vec<usize> {
        let mut sizes = Vec::new();
        while let Ok(cmd) = rx.try_recv() {
            if let QueueCmd::Publish { items, .. } = cmd {
                sizes.push(items.len());
            }
        }
        sizes
    }

    #[test]
    fn batches_per_target_and_stops_at_a_full_mailbox_in_order() {
        let (a, mut rx_a) = queue(1, 8);
        let (b, mut rx_b) = queue(2, 1);
        b.tx.try_send(QueueCmd::Resume).unwrap();
        let mut outbox = Outbox::default();
        for _ in 0..3 {
            outbox.push(forward(&[&a, &b]));
        }
        outbox.push(forward(&[&b]));
        // a takes the run of three in one command; b is full, so everything waits for it.
        assert_eq!(outbox.pump().map(|q| q.id), Some(2));
        assert_eq!(published(&mut rx_a), [3]);
        assert_eq!(published(&mut rx_b), Vec::<usize>::new());
        assert_eq!(outbox.room(), LIMIT_MESSAGES - 4);
        // Room again: b gets its four copies in one command, in order.
        assert_eq!(outbox.pump().map(|q| q.id), None);
        assert_eq!(published(&mut rx_b), [4]);
        assert!(outbox.pending.is_empty());
        assert_eq!(outbox.room(), LIMIT_MESSAGES);
    }

    #[test]
    fn bodies_waiting_past_the_byte_limit_leave_expiry_no_room() {
        let (target, _rx) = queue(1, 1);
        target.tx.try_send(QueueCmd::Resume).unwrap();
        let mut outbox = Outbox::default();
        let big = Message::new(Default::default(), charon_model::Body::Data(vec![0; LIMIT_BYTES / 2].into()));
        outbox.push(Forward::new(Arc::new(big.clone()), vec![Arc::clone(&target)]));
        assert_eq!(outbox.room(), LIMIT_MESSAGES - 1);
        outbox.push(Forward::new(Arc::new(big), vec![Arc::clone(&target)]));
        assert_eq!(outbox.room(), 0);
    }

    #[test]
    fn a_deleted_target_is_skipped() {
        let (a, rx_a) = queue(1, 8);
        drop(rx_a);
        let mut outbox = Outbox::default();
        outbox.push(forward(&[&a]));
        assert_eq!(outbox.pump().map(|q| q.id), None);
        assert!(outbox.pending.is_empty());
    }
}
