//! `kill -9` while messages are dead-lettered loses none of them: 20 crash / restart cycles of
//! the real binary while persistent messages expire from a durable queue into a durable
//! dead-letter queue, and while a consumer rejects every message of another durable queue into
//! a second one. At the end every confirmed message is in its source queue or its dead-letter
//! queue (possibly both after a crash, never neither).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, BasicRejectOptions,
    ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};

const CYCLES: u64 = 20;
/// Messages expire here into `EXPIRED_DLQ`.
const EXPIRING: &str = "dl-expiring";
const EXPIRED_DLQ: &str = "dl-expired";
/// A consumer rejects every message here into `REJECTED_DLQ`.
const REJECTING: &str = "dl-rejecting";
const REJECTED_DLQ: &str = "dl-rejected";

async fn connect(port: u16) -> Option<Connection> {
    let url = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
    Connection::connect(&url, ConnectionProperties::default()).await.ok()
}

fn dead_lettered_to(dlq: &str, ttl: Option<i32>) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
    args.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString(dlq.into()));
    if let Some(ttl) = ttl {
        args.insert("x-message-ttl".into(), AMQPValue::LongInt(ttl));
    }
    args
}

async fn declare(ch: &Channel) {
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    for dlq in [EXPIRED_DLQ, REJECTED_DLQ] {
        ch.queue_declare(dlq.into(), durable, FieldTable::default()).await.unwrap();
    }
    ch.queue_declare(EXPIRING.into(), durable, dead_lettered_to(EXPIRED_DLQ, Some(20))).await.unwrap();
    ch.queue_declare(REJECTING.into(), durable, dead_lettered_to(REJECTED_DLQ, None)).await.unwrap();
}

/// Publishes persistent messages to `queue` in confirmed windows of 50 until the broker dies;
/// records the ids it confirmed.
async fn publisher(port: u16, queue: &'static str, next_id: Arc<Mutex<u64>>, confirmed: Arc<Mutex<BTreeSet<u64>>>) {
    let Some(conn) = connect(port).await else { return };
    let Ok(ch) = conn.create_channel().await else { return };
    if ch.confirm_select(ConfirmSelectOptions::default()).await.is_err() {
        return;
    }
    loop {
        let mut window = Vec::new();
        for _ in 0..50 {
            let id = {
                let mut next = next_id.lock().unwrap();
                *next += 1;
                *next
            };
            let properties = BasicProperties::default().with_delivery_mode(2);
            let payload = id.to_be_bytes();
            let sent = ch.basic_publish("".into(), queue.into(), BasicPublishOptions::default(), &payload, properties);
            match sent.await {
                Ok(confirm) => window.push((id, confirm)),
                Err(_) => return,
            }
        }
        for (id, confirm) in window {
            match confirm.await {
                Ok(c) if c.is_ack() => {
                    confirmed.lock().unwrap().insert(id);
                }
                _ => return,
            }
        }
    }
}

/// Rejects (requeue = false) every message of `queue` until the broker dies.
async fn rejecter(port: u16, queue: &'static str) {
    let Some(conn) = connect(port).await else { return };
    let Ok(ch) = conn.create_channel().await else { return };
    if ch.basic_qos(100, BasicQosOptions::default()).await.is_err() {
        return;
    }
    let options = BasicConsumeOptions::default();
    let Ok(mut deliveries) = ch.basic_consume(queue.into(), "r".into(), options, FieldTable::default()).await else {
        return;
    };
    while let Some(Ok(delivery)) = deliveries.next().await {
        if delivery.reject(BasicRejectOptions { requeue: false }).await.is_err() {
            return;
        }
    }
}

