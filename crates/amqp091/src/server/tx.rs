//! One channel's AMQP 0.9.1 transaction (`tx.select`), as RabbitMQ 4.0.5 keeps it: the
//! publishes and settlements made since the last commit or rollback, held in the channel until
//! `tx.commit` applies them or `tx.rollback` drops them.
//!
//! What is held, and when, follows `rabbit_channel`:
//! - a publish is checked and routed when it arrives (permission and routing errors close the
//!   channel then), but reaches its queues, or comes back as `basic.return`, only at commit;
//! - an ack, nack or reject takes its delivery tags out of the channel's unacked set at once
//!   (an unknown tag fails there and then, and a second ack of the same tag is unknown), and
//!   settles them with their queues at commit; a rollback puts them back, unacked, and
//!   requeues nothing;
//! - a commit first delivers every held publish in order, then applies the settlements in
//!   order, and answers `tx.commit-ok` only once every queue confirmed what it was given (so
//!   persistent messages in durable queues are on disk first): the queues answer through the
//!   publisher-confirm path the channel already has. While it waits, any other method on the
//!   channel is a connection error, and one refused message (a full `reject-publish` queue)
//!   turns the commit into `partial tx completion`.
//!
//! Bound: like RabbitMQ, none per channel. A client may publish without ever committing, and
//! what it holds lives in the broker's resident memory, which is what the memory alarm
//! measures; the alarm (and the store's flow control) holds a transactional publish at the
//! socket exactly like any other, so an uncommitted transaction that grows blocks its
//! connection at the watermark instead of growing without end. A separate byte budget per
//! transaction would refuse what RabbitMQ accepts.

use std::mem;
use std::sync::Arc;

use charon_engine::{QueueRef, Settle};
use charon_model::Message;

use super::channel::PendingAck;
use super::confirms::ConfirmTracker;

/// A publish held until commit, with the queues it was routed to when it arrived.
#[derive(Debug)]
pub(crate) struct HeldPublish {
    pub(crate) message: Arc<Message>,
    pub(crate) queues: Arc<[QueueRef]>,
    pub(crate) mandatory: bool,
}

/// An ack, nack or reject held until commit: the deliveries it settles with their delivery
/// tags (a rollback puts them back under the same tags), and how.
#[derive(Debug)]
pub(crate) struct HeldSettle {
    pub(crate) how: Settle,
    pub(crate) deliveries: Vec<(u64, PendingAck)>,
}

/// The work a commit applies: publishes first, then settlements, each in arrival order (the
/// order of RabbitMQ's `tx.commit`).
#[derive(Debug)]
pub(crate) struct Commit {
    pub(crate) publishes: Vec<HeldPublish>,
    pub(crate) settles: Vec<HeldSettle>,
}

/// Whether a commit is waiting for its queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Open,
    /// Committed work was handed to the queues; `tx.commit-ok` waits for their answers.
    Committing,
}

/// A transactional channel's held work and its commit in progress.
#[derive(Debug)]
pub(crate) struct Transaction {
    publishes: Vec<HeldPublish>,
    settles: Vec<HeldSettle>,
    /// Numbers the committed publishes that reached a queue, and collects the queues'
    /// answers; a channel is never in confirm mode and in a transaction at once, so the
    /// numbers are the transaction's own.
    confirms: ConfirmTracker,
    phase: Phase,
}

impl Transaction {
    /// Publishes and settlements held for the commit.
    pub(crate) fn held(&self) -> (usize, usize) {
        (self.publishes.len(), self.settles.len())
    }

    pub(crate) fn new() -> Self {
        Self { publishes: Vec::new(), settles: Vec::new(), confirms: ConfirmTracker::new(), phase: Phase::Open }
    }

    /// Holds a routed publish until commit.
    pub(crate) fn hold_publish(&mut self, publish: HeldPublish) {
        self.publishes.push(publish);
    }

    /// Holds settled deliveries (already taken out of the unacked set) until commit.
    pub(crate) fn hold_settle(&mut self, how: Settle, deliveries: Vec<(u64, PendingAck)>) {
        self.settles.push(HeldSettle { how, deliveries });
    }

    /// Starts a commit: takes the held work, which the caller applies, numbering each
    /// publish that reaches queues with [`Transaction::number`].
    pub(crate) fn begin_commit(&mut self) -> Commit {
        self.phase = Phase::Committing;
        Commit { publishes: mem::take(&mut self.publishes), settles: mem::take(&mut self.settles) }
    }

    /// The confirm number of a committed publish handed to `queues` queues.
    pub(crate) fn number(&mut self, queues: usize) -> u64 {
        self.confirms.publish(queues)
    }

    /// One queue answered for committed publish `seq`.
    pub(crate) fn answer(&mut self, seq: u64, accepted: bool) {
        self.confirms.answer(seq, accepted);
    }

