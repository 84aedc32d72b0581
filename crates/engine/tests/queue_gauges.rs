//! Per-queue gauges (issue 16, item 7): how many dead letters wait in each queue, and how old
//! its oldest ready message is.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use charon_engine::{Broker, BrokerConfig, Enqueue, Owner, QueueDeclare};
use charon_model::{Body, Message, Routing, Table};

const OWNER: Owner = Owner { session: 1, channel: 1 };

/// The value of `family{vhost="/",queue="q"}` in the exposition.
fn gauge(broker: &Broker, family: &str) -> f64 {
    let text = charon_engine::metrics::render_queue_counters(broker);
    let prefix = format!("{family}{{vhost=\"/\",queue=\"q\"}} ");
    let line = text.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("{prefix} in {text}"));
    line[prefix.len()..].parse().unwrap()
}

#[tokio::test]
async fn the_oldest_ready_message_age_grows_while_it_waits_and_follows_the_head() {
    let broker = Broker::new(BrokerConfig::default());
    let user = broker.authenticate("guest", "guest").unwrap();
    let vhost = broker.open_vhost(&user, "/").unwrap();
    vhost
        .declare_queue(&QueueDeclare { name: "q".into(), arguments: Table::new(), ..Default::default() }, 1)
        .await
        .unwrap();
    let queue = vhost.queue("q", 1).unwrap();
    let publish = |body: &'static str| {
        let routing = Routing { exchange: String::new(), routing_key: "q".into(), ..Routing::default() };
        vec![Enqueue { message: Arc::new(Message::new(routing, Body::Data(body.into()))), confirm: None }]
    };
    let age = "charon_queue_oldest_message_age_seconds";
    assert_eq!(gauge(&broker, age), 0.0, "empty");
    assert_eq!(gauge(&broker, "charon_queue_dead_letters_pending"), 0.0, "shown for classic queues too");
    assert!(queue.publish(publish("old"), None).await);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(queue.publish(publish("new"), None).await);
    queue.stats().await.unwrap();
    let first = gauge(&broker, age);
    assert!((1.4..3.0).contains(&first), "the old message waited 1.5 s: {first}");
    // The old one leaves: the head is the new one, about 0 s old.
    assert!(queue.get(OWNER, true).await.unwrap().is_some());
    queue.stats().await.unwrap();
    let second = gauge(&broker, age);
    assert!(second < 0.5, "the new head is young: {second}");
    assert!(queue.get(OWNER, true).await.unwrap().is_some());
    queue.stats().await.unwrap();
    assert_eq!(gauge(&broker, age), 0.0, "empty again");
}
