//! What the engine's dead-lettering tests share: a broker, queues, a message rejected into
//! dead lettering, and waiting for a queue's counts. (Each test binary uses part of it.)

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use charon_engine::{Broker, BrokerConfig, Enqueue, Owner, QueueDeclare, QueueRef, Settle, VHost};
use charon_model::{Body, Message, Routing, Table, Value};

pub(crate) const OWNER: Owner = Owner { session: 1, channel: 1 };

pub(crate) fn table(pairs: &[(&str, Value)]) -> Table {
    let mut table = Table::new();
    for (key, value) in pairs {
        table.insert(*key, value.clone());
    }
    table
}

/// A durable queue's declare.
pub(crate) fn declare(name: &str, arguments: Table) -> QueueDeclare {
    QueueDeclare { name: name.into(), durable: true, arguments, ..QueueDeclare::default() }
}

/// A message published to the default exchange with `queue` as its key.
pub(crate) fn message(queue: &str, body: &str) -> Arc<Message> {
    let routing = Routing { exchange: String::new(), routing_key: queue.into(), ..Routing::default() };
    Arc::new(Message::new(routing, Body::Data(body.to_owned().into())))
}

/// Publishes one message to `queue` and rejects it (requeue = false).
pub(crate) async fn publish_and_reject(queue: &QueueRef, body: &str) {
    assert!(queue.publish(vec![Enqueue { message: message(queue.name(), body), confirm: None }], None).await);
    let got = queue.get(OWNER, false).await.unwrap().expect("the message");
    queue.settle(vec![got.delivery.seq], Settle::Discard).await;
}

/// Waits (up to 5 s) until `queue` reports `expected` as `(ready, dead letters waiting)`;
/// returns what it reported last. (Forwarding and the targets' confirms are asynchronous.)
pub(crate) async fn counts(queue: &QueueRef, expected: (u32, u32)) -> (u32, u32) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let stats = queue.stats().await.unwrap();
        let got = (stats.ready, stats.dead_letters_pending);
        if got == expected || tokio::time::Instant::now() >= deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A broker without a store, and its vhost `/`.
pub(crate) fn broker(config: BrokerConfig) -> (Arc<Broker>, Arc<VHost>) {
    let broker = Broker::new(config);
    let user = broker.authenticate("guest", "guest").unwrap();
    let vhost = broker.open_vhost(&user, "/").unwrap();
    (broker, vhost)
}

/// A broker on `dir`'s store, with what the log recovered, its vhost `/`, and the store (to
/// close its log).
pub(crate) fn open_stored(
    dir: &std::path::Path,
) -> (Arc<Broker>, Arc<VHost>, Arc<charon_engine::persist::Persistence>) {
    use charon_store::meta::MetaStore;
    use charon_store::segment_log::{LogOptions, MessageLog};
    let meta = MetaStore::open(&dir.join("meta.redb")).unwrap();
    let (log, recovery) = MessageLog::open(&dir.join("log"), LogOptions::default()).unwrap();
    let persistence = charon_engine::persist::Persistence::new(log, meta);
    let broker = Broker::with_store(BrokerConfig::default(), Arc::clone(&persistence), recovery.queues).unwrap();
    let user = broker.authenticate("guest", "guest").unwrap();
    let vhost = broker.open_vhost(&user, "/").unwrap();
    (broker, vhost, persistence)
}
