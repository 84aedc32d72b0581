//! Redrive jobs against a real engine: messages dead-lettered by rejection go back where they
//! died from, filters leave the rest in place, dry runs move nothing, refusals pause, limits
//! hold.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use charon_engine::redrive::{JobSpec, JobState, JobView, RedriveError};
use charon_engine::{Broker, BrokerConfig, Destination, Enqueue, ExchangeDeclare, QueueRef, Settle, VHost};
use charon_model::{Body, DeathReason, Message, REDRIVE_COUNT_KEY, Routing, Table, Value};
use support::{OWNER, broker, declare, table};

/// `orders` (bound to exchange `shop` with `order.new`) and `billing` dead-letter into `dlq`.
async fn setup() -> (Arc<Broker>, Arc<VHost>) {
    let (broker, vhost) = broker(BrokerConfig::default());
    let to_dlq = || {
        table(&[("x-dead-letter-exchange", Value::long_str("")), ("x-dead-letter-routing-key", Value::long_str("dlq"))])
    };
    vhost.declare_queue(&declare("dlq", Table::new()), 1).await.unwrap();
    vhost.declare_queue(&declare("orders", to_dlq()), 1).await.unwrap();
    vhost.declare_queue(&declare("billing", to_dlq()), 1).await.unwrap();
    let shop =
        ExchangeDeclare { name: "shop".into(), kind: "direct".into(), durable: true, ..ExchangeDeclare::default() };
    vhost.declare_exchange(&shop).await.unwrap();
    vhost.bind("shop", Destination::Queue("orders".into()), "order.new", &Table::new(), 1).await.unwrap();
    (broker, vhost)
}

fn queue(vhost: &VHost, name: &str) -> QueueRef {
    vhost.queue(name, 1).unwrap()
}

/// Publishes `body` into `queue` as if routed by `exchange`/`key`, then rejects it into the
/// dead-letter queue.
async fn dead_letter(vhost: &VHost, queue_name: &str, exchange: &str, key: &str, body: &str, tenant: &str) {
    let q = queue(vhost, queue_name);
    let dlq = queue(vhost, "dlq");
    let before = dlq.stats().await.unwrap().ready;
    let routing = Routing { exchange: exchange.into(), routing_key: key.into(), ..Routing::default() };
    let mut m = Message::new(routing, Body::Data(body.to_owned().into()));
    m.headers.insert("tenant", Value::long_str(tenant));
    assert!(q.publish(vec![Enqueue { message: Arc::new(m), confirm: None }], None).await);
    let got = q.get(OWNER, false).await.unwrap().expect("the message");
    q.settle(vec![got.delivery.seq], Settle::Discard).await;
    assert_eq!(ready(&dlq, before + 1).await, before + 1, "dead-lettered in order");
}

/// Expires `body` out of `queue` into the dead-letter queue (a per-message TTL of 0).
async fn expire(vhost: &VHost, queue_name: &str, body: &str) {
    let q = queue(vhost, queue_name);
    let dlq = queue(vhost, "dlq");
    let before = dlq.stats().await.unwrap().ready;
    let routing = Routing { routing_key: queue_name.into(), ..Routing::default() };
    let mut m = Message::new(routing, Body::Data(body.to_owned().into()));
    m.properties_mut().ttl = Some(0);
    assert!(q.publish(vec![Enqueue { message: Arc::new(m), confirm: None }], None).await);
    assert_eq!(ready(&dlq, before + 1).await, before + 1, "expired in order");
}

