#![allow(clippy::unwrap_used)]
//! Priority queues and a quorum queue's two levels through the queue's operations: what gets,
//! consumers, drop-head, requeues and expiry take, as RabbitMQ 4.0.5 was observed to take it
//! (see [`crate::order`]).

use super::super::args::QueueType;
use super::*;
use crate::session::SessionSink;
use crate::settings::Overflow;
use charon_model::{Body, Properties, Routing, Table, Value};

fn priority_queue(queue_type: QueueType, max: Option<i64>, settings: QueueSettings) -> QueueState {
    let mut arguments = Table::new();
    if let Some(max) = max {
        arguments.insert("x-max-priority", Value::I64(max));
    }
    QueueState::new(super::tests::queue_named("pq", queue_type, true, 1, arguments), settings, 1_000)
}

fn message(body: String, priority: Option<u8>, ttl: Option<u64>) -> Enqueue {
    let mut m = Message::new(Routing::default(), Body::Data(body.into()));
    m.set_properties(Properties { priority, ttl, ..Properties::default() });
    Enqueue { message: Arc::new(m), confirm: None }
}

/// Publishes `m{i}-p{priority}` for each priority, one batch each.
fn publish(state: &mut QueueState, priorities: &[Option<u8>]) {
    for (i, &priority) in priorities.iter().enumerate() {
        let name = priority.map_or_else(|| format!("m{i}-pNone"), |p| format!("m{i}-p{p}"));
        state.publish(vec![message(name, priority, None)], None);
    }
}

fn body(message: &Message) -> String {
    String::from_utf8_lossy(message.body.bytes()).into_owned()
}

const OWNER: Owner = Owner { session: 1, channel: 1 };

fn get_all(state: &mut QueueState) -> Vec<String> {
    std::iter::from_fn(|| state.get(OWNER, true)).map(|got| body(&got.delivery.message)).collect()
}

#[test]
fn gets_take_the_highest_priority_first_then_fifo_capped_at_the_maximum() {
    let mut s = priority_queue(QueueType::Classic, Some(10), QueueSettings::default());
    publish(&mut s, &[Some(1), Some(9), Some(5), None, Some(0), Some(20), Some(9), Some(1)]);
    assert_eq!(s.stats().ready, 8);
    assert_eq!(get_all(&mut s), ["m5-p20", "m1-p9", "m6-p9", "m2-p5", "m0-p1", "m7-p1", "m3-pNone", "m4-p0"]);
}

#[test]
fn a_consumer_gets_the_backlog_in_priority_order() {
    let mut s = priority_queue(QueueType::Classic, Some(3), QueueSettings::default());
    publish(&mut s, &[Some(1), Some(2), Some(3), Some(0), Some(3)]);
    let (session, _rx) = SessionSink::new(1, 0);
    let spec = ConsumeSpec {
        id: 1,
        tag: "ctag".into(),
        owner: OWNER,
        session: session.clone(),
        no_ack: true,
        prefetch: 0,
        link_credit: None,
        channel_limit: None,
        exclusive: false,
        arguments: Table::new(),
    };
    s.consume(spec).unwrap();
    s.dispatch();
    let got: Vec<String> = s
        .take_outbox()
        .into_iter()
        .flat_map(|(_, event)| match event {
            crate::session::SessionEvent::Deliveries { items, .. } => {
                items.iter().map(|d| body(&d.message)).collect::<Vec<_>>()
            }
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(got, ["m2-p3", "m4-p3", "m1-p2", "m0-p1", "m3-p0"]);
}

#[test]
fn drop_head_drops_the_message_that_would_be_delivered_next() {
    let settings = QueueSettings { max_length: Some(3), overflow: Overflow::DropHead, ..QueueSettings::default() };
    let mut s = priority_queue(QueueType::Classic, Some(10), settings);
    publish(&mut s, &[Some(1), Some(9), Some(5), Some(2), Some(9), Some(0)]);
    let dropped: Vec<(String, DeathReason)> =
        s.take_discarded().into_iter().map(|d| (body(&d.message), d.reason)).collect();
    assert_eq!(
        dropped,
        [
            ("m1-p9".into(), DeathReason::Maxlen),
            ("m4-p9".into(), DeathReason::Maxlen),
            ("m2-p5".into(), DeathReason::Maxlen)
        ]
    );
    // RabbitMQ 4.0.5 keeps m3-p2, m0-p1, m5-p0.
    assert_eq!(get_all(&mut s), ["m3-p2", "m0-p1", "m5-p0"]);
}

#[test]
fn requeued_messages_go_back_to_their_priority_at_their_position() {
    let mut s = priority_queue(QueueType::Classic, Some(10), QueueSettings::default());
    publish(&mut s, &[Some(1), Some(9), Some(5), Some(9), Some(1)]);
    let first = s.get(OWNER, false).unwrap();
    let second = s.get(OWNER, false).unwrap();
    assert_eq!((body(&first.delivery.message), body(&second.delivery.message)), ("m1-p9".into(), "m3-p9".into()));
    s.settle(&[second.delivery.seq], Settle::Requeue);
    s.settle(&[first.delivery.seq], Settle::Requeue);
    assert_eq!(get_all(&mut s), ["m1-p9", "m3-p9", "m2-p5", "m0-p1", "m4-p1"]);
}

#[test]
fn expiry_looks_only_at_the_message_that_would_be_delivered_next() {
    let mut s = priority_queue(QueueType::Classic, Some(5), QueueSettings::default());
    s.publish(vec![message("old-low".into(), Some(1), Some(10))], None);
    s.publish(vec![message("new-high".into(), Some(5), None)], None);
    s.set_now(1_100);
    s.expire(true);
    assert!(s.take_discarded().is_empty(), "the expired low one waits behind the high one");
    assert_eq!(s.stats().ready, 2);
    assert_eq!(body(&s.get(OWNER, true).unwrap().delivery.message), "new-high");
    assert!(s.get(OWNER, true).is_none(), "the low one expired on its way out");
    let dropped: Vec<(String, DeathReason)> =
        s.take_discarded().into_iter().map(|d| (body(&d.message), d.reason)).collect();
    assert_eq!(dropped, [("old-low".into(), DeathReason::Expired)]);
}

#[test]
fn a_quorum_queue_takes_two_high_then_one_normal_and_returns_first() {
    let mut q = priority_queue(QueueType::Quorum, None, QueueSettings::default());
    publish(&mut q, &[Some(1), Some(9), Some(5), None, Some(0), Some(4), Some(5), Some(20), Some(3)]);
    let first = q.get(OWNER, false).unwrap();
    assert_eq!(body(&first.delivery.message), "m1-p9");
    q.settle(&[first.delivery.seq], Settle::Requeue);
    // The return comes first and leaves the two-to-one count where it was (one high taken).
    assert_eq!(get_all(&mut q), ["m1-p9", "m2-p5", "m0-p1", "m6-p5", "m7-p20", "m3-pNone", "m4-p0", "m5-p4", "m8-p3"]);
}

#[test]
fn without_x_max_priority_a_classic_queue_ignores_priorities() {
    for max in [None, Some(0)] {
        let mut s = priority_queue(QueueType::Classic, max, QueueSettings::default());
        publish(&mut s, &[Some(1), Some(9), Some(5)]);
        assert_eq!(get_all(&mut s), ["m0-p1", "m1-p9", "m2-p5"]);
    }
}
