//! A queue's dead letters on their way to their target queues.
//!
//! The dead-lettering queue forwards its own dead letters, without ever waiting inside a
//! command: a target whose mailbox is full keeps the forwards queued here (in order) and the
//! queue's task waits for room in that mailbox while it goes on serving its own commands. A
//! dead-letter storm therefore slows only the queue that causes it, and two queues
//! dead-lettering into each other cannot deadlock. Messages held here are whole, even those the
//! queue had paged out, so expiry — the one source the queue drives itself — stops while the
//! outbox is full ([`Outbox::room`]). A copy whose source waits for its targets (see
//! `unconfirmed.rs`) is published with its confirm number, and the confirms come back to the
//! source's own inbox; a target that is gone will never confirm, so its numbers are handed back
//! at once.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::mpsc::error::TrySendError;

use super::command::QueueCmd;
use super::handle::QueueRef;
use super::requests::{ConfirmTo, Enqueue};
use crate::dead_letter::Forward;
use crate::session::SessionEvent;

/// Forwards handed to one target in one mailbox command at most.
const BATCH: usize = 64;
/// Dead letters waiting here before expiry stops making more (see [`Outbox::room`]).
const LIMIT_MESSAGES: usize = 4096;
/// Body bytes of the dead letters waiting here before expiry stops making more.
const LIMIT_BYTES: usize = 16 * 1024 * 1024;

#[derive(Debug)]
pub(super) struct Outbox {
    pending: VecDeque<Forward>,
    /// Body bytes of `pending`.
    bytes: usize,
    /// Where the targets confirm copies that carry a confirm number.
    confirm_to: ConfirmTo,
}

impl Outbox {
    /// An empty outbox whose targets confirm to `confirm_to`.
    pub(super) fn new(confirm_to: ConfirmTo) -> Self {
        Self { pending: VecDeque::new(), bytes: 0, confirm_to }
    }

    pub(super) fn push(&mut self, forward: Forward) {
        self.bytes += forward.message.body.len();
        self.pending.push_back(forward);
    }

    /// Whether every dead letter was handed to its targets.
    pub(super) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// How many more dead letters the queue's own expiry may add. Rejects and overflow still
    /// add theirs whatever this says: they come with a client's command.
    pub(super) fn room(&self) -> usize {
        if self.bytes >= LIMIT_BYTES { 0 } else { LIMIT_MESSAGES.saturating_sub(self.pending.len()) }
    }

