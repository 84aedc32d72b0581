//! No silent loss (issue 16): a dead letter RabbitMQ drops silently — its dead-letter exchange
//! is missing, routes it nowhere or only into a cycle, or its target is full with
//! `reject-publish` — goes with its death and a drop reason to the vhost's fallback queue
//! `amq.charon.dead-letters`, and is counted. A queue without a dead-letter exchange discards
//! as before.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use charon_engine::dead_letter::{DROP_REASON_HEADER, FALLBACK_QUEUE};
use charon_engine::{BrokerConfig, ConfirmTo, EngineError, QueueDeclare, QueueRef, SessionEvent, SessionSink, VHost};
use charon_model::{DeathReason, Message, Table, Value};
use support::{OWNER, declare, message, publish_and_reject, table};

/// The next message of `queue`, waiting up to 5 s for one (dead lettering is asynchronous).
async fn next(queue: &QueueRef) -> Option<Arc<Message>> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(got) = queue.get(OWNER, true).await.unwrap() {
            return Some(got.delivery.message);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The vhost's counts of dead letters dropped where RabbitMQ drops them silently (the
/// `charon_dead_letters_dropped_total` series), as "queue reason count".
fn dropped(vhost: &VHost) -> Vec<String> {
    let counts = vhost.dropped_dead_letters().into_iter();
    counts.map(|(queue, reason, count)| format!("{queue} {} {count}", reason.as_str())).collect()
}

async fn setup(fallback: bool) -> (Arc<charon_engine::Broker>, Arc<VHost>) {
    support::broker(BrokerConfig { dead_letter_fallback: fallback, ..BrokerConfig::default() })
}

fn drop_reason(message: &Message) -> Option<&str> {
    message.headers.get(DROP_REASON_HEADER).and_then(Value::as_str)
}

fn dlx(exchange: &str, key: &str) -> Table {
    table(&[("x-dead-letter-exchange", Value::long_str(exchange)), ("x-dead-letter-routing-key", Value::long_str(key))])
}

#[tokio::test]
async fn a_missing_exchange_or_no_route_keeps_the_letter_in_the_fallback_queue_with_its_death_and_reason() {
    let (_broker, vhost) = setup(true).await;
    let fallback = vhost.queue(FALLBACK_QUEUE, 1).expect("every vhost has one");
    for (name, arguments, why) in [
        ("a", dlx("missing", "k"), "no-dlx"),
        ("b", dlx("", "nowhere"), "unroutable"),
        ("c", dlx("amq.direct", "k"), "unroutable"),
    ] {
        vhost.declare_queue(&declare(name, arguments), 1).await.unwrap();
        publish_and_reject(&vhost.queue(name, 1).unwrap(), &format!("body-{name}")).await;
        let kept = next(&fallback).await.expect("kept, not dropped");
        assert_eq!(kept.body.bytes().as_ref(), format!("body-{name}").as_bytes());
        assert_eq!(drop_reason(&kept), Some(why));
        let death = &kept.broker.deaths.as_deref().expect("its death").entries[0];
        assert_eq!((death.queue.as_str(), death.reason, death.count), (name, DeathReason::Rejected, 1));
    }
    assert_eq!(dropped(&vhost), ["a no-dlx 1", "b unroutable 1", "c unroutable 1"]);
}

#[tokio::test]
async fn a_queue_without_a_dead_letter_exchange_discards_as_its_owner_chose() {
    let (_broker, vhost) = setup(true).await;
    vhost.declare_queue(&declare("plain", Table::new()), 1).await.unwrap();
    publish_and_reject(&vhost.queue("plain", 1).unwrap(), "gone").await;
    vhost.queue("plain", 1).unwrap().stats().await.unwrap();
    assert!(vhost.queue(FALLBACK_QUEUE, 1).unwrap().get(OWNER, true).await.unwrap().is_none());
    assert!(dropped(&vhost).is_empty(), "not a drop: the owner chose no dead-letter exchange");
}

#[tokio::test]
async fn an_expiry_cycle_is_kept_with_reason_cycle() {
    let (_broker, vhost) = setup(true).await;
    // Expired messages dead-letter back into their own queue: RabbitMQ's cycle rule drops them.
    let mut arguments = dlx("", "loop");
    arguments.insert("x-message-ttl", Value::I64(0));
    vhost.declare_queue(&declare("loop", arguments), 1).await.unwrap();
    let queue = vhost.queue("loop", 1).unwrap();
    assert!(queue.publish(vec![charon_engine::Enqueue { message: message("loop", "m"), confirm: None }], None).await);
    let kept = next(&vhost.queue(FALLBACK_QUEUE, 1).unwrap()).await.expect("kept");
    assert_eq!(drop_reason(&kept), Some("cycle"));
    let deaths = kept.broker.deaths.as_deref().unwrap();
    assert_eq!(
        deaths.entries.iter().map(|d| (d.queue.as_str(), d.reason, d.count)).collect::<Vec<_>>(),
        [("loop", DeathReason::Expired, 1)]
    );
}

#[tokio::test]
async fn a_dead_letter_a_full_reject_publish_target_refuses_is_kept_and_confirmed_to_its_source_by_the_fallback() {
    let (_broker, vhost) = setup(true).await;
    let full = table(&[("x-max-length", Value::I64(0)), ("x-overflow", Value::long_str("reject-publish"))]);
    vhost.declare_queue(&declare("dlq", full), 1).await.unwrap();
    vhost.declare_queue(&declare("src", dlx("", "dlq")), 1).await.unwrap();
    publish_and_reject(&vhost.queue("src", 1).unwrap(), "m").await;
    let kept = next(&vhost.queue(FALLBACK_QUEUE, 1).unwrap()).await.expect("kept");
    assert_eq!(drop_reason(&kept), Some("target-full"));
    assert_eq!(kept.broker.deaths.as_deref().unwrap().entries[0].queue, "src");
    assert!(vhost.queue("dlq", 1).unwrap().get(OWNER, true).await.unwrap().is_none(), "the target stays empty");
    assert_eq!(dropped(&vhost), ["src target-full 1"]);
    // What the target refuses with a confirm number is confirmed, by the fallback queue, to
    // the one who sent it (a source that waits for its copy to be safe).
    let (sink, mut inbox) = SessionSink::new(99, 0);
    let dlq = vhost.queue("dlq", 1).unwrap();
    let mut dead = Message::clone(&kept);
    dead.headers = Table::new();
    let item = charon_engine::Enqueue { message: Arc::new(dead), confirm: Some(41) };
    assert!(dlq.publish(vec![item], Some(ConfirmTo { session: sink, channel: 3 })).await);
    let Some(SessionEvent::Confirms { channel, accepted, refused }) = inbox.recv().await else { panic!("an answer") };
    assert_eq!((channel, accepted, refused), (3, vec![41], vec![]));
    // A message that is not a dead letter is refused to its publisher as before.
    let (sink, mut inbox) = SessionSink::new(98, 0);
    let item = charon_engine::Enqueue { message: message("dlq", "plain"), confirm: Some(7) };
    assert!(dlq.publish(vec![item], Some(ConfirmTo { session: sink, channel: 1 })).await);
    let Some(SessionEvent::Confirms { accepted, refused, .. }) = inbox.recv().await else { panic!("an answer") };
    assert_eq!((accepted, refused), (vec![], vec![7]));
}

#[tokio::test]
async fn a_reject_publish_dlx_target_dead_letters_what_it_refuses_itself() {
    let (_broker, vhost) = setup(true).await;
    let mut full = table(&[("x-max-length", Value::I64(0)), ("x-overflow", Value::long_str("reject-publish-dlx"))]);
    for (key, value) in dlx("", "overflow").iter() {
        full.insert(key, value.clone());
    }
    vhost.declare_queue(&declare("overflow", Table::new()), 1).await.unwrap();
    vhost.declare_queue(&declare("dlq", full), 1).await.unwrap();
    vhost.declare_queue(&declare("src", dlx("", "dlq")), 1).await.unwrap();
    publish_and_reject(&vhost.queue("src", 1).unwrap(), "m").await;
    let moved = next(&vhost.queue("overflow", 1).unwrap()).await.expect("dead-lettered by the full target");
    let deaths = moved.broker.deaths.as_deref().unwrap();
    assert_eq!(
        deaths.entries.iter().map(|d| (d.queue.as_str(), d.reason)).collect::<Vec<_>>(),
        [("dlq", DeathReason::Maxlen), ("src", DeathReason::Rejected)]
    );
    assert!(vhost.queue(FALLBACK_QUEUE, 1).unwrap().get(OWNER, true).await.unwrap().is_none(), "not passed on too");
}

#[tokio::test]
async fn with_the_fallback_off_there_is_no_queue_and_drops_are_still_counted() {
    let (_broker, vhost) = setup(false).await;
    assert!(matches!(vhost.queue(FALLBACK_QUEUE, 1), Err(EngineError::NotFound(_))));
    vhost.declare_queue(&declare("src", dlx("missing", "k")), 1).await.unwrap();
    publish_and_reject(&vhost.queue("src", 1).unwrap(), "m").await;
    vhost.queue("src", 1).unwrap().stats().await.unwrap();
    assert_eq!(dropped(&vhost), ["src no-dlx 1"]);
}

#[tokio::test]
async fn clients_cannot_declare_the_fallback_queue_but_may_read_it_and_it_does_not_count_against_max_queues() {
    let (broker, vhost) = setup(true).await;
    let refused = vhost.declare_queue(&declare(FALLBACK_QUEUE, Table::new()), 1).await;
    assert!(matches!(refused, Err(EngineError::ReservedName { .. })), "{refused:?}");
    let passive = QueueDeclare { name: FALLBACK_QUEUE.into(), passive: true, ..QueueDeclare::default() };
    assert_eq!(vhost.declare_queue(&passive, 1).await.unwrap().messages, 0);
    let fallback = vhost.queue(FALLBACK_QUEUE, 1).unwrap();
    assert!(fallback.config.durable);
    assert_eq!(fallback.config.arguments.get("x-max-length"), Some(&Value::I64(1_000_000)));
    broker.limits().set(charon_engine::LimitScope::Vhost, "/", "max-queues", 1).await.unwrap();
    vhost.declare_queue(&declare("mine", Table::new()), 1).await.expect("the one queue the limit allows");
    let over = vhost.declare_queue(&declare("two", Table::new()), 1).await;
    assert!(matches!(over, Err(EngineError::QueueLimit { .. })), "{over:?}");
}
