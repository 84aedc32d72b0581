//! `kill -9` during a redrive loses no message: 20,000 persistent messages are rejected from a
//! durable queue into its durable dead-letter queue, a rate-limited redrive job sends them
//! back (`original`: to the queue they died in), and the real binary is killed 20 times while
//! the job runs; each start resumes the job from the metadata store. At the end the job has
//! completed and every message is back in its queue exactly once: each goes back to one
//! queue, so its copy's log record there also removed it from the dead-letter queue (none
//! lost, none duplicated).
//!
//! The same with a filter (a job that browses its source and removes what it moved, resuming
//! from its recorded cursor after each start): the selected half goes back, the other half
//! stays in the dead-letter queue, none lost (a browsing job moves at least once).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, BasicRejectOptions,
    ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use serde_json::Value;

const CYCLES: u64 = 20;
const MESSAGES: u64 = 20_000;
const ORDERS: &str = "rd-orders";
const DLQ: &str = "rd-dlq";

async fn connect(port: u16) -> Connection {
    let url = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
    Connection::connect(&url, ConnectionProperties::default()).await.expect("connect")
}

/// One request to the API as guest: status and JSON body.
async fn api(http_port: u16, method: &str, path: &str, body: &str) -> (u16, Value) {
    let reply = support::http::Call::api(http_port, method, path).body(body).send().await;
    (reply.status, reply.json())
}

async fn declare(ch: &Channel) {
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    ch.queue_declare(DLQ.into(), durable, FieldTable::default()).await.unwrap();
    let mut args = FieldTable::default();
    args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
    args.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString(DLQ.into()));
    ch.queue_declare(ORDERS.into(), durable, args).await.unwrap();
}

/// Publishes the persistent messages 1..=MESSAGES to `ORDERS`, confirmed in windows.
async fn publish_all(ch: &Channel) {
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let mut id = 0;
    while id < MESSAGES {
        let mut window = Vec::new();
        for _ in 0..500 {
            id += 1;
            let mut headers = FieldTable::default();
            let half = if id.is_multiple_of(2) { "even" } else { "odd" };
            headers.insert(ShortString::from("half"), AMQPValue::LongString(half.into()));
            let properties = BasicProperties::default().with_delivery_mode(2).with_headers(headers);
            let confirm = ch
                .basic_publish("".into(), ORDERS.into(), BasicPublishOptions::default(), &id.to_be_bytes(), properties)
                .await
                .unwrap();
            window.push(confirm);
        }
        for confirm in window {
            assert!(confirm.await.unwrap().is_ack());
        }
    }
}

async fn queue_messages(http_port: u16, queue: &str) -> u64 {
    let (_, got) = api(http_port, "GET", &format!("/api/queues/%2F/{queue}"), "").await;
    got["messages"].as_u64().unwrap_or(u64::MAX)
}

