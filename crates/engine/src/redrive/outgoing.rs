//! What a redrive publishes, gathered per destination queue.
//!
//! A copy of a message the job holds as a delivery (a consuming pass), routed to one queue
//! alone, is *moved* ([`crate::queue::QueueHandle::publish_moved`]): its enqueue record in the
//! log also removes the message from the source, so a crash leaves it in exactly one of the two
//! queues, never both. Any other copy is published as it is, and the source lets the message go
//! once every queue confirmed it: a crash in between can leave it in the source too (moved again
//! later: at least once). That covers a copy that fans out (one queue's record cannot remove the
//! source for all), and a message a browsing pass reads while it stays ready in the source: a
//! consumer of the source could take and requeue it, still in use there after its log record
//! was removed.
//!
//! A moved copy is refused by a destination without room in any overflow mode (as a plain
//! publish is by `reject-publish`); `reject-publish-dlx` refuses it without dead-lettering a
//! second copy, and `drop-head` takes it and drops its head, as for any publish.

use std::sync::Arc;

use charon_model::Message;

use crate::queue::{ConfirmTo, Enqueue, MovedFrom, QueueRef};

/// One destination queue's share of a batch.
struct Outgoing {
    queue: QueueRef,
    /// Copies routed to this queue alone, with their places in the source.
    moved: Vec<Enqueue>,
    moved_from: Vec<u64>,
    /// Copies of messages that fan out.
    copied: Vec<Enqueue>,
}

/// Copies for their destination queues, published together by [`Batch::send`].
#[derive(Default)]
pub(super) struct Batch(Vec<Outgoing>);

impl Batch {
    /// Adds a copy of a source message for each of `queues` (its route), confirmed under
    /// `number`; `held` is the message's place in the source when the job holds it as a
    /// delivery.
    pub(super) fn add(&mut self, queues: &[QueueRef], message: &Arc<Message>, number: u64, held: Option<u64>) {
        let moved_from = if queues.len() == 1 { held } else { None };
        for queue in queues {
            let index = match self.0.iter().position(|o| o.queue.id == queue.id) {
                Some(index) => index,
                None => {
                    self.0.push(Outgoing {
                        queue: Arc::clone(queue),
                        moved: Vec::new(),
                        moved_from: Vec::new(),
                        copied: Vec::new(),
                    });
                    self.0.len() - 1
                }
            };
            let Some(outgoing) = self.0.get_mut(index) else { continue };
            let enqueue = Enqueue { message: Arc::clone(message), confirm: Some(number) };
            match moved_from {
                Some(seq) => {
                    outgoing.moved.push(enqueue);
                    outgoing.moved_from.push(seq);
                }
                None => outgoing.copied.push(enqueue),
            }
        }
    }

    /// Publishes each queue's copies, the moved ones out of `source` (a queue id), with the
    /// confirm channel `to` gives that queue. Returns, per queue that was gone, its channel
    /// and the confirm numbers it will never answer.
    pub(super) async fn send(self, source: u64, mut to: impl FnMut(&QueueRef) -> ConfirmTo) -> Vec<(u32, Vec<u64>)> {
        let mut gone = Vec::new();
        for Outgoing { queue, moved, moved_from, copied } in self.0 {
            let to = to(&queue);
            let channel = to.channel;
            let numbers = |items: &[Enqueue]| items.iter().filter_map(|e| e.confirm).collect::<Vec<u64>>();
            if !moved.is_empty() {
                let unanswered = numbers(&moved);
                let from = MovedFrom { queue: source, seqs: moved_from };
                if !queue.publish_moved(moved, from, to.clone()).await {
                    gone.push((channel, unanswered));
                }
            }
            if !copied.is_empty() {
                let unanswered = numbers(&copied);
                if !queue.publish(copied, Some(to)).await {
                    gone.push((channel, unanswered));
                }
            }
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use tokio::sync::mpsc;

    use super::*;
    use crate::queue::QueueHandle;
    use crate::queue::command::QueueCmd;
    use crate::session::SessionSink;

    fn queue(id: u64) -> (QueueRef, mpsc::Receiver<QueueCmd>) {
        QueueHandle::with_mailbox(id, &format!("q{id}"), 8)
    }

    fn numbers(items: &[Enqueue]) -> Vec<Option<u64>> {
        items.iter().map(|i| i.confirm).collect()
    }

    #[tokio::test]
    async fn a_held_message_routed_to_one_queue_is_moved_and_any_other_copy_is_published() {
        let (a, mut a_rx) = queue(1);
        let (b, mut b_rx) = queue(2);
        let mut batch = Batch::default();
        let message = Arc::new(Message::default());
        batch.add(std::slice::from_ref(&a), &message, 11, Some(100));
        batch.add(&[Arc::clone(&a), Arc::clone(&b)], &message, 12, Some(101));
        batch.add(std::slice::from_ref(&a), &message, 13, Some(102));
        batch.add(std::slice::from_ref(&b), &message, 14, None);
        let (session, _events) = SessionSink::new(7, 0);
        let gone = batch
            .send(50, |queue| ConfirmTo { session: session.clone(), channel: 2 + u32::try_from(queue.id).unwrap() })
            .await;
        assert!(gone.is_empty());
        let Ok(QueueCmd::PublishMoved { items, from, confirm_to }) = a_rx.try_recv() else { panic!("a move first") };
        assert_eq!(
            (numbers(&items), from.queue, from.seqs, confirm_to.channel),
            (vec![Some(11), Some(13)], 50, vec![100, 102], 3)
        );
        let Ok(QueueCmd::Publish { items, confirm_to }) = a_rx.try_recv() else { panic!("then the fanned-out copy") };
        assert_eq!((numbers(&items), confirm_to.map(|to| to.channel)), (vec![Some(12)], Some(3)));
        let Ok(QueueCmd::Publish { items, .. }) = b_rx.try_recv() else { panic!("b gets the fanned-out copy") };
        assert_eq!(numbers(&items), [Some(12), Some(14)], "and the copy of a message not held");
        assert!(a_rx.try_recv().is_err() && b_rx.try_recv().is_err(), "nothing else");
    }

    #[tokio::test]
    async fn a_gone_queue_hands_its_numbers_back_by_channel() {
        let (a, a_rx) = queue(1);
        drop(a_rx);
        let (b, _b_rx) = queue(2);
        let mut batch = Batch::default();
        let message = Arc::new(Message::default());
        batch.add(std::slice::from_ref(&a), &message, 1, Some(10));
        batch.add(&[Arc::clone(&a), Arc::clone(&b)], &message, 2, Some(11));
        let (session, _events) = SessionSink::new(7, 0);
        let gone = batch
            .send(50, |queue| ConfirmTo { session: session.clone(), channel: 2 + u32::try_from(queue.id).unwrap() })
            .await;
        assert_eq!(gone, [(3, vec![1]), (3, vec![2])]);
    }
}
