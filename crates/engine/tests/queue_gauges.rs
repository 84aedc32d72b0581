//! Per-queue gauges (issue 16, item 7): how many dead letters wait in each queue, and how old
//! its oldest ready message is.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use charon_engine::{Broker, BrokerConfig, Enqueue, Owner, QueueDeclare, QueueRef};
use charon_model::{Body, Message, Routing, Table};

const OWNER: Owner = Owner { session: 1, channel: 1 };

/// How long ago (ms) the queue's oldest ready message arrived, by its handle's gauge (what
/// `charon_queue_oldest_message_age_seconds` renders); `None` while nothing is ready.
fn oldest_age_ms(queue: &QueueRef) -> Option<i64> {
    let arrived = queue.oldest_ready_at.load(Relaxed);
    (arrived != 0).then(|| charon_engine::clock::now_ms() - arrived)
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
    assert_eq!(oldest_age_ms(&queue), None, "empty");
    assert_eq!(queue.dead_letters_pending.load(Relaxed), 0);
    assert!(queue.publish(publish("old"), None).await);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(queue.publish(publish("new"), None).await);
    queue.stats().await.unwrap();
    let first = oldest_age_ms(&queue).unwrap();
    assert!((1_400..3_000).contains(&first), "the old message waited 1.5 s: {first} ms");
    // The old one leaves: the head is the new one, about 0 s old.
    assert!(queue.get(OWNER, true).await.unwrap().is_some());
    queue.stats().await.unwrap();
    let second = oldest_age_ms(&queue).unwrap();
    assert!(second < 500, "the new head is young: {second} ms");
    assert!(queue.get(OWNER, true).await.unwrap().is_some());
    queue.stats().await.unwrap();
    assert_eq!(oldest_age_ms(&queue), None, "empty again");
}