/// Rejects every message of `ORDERS` into the dead-letter queue, until it holds all of them.
async fn reject_all(ch: &Channel, http_port: u16) {
    ch.basic_qos(1000, BasicQosOptions::default()).await.unwrap();
    let mut deliveries = ch
        .basic_consume(ORDERS.into(), "rejecter".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    let mut rejected = 0;
    while rejected < MESSAGES {
        let delivery = deliveries.next().await.unwrap().unwrap();
        delivery.reject(BasicRejectOptions { requeue: false }).await.unwrap();
        rejected += 1;
    }
    for _ in 0..600 {
        if queue_messages(http_port, DLQ).await == MESSAGES {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the dead-letter queue never held every message");
}

/// Every id left in `queue`, taken with acknowledgements until nothing arrives for a second;
/// and how many deliveries that took (duplicates counted).
async fn drain(ch: &Channel, queue: &str) -> (BTreeSet<u64>, u64) {
    ch.basic_qos(1000, BasicQosOptions::default()).await.unwrap();
    let options = BasicConsumeOptions::default();
    let mut deliveries = ch
        .basic_consume(queue.into(), format!("drain-{queue}").as_str().into(), options, FieldTable::default())
        .await
        .unwrap();
    let (mut ids, mut count) = (BTreeSet::new(), 0);
    while let Ok(Some(Ok(delivery))) = tokio::time::timeout(Duration::from_secs(1), deliveries.next()).await {
        ids.insert(u64::from_be_bytes(delivery.data[..8].try_into().unwrap()));
        count += 1;
        delivery.ack(BasicAckOptions::default()).await.unwrap();
    }
    (ids, count)
}

/// The job once it is no longer running (or after 60 s, as it then stands).
async fn until_not_running(http_port: u16, job_id: &str) -> Value {
    let path = format!("/api/charon/redrives/%2F/{job_id}");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let job = api(http_port, "GET", &path, "").await.1;
        if job["state"] != "running" || std::time::Instant::now() > deadline {
            return job;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every message published and rejected into the dead-letter queue, then the broker stopped
/// cleanly: the rejections' exits from the work queue are on disk, so a message found there at
/// the end can only have been moved back by a job. (A kill right after the rejections could
/// leave a rejected message in both queues, as dead lettering's crash semantics allow, and the
/// tests count what the moves do.)
async fn rejected_then_stopped(data: &std::path::Path) {
    let mut charon = support::Charon::start_on(data, &[]);
    let conn = connect(charon.port).await;
    let ch = conn.create_channel().await.unwrap();
    declare(&ch).await;
    publish_all(&ch).await;
    reject_all(&conn.create_channel().await.unwrap(), charon.http_port).await;
    assert_eq!(queue_messages(charon.http_port, ORDERS).await, 0);
    drop(conn);
    charon.terminate();
    assert!(charon.wait_exit(Duration::from_secs(30)).is_some(), "a clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_kill_9_cycles_during_a_redrive_lose_no_message() {
    let data = tempfile::tempdir().unwrap();
    rejected_then_stopped(data.path()).await;
    let job_id = {
        let charon = support::Charon::start_on(data.path(), &[]);
        assert_eq!(queue_messages(charon.http_port, ORDERS).await, 0, "nothing came back to the work queue");
        // ~1,000 a second: the job spans the crash cycles.
        let body = r#"{"source":"rd-dlq","destination":{"type":"original","death":"first"},"rate":1000}"#;
        let (status, job) = api(charon.http_port, "POST", "/api/charon/redrives/%2F", body).await;
        assert_eq!(status, 201, "{job}");
        job["id"].as_str().unwrap().to_owned()
    };
    let mut moved_seen = Vec::new();
    for cycle in 0..CYCLES {
        let mut charon = support::Charon::start_on(data.path(), &[]);
        // Crash points spread over 150..750 ms of the job's run.
        tokio::time::sleep(Duration::from_millis(150 + (cycle * 337) % 600)).await;
        let (_, job) = api(charon.http_port, "GET", &format!("/api/charon/redrives/%2F/{job_id}"), "").await;
        moved_seen.push(job["progress"]["moved"].as_u64().unwrap_or(0));
        assert_eq!(job["id"], job_id.as_str(), "the job survived the restart: {job}");
        charon.kill9();
    }
    let charon = support::Charon::start_on(data.path(), &[]);
    let job = until_not_running(charon.http_port, &job_id).await;
    assert_eq!(job["state"], "completed", "{job}");
    let conn = connect(charon.port).await;
    let (back, deliveries) = drain(&conn.create_channel().await.unwrap(), ORDERS).await;
    let (left, _) = drain(&conn.create_channel().await.unwrap(), DLQ).await;
    let lost: Vec<u64> = (1..=MESSAGES).filter(|id| !back.contains(id) && !left.contains(id)).collect();
    assert!(lost.is_empty(), "{} messages in neither queue: {:?}", lost.len(), &lost[..lost.len().min(20)]);
    assert!(left.is_empty(), "a completed job left {} in the dead-letter queue", left.len());
    assert_eq!(back.len() as u64, MESSAGES);
    assert!(moved_seen.windows(2).any(|w| w[1] > w[0]), "the job made progress across cycles: {moved_seen:?}");
    assert_eq!(deliveries, MESSAGES, "each message once: a move's record removed it from the source");
    eprintln!("{MESSAGES} messages back in {ORDERS}, {deliveries} deliveries; moved as seen per cycle: {moved_seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_cycles_during_a_filtered_redrive_lose_no_message() {
    const FILTERED_CYCLES: u64 = 10;
    let data = tempfile::tempdir().unwrap();
    rejected_then_stopped(data.path()).await;
    let job_id = {
        let charon = support::Charon::start_on(data.path(), &[]);
        assert_eq!(queue_messages(charon.http_port, ORDERS).await, 0, "nothing came back to the work queue");
        let body = r#"{"source":"rd-dlq","destination":{"type":"original","death":"first"},"rate":1000,
                       "filter":{"headers":{"half":"even"}}}"#;
        let (status, job) = api(charon.http_port, "POST", "/api/charon/redrives/%2F", body).await;
        assert_eq!(status, 201, "{job}");
        job["id"].as_str().unwrap().to_owned()
    };
    let mut moved_seen = Vec::new();
    for cycle in 0..FILTERED_CYCLES {
        let mut charon = support::Charon::start_on(data.path(), &[]);
        tokio::time::sleep(Duration::from_millis(300 + (cycle * 337) % 600)).await;
        let (_, job) = api(charon.http_port, "GET", &format!("/api/charon/redrives/%2F/{job_id}"), "").await;
        moved_seen.push(job["progress"]["moved"].as_u64().unwrap_or(0));
        // Browsing holds nothing: every message of the source stays ready.
        let (_, dlq) = api(charon.http_port, "GET", &format!("/api/queues/%2F/{DLQ}"), "").await;
        assert_eq!(dlq["messages_unacknowledged"].as_u64().unwrap_or(0), 0, "{dlq}");
        charon.kill9();
    }
    let charon = support::Charon::start_on(data.path(), &[]);
    let job = until_not_running(charon.http_port, &job_id).await;
    assert_eq!(job["state"], "completed", "{job}");
    let conn = connect(charon.port).await;
    let (back, deliveries) = drain(&conn.create_channel().await.unwrap(), ORDERS).await;
    let (left, _) = drain(&conn.create_channel().await.unwrap(), DLQ).await;
    let even = |id: &u64| id.is_multiple_of(2);
    let lost: Vec<u64> = (1..=MESSAGES).filter(|id| !back.contains(id) && !left.contains(id)).collect();
    assert!(lost.is_empty(), "{} messages in neither queue: {:?}", lost.len(), &lost[..lost.len().min(20)]);
    let missing: Vec<u64> = (1..=MESSAGES).filter(|id| even(id) && !back.contains(id)).collect();
    assert!(
        missing.is_empty(),
        "{} selected messages not moved: {:?}",
        missing.len(),
        &missing[..missing.len().min(20)]
    );
    let strays: Vec<&u64> = back.iter().filter(|id| !even(id)).collect();
    assert!(strays.is_empty(), "{} unselected messages moved: {:?}", strays.len(), &strays[..strays.len().min(20)]);
    assert!((1..=MESSAGES).filter(|id| !even(id)).all(|id| left.contains(&id)), "the others stayed");
    // A removal lost in a crash behind the recorded cursor leaves a copy in the source too.
    let twice = left.iter().filter(|id| even(id)).count();
    assert!(moved_seen.windows(2).any(|w| w[1] > w[0]), "the job made progress across cycles: {moved_seen:?}");
    eprintln!(
        "{} selected messages back in {ORDERS} ({deliveries} deliveries), {twice} also left in {DLQ}; moved per cycle: {moved_seen:?}",
        back.len()
    );
}