    /// Hands as many forwards to their targets as their mailboxes take, in order. Returns the
    /// target that is full, if any (nothing more moves until it has room), and the confirm
    /// numbers of copies whose target is gone.
    pub(super) fn pump(&mut self, gone: &mut Vec<u64>) -> Option<QueueRef> {
        loop {
            let first = self.pending.front()?;
            let target = first.targets.first()?.clone();
            let reply = reply_key(first);
            // The run of forwards, from the front, whose next target is this queue and whose
            // confirms go to the same place.
            let run = self
                .pending
                .iter()
                .take(BATCH)
                .take_while(|f| f.targets.first().is_some_and(|t| t.id == target.id) && reply_key(f) == reply)
                .count();
            let items: Vec<Enqueue> = self
                .pending
                .iter()
                .take(run)
                .map(|f| Enqueue { message: Arc::clone(&f.message), confirm: f.confirm })
                .collect();
            // A target holding back for flow takes no dead letters either: they wait here, and
            // expiry stops once it is full ([`Self::room`]).
            if target.admission.held_for_flow() {
                return Some(target);
            }
            let reply_to = first.reply_to.clone();
            let confirm_to = items.iter().any(|i| i.confirm.is_some()).then(|| match &reply_to {
                Some(to) => to.clone(),
                None => self.confirm_to.clone(),
            });
            match target.tx.try_send(QueueCmd::Publish { items, confirm_to }) {
                Ok(()) => self.advance(run),
                // A deleted target simply does not get its copies, as in RabbitMQ.
                Err(TrySendError::Closed(QueueCmd::Publish { items, .. })) => {
                    let numbers = items.iter().filter_map(|i| i.confirm);
                    match reply_to {
                        // Someone else's numbers: they hear of the refusal themselves.
                        Some(to) => to.session.send(SessionEvent::Confirms {
                            channel: to.channel,
                            accepted: Vec::new(),
                            refused: numbers.collect(),
                        }),
                        None => gone.extend(numbers),
                    }
                    self.advance(run);
                }
                Err(TrySendError::Closed(_)) => self.advance(run),
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

/// Forwards whose confirms go to the same place share a publish.
fn reply_key(forward: &Forward) -> Option<(crate::session::SessionId, u32)> {
    forward.reply_to.as_ref().map(|to| (to.session.id, to.channel))
}

/// Resolves when `target` takes dead letters again: it does not hold back for flow and has
/// room in its mailbox (or is gone).
pub(super) async fn room_in(target: &QueueRef) {
    target.admission.flow_let_go().await;
    let _ = target.tx.reserve().await;
}

#[cfg(test)]
mod tests {
    use charon_model::Message;
    use tokio::sync::mpsc;

    use super::super::handle::QueueHandle;
    use super::*;
    use crate::session::{SessionEvent, SessionSink};

    fn queue(id: u64, capacity: usize) -> (QueueRef, mpsc::Receiver<QueueCmd>) {
        QueueHandle::with_mailbox(id, &format!("q{id}"), capacity)
    }

    fn forward(targets: &[&QueueRef]) -> Forward {
        Forward::new(Arc::new(Message::default()), targets.iter().map(|t| Arc::clone(t)).collect(), None)
    }

    fn outbox() -> (Outbox, mpsc::UnboundedReceiver<SessionEvent>) {
        let (session, inbox) = SessionSink::new(99, 0);
        (Outbox::new(ConfirmTo { session, channel: 0 }), inbox)
    }

    /// Pumps once; the full target's id and the numbers handed back for gone targets.
    fn pump(outbox: &mut Outbox) -> (Option<u64>, Vec<u64>) {
        let mut gone = Vec::new();
        let full = outbox.pump(&mut gone).map(|q| q.id);
        (full, gone)
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
        let (mut outbox, _inbox) = outbox();
        for _ in 0..3 {
            outbox.push(forward(&[&a, &b]));
        }
        outbox.push(forward(&[&b]));
        // a takes the run of three in one command; b is full, so everything waits for it.
        assert_eq!(pump(&mut outbox).0, Some(2));
        assert_eq!(published(&mut rx_a), [3]);
        assert_eq!(published(&mut rx_b), Vec::<usize>::new());
        assert_eq!(outbox.room(), LIMIT_MESSAGES - 4);
        // Room again: b gets its four copies in one command, in order.
        assert_eq!(pump(&mut outbox).0, None);
        assert_eq!(published(&mut rx_b), [4]);
        assert!(outbox.pending.is_empty());
        assert_eq!(outbox.room(), LIMIT_MESSAGES);
    }

    #[test]
    fn bodies_waiting_past_the_byte_limit_leave_expiry_no_room() {
        let (target, _rx) = queue(1, 1);
        target.tx.try_send(QueueCmd::Resume).unwrap();
        let (mut outbox, _inbox) = outbox();
        let big = Message::new(Default::default(), charon_model::Body::Data(vec![0; LIMIT_BYTES / 2].into()));
        let big_forward = |message: &Message| Forward::new(Arc::new(message.clone()), vec![Arc::clone(&target)], None);
        outbox.push(big_forward(&big));
        assert_eq!(outbox.room(), LIMIT_MESSAGES - 1);
        outbox.push(big_forward(&big));
        assert_eq!(outbox.room(), 0);
    }

    #[test]
    fn a_deleted_target_is_skipped() {
        let (a, rx_a) = queue(1, 8);
        drop(rx_a);
        let (mut outbox, _inbox) = outbox();
        outbox.push(forward(&[&a]));
        assert_eq!(pump(&mut outbox).0, None);
        assert!(outbox.pending.is_empty());
    }

    #[test]
    fn copies_with_a_confirm_number_ask_their_target_to_confirm_to_the_source() {
        let (mut outbox, _inbox) = outbox();
        let (target, mut rx) = queue(1, 8);
        for confirm in [Some(5), None] {
            outbox.push(Forward::new(Arc::new(Message::default()), vec![Arc::clone(&target)], confirm));
        }
        assert_eq!(pump(&mut outbox), (None, vec![]));
        let Ok(QueueCmd::Publish { items, confirm_to }) = rx.try_recv() else { panic!("one publish") };
        assert_eq!(items.iter().map(|i| i.confirm).collect::<Vec<_>>(), [Some(5), None]);
        assert_eq!(confirm_to.map(|to| to.session.id), Some(99));
    }

    #[test]
    fn a_gone_target_hands_the_numbers_back() {
        let (mut outbox, _inbox) = outbox();
        let (gone_target, rx) = queue(1, 8);
        drop(rx);
        let (live, mut live_rx) = queue(2, 8);
        outbox.push(Forward::new(
            Arc::new(Message::default()),
            vec![Arc::clone(&gone_target), Arc::clone(&live)],
            Some(7),
        ));
        assert_eq!(
            pump(&mut outbox),
            (None, vec![7]),
            "the deleted target answers at once; the live one confirms itself"
        );
        assert!(matches!(live_rx.try_recv(), Ok(QueueCmd::Publish { confirm_to: Some(_), .. })));
    }

    #[test]
    fn a_passed_on_copy_is_confirmed_to_its_source_not_to_the_forwarding_queue() {
        let (mut outbox, _own) = outbox();
        let (source, mut source_inbox) = SessionSink::new(7, 0);
        let (target, mut rx) = queue(1, 8);
        let mut passed_on = Forward::new(Arc::new(Message::default()), vec![Arc::clone(&target)], Some(3));
        passed_on.reply_to = Some(ConfirmTo { session: source, channel: 2 });
        outbox.push(Forward::new(Arc::new(Message::default()), vec![Arc::clone(&target)], Some(5)));
        outbox.push(passed_on);
        assert_eq!(pump(&mut outbox), (None, vec![]));
        // Two publishes: the forwarding queue's own copy, then the passed-on one.
        let confirms: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok())
            .filter_map(|cmd| match cmd {
                QueueCmd::Publish { items, confirm_to } => {
                    Some((items[0].confirm, confirm_to.map(|to| (to.session.id, to.channel))))
                }
                _ => None,
            })
            .collect();
        assert_eq!(confirms, [(Some(5), Some((99, 0))), (Some(3), Some((7, 2)))]);
        // A gone target refuses a passed-on copy to its source directly.
        let (gone, rx) = queue(2, 8);
        drop(rx);
        let (source, mut source_inbox2) = SessionSink::new(8, 0);
        let mut passed_on = Forward::new(Arc::new(Message::default()), vec![gone], Some(4));
        passed_on.reply_to = Some(ConfirmTo { session: source, channel: 1 });
        outbox.push(passed_on);
        assert_eq!(pump(&mut outbox), (None, vec![]));
        let Ok(SessionEvent::Confirms { channel, accepted, refused }) = source_inbox2.try_recv() else {
            panic!("a refusal")
        };
        assert_eq!((channel, accepted, refused), (1, vec![], vec![4]));
        assert!(source_inbox.try_recv().is_err());
    }
}
