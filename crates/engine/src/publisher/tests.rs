#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use tokio::sync::mpsc;

use super::*;
use crate::queue::QueueHandle;
use crate::queue::command::QueueCmd;

fn queue(id: u64) -> (QueueRef, mpsc::Receiver<QueueCmd>) {
    QueueHandle::with_mailbox(id, &format!("q{id}"), 8)
}

fn numbers(items: &[Enqueue]) -> Vec<Option<u64>> {
    items.iter().map(|i| i.confirm).collect()
}

fn publisher() -> Publisher {
    let (sink, _events) = SessionSink::new(7, 0);
    Publisher::new(Some(sink))
}

/// The next command in a mailbox, as `(kind, confirm numbers, confirm channel)`.
fn next(rx: &mut mpsc::Receiver<QueueCmd>) -> (&'static str, Vec<Option<u64>>, Option<u32>) {
    match rx.try_recv() {
        Ok(QueueCmd::Publish { items, confirm_to }) => ("publish", numbers(&items), confirm_to.map(|to| to.channel)),
        Ok(QueueCmd::PublishMoved { items, confirm_to, .. }) => ("moved", numbers(&items), Some(confirm_to.channel)),
        Ok(_) => ("other", Vec::new(), None),
        Err(_) => ("none", Vec::new(), None),
    }
}

#[tokio::test]
async fn each_queue_gets_one_command_per_channel_with_its_messages_in_order() {
    let (a, mut a_rx) = queue(1);
    let (b, mut b_rx) = queue(2);
    let mut publisher = publisher();
    let message = Arc::new(Message::default());
    publisher.push(&[Arc::clone(&a), Arc::clone(&b)], 1, &message, Some(1));
    publisher.push(std::slice::from_ref(&a), 1, &message, Some(2));
    publisher.push(std::slice::from_ref(&a), 2, &message, Some(1));
    publisher.push(std::slice::from_ref(&b), 1, &message, None);
    assert!(publisher.flush(Flush::Hold).await.is_empty());
    assert_eq!(next(&mut a_rx), ("publish", vec![Some(1), Some(2)], Some(1)));
    assert_eq!(next(&mut a_rx), ("publish", vec![Some(1)], Some(2)));
    assert_eq!(next(&mut a_rx).0, "none");
    assert_eq!(next(&mut b_rx), ("publish", vec![Some(1), None], Some(1)));
    assert_eq!(next(&mut b_rx).0, "none");
}

#[tokio::test]
async fn a_batch_that_asks_no_confirmation_names_nowhere_to_send_one() {
    let (a, mut a_rx) = queue(1);
    let mut publisher = publisher();
    publisher.push(std::slice::from_ref(&a), 1, &Arc::new(Message::default()), None);
    publisher.flush(Flush::Force).await;
    assert_eq!(next(&mut a_rx), ("publish", vec![None], None));
}

#[tokio::test]
async fn a_held_queue_stops_the_flush_at_its_batch_until_it_admits() {
    let (a, mut a_rx) = queue(1);
    let (b, mut b_rx) = queue(2);
    let mut publisher = publisher();
    let message = Arc::new(Message::default());
    publisher.push(std::slice::from_ref(&a), 1, &message, Some(1));
    publisher.push(std::slice::from_ref(&b), 1, &message, Some(2));
    a.admission.set_for_tests(true, false);
    publisher.flush(Flush::Hold).await;
    assert_eq!(publisher.held_by().map(|q| q.id), Some(1));
    assert!(publisher.holding().is_some_and(Admission::is_closed));
    assert_eq!((next(&mut a_rx).0, next(&mut b_rx).0), ("none", "none"), "b waits behind a: order");
    a.admission.set_for_tests(false, false);
    publisher.flush(Flush::Hold).await;
    assert!(!publisher.held());
    assert_eq!((next(&mut a_rx).1, next(&mut b_rx).1), (vec![Some(1)], vec![Some(2)]));
}

#[tokio::test]
async fn force_hands_over_what_a_held_queue_would_stop() {
    let (a, mut a_rx) = queue(1);
    let mut publisher = publisher();
    publisher.push(std::slice::from_ref(&a), 1, &Arc::new(Message::default()), Some(1));
    a.admission.set_for_tests(false, true);
    publisher.flush(Flush::Force).await;
    assert!(!publisher.held());
    assert_eq!(next(&mut a_rx).1, [Some(1)]);
}

