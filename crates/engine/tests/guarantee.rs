//! Charon's dead-letter guarantee (issue 16, item 2): with `charon-dead-letter-guarantee:
//! at-least-once` (policy) or the broker's `dead_letter_guarantee`, any queue with a dead-letter
//! exchange — classic too, in every overflow mode, for every reason — keeps a dead letter until
//! its targets confirmed it. Waiting letters do not count against the length limits; a bound on
//! them holds the queue's publishers back instead of dropping anything.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use charon_engine::dead_letter::FALLBACK_QUEUE;
use charon_engine::metrics::DeadLetterStrategy;
use charon_engine::{Broker, BrokerConfig, Destination, Enqueue, Policy, QueueRef, Settle, VHost};
use charon_model::{Body, DeathReason, Message, Routing, Table, Value};
use support::{OWNER, counts, declare, open_stored, publish_and_reject as reject_one, table};

fn item(queue: &str, body: &str) -> Vec<Enqueue> {
    vec![Enqueue { message: support::message(queue, body), confirm: None }]
}

/// A broker with a `dlx` direct exchange (nothing bound yet) and the guarantee as a policy on
/// queues named `src*` (`extra` policy keys added).
async fn setup(extra: &[(&str, Value)]) -> (Arc<Broker>, Arc<VHost>) {
    let (broker, vhost) = support::broker(BrokerConfig::default());
    let exchange = charon_engine::ExchangeDeclare { name: "dlx".into(), kind: "direct".into(), ..Default::default() };
    vhost.declare_exchange(&exchange).await.unwrap();
    let mut definition = table(&[("charon-dead-letter-guarantee", Value::long_str("at-least-once"))]);
    for (key, value) in extra {
        definition.insert(*key, value.clone());
    }
    vhost.set_policy(Policy::new("guarantee", "^src", "queues", 0, definition).unwrap()).await.unwrap();
    (broker, vhost)
}

fn source_args(extra: &[(&str, Value)]) -> Table {
    let mut args = table(&[("x-dead-letter-exchange", Value::long_str("dlx"))]);
    for (key, value) in extra {
        args.insert(*key, value.clone());
    }
    args
}

async fn bind_dlq(vhost: &VHost) -> QueueRef {
    vhost.declare_queue(&declare("dlq", Table::new()), 1).await.unwrap();
    vhost.bind("dlx", Destination::Queue("dlq".into()), "src", &Table::new(), 1).await.unwrap();
    vhost.queue("dlq", 1).unwrap()
}

#[tokio::test]
async fn a_classic_queue_keeps_an_unroutable_dead_letter_until_a_binding_gives_it_a_route() {
    let (_broker, vhost) = setup(&[]).await;
    vhost.declare_queue(&declare("src", source_args(&[])), 1).await.unwrap();
    let source = vhost.queue("src", 1).unwrap();
    reject_one(&source, "m1").await;
    assert_eq!(counts(&source, (0, 1)).await, (0, 1), "waits, not ready, not dropped");
    assert!(source.get(OWNER, true).await.unwrap().is_none(), "never delivered");
    let fallback = vhost.queue(FALLBACK_QUEUE, 1).unwrap();
    assert!(fallback.get(OWNER, true).await.unwrap().is_none(), "not given up to the fallback queue");
    let dlq = bind_dlq(&vhost).await;
    assert_eq!(counts(&source, (0, 0)).await, (0, 0));
    let got = dlq.get(OWNER, true).await.unwrap().expect("the dead letter");
    assert_eq!(got.delivery.message.body.bytes().as_ref(), b"m1");
    assert_eq!(source.dead_lettered.get(DeadLetterStrategy::AtLeastOnce, DeathReason::Rejected), 1);
}

