#![allow(clippy::unwrap_used)]
//! Single active consumer and consumer priorities through the queue's operations.

use super::super::args::QueueType;
use super::*;
use crate::session::{SessionEvent, SessionSink};
use charon_model::{Body, Routing, Table, Value};

fn queue_state(queue_type: QueueType, single_active: bool) -> QueueState {
    let mut arguments = Table::new();
    if single_active {
        arguments.insert("x-single-active-consumer", Value::Bool(true));
    }
    let queue = super::tests::queue_named("sac", queue_type, true, 1, arguments);
    QueueState::new(queue, QueueSettings::default(), 1_000)
}

fn spec(id: u64, session: &SessionSink, priority: Option<Value>) -> ConsumeSpec {
    let mut arguments = Table::new();
    if let Some(priority) = priority {
        arguments.insert("x-priority", priority);
    }
    ConsumeSpec {
        id,
        tag: format!("ctag-{id}"),
        owner: Owner { session: session.id, channel: u32::try_from(id).unwrap() },
        session: session.clone(),
        no_ack: false,
        prefetch: 10,
        link_credit: None,
        channel_limit: None,
        exclusive: false,
        arguments,
    }
}

fn publish(state: &mut QueueState, n: u8) {
    for i in 0..n {
        let message = Message::new(Routing::default(), Body::Data(vec![i].into()));
        state.publish(vec![Enqueue { message: Arc::new(message), confirm: None }], None);
    }
}

/// Runs a dispatch pass and gives who got which sequence numbers.
fn delivered(state: &mut QueueState) -> Vec<(u64, Vec<u64>)> {
    state.dispatch();
    state
        .take_outbox()
        .into_iter()
        .filter_map(|(_, e)| match e {
            SessionEvent::Deliveries { consumer, items, .. } => Some((consumer, items.iter().map(|d| d.seq).collect())),
            _ => None,
        })
        .collect()
}

#[test]
fn one_consumer_receives_and_the_next_takes_over_with_the_requeued_messages() {
    let (session, _rx) = SessionSink::new(1, 0);
    let mut s = queue_state(QueueType::Classic, true);
    s.consume(spec(1, &session, None)).unwrap();
    s.consume(spec(2, &session, Some(Value::I32(10)))).unwrap();
    assert_eq!(s.stats().single_active_consumer_tag.as_deref(), Some("ctag-1"), "priorities do not count");
    publish(&mut s, 3);
    let first = delivered(&mut s);
    assert_eq!(first.iter().map(|(c, seqs)| (*c, seqs.len())).collect::<Vec<_>>(), [(1, 3)]);
    // Its channel closes: the next consumer is active and gets them back.
    s.owner_closed(Owner { session: session.id, channel: 1 });
    assert_eq!(s.stats().single_active_consumer_tag.as_deref(), Some("ctag-2"));
    assert_eq!(delivered(&mut s).iter().map(|(c, seqs)| (*c, seqs.len())).collect::<Vec<_>>(), [(2, 3)]);
    assert!(s.stats().single_active_consumer);
}

#[test]
fn a_quorum_queue_activates_the_highest_priority_consumer() {
    let (session, _rx) = SessionSink::new(1, 0);
    let mut q = queue_state(QueueType::Quorum, true);
    q.consume(spec(1, &session, None)).unwrap();
    q.consume(spec(2, &session, Some(Value::I64(1 << 40)))).unwrap();
    assert_eq!(q.stats().single_active_consumer_tag.as_deref(), Some("ctag-2"));
    publish(&mut q, 2);
    assert_eq!(delivered(&mut q).iter().map(|(c, _)| *c).collect::<Vec<_>>(), [2]);
}

#[test]
fn without_single_active_consumer_higher_priorities_go_first_and_no_tag_is_shown() {
    let (session, _rx) = SessionSink::new(1, 0);
    let mut s = queue_state(QueueType::Classic, false);
    s.consume(spec(1, &session, Some(Value::I16(-3)))).unwrap();
    s.consume(spec(2, &session, Some(Value::U8(5)))).unwrap();
    publish(&mut s, 2);
    assert_eq!(delivered(&mut s).iter().map(|(c, _)| *c).collect::<Vec<_>>(), [2]);
    assert_eq!((s.stats().single_active_consumer, s.stats().single_active_consumer_tag), (false, None));
}

#[test]
fn a_priority_that_is_not_an_integer_is_refused_with_rabbitmq_text() {
    let (session, _rx) = SessionSink::new(1, 0);
    let mut s = queue_state(QueueType::Classic, false);
    let error = s.consume(spec(1, &session, Some(Value::LongStr("high".into())))).unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid arg 'x-priority' for queue 'sac' in vhost '/': \"expected integer, got longstr\""
    );
    assert_eq!(s.stats().consumers, 0);
}

#[test]
fn exclusive_consumers_on_a_classic_single_active_queue_are_refused_and_quorum_queues_ignore_exclusivity() {
    let (session, _rx) = SessionSink::new(1, 0);
    let mut s = queue_state(QueueType::Classic, true);
    let mut exclusive = spec(1, &session, None);
    exclusive.exclusive = true;
    assert!(matches!(s.consume(exclusive.clone()), Err(EngineError::ExclusiveConsumeUnavailable(_))), "even alone");
    for single_active in [false, true] {
        let mut q = queue_state(QueueType::Quorum, single_active);
        q.consume(exclusive.clone()).unwrap();
        q.consume(spec(2, &session, None)).unwrap();
        let mut another = spec(3, &session, None);
        another.exclusive = true;
        q.consume(another).unwrap();
        assert_eq!(q.stats().consumers, 3);
    }
}
