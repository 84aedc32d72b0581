//! `kill -9` under load loses no confirmed message: 20 crash / restart cycles of the real
//! binary with a confirmed publisher and an acknowledging consumer running on a durable queue.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};

const CYCLES: u64 = 20;
const QUEUE: &str = "crash";
/// Each body: the id, then a pattern derived from it, so a corrupted or invented message shows.
const PATTERN_LEN: usize = 120;

fn body(id: u64) -> Vec<u8> {
    let mut body = id.to_be_bytes().to_vec();
    body.extend((0..PATTERN_LEN).map(|i| (id as usize).wrapping_mul(31).wrapping_add(i) as u8));
    body
}

fn id_of(body: &[u8]) -> u64 {
    let id = u64::from_be_bytes(body[..8].try_into().unwrap());
    assert_eq!(body, self::body(id), "message {id} came back intact");
    id
}

#[derive(Default)]
struct Ledger {
    /// Ids handed to basic.publish (confirmed or not).
    published: BTreeSet<u64>,
    /// Ids the broker confirmed.
    confirmed: BTreeSet<u64>,
    /// Per id, the broker lifetimes (cycles) in which it was delivered.
    delivered: BTreeMap<u64, Vec<u64>>,
}

async fn connect(port: u16) -> Option<Connection> {
    let url = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
    Connection::connect(&url, ConnectionProperties::default()).await.ok()
}

/// Publishes persistent messages in windows of 50, recording confirmations, until the broker dies.
async fn publisher(port: u16, next_id: Arc<Mutex<u64>>, ledger: Arc<Mutex<Ledger>>) {
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
            ledger.lock().unwrap().published.insert(id);
            let properties = BasicProperties::default().with_delivery_mode(2);
            let payload = body(id);
            let sent = ch.basic_publish("".into(), QUEUE.into(), BasicPublishOptions::default(), &payload, properties);
            match sent.await {
                Ok(confirm) => window.push((id, confirm)),
                Err(_) => return,
            }
        }
        for (id, confirm) in window {
            match confirm.await {
                Ok(c) if c.is_ack() => {
                    ledger.lock().unwrap().confirmed.insert(id);
                }
                _ => return,
            }
        }
    }
}

/// Consumes and acknowledges every message until the broker dies (or, when `until_empty`, until
/// nothing arrives for a second).
async fn consumer(port: u16, cycle: u64, ledger: Arc<Mutex<Ledger>>, until_empty: bool) {
    let Some(conn) = connect(port).await else { return };
    let Ok(ch) = conn.create_channel().await else { return };
    if ch.basic_qos(200, BasicQosOptions::default()).await.is_err() {
        return;
    }
    let options = BasicConsumeOptions::default();
    let Ok(mut deliveries) = ch.basic_consume(QUEUE.into(), "c".into(), options, FieldTable::default()).await else {
        return;
    };
    loop {
        let next = if until_empty {
            match tokio::time::timeout(Duration::from_secs(1), deliveries.next()).await {
                Ok(next) => next,
                Err(_) => return,
            }
        } else {
            deliveries.next().await
        };
        let Some(Ok(delivery)) = next else { return };
        let id = id_of(&delivery.data);
        {
            let mut ledger = ledger.lock().unwrap();
            let lifetimes = ledger.delivered.entry(id).or_default();
            assert!(
                !lifetimes.contains(&cycle) || delivery.redelivered,
                "message {id} delivered twice in one broker lifetime without redelivered"
            );
            lifetimes.push(cycle);
        }
        if delivery.ack(BasicAckOptions::default()).await.is_err() {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_kill_9_cycles_lose_no_confirmed_message() {
    let data = tempfile::tempdir().unwrap();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let next_id = Arc::new(Mutex::new(0u64));
    for cycle in 0..CYCLES {
        let mut charon = support::Charon::start_on(data.path(), &[]);
        {
            let conn = connect(charon.port).await.expect("connect");
            let ch = conn.create_channel().await.unwrap();
            let options = QueueDeclareOptions { durable: true, ..Default::default() };
            ch.queue_declare(QUEUE.into(), options, FieldTable::default()).await.unwrap();
        }
        let publishing = tokio::spawn(publisher(charon.port, Arc::clone(&next_id), Arc::clone(&ledger)));
        let consuming = tokio::spawn(consumer(charon.port, cycle, Arc::clone(&ledger), false));
        // Crash points spread over 150..750 ms of load.
        tokio::time::sleep(Duration::from_millis(150 + (cycle * 337) % 600)).await;
        charon.kill9();
        // The clients notice the dead socket (lapin may leave a pending confirm hanging: such
        // a message simply counts as unconfirmed); what they saw is in the ledger already.
        for task in [publishing, consuming] {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(3), task).await.is_err() {
                abort.abort();
            }
        }
    }
    let charon = support::Charon::start_on(data.path(), &[]);
    consumer(charon.port, CYCLES, Arc::clone(&ledger), true).await;

    let ledger = ledger.lock().unwrap();
    assert!(ledger.confirmed.len() > 1000, "the load ran: {} confirmed", ledger.confirmed.len());
    let lost: Vec<u64> = ledger.confirmed.iter().filter(|id| !ledger.delivered.contains_key(id)).copied().collect();
    assert!(lost.is_empty(), "confirmed but never delivered: {lost:?}");
    let invented: Vec<u64> = ledger.delivered.keys().filter(|id| !ledger.published.contains(id)).copied().collect();
    assert!(invented.is_empty(), "delivered but never published: {invented:?}");
    // A message comes again only after a crash (its ack was not yet on disk), never twice in
    // one lifetime (checked while consuming).
    let duplicates = ledger.delivered.values().filter(|lifetimes| lifetimes.len() > 1).count();
    eprintln!(
        "published {}, confirmed {}, delivered {}, delivered again after a crash {duplicates}",
        ledger.published.len(),
        ledger.confirmed.len(),
        ledger.delivered.len()
    );
}