async fn ready(q: &QueueRef, expected: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let ready = q.stats().await.unwrap().ready;
        if ready == expected || Instant::now() > deadline {
            return ready;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Takes every ready message of `q` (acknowledging them), in order.
async fn drain(q: &QueueRef) -> Vec<Message> {
    let mut out = Vec::new();
    while let Some(got) = q.get(OWNER, true).await.unwrap() {
        out.push((*got.delivery.message).clone());
    }
    out
}

fn body(m: &Message) -> String {
    String::from_utf8(m.body.bytes().to_vec()).unwrap()
}

fn spec(json: &str) -> JobSpec {
    serde_json::from_str(json).unwrap()
}

/// Creates the job `json` describes (it must be accepted).
async fn start(broker: &Broker, vhost: &Arc<VHost>, json: &str) -> JobView {
    broker.redrives().create(vhost, spec(json)).await.unwrap()
}

async fn finished(broker: &Broker, id: &str) -> JobView {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let view = broker.redrives().get("/", id).unwrap();
        if view.state != JobState::Running || Instant::now() > deadline {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn original_sends_each_message_back_where_it_died_with_its_history_and_a_count() {
    let (broker, vhost) = setup().await;
    dead_letter(&vhost, "orders", "shop", "order.new", "o1", "acme").await;
    dead_letter(&vhost, "billing", "", "billing", "b1", "acme").await;
    dead_letter(&vhost, "orders", "shop", "order.new", "o2", "acme").await;
    let dlq = queue(&vhost, "dlq");
    assert_eq!(ready(&dlq, 3).await, 3);
    let job = start(&broker, &vhost, r#"{"source":"dlq","destination":{"type":"original","death":"first"}}"#).await;
    assert_eq!(job.state, JobState::Running);
    let done = finished(&broker, &job.id).await;
    assert_eq!(done.state, JobState::Completed, "{done:?}");
    assert_eq!((done.progress.moved, done.progress.skipped, done.progress.failed), (3, 0, 0));
    assert_eq!(done.progress.remaining, 0);
    assert_eq!(ready(&dlq, 0).await, 0);
    let orders = drain(&queue(&vhost, "orders")).await;
    assert_eq!(orders.iter().map(body).collect::<Vec<_>>(), ["o1", "o2"]);
    let billing = drain(&queue(&vhost, "billing")).await;
    assert_eq!(billing.iter().map(body).collect::<Vec<_>>(), ["b1"]);
    let moved = &orders[0];
    assert_eq!(moved.broker.redrive_count, 1);
    assert_eq!((moved.routing.exchange.as_str(), moved.routing.routing_key.as_str()), ("shop", "order.new"));
    let history = moved.broker.deaths.as_deref().expect("the death history is kept");
    assert_eq!((history.first.queue.as_str(), history.first.reason), ("orders", DeathReason::Rejected));
    // Rendered for consumers with the other counts.
    let shown = moved.broker.with_delivery_count(&moved.headers);
    assert_eq!(shown.get(REDRIVE_COUNT_KEY), Some(&Value::I64(1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_leaves_the_others_in_place_and_in_order_without_spinning() {
    let (broker, vhost) = setup().await;
    dead_letter(&vhost, "orders", "shop", "order.new", "keep-1", "other").await;
    dead_letter(&vhost, "orders", "shop", "order.new", "move-1", "acme").await;
    expire(&vhost, "orders", "expired-1").await;
    dead_letter(&vhost, "orders", "shop", "order.new", "keep-2", "other").await;
    dead_letter(&vhost, "orders", "shop", "order.new", "move-2", "acme").await;
    let dlq = queue(&vhost, "dlq");
    assert_eq!(ready(&dlq, 5).await, 5);
    let job = start(
        &broker,
        &vhost,
        r#"{"source":"dlq","destination":{"type":"queue","queue":"billing"},
                     "filter":{"reasons":["rejected"],"headers":{"tenant":"acme"}}}"#,
    )
    .await;
    let done = finished(&broker, &job.id).await;
    assert_eq!(done.state, JobState::Completed);
    assert_eq!((done.progress.moved, done.progress.skipped), (2, 3));
    let left = drain(&dlq).await;
    assert_eq!(left.iter().map(body).collect::<Vec<_>>(), ["keep-1", "expired-1", "keep-2"]);
    let moved = drain(&queue(&vhost, "billing")).await;
    assert_eq!(moved.iter().map(body).collect::<Vec<_>>(), ["move-1", "move-2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_counts_by_reason_and_source_and_moves_nothing() {
    let (broker, vhost) = setup().await;
    dead_letter(&vhost, "orders", "shop", "order.new", "o1", "a").await;
    dead_letter(&vhost, "billing", "", "billing", "b1", "a").await;
    expire(&vhost, "orders", "e1").await;
    let dlq = queue(&vhost, "dlq");
    assert_eq!(ready(&dlq, 3).await, 3);
    let job =
        start(&broker, &vhost, r#"{"source":"dlq","destination":{"type":"original","death":"last"},"dry_run":true}"#)
            .await;
    let done = finished(&broker, &job.id).await;
    assert_eq!(done.state, JobState::Completed);
    let dry = done.dry_run_result.expect("a dry-run result");
    assert_eq!(dry.total, 3);
    assert_eq!(dry.by_reason.get("rejected"), Some(&2));
    assert_eq!(dry.by_reason.get("expired"), Some(&1));
    assert_eq!(dry.by_source.get("orders"), Some(&2));
    assert_eq!(dry.by_source.get("billing"), Some(&1));
    assert_eq!(done.progress.moved, 0);
    assert_eq!(drain(&dlq).await.iter().map(body).collect::<Vec<_>>(), ["o1", "b1", "e1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_destination_pauses_the_job_and_a_resume_finishes_it() {
    let (broker, vhost) = setup().await;
    let full = table(&[("x-max-length", Value::I64(1)), ("x-overflow", Value::long_str("reject-publish"))]);
    vhost.declare_queue(&declare("small", full), 1).await.unwrap();
    for i in 0..3 {
        dead_letter(&vhost, "orders", "shop", "order.new", &format!("m{i}"), "a").await;
    }
    let dlq = queue(&vhost, "dlq");
    assert_eq!(ready(&dlq, 3).await, 3);
    let job =
        start(&broker, &vhost, r#"{"source":"dlq","destination":{"type":"queue","queue":"small"},"rate":50}"#).await;
    let paused = finished(&broker, &job.id).await;
    assert_eq!(paused.state, JobState::Paused, "{paused:?}");
    assert!(paused.reason.as_deref().unwrap().contains("'small' refused"), "{:?}", paused.reason);
    assert_eq!(paused.progress.moved, 1);
    // The refusal pauses the job; a message published before it arrived may be refused too.
    assert!((1..=2).contains(&paused.progress.failed), "{paused:?}");
    assert_eq!(ready(&dlq, 2).await, 2, "the refused message stays in the source");
    // Room again: the job goes on from where it was.
    assert_eq!(drain(&queue(&vhost, "small")).await.len(), 1);
    let small = queue(&vhost, "small");
    let resumed = broker.redrives().resume(&vhost, &job.id).await.unwrap();
    assert_eq!(resumed.state, JobState::Running);
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < 2 && Instant::now() < deadline {
        got.extend(drain(&small).await);
        if broker.redrives().get("/", &job.id).unwrap().state == JobState::Paused {
            broker.redrives().resume(&vhost, &job.id).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(got.iter().map(body).collect::<Vec<_>>(), ["m1", "m2"]);
    assert_eq!(finished(&broker, &job.id).await.progress.moved, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_messages_rate_and_one_running_job_per_source() {
    let (broker, vhost) = setup().await;
    for i in 0..12 {
        dead_letter(&vhost, "orders", "shop", "order.new", &format!("m{i}"), "a").await;
    }
    let dlq = queue(&vhost, "dlq");
    assert_eq!(ready(&dlq, 12).await, 12);
    let started = Instant::now();
    let job = start(
        &broker,
        &vhost,
        r#"{"source":"dlq","destination":{"type":"queue","queue":"billing"},"rate":20,"max_messages":10}"#,
    )
    .await;
    let second = broker
        .redrives()
        .create(&vhost, spec(r#"{"source":"dlq","destination":{"type":"queue","queue":"billing"}}"#))
        .await;
    assert!(matches!(&second, Err(RedriveError::Conflict(text)) if text.contains(&job.id)), "{second:?}");
    let done = finished(&broker, &job.id).await;
    let took = started.elapsed();
    assert_eq!(done.state, JobState::Completed);
    assert_eq!(done.progress.moved, 10);
    // Ten messages at 20/s, the first at once: at least 9/20 s.
    assert!(took >= Duration::from_millis(440), "{took:?}");
    assert_eq!(ready(&dlq, 2).await, 2);
    assert_eq!(drain(&queue(&vhost, "billing")).await.len(), 10);
    // Finished: deletable; a second job may run now.
    broker.redrives().delete("/", &job.id).await.unwrap();
    assert!(matches!(broker.redrives().get("/", &job.id), Err(RedriveError::NotFound(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_and_cancel_keep_every_message() {
    let (broker, vhost) = setup().await;
    for i in 0..40 {
        dead_letter(&vhost, "orders", "shop", "order.new", &format!("m{i}"), "a").await;
    }
    let dlq = queue(&vhost, "dlq");
    assert_eq!(ready(&dlq, 40).await, 40);
    let job =
        start(&broker, &vhost, r#"{"source":"dlq","destination":{"type":"original","death":"first"},"rate":40}"#).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let paused = broker.redrives().pause(&vhost, &job.id).await.unwrap();
    assert_eq!(paused.state, JobState::Paused);
    assert!(matches!(broker.redrives().delete("/", &job.id).await, Err(RedriveError::Conflict(_))));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let moved = broker.redrives().get("/", &job.id).unwrap().progress.moved;
    assert!(moved > 0 && moved < 40, "{moved}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(broker.redrives().get("/", &job.id).unwrap().progress.moved, moved, "paused: nothing moves");
    broker.redrives().resume(&vhost, &job.id).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let cancelled = broker.redrives().cancel(&vhost, &job.id).await.unwrap();
    assert_eq!(cancelled.state, JobState::Cancelled);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let moved = broker.redrives().get("/", &job.id).unwrap().progress.moved;
    let orders = drain(&queue(&vhost, "orders")).await.len() as u64;
    let left = drain(&dlq).await.len() as u64;
    assert_eq!(orders, moved);
    assert_eq!(orders + left, 40, "none lost, none duplicated");
    assert!(matches!(broker.redrives().resume(&vhost, &job.id).await, Err(RedriveError::Conflict(_))));
}

/// Publishes `count` messages straight into `q`, the `every`-th of them with tenant `acme`
/// (body `m<i>`), the others with tenant `other`.
async fn fill(q: &QueueRef, count: usize, every: usize) {
    for chunk in (0..count).collect::<Vec<_>>().chunks(500) {
        let items = chunk
            .iter()
            .map(|i| {
                let routing = Routing { routing_key: q.name().into(), ..Routing::default() };
                let mut m = Message::new(routing, Body::Data(format!("m{i}").into()));
                let tenant = if i % every == 0 { "acme" } else { "other" };
                m.headers.insert("tenant", Value::long_str(tenant));
                Enqueue { message: Arc::new(m), confirm: None }
            })
            .collect();
        assert!(q.publish(items, None).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_selecting_10_of_10_000_holds_none_of_the_others() {
    let (broker, vhost) = setup().await;
    let dlq = queue(&vhost, "dlq");
    fill(&dlq, 10_000, 1_000).await;
    assert_eq!(ready(&dlq, 10_000).await, 10_000);
    // A rate keeps the job running long enough to be watched.
    let job = start(
        &broker,
        &vhost,
        r#"{"source":"dlq","destination":{"type":"queue","queue":"billing"},
                     "filter":{"headers":{"tenant":"acme"}},"rate":20}"#,
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut samples = 0;
    while broker.redrives().get("/", &job.id).unwrap().state == JobState::Running && Instant::now() < deadline {
        let stats = dlq.stats().await.unwrap();
        assert_eq!(stats.unacked, 0, "the job holds no message of the source");
        assert!(stats.ready >= 9_990, "{}", stats.ready);
        samples += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(samples > 20, "the job was watched while it ran ({samples} samples)");
    let done = finished(&broker, &job.id).await;
    assert_eq!(done.state, JobState::Completed, "{done:?}");
    assert_eq!((done.progress.moved, done.progress.skipped, done.progress.failed), (10, 9_990, 0));
    assert_eq!(done.progress.remaining, 0);
    let stats = dlq.stats().await.unwrap();
    assert_eq!((stats.ready, stats.unacked), (9_990, 0));
    let moved = drain(&queue(&vhost, "billing")).await;
    let expected: Vec<String> = (0..10).map(|i| format!("m{}", i * 1_000)).collect();
    assert_eq!(moved.iter().map(body).collect::<Vec<_>>(), expected);
    assert!(moved.iter().all(|m| m.broker.redrive_count == 1));
    let left = drain(&dlq).await;
    assert_eq!(left.len(), 9_990);
    assert!(left.iter().all(|m| m.headers.get("tenant") == Some(&Value::long_str("other"))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_job_paused_by_a_refusal_resumes_from_its_cursor() {
    let (broker, vhost) = setup().await;
    let full = table(&[("x-max-length", Value::I64(1)), ("x-overflow", Value::long_str("reject-publish"))]);
    vhost.declare_queue(&declare("small", full), 1).await.unwrap();
    let dlq = queue(&vhost, "dlq");
    // m0, m3, m6, m9 are acme's.
    fill(&dlq, 10, 3).await;
    assert_eq!(ready(&dlq, 10).await, 10);
    let job = start(
        &broker,
        &vhost,
        r#"{"source":"dlq","destination":{"type":"queue","queue":"small"},
                     "filter":{"headers":{"tenant":"acme"}},"rate":50}"#,
    )
    .await;
    let paused = finished(&broker, &job.id).await;
    assert_eq!(paused.state, JobState::Paused, "{paused:?}");
    assert!(paused.reason.as_deref().unwrap().contains("'small' refused"), "{:?}", paused.reason);
    assert_eq!(paused.progress.moved, 1);
    assert_eq!(dlq.stats().await.unwrap().unacked, 0, "a paused job holds nothing");
    let small = queue(&vhost, "small");
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < 4 && Instant::now() < deadline {
        got.extend(drain(&small).await);
        if broker.redrives().get("/", &job.id).unwrap().state == JobState::Paused {
            broker.redrives().resume(&vhost, &job.id).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(got.iter().map(body).collect::<Vec<_>>(), ["m0", "m3", "m6", "m9"]);
    let done = finished(&broker, &job.id).await;
    assert_eq!(done.state, JobState::Completed, "{done:?}");
    // Each resume went on from the cursor: the skipped ones were counted once.
    assert_eq!((done.progress.moved, done.progress.skipped), (4, 6));
    let left = drain(&dlq).await;
    assert_eq!(left.iter().map(body).collect::<Vec<_>>(), ["m1", "m2", "m4", "m5", "m7", "m8"]);
}