/// Every id left in `queue`, taken with acknowledgements until nothing arrives for a second.
async fn drain(ch: &Channel, queue: &str) -> BTreeSet<u64> {
    let options = BasicConsumeOptions::default();
    let mut deliveries = ch
        .basic_consume(queue.into(), format!("drain-{queue}").as_str().into(), options, FieldTable::default())
        .await
        .unwrap();
    let mut ids = BTreeSet::new();
    while let Ok(Some(Ok(delivery))) = tokio::time::timeout(Duration::from_secs(1), deliveries.next()).await {
        ids.insert(u64::from_be_bytes(delivery.data[..8].try_into().unwrap()));
        delivery.ack(BasicAckOptions::default()).await.unwrap();
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_kill_9_cycles_lose_no_dead_letter() {
    kill_9_cycles(&[]).await;
}

/// The same under Charon's guarantee: every dead letter waits in its source (journalled as
/// such) until its target confirmed it, and a restart finds the waiting ones again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_kill_9_cycles_lose_no_dead_letter_under_the_guarantee() {
    kill_9_cycles(&["--dead-letter-guarantee", "at-least-once"]).await;
}

async fn kill_9_cycles(args: &[&str]) {
    let data = tempfile::tempdir().unwrap();
    let next_id = Arc::new(Mutex::new(0u64));
    let expiring = Arc::new(Mutex::new(BTreeSet::new()));
    let rejected = Arc::new(Mutex::new(BTreeSet::new()));
    for cycle in 0..CYCLES {
        let mut charon = support::Charon::start_on(data.path(), args);
        {
            let conn = connect(charon.port).await.expect("connect");
            declare(&conn.create_channel().await.unwrap()).await;
        }
        let tasks = [
            tokio::spawn(publisher(charon.port, EXPIRING, Arc::clone(&next_id), Arc::clone(&expiring))),
            tokio::spawn(publisher(charon.port, REJECTING, Arc::clone(&next_id), Arc::clone(&rejected))),
            tokio::spawn(rejecter(charon.port, REJECTING)),
        ];
        // Crash points spread over 150..750 ms of load.
        tokio::time::sleep(Duration::from_millis(150 + (cycle * 337) % 600)).await;
        charon.kill9();
        for task in tasks {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(3), task).await.is_err() {
                abort.abort();
            }
        }
    }
    let charon = support::Charon::start_on(data.path(), args);
    let conn = connect(charon.port).await.expect("connect");
    let ch = conn.create_channel().await.unwrap();
    // What is left in the expiring queue expires within its 20 ms TTL after the restart.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut found = drain(&ch, EXPIRED_DLQ).await;
    found.extend(drain(&ch, EXPIRING).await);
    found.extend(drain(&ch, REJECTED_DLQ).await);
    found.extend(drain(&ch, REJECTING).await);

    let (expiring, rejected) = (expiring.lock().unwrap(), rejected.lock().unwrap());
    assert!(expiring.len() > 1000 && rejected.len() > 1000, "the load ran: {} + {}", expiring.len(), rejected.len());
    let lost: Vec<u64> = expiring.iter().chain(rejected.iter()).filter(|id| !found.contains(id)).copied().collect();
    assert!(lost.is_empty(), "{} confirmed messages in neither queue: {lost:?}", lost.len());
    eprintln!("confirmed {} expiring and {} rejected; all found", expiring.len(), rejected.len());
}

/// Under the guarantee, letters nobody can route wait parked on disk (a spill and 48 bytes
/// each), and are read back in batches when a binding comes. Ten cycles kill the broker while
/// rejected letters park (the dead-letter exchange has no binding), ten more after the binding
/// exists, while they are read back and forwarded. At the end every confirmed message is in
/// its source or its dead-letter queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_kill_9_cycles_lose_no_parked_dead_letter() {
    const SOURCE: &str = "parking-source";
    const DLX: &str = "parking-dlx";
    const DLQ: &str = "parking-dlq";
    let args = ["--dead-letter-guarantee", "at-least-once"];
    let data = tempfile::tempdir().unwrap();
    let next_id = Arc::new(Mutex::new(0u64));
    let confirmed = Arc::new(Mutex::new(BTreeSet::new()));
    let declare = |ch: Channel, bind: bool| async move {
        let durable = QueueDeclareOptions { durable: true, ..Default::default() };
        let exchange = ExchangeDeclareOptions { durable: true, ..Default::default() };
        ch.exchange_declare(DLX.into(), ExchangeKind::Fanout, exchange, FieldTable::default()).await.unwrap();
        let mut source_args = FieldTable::default();
        source_args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString(DLX.into()));
        ch.queue_declare(SOURCE.into(), durable, source_args).await.unwrap();
        ch.queue_declare(DLQ.into(), durable, FieldTable::default()).await.unwrap();
        if bind {
            ch.queue_bind(DLQ.into(), DLX.into(), "".into(), QueueBindOptions::default(), FieldTable::default())
                .await
                .unwrap();
        }
    };
    for cycle in 0..CYCLES {
        let mut charon = support::Charon::start_on(data.path(), &args);
        {
            let conn = connect(charon.port).await.expect("connect");
            declare(conn.create_channel().await.unwrap(), cycle >= CYCLES / 2).await;
        }
        let tasks = [
            tokio::spawn(publisher(charon.port, SOURCE, Arc::clone(&next_id), Arc::clone(&confirmed))),
            tokio::spawn(rejecter(charon.port, SOURCE)),
        ];
        tokio::time::sleep(Duration::from_millis(150 + (cycle * 337) % 600)).await;
        charon.kill9();
        for task in tasks {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(3), task).await.is_err() {
                abort.abort();
            }
        }
    }
    let charon = support::Charon::start_on(data.path(), &args);
    let conn = connect(charon.port).await.expect("connect");
    let ch = conn.create_channel().await.unwrap();
    let confirmed = confirmed.lock().unwrap().clone();
    assert!(confirmed.len() > 1000, "the load ran: {}", confirmed.len());
    // The waiting letters are read back and forwarded after the restart, a batch at a time.
    let mut found = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !confirmed.is_subset(&found) && tokio::time::Instant::now() < deadline {
        found.extend(drain(&ch, DLQ).await);
        found.extend(drain(&ch, SOURCE).await);
    }
    let lost: Vec<u64> = confirmed.difference(&found).copied().collect();
    assert!(lost.is_empty(), "{} confirmed messages in neither queue: {lost:?}", lost.len());
    eprintln!("confirmed {}; all found", confirmed.len());
}
