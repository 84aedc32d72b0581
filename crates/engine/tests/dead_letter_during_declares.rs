//! A queue keeps dead-lettering at its normal rate while another connection declares 1,000
//! durable queues (issue 15: no metadata I/O under the topology lock or on a runtime worker).
//!
//! Each durable declare commits (and fsyncs) one redb transaction. When that commit ran under the
//! vhost's topology write lock on a runtime worker, routing a dead letter (which takes the read
//! lock) waited behind it: the lock is writer-fair, so the declaring connection, taking it again
//! right after each commit, let the dead-lettering queue route about one dead letter per commit.
//! A queue expiring several messages per millisecond then fell further behind with every
//! declare, and its dead letters arrived later and later.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use charon_engine::persist::Persistence;
use charon_engine::{Broker, BrokerConfig, ConsumeSpec, Enqueue, Owner, QueueDeclare, SessionEvent, SessionSink};
use charon_model::{Body, Message, Routing, Table, Value};
use charon_store::meta::MetaStore;
use charon_store::segment_log::{LogOptions, MessageLog};

/// The source queue's message TTL: every message dead-letters this long after its publish.
const TTL_MS: i64 = 10;
/// Messages published per millisecond tick: several per commit, so a dead-letterer that routes
/// one message per commit falls behind.
const PER_TICK: usize = 5;
/// Durable queues the other connection declares.
const DECLARES: usize = 1_000;

fn table(pairs: &[(&str, Value)]) -> Table {
    let mut table = Table::new();
    for (key, value) in pairs {
        table.insert(*key, value.clone());
    }
    table
}

/// The dead-letter rate during the declares must be at least this fraction of the rate before.
///
/// Why this bound: the source queue expires `PER_TICK` messages every millisecond, so before the
/// declares it dead-letters a few thousand per second. With the commit under the lock it routed
/// about one per commit (a few hundred per second at best; on a loaded 2-core machine the old
/// code managed 1/36 of its rate, its full mailbox holding back the publisher too). Without the
/// lock the declares only compete for CPU, which on 2 cores can take a share of the rate but not
/// most of it: a third still fails the old behaviour by an order of magnitude.
const MIN_SHARE: f64 = 1.0 / 3.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_keeps_dead_lettering_while_another_connection_declares_a_thousand_durable_queues() {
    let dir = tempfile::tempdir().unwrap();
    let meta = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
    let (log, _) = MessageLog::open(&dir.path().join("log"), LogOptions::default()).unwrap();
    let broker = Broker::with_store(BrokerConfig::default(), Persistence::new(log, meta), HashMap::new()).unwrap();
    let user = broker.authenticate("guest", "guest").unwrap();
    let vhost = broker.open_vhost(&user, "/").unwrap();

    let declare = |name: &str, durable: bool, arguments: Table| QueueDeclare {
        name: name.into(),
        durable,
        arguments,
        ..QueueDeclare::default()
    };
    vhost.declare_queue(&declare("dlq", false, Table::new()), 1).await.unwrap();
    let source_args = table(&[
        ("x-message-ttl", Value::I64(TTL_MS)),
        ("x-dead-letter-exchange", Value::long_str("")),
        ("x-dead-letter-routing-key", Value::long_str("dlq")),
    ]);
    vhost.declare_queue(&declare("src", false, source_args), 1).await.unwrap();
    let source = vhost.queue("src", 1).unwrap();
    let dlq = vhost.queue("dlq", 1).unwrap();
    let (sink, mut events) = SessionSink::new(1, 0);
    dlq.consume(ConsumeSpec {
        id: broker.next_id(),
        tag: "ctag".into(),
        owner: Owner { session: 1, channel: 1 },
        session: sink,
        no_ack: true,
        prefetch: 0,
        link_credit: None,
        channel_limit: None,
        exclusive: false,
        arguments: Table::new(),
    })
    .await
    .unwrap();

    // Publishes PER_TICK messages every millisecond straight into the source queue (no routing,
    // so only the dead-letter path meets the topology lock).
    let start = Instant::now();
    let publisher = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let items = (0..PER_TICK)
                .map(|_| {
                    let message = Message::new(Routing::default(), Body::Data("expires".into()));
                    Enqueue { message: Arc::new(message), confirm: None }
                })
                .collect();
            if !source.publish(items, None).await {
                break;
            }
        }
    });
    // When each dead letter arrived.
    let receiver = tokio::spawn(async move {
        let mut arrivals: Vec<Duration> = Vec::new();
        while let Some(event) = events.recv().await {
            if let SessionEvent::Deliveries { items, .. } = event {
                let now = start.elapsed();
                arrivals.extend(items.iter().map(|_| now));
            }
        }
        arrivals
    });

    tokio::time::sleep(Duration::from_millis(300)).await;
    let declares_from = start.elapsed();
    let declarer = Arc::clone(&vhost);
    let declares = tokio::spawn(async move {
        for i in 0..DECLARES {
            declarer.declare_queue(&declare(&format!("durable-{i}"), true, Table::new()), 2).await.unwrap();
        }
    });
    declares.await.unwrap();
    let declares_to = start.elapsed();
    tokio::time::sleep(Duration::from_millis(300)).await;
    publisher.abort();
    let _ = publisher.await;
    vhost.delete_queue("dlq", 1, false, false).await.unwrap();
    drop(vhost);
    drop(broker);
    let seen = tokio::time::timeout(Duration::from_secs(30), receiver).await.unwrap().unwrap();

    let rate = |from: Duration, to: Duration| {
        let count = seen.iter().filter(|at| (from..to).contains(*at)).count();
        count as f64 / (to - from).as_secs_f64()
    };
    // The first 100 ms warm up (the first messages expire only after the TTL).
    let before = rate(Duration::from_millis(100), declares_from);
    let during = rate(declares_from, declares_to);
    eprintln!(
        "{} dead letters; {DECLARES} declares took {:?}; {before:.0}/s before them, {during:.0}/s during them",
        seen.len(),
        declares_to - declares_from,
    );
    assert!(before > 1_000.0, "the source queue dead-lettered only {before:.0} messages per second");
    assert!(
        during >= before * MIN_SHARE,
        "{during:.0} dead letters per second during the declares, {before:.0} per second before them"
    );
}