    /// The outcome of the commit in progress once every queue answered: `Some(true)` when
    /// all accepted, `Some(false)` when one refused (RabbitMQ's `partial tx completion`; what
    /// was accepted stays). `None` while queues have yet to answer, or without a commit.
    pub(crate) fn poll_commit(&mut self) -> Option<bool> {
        if self.phase != Phase::Committing || self.confirms.is_waiting() {
            return None;
        }
        self.phase = Phase::Open;
        Some(self.confirms.drain().iter().all(|(_, ack, _)| *ack))
    }

    /// Drops the held publishes and returns the held deliveries, to go back to the unacked
    /// set as they were: a rollback requeues nothing.
    pub(crate) fn rollback(&mut self) -> Vec<(u64, PendingAck)> {
        self.publishes.clear();
        mem::take(&mut self.settles).into_iter().flat_map(|s| s.deliveries).collect()
    }
}

#[cfg(test)]
mod tests {

    use charon_model::{Body, Routing};

    use super::*;

    fn message(key: &str) -> Arc<Message> {
        let routing = Routing { routing_key: key.to_owned(), ..Routing::default() };
        Arc::new(Message::new(routing, Body::Data("x".into())))
    }

    use super::super::test_queue::queue;

    fn pending(queue: &QueueRef, seq: u64) -> PendingAck {
        PendingAck { queue: Arc::clone(queue), seq, consumed: true, delivered_at: std::time::Instant::now() }
    }

    #[tokio::test]
    async fn a_commit_takes_publishes_then_settlements_in_arrival_order() {
        let q = queue().await;
        let mut tx = Transaction::new();
        tx.hold_publish(HeldPublish { message: message("a"), queues: Arc::from([]), mandatory: true });
        tx.hold_settle(Settle::Ack, vec![(3, pending(&q, 30))]);
        tx.hold_publish(HeldPublish { message: message("b"), queues: Arc::from([Arc::clone(&q)]), mandatory: false });
        tx.hold_settle(Settle::Requeue, vec![(1, pending(&q, 10))]);
        assert_eq!(tx.poll_commit(), None, "not committing");
        let commit = tx.begin_commit();
        let keys: Vec<(&str, usize, bool)> = commit
            .publishes
            .iter()
            .map(|p| (p.message.routing.routing_key.as_str(), p.queues.len(), p.mandatory))
            .collect();
        assert_eq!(keys, [("a", 0, true), ("b", 1, false)]);
        let settles: Vec<(Settle, Vec<(u64, u64)>)> =
            commit.settles.iter().map(|s| (s.how, s.deliveries.iter().map(|(t, p)| (*t, p.seq)).collect())).collect();
        assert_eq!(settles, [(Settle::Ack, vec![(3, 30)]), (Settle::Requeue, vec![(1, 10)])]);
        // Nothing numbered: the commit is complete at once, and the next one starts empty.
        assert_eq!(tx.poll_commit(), Some(true));
        assert_eq!(tx.poll_commit(), None, "answered once");
        let next = tx.begin_commit();
        assert!(next.publishes.is_empty() && next.settles.is_empty());
    }

    #[test]
    fn commit_ok_waits_for_every_queue_and_a_refusal_fails_the_commit() {
        let mut tx = Transaction::new();
        assert_eq!(tx.poll_commit(), None, "no commit in progress");
        tx.begin_commit();
        let a = tx.number(2);
        let b = tx.number(1);
        assert_eq!((a, b), (1, 2));
        assert_eq!(tx.poll_commit(), None);
        tx.answer(a, true);
        tx.answer(b, true);
        assert_eq!(tx.poll_commit(), None, "publish 1 still waits for its second queue");
        tx.answer(a, true);
        assert_eq!(tx.poll_commit(), Some(true));
        assert_eq!(tx.poll_commit(), None, "answered once");

        tx.begin_commit();
        let c = tx.number(1);
        let d = tx.number(1);
        assert_eq!((c, d), (3, 4), "numbers go on across commits");
        tx.answer(c, false);
        assert_eq!(tx.poll_commit(), None);
        tx.answer(d, true);
        assert_eq!(tx.poll_commit(), Some(false));
        assert_eq!(tx.poll_commit(), None);
    }

    #[tokio::test]
    async fn a_rollback_drops_publishes_and_gives_back_settled_deliveries() {
        let q = queue().await;
        let mut tx = Transaction::new();
        tx.hold_publish(HeldPublish { message: message("a"), queues: Arc::from([Arc::clone(&q)]), mandatory: false });
        tx.hold_settle(Settle::Ack, vec![(2, pending(&q, 20))]);
        tx.hold_settle(Settle::Discard, vec![(4, pending(&q, 40)), (5, pending(&q, 50))]);
        let back: Vec<(u64, u64)> = tx.rollback().into_iter().map(|(tag, p)| (tag, p.seq)).collect();
        assert_eq!(back, [(2, 20), (4, 40), (5, 50)]);
        let commit = tx.begin_commit();
        assert!(commit.publishes.is_empty() && commit.settles.is_empty());
    }
}
