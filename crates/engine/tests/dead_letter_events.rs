//! The dead-letter event stream (issue 16): every death in a vhost — dead-lettered or dropped —
//! publishes one JSON event to `amq.charon.dead-letter-events` while something is bound to it,
//! and none is even built while nothing is.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;
use std::time::Duration;

use charon_engine::dead_letter::events::EVENTS_EXCHANGE;
use charon_engine::{Broker, BrokerConfig, Destination, Enqueue, Owner, QueueDeclare, QueueRef, Settle, VHost};
use charon_model::{Body, Message, MessageId, Properties, Routing, Table, Value};

const OWNER: Owner = Owner { session: 1, channel: 1 };

fn table(pairs: &[(&str, Value)]) -> Table {
    let mut table = Table::new();
    for (key, value) in pairs {
        table.insert(*key, value.clone());
    }
    table
}

async fn setup() -> Arc<VHost> {
    let broker = Broker::new(BrokerConfig::default());
    let user = broker.authenticate("guest", "guest").unwrap();
    broker.open_vhost(&user, "/").unwrap()
}

async fn declare(vhost: &VHost, name: &str, arguments: Table) -> QueueRef {
    let declare = QueueDeclare { name: name.into(), arguments, ..QueueDeclare::default() };
    vhost.declare_queue(&declare, 1).await.unwrap();
    vhost.queue(name, 1).unwrap()
}

async fn publish(queue: &QueueRef, id: &str) {
    let routing = Routing { exchange: String::new(), routing_key: queue.name().into(), ..Routing::default() };
    let mut message = Message::new(routing, Body::Data("m".into()));
    message.set_properties(Properties { message_id: Some(MessageId::String(id.into())), ..Properties::default() });
    assert!(queue.publish(vec![Enqueue { message: Arc::new(message), confirm: None }], None).await);
}

/// The next event in `queue` (waits up to 5 s), as JSON, with its routing key.
async fn next_event(queue: &QueueRef) -> (String, serde_json::Value) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(got) = queue.get(OWNER, true).await.unwrap() {
            let message = got.delivery.message;
            assert_eq!(message.properties().content_type.as_deref(), Some("application/json"));
            let json = serde_json::from_slice(message.body.bytes()).unwrap();
            return (message.routing.routing_key.clone(), json);
        }
        assert!(tokio::time::Instant::now() < deadline, "no event in {}", queue.name());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn expired_and_rejected_deaths_emit_events_with_their_drop_reasons() {
    let vhost = setup().await;
    let events = declare(&vhost, "events", Table::new()).await;
    vhost.bind(EVENTS_EXCHANGE, Destination::Queue("events".into()), "#", &Table::new(), 1).await.unwrap();
    assert!(vhost.dead_letter_events().listened());
    declare(&vhost, "dlq", Table::new()).await;
    let ttl = table(&[
        ("x-message-ttl", Value::I64(0)),
        ("x-dead-letter-exchange", Value::long_str("")),
        ("x-dead-letter-routing-key", Value::long_str("dlq")),
    ]);
    let expiring = declare(&vhost, "expiring", ttl).await;
    let plain = declare(&vhost, "plain", Table::new()).await;

    publish(&expiring, "e-1").await;
    let (key, event) = next_event(&events).await;
    assert_eq!(key, "expired.expiring");
    assert_eq!(event["vhost"], "/");
    assert_eq!(event["queue"], "expiring");
    assert_eq!(event["reason"], "expired");
    assert_eq!(event["drop_reason"], serde_json::Value::Null);
    assert_eq!(event["message_id"], "e-1");
    assert_eq!(event["correlation_id"], serde_json::Value::Null);
    assert_eq!(event["count"], 1);
    assert_eq!(event["dead_letter_exchange"], "");
    assert_eq!(event["routing_keys"], serde_json::json!(["expiring"]));
    assert!(event["time"].as_i64().unwrap() > 1_700_000_000_000);
    assert_eq!(event["error_condition"], serde_json::Value::Null);
    assert!(vhost.queue("dlq", 1).unwrap().get(OWNER, true).await.unwrap().is_some(), "dead-lettered as before");

    publish(&plain, "p-1").await;
    let got = plain.get(OWNER, false).await.unwrap().unwrap();
    plain.settle(vec![got.delivery.seq], Settle::Discard).await;
    let (key, event) = next_event(&events).await;
    assert_eq!(key, "rejected.plain");
    assert_eq!((event["reason"].as_str(), event["drop_reason"].as_str()), (Some("rejected"), Some("no-dlx")));
    assert_eq!(event["dead_letter_exchange"], serde_json::Value::Null);
    assert_eq!(event["message_id"], "p-1");

    // A dead-letter exchange that routes nowhere.
    let nowhere = table(&[("x-dead-letter-exchange", Value::long_str("amq.direct")), ("x-message-ttl", Value::I64(0))]);
    publish(&declare(&vhost, "nowhere", nowhere).await, "n-1").await;
    let (_, event) = next_event(&events).await;
    assert_eq!((event["queue"].as_str(), event["drop_reason"].as_str()), (Some("nowhere"), Some("unroutable")));
    // A dead-letter exchange that does not exist counts as none.
    let missing = table(&[("x-dead-letter-exchange", Value::long_str("missing")), ("x-message-ttl", Value::I64(0))]);
    publish(&declare(&vhost, "missing-dlx", missing).await, "m-1").await;
    let (_, event) = next_event(&events).await;
    assert_eq!(
        (event["queue"].as_str(), event["drop_reason"].as_str(), event["dead_letter_exchange"].as_str()),
        (Some("missing-dlx"), Some("no-dlx"), Some("missing"))
    );

    // Dead-lettered back to itself on expiry: only the cycle rule removed the target.
    let cycle = table(&[
        ("x-dead-letter-exchange", Value::long_str("")),
        ("x-dead-letter-routing-key", Value::long_str("cycle")),
        ("x-message-ttl", Value::I64(0)),
    ]);
    let cycle = declare(&vhost, "cycle", cycle).await;
    publish(&cycle, "c-1").await;
    let (_, event) = next_event(&events).await;
    assert_eq!(
        (event["queue"].as_str(), event["drop_reason"].as_str(), event["count"].as_u64()),
        (Some("cycle"), Some("cycle"), Some(1))
    );
    assert_eq!(vhost.dead_letter_events().built(), 5);
}