#[tokio::test]
async fn drop_head_and_expiry_keep_their_dead_letters_which_do_not_count_against_the_limit() {
    let (_broker, vhost) = setup(&[]).await;
    let args = source_args(&[("x-max-length", Value::I64(1)), ("x-message-ttl", Value::I64(60_000))]);
    vhost.declare_queue(&declare("src-drop", args), 1).await.unwrap();
    let source = vhost.queue("src-drop", 1).unwrap();
    for body in ["a", "b", "c"] {
        assert!(source.publish(item("src-drop", body), None).await);
    }
    // Two dropped from the head, waiting; they do not push the third out.
    assert_eq!(counts(&source, (1, 2)).await, (1, 2));
    vhost.declare_queue(&declare("src-ttl", source_args(&[("x-message-ttl", Value::I64(0))])), 1).await.unwrap();
    let expiring = vhost.queue("src-ttl", 1).unwrap();
    assert!(expiring.publish(item("src-ttl", "t"), None).await);
    assert_eq!(counts(&expiring, (0, 1)).await, (0, 1), "expired, waiting");
    vhost.declare_queue(&declare("dlq", Table::new()), 1).await.unwrap();
    for key in ["src-drop", "src-ttl"] {
        vhost.bind("dlx", Destination::Queue("dlq".into()), key, &Table::new(), 1).await.unwrap();
    }
    assert_eq!(counts(&source, (1, 0)).await, (1, 0));
    assert_eq!(counts(&expiring, (0, 0)).await, (0, 0));
    assert_eq!(vhost.queue("dlq", 1).unwrap().stats().await.unwrap().ready, 3);
}

#[tokio::test]
async fn a_letter_a_full_target_refuses_waits_and_goes_once_the_target_has_room() {
    let (_broker, vhost) = setup(&[]).await;
    let full = table(&[("x-max-length", Value::I64(1)), ("x-overflow", Value::long_str("reject-publish"))]);
    vhost.declare_queue(&declare("dlq", full), 1).await.unwrap();
    let dlq = vhost.queue("dlq", 1).unwrap();
    assert!(dlq.publish(item("dlq", "filler"), None).await);
    vhost.bind("dlx", Destination::Queue("dlq".into()), "src", &Table::new(), 1).await.unwrap();
    vhost.declare_queue(&declare("src", source_args(&[])), 1).await.unwrap();
    let source = vhost.queue("src", 1).unwrap();
    reject_one(&source, "m1").await;
    assert_eq!(counts(&source, (0, 1)).await, (0, 1), "refused by the full target: it waits");
    // Room again, without any change to the topology or a policy: the retry timer (5 s under
    // the guarantee, RabbitMQ's 180 s for its own strategy) sends it.
    assert!(dlq.get(OWNER, true).await.unwrap().is_some());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
    while source.stats().await.unwrap().dead_letters_pending > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(counts(&source, (0, 0)).await, (0, 0));
    let got = dlq.get(OWNER, true).await.unwrap().expect("the dead letter");
    assert_eq!(got.delivery.message.body.bytes().as_ref(), b"m1");
}

