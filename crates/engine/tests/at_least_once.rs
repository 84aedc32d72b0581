//! RabbitMQ's at-least-once dead lettering (issue 16): a quorum queue with the `at-least-once`
//! strategy and `reject-publish` keeps a dead letter nobody can take — not ready, counted as
//! pending — until a route exists, then hands it over; leaving the strategy deletes what waits.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use charon_engine::metrics::DeadLetterStrategy;
use charon_engine::{Broker, BrokerConfig, VHost};
use charon_model::{Body, DeathReason, Message, Routing, Table, Value};
use support::{OWNER, counts, declare, open_stored, publish_and_reject, table};

fn source_args(strategy: &str, overflow: &str) -> Table {
    table(&[
        ("x-queue-type", Value::long_str("quorum")),
        ("x-dead-letter-strategy", Value::long_str(strategy)),
        ("x-overflow", Value::long_str(overflow)),
        ("x-dead-letter-exchange", Value::long_str("")),
        ("x-dead-letter-routing-key", Value::long_str("dlq")),
    ])
}

async fn setup() -> (Arc<Broker>, Arc<VHost>) {
    support::broker(BrokerConfig::default())
}

#[tokio::test]
async fn an_unroutable_dead_letter_waits_in_the_source_until_its_queue_is_declared() {
    let (_broker, vhost) = setup().await;
    vhost.declare_queue(&declare("src", source_args("at-least-once", "reject-publish")), 1).await.unwrap();
    let source = vhost.queue("src", 1).unwrap();
    publish_and_reject(&source, "m1").await;
    assert_eq!(counts(&source, (0, 1)).await, (0, 1), "not ready, not lost: pending");
    assert_eq!(source.dead_letters_pending.load(Relaxed), 1);
    assert_eq!(source.dead_lettered.get(DeadLetterStrategy::AtLeastOnce, DeathReason::Rejected), 1);
    assert_eq!(source.get(OWNER, true).await.unwrap().map(|g| g.delivery.seq), None, "never delivered");
    // The dead-letter queue appears: the letter goes there at once, not after a timer.
    vhost.declare_queue(&declare("dlq", Table::new()), 1).await.unwrap();
    let dlq = vhost.queue("dlq", 1).unwrap();
    assert_eq!(counts(&source, (0, 0)).await, (0, 0));
    assert_eq!(source.dead_letters_pending.load(Relaxed), 0);
    let got = dlq.get(OWNER, true).await.unwrap().expect("the dead letter");
    assert_eq!(got.delivery.message.body.bytes().as_ref(), b"m1");
    let deaths = got.delivery.message.broker.deaths.as_deref().expect("its death");
    assert_eq!(deaths.entries[0].queue, "src");
}

#[tokio::test]
async fn a_full_target_keeps_the_letter_until_a_retry_finds_room() {
    let (_broker, vhost) = setup().await;
    let full = table(&[("x-max-length", Value::I64(0)), ("x-overflow", Value::long_str("reject-publish"))]);
    vhost.declare_queue(&declare("dlq", full), 1).await.unwrap();
    vhost.declare_queue(&declare("src", source_args("at-least-once", "reject-publish")), 1).await.unwrap();
    let source = vhost.queue("src", 1).unwrap();
    publish_and_reject(&source, "m1").await;
    assert_eq!(counts(&source, (0, 1)).await, (0, 1), "refused by the full target: kept");
    // The target is replaced by one with room; the new queue makes the source try again.
    vhost.delete_queue("dlq", 1, false, false).await.unwrap();
    vhost.declare_queue(&declare("dlq", Table::new()), 1).await.unwrap();
    assert_eq!(counts(&source, (0, 0)).await, (0, 0));
    assert!(vhost.queue("dlq", 1).unwrap().get(OWNER, true).await.unwrap().is_some());
}

#[tokio::test]
async fn with_drop_head_or_at_most_once_the_dead_letter_is_dropped_as_before() {
    let (_broker, vhost) = setup().await;
    for (name, strategy, overflow) in [("a", "at-least-once", "drop-head"), ("b", "at-most-once", "reject-publish")] {
        let mut args = source_args(strategy, overflow);
        args.insert("x-dead-letter-routing-key", Value::long_str(&format!("dlq-{name}")));
        vhost.declare_queue(&declare(name, args), 1).await.unwrap();
        let source = vhost.queue(name, 1).unwrap();
        publish_and_reject(&source, "m").await;
        assert_eq!(counts(&source, (0, 0)).await, (0, 0), "{strategy} with {overflow}: dropped, nothing pending");
    }
}