#[tokio::test]
async fn a_binding_key_filters_events_and_nothing_is_built_while_nothing_is_bound() {
    let vhost = setup().await;
    let plain = declare(&vhost, "orders", table(&[("x-message-ttl", Value::I64(0))])).await;
    publish(&plain, "unheard").await;
    // Give the queue its pass: the message expired, no event was built.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(plain.stats().await.unwrap().ready, 0);
    assert!(!vhost.dead_letter_events().listened());
    assert_eq!(vhost.dead_letter_events().built(), 0);

    let rejected = declare(&vhost, "rejected-only", Table::new()).await;
    vhost
        .bind(EVENTS_EXCHANGE, Destination::Queue("rejected-only".into()), "rejected.#", &Table::new(), 1)
        .await
        .unwrap();
    publish(&plain, "expires").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(vhost.dead_letter_events().built(), 1, "built: something is bound");
    assert!(rejected.get(OWNER, true).await.unwrap().is_none(), "expired.orders does not match rejected.#");

    // Unbinding the last listener stops building again.
    vhost
        .unbind(EVENTS_EXCHANGE, Destination::Queue("rejected-only".into()), "rejected.#", &Table::new(), 1)
        .await
        .unwrap();
    assert!(!vhost.dead_letter_events().listened());
    publish(&plain, "unheard-again").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(vhost.dead_letter_events().built(), 1);
}

#[tokio::test]
async fn an_at_least_once_death_is_reported_once_not_per_retry() {
    let vhost = setup().await;
    let events = declare(&vhost, "events", Table::new()).await;
    vhost.bind(EVENTS_EXCHANGE, Destination::Queue("events".into()), "#", &Table::new(), 1).await.unwrap();
    let args = table(&[
        ("x-queue-type", Value::long_str("quorum")),
        ("x-dead-letter-strategy", Value::long_str("at-least-once")),
        ("x-overflow", Value::long_str("reject-publish")),
        ("x-dead-letter-exchange", Value::long_str("")),
        ("x-dead-letter-routing-key", Value::long_str("missing")),
    ]);
    let declare_quorum = QueueDeclare { name: "qq".into(), durable: true, arguments: args, ..QueueDeclare::default() };
    vhost.declare_queue(&declare_quorum, 1).await.unwrap();
    let source = vhost.queue("qq", 1).unwrap();
    publish(&source, "q-1").await;
    let got = source.get(OWNER, false).await.unwrap().unwrap();
    source.settle(vec![got.delivery.seq], Settle::Discard).await;
    let (key, event) = next_event(&events).await;
    assert_eq!(key, "rejected.qq");
    assert_eq!(event["drop_reason"], serde_json::Value::Null, "kept until a route exists, not dropped");
    // Unroutable: it waits; a topology change makes it try again — without a second event.
    declare(&vhost, "unrelated", Table::new()).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(source.stats().await.unwrap().dead_letters_pending, 1);
    assert!(events.get(OWNER, true).await.unwrap().is_none());
    assert_eq!(vhost.dead_letter_events().built(), 1);
}