#[tokio::test]
async fn at_the_bound_publishers_wait_until_dead_letters_are_confirmed() {
    let (_broker, vhost) = setup(&[("charon-dead-letter-pending-max", Value::I64(2))]).await;
    vhost.declare_queue(&declare("src", source_args(&[])), 1).await.unwrap();
    let source = vhost.queue("src", 1).unwrap();
    reject_one(&source, "m1").await;
    reject_one(&source, "m2").await;
    assert_eq!(counts(&source, (0, 2)).await, (0, 2));
    assert!(source.admission.is_closed(), "two waiting: the bound");
    let publish = tokio::spawn({
        let source = Arc::clone(&source);
        async move { source.publish(item("src", "m3"), None).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!publish.is_finished(), "the publisher is held back, nothing dropped");
    assert_eq!(counts(&source, (0, 2)).await, (0, 2));
    bind_dlq(&vhost).await;
    assert!(tokio::time::timeout(Duration::from_secs(5), publish).await.unwrap().unwrap());
    assert_eq!(counts(&source, (1, 0)).await, (1, 0));
    assert!(!source.admission.is_closed());
}

#[tokio::test]
async fn switching_the_guarantee_off_keeps_the_letters_it_promised() {
    let (_broker, vhost) = setup(&[]).await;
    vhost.declare_queue(&declare("src", source_args(&[])), 1).await.unwrap();
    let source = vhost.queue("src", 1).unwrap();
    reject_one(&source, "m1").await;
    assert_eq!(counts(&source, (0, 1)).await, (0, 1));
    let off = table(&[("charon-dead-letter-guarantee", Value::long_str("at-most-once"))]);
    vhost.set_policy(Policy::new("guarantee", "^src", "queues", 0, off).unwrap()).await.unwrap();
    assert_eq!(counts(&source, (0, 1)).await, (0, 1), "still waiting");
    let dlq = bind_dlq(&vhost).await;
    assert_eq!(counts(&source, (0, 0)).await, (0, 0));
    assert!(dlq.get(OWNER, true).await.unwrap().is_some());
    // From now on at most once: an unroutable letter goes to the fallback queue.
    vhost.declare_queue(&declare("src-2", source_args(&[])), 1).await.unwrap();
    reject_one(&vhost.queue("src-2", 1).unwrap(), "m2").await;
    assert_eq!(counts(&vhost.queue("src-2", 1).unwrap(), (0, 0)).await, (0, 0));
}

#[tokio::test]
async fn the_broker_default_applies_without_a_policy_and_bad_policy_values_are_refused() {
    let (_broker, vhost) = support::broker(BrokerConfig { dead_letter_guarantee: true, ..BrokerConfig::default() });
    let args = table(&[("x-dead-letter-exchange", Value::long_str("missing"))]);
    vhost.declare_queue(&declare("q", args), 1).await.unwrap();
    let queue = vhost.queue("q", 1).unwrap();
    reject_one(&queue, "m").await;
    assert_eq!(counts(&queue, (0, 1)).await, (0, 1), "a missing exchange: it waits for one");
    let bad = table(&[("charon-dead-letter-guarantee", Value::long_str("always"))]);
    let refused = Policy::new("p", ".*", "queues", 0, bad).unwrap_err();
    assert_eq!(refused, "<<\"always\">> is not a valid dead letter guarantee");
    let bad = table(&[("charon-dead-letter-pending-max", Value::I64(0))]);
    assert!(Policy::new("p", ".*", "queues", 0, bad).unwrap_err().contains("is not a valid maximum of pending"));
}

#[test]
fn a_classic_queues_waiting_dead_letter_waits_again_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let persistent = |queue: &str| {
        let routing = Routing { exchange: String::new(), routing_key: queue.into(), ..Routing::default() };
        let mut message = Message::new(routing, Body::Data("kept".into()));
        message.set_properties(charon_model::Properties { delivery_mode: Some(2), ..Default::default() });
        vec![Enqueue { message: Arc::new(message), confirm: None }]
    };
    {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let (_broker, vhost, persistence) = open_stored(dir.path());
            let on = table(&[("charon-dead-letter-guarantee", Value::long_str("at-least-once"))]);
            vhost.set_policy(Policy::new("guarantee", "^src", "queues", 0, on).unwrap()).await.unwrap();
            vhost.declare_queue(&declare("src", source_args(&[])), 1).await.unwrap();
            let source = vhost.queue("src", 1).unwrap();
            assert!(source.publish(persistent("src"), None).await);
            let got = source.get(OWNER, false).await.unwrap().unwrap();
            source.settle(vec![got.delivery.seq], Settle::Discard).await;
            assert_eq!(counts(&source, (0, 1)).await, (0, 1));
            source.stats().await.unwrap();
            persistence.log.close().unwrap();
        });
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (_broker, vhost, _persistence) = open_stored(dir.path());
        let source = vhost.queue("src", 1).unwrap();
        assert_eq!(counts(&source, (0, 1)).await, (0, 1), "recovered waiting, not ready");
        let exchange =
            charon_engine::ExchangeDeclare { name: "dlx".into(), kind: "direct".into(), ..Default::default() };
        vhost.declare_exchange(&exchange).await.unwrap();
        let dlq = bind_dlq(&vhost).await;
        assert_eq!(counts(&source, (0, 0)).await, (0, 0));
        let got = dlq.get(OWNER, true).await.unwrap().expect("the dead letter");
        assert_eq!(got.delivery.message.body.bytes().as_ref(), b"kept");
    });
}