#[tokio::test]
async fn a_policy_switching_the_strategy_away_deletes_the_waiting_letters() {
    let (_broker, vhost) = setup().await;
    // The strategy comes from a policy; the queue's own arguments set the rest.
    let mut args = source_args("at-least-once", "reject-publish");
    args.remove("x-dead-letter-strategy");
    vhost.declare_queue(&declare("src", args), 1).await.unwrap();
    let set = |strategy: &str| {
        let definition = table(&[("dead-letter-strategy", Value::long_str(strategy))]);
        charon_engine::Policy::new("dl", "^src$", "queues", 0, definition).unwrap()
    };
    vhost.set_policy(set("at-least-once")).await.unwrap();
    let source = vhost.queue("src", 1).unwrap();
    publish_and_reject(&source, "m1").await;
    publish_and_reject(&source, "m2").await;
    assert_eq!(counts(&source, (0, 2)).await, (0, 2));
    vhost.set_policy(set("at-most-once")).await.unwrap();
    assert_eq!(counts(&source, (0, 0)).await, (0, 0), "RabbitMQ 4.0.5 deletes them (switch_from)");
    // Nothing comes back when the route appears later.
    vhost.declare_queue(&declare("dlq", Table::new()), 1).await.unwrap();
    // Two round trips through the source: the pass the declare's retry started has forwarded
    // whatever it had before the second answer, so a copy would be in the DLQ's mailbox now.
    source.stats().await.unwrap();
    source.stats().await.unwrap();
    assert!(vhost.queue("dlq", 1).unwrap().get(OWNER, true).await.unwrap().is_none());
}

#[test]
fn a_waiting_dead_letter_waits_again_after_a_restart_and_is_never_ready() {
    let dir = tempfile::tempdir().unwrap();
    {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let (_broker, vhost, persistence) = open_stored(dir.path());
            vhost.declare_queue(&declare("src", source_args("at-least-once", "reject-publish")), 1).await.unwrap();
            let source = vhost.queue("src", 1).unwrap();
            publish_and_reject(&source, "m1").await;
            assert_eq!(counts(&source, (0, 1)).await, (0, 1));
            // A stats answer can come in the pass that made the letter wait, before that pass
            // hands its log records over; one more command runs after them.
            source.stats().await.unwrap();
            persistence.log.close().unwrap();
        });
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (_broker, vhost, _persistence) = open_stored(dir.path());
        let source = vhost.queue("src", 1).unwrap();
        assert_eq!(counts(&source, (0, 1)).await, (0, 1), "recovered waiting, not ready");
        assert!(source.get(OWNER, true).await.unwrap().is_none(), "never delivered");
        vhost.declare_queue(&declare("dlq", Table::new()), 1).await.unwrap();
        assert_eq!(counts(&source, (0, 0)).await, (0, 0));
        let got = vhost.queue("dlq", 1).unwrap().get(OWNER, true).await.unwrap().expect("the dead letter");
        assert_eq!(got.delivery.message.body.bytes().as_ref(), b"m1");
    });
}

#[tokio::test]
async fn waiting_dead_letters_count_against_the_length_limit() {
    let (_broker, vhost) = setup().await;
    let mut args = source_args("at-least-once", "reject-publish");
    args.insert("x-max-length", Value::I64(1));
    vhost.declare_queue(&declare("src", args), 1).await.unwrap();
    let source = vhost.queue("src", 1).unwrap();
    publish_and_reject(&source, "waits").await;
    assert_eq!(counts(&source, (0, 1)).await, (0, 1));
    // One ready message more puts the queue over its limit of one: the next publish is refused.
    let (session, mut events) = charon_engine::SessionSink::new(1, 0);
    for confirm in 1..=2u64 {
        let routing = Routing { exchange: String::new(), routing_key: "src".into(), ..Routing::default() };
        let message = Arc::new(Message::new(routing, Body::Data("m".into())));
        let to = charon_engine::ConfirmTo { session: session.clone(), channel: 1 };
        assert!(source.publish(vec![charon_engine::Enqueue { message, confirm: Some(confirm) }], Some(to)).await);
    }
    let mut answers = Vec::new();
    while answers.len() < 2 {
        if let charon_engine::SessionEvent::Confirms { accepted, refused, .. } = events.recv().await.unwrap() {
            answers.extend(accepted.into_iter().map(|n| (n, true)));
            answers.extend(refused.into_iter().map(|n| (n, false)));
        }
    }
    answers.sort_unstable();
    assert_eq!(answers, [(1, true), (2, false)], "the waiting letter counted: 1 ready + 1 waiting > 1");
}