// Paused time: the sleep lets the flush run until it waits, without a real delay.
#[tokio::test(start_paused = true)]
async fn wait_waits_for_the_queue_to_admit() {
    let (a, mut a_rx) = queue(1);
    let mut publisher = publisher();
    publisher.push(std::slice::from_ref(&a), 1, &Arc::new(Message::default()), Some(1));
    a.admission.set_for_tests(true, false);
    let flushing = tokio::spawn(async move { publisher.flush(Flush::Wait).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!flushing.is_finished());
    assert_eq!(next(&mut a_rx).0, "none");
    a.admission.set_for_tests(false, false);
    assert!(flushing.await.unwrap().is_empty());
    assert_eq!(next(&mut a_rx).1, [Some(1)]);
}

#[tokio::test]
async fn a_gone_queue_hands_its_numbers_back_by_channel() {
    let (a, a_rx) = queue(1);
    drop(a_rx);
    let (b, mut b_rx) = queue(2);
    let mut publisher = publisher();
    let message = Arc::new(Message::default());
    publisher.push(&[Arc::clone(&a), Arc::clone(&b)], 3, &message, Some(1));
    publisher.push(std::slice::from_ref(&a), 4, &message, Some(2));
    publisher.push(std::slice::from_ref(&a), 4, &message, None);
    assert_eq!(publisher.flush(Flush::Force).await, [(3, vec![1]), (4, vec![2])]);
    assert_eq!(next(&mut b_rx).1, [Some(1)]);
}

#[tokio::test]
async fn a_held_copy_is_moved_out_of_its_source_and_a_fanned_out_one_is_published() {
    let (a, mut a_rx) = queue(1);
    let (b, mut b_rx) = queue(2);
    let mut publisher = publisher();
    let message = Arc::new(Message::default());
    publisher.push_moved(&a, 3, Arc::clone(&message), 11, (50, 100));
    publisher.push(&[Arc::clone(&a), Arc::clone(&b)], 3, &message, Some(12));
    publisher.push_moved(&a, 3, Arc::clone(&message), 13, (50, 102));
    assert!(publisher.flush(Flush::Wait).await.is_empty());
    let Ok(QueueCmd::PublishMoved { items, from, confirm_to }) = a_rx.try_recv() else { panic!("a move first") };
    assert_eq!(
        (numbers(&items), from.queue, from.seqs, confirm_to.channel),
        (vec![Some(11), Some(13)], 50, vec![100, 102], 3)
    );
    assert_eq!(next(&mut a_rx), ("publish", vec![Some(12)], Some(3)));
    assert_eq!(next(&mut b_rx), ("publish", vec![Some(12)], Some(3)));
}

#[tokio::test]
async fn routes_come_from_the_vhost_through_the_cache() {
    let broker = crate::Broker::new(crate::BrokerConfig::default());
    let vhost = broker.vhost("/").unwrap();
    let declare = crate::vhost::QueueDeclare {
        name: "q".into(),
        passive: false,
        durable: false,
        exclusive: false,
        auto_delete: false,
        arguments: charon_model::Table::new(),
    };
    vhost.declare_queue(&declare, 1).await.unwrap();
    let mut publisher = Publisher::new(None);
    let routing = charon_model::Routing { routing_key: "q".into(), ..charon_model::Routing::default() };
    let message = Message::new(routing, charon_model::Body::Data(bytes::Bytes::new()));
    for _ in 0..2 {
        let queues = publisher.route(&vhost, &message).unwrap();
        assert_eq!(queues.iter().map(|q| q.name()).collect::<Vec<_>>(), ["q"]);
    }
    let mut nowhere = message.clone();
    nowhere.routing.exchange = "missing".into();
    assert!(publisher.route(&vhost, &nowhere).is_err());
}

#[test]
fn a_publish_is_answered_once_every_queue_answered_with_the_first_refusal() {
    let mut outstanding = Outstanding::new(1 << 62);
    let one = outstanding.expect(2, "one");
    let two = outstanding.expect(1, "two");
    assert_eq!((one, two), ((1 << 62) | 1, (1 << 62) | 2));
    assert_eq!(outstanding.answer(one, 5, false), None);
    assert_eq!(outstanding.answer(two, 6, true), Some(Answered { value: "two", refused_on: None }));
    assert_eq!(outstanding.answer(one, 7, false), Some(Answered { value: "one", refused_on: Some(5) }));
    assert_eq!(outstanding.answer(one, 7, true), None, "answered already");
    assert!(outstanding.is_empty());
    let three = outstanding.expect(1, "three");
    let four = outstanding.expect(1, "four");
    outstanding.retain(|value| *value != "three");
    assert_eq!(outstanding.len(), 1);
    assert_eq!(outstanding.answer(three, 1, true), None, "forgotten");
    assert_eq!(outstanding.answer(four, 1, true).map(|a| a.value), Some("four"));
}
