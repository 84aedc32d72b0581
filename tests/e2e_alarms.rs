//! RabbitMQ's memory and disk alarms through the real binary: publishers are blocked while
//! consumers drain, resident memory stays near the watermark under a flood larger than it, and
//! a disk smaller than one log segment fills, blocks, drains and unblocks by itself, with
//! every confirmed message delivered; an uncommitted transaction is bounded by the memory
//! alarm.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use lapin::options::{BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, Event};
use tokio::sync::watch;

const MIB: usize = 1 << 20;

/// Collects the `connection.blocked` reasons a connection is sent, and follows whether it was
/// unblocked since.
fn watch_blocked(conn: &Connection) -> (Arc<Mutex<Vec<String>>>, watch::Receiver<bool>) {
    let reasons = Arc::new(Mutex::new(Vec::new()));
    let (unblocked, follow) = watch::channel(false);
    let mut events = Box::pin(conn.events_listener());
    let r = Arc::clone(&reasons);
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            match event {
                Event::ConnectionBlocked(reason) => {
                    unblocked.send_replace(false);
                    r.lock().unwrap().push(reason.to_string());
                }
                Event::ConnectionUnblocked => {
                    unblocked.send_replace(true);
                }
                _ => {}
            }
        }
    });
    (reasons, follow)
}

async fn drain(channel: &Channel, queue: &str) -> usize {
    let mut got = 0;
    while let Some(message) = channel.basic_get(queue.into(), BasicGetOptions { no_ack: true }).await.unwrap() {
        assert!(message.delivery.data.len() >= 8);
        got += 1;
    }
    got
}

/// Four publishers flood 600 MiB of 1 MiB transient messages into a queue nobody consumes,
/// against a 60 MB watermark (the debug binary idles near 32 MB, and under the flood it does
/// not get below about 45 MB: the connections' buffers, the log writer's batch; at a 45 MB
/// watermark each clearing let only a few messages in and the flood took minutes): they are blocked ("low on memory") whenever resident memory
/// passes it, the queue pages the bodies to the log meanwhile, the alarm clears and they go
/// on. Resident memory never exceeds the watermark by more than a bound, and every message is
/// there at the end. (Before the alarm existed, 10,000 such messages took the broker to 8 GB.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_bigger_than_the_watermark_is_held_near_it_and_nothing_is_lost() {
    const WATERMARK: u64 = 60_000_000;
    const PUBLISHERS: usize = 4;
    const EACH: usize = 150;
    let charon = support::Charon::start_with(&["--vm-memory-high-watermark-absolute", "60MB"]);
    let peak = Arc::new(AtomicU64::new(0));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (Arc::clone(&peak), Arc::clone(&sampling));
        let pid = charon.pid();
        std::thread::spawn(move || {
            while sampling.load(Ordering::SeqCst) {
                peak.fetch_max(support::rss_of(pid), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let setup = Connection::connect(&charon.url(), ConnectionProperties::default()).await.unwrap();
    let channel = setup.create_channel().await.unwrap();
    channel.queue_declare("flood".into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();

    let mut publishers = Vec::new();
    let mut watches = Vec::new();
    for p in 0..PUBLISHERS {
        let conn = Connection::connect(&charon.url(), ConnectionProperties::default()).await.unwrap();
        watches.push(watch_blocked(&conn));
        publishers.push(tokio::spawn(async move {
            let channel = conn.create_channel().await.unwrap();
            channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
            for i in 0..EACH {
                let mut body = vec![0u8; MIB];
                body[..8].copy_from_slice(&((p * EACH + i) as u64).to_be_bytes());
                let options = BasicPublishOptions::default();
                let confirm = channel
                    .basic_publish("".into(), "flood".into(), options, &body, BasicProperties::default())
                    .await
                    .unwrap();
                assert!(confirm.await.unwrap().is_ack());
            }
            conn
        }));
    }
    let mut connections = Vec::new();
    for publisher in publishers {
        let finished = tokio::time::timeout(Duration::from_secs(240), publisher).await;
        connections.push(finished.expect("the flood finishes: the alarm clears as the queue pages").unwrap());
    }
    sampling.store(false, Ordering::SeqCst);
    sampler.join().unwrap();
    let peak = peak.load(Ordering::SeqCst);
    let reasons: Vec<String> = watches.iter().flat_map(|(r, _)| r.lock().unwrap().clone()).collect();
    assert!(reasons.iter().any(|r| r == "low on memory"), "publishers were blocked: {reasons:?}");
    assert!(reasons.iter().all(|r| r == "low on memory"), "{reasons:?}");
    // RabbitMQ's log lines for the alarm (warning level, shown at --log-level warn).
    let logged = charon.stderr();
    for line in [
        "memory resource limit alarm set on node ",
        "*** Publishers will be blocked until this alarm clears ***",
        "memory resource limit alarm cleared on node ",
    ] {
        assert!(logged.contains(line), "no {line:?} in the log:\n{logged}");
    }
    eprintln!(
        "peak RSS {} MB against a {} MB watermark; {} blocks",
        peak / 1_000_000,
        WATERMARK / 1_000_000,
        reasons.len()
    );
    assert!(peak < WATERMARK + 100_000_000, "peak RSS {peak} bytes");
    assert_eq!(drain(&channel, "flood").await, PUBLISHERS * EACH);
    drop(connections);
}

/// The data directory on an 80 MiB tmpfs (smaller than one 64 MiB log segment plus the 50 MB
/// limit): persistent 1 MiB messages are confirmed until free space falls under the limit,
/// then the publisher is blocked "low on disk"; a consumer drains the queue, the log gives the
/// spent segment back, the alarm clears by itself, the held publish is confirmed and
/// publishing goes on. Every confirmed message is delivered. Before, the spent segment stayed
/// and publishers stayed blocked until the disk was enlarged from outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_disk_fills_blocks_drains_and_unblocks_by_itself() {
    let mount = support::Tmpfs::mount("80m");
    let charon = support::Charon::start_on(mount.path(), &["--disk-free-limit", "50MB"]);
    let publisher = Connection::connect(&charon.url(), ConnectionProperties::default()).await.unwrap();
    let (reasons, mut unblocked) = watch_blocked(&publisher);
    let channel = publisher.create_channel().await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare("disk".into(), durable, FieldTable::default()).await.unwrap();
    let persistent = BasicProperties::default().with_delivery_mode(2);
    let body = vec![7u8; MIB];

    let mut confirmed = 0usize;
    loop {
        let options = BasicPublishOptions::default();
        let publish = async {
            let confirm = channel.basic_publish("".into(), "disk".into(), options, &body, persistent.clone());
            confirm.await.unwrap().await
        };
        match tokio::time::timeout(Duration::from_secs(3), publish).await {
            Ok(result) => {
                assert!(result.unwrap().is_ack());
                confirmed += 1;
                assert!(confirmed < 80, "never blocked");
            }
            // Not confirmed: held unread until the alarm clears.
            Err(_) => break,
        }
    }
    assert_eq!(reasons.lock().unwrap().as_slice(), ["low on disk"]);
    assert!(confirmed >= 10, "{confirmed} confirmed before the alarm");

    let consumer = Connection::connect(&charon.url(), ConnectionProperties::default()).await.unwrap();
    let cch = consumer.create_channel().await.unwrap();
    let mut drained = drain(&cch, "disk").await;
    tokio::time::timeout(Duration::from_secs(20), unblocked.wait_for(|unblocked| *unblocked))
        .await
        .expect("connection.unblocked once the drained segment is given back")
        .unwrap();

    // The held publish was confirmed on unblock; publishing goes on.
    for _ in 0..5 {
        let options = BasicPublishOptions::default();
        let confirm =
            channel.basic_publish("".into(), "disk".into(), options, &body, persistent.clone()).await.unwrap();
        let result = tokio::time::timeout(Duration::from_secs(10), confirm).await.expect("confirmed");
        assert!(result.unwrap().is_ack());
        confirmed += 1;
    }
    drained += drain(&cch, "disk").await;
    assert_eq!(drained, confirmed + 1, "every confirmed message, and the held one, delivered");
}

/// A transaction that is never committed holds its publishes in the broker; RabbitMQ bounds
/// it only by the memory alarm, and so does Charon: 1 MiB publishes in an open transaction
/// against a 45 MB watermark get the publisher blocked "low on memory" long before 200 MiB,
/// while another connection still works (and a rollback is not needed to stay alive).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncommitted_transaction_is_bounded_by_the_memory_alarm() {
    let charon = support::Charon::start_with(&["--vm-memory-high-watermark-absolute", "45MB"]);
    let conn = Connection::connect(&charon.url(), ConnectionProperties::default()).await.unwrap();
    let (reasons, _) = watch_blocked(&conn);
    let channel = conn.create_channel().await.unwrap();
    channel.queue_declare("held".into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    channel.tx_select().await.unwrap();
    let body = vec![7u8; MIB];
    let mut sent = 0;
    while reasons.lock().unwrap().is_empty() && sent < 200 {
        let publish = channel.basic_publish(
            "".into(),
            "held".into(),
            BasicPublishOptions::default(),
            &body,
            BasicProperties::default(),
        );
        // Once the socket is no longer read, a publish may wait for room: the block is what
        // this test waits for.
        if tokio::time::timeout(Duration::from_secs(2), publish).await.is_err() {
            tokio::time::sleep(Duration::from_millis(500)).await;
            break;
        }
        sent += 1;
    }
    let reasons = reasons.lock().unwrap().clone();
    assert_eq!(reasons.first().map(String::as_str), Some("low on memory"), "after {sent} MiB held: {reasons:?}");
    assert!(sent < 200, "{sent} MiB held without a block");
    // Nothing was committed, so nothing reached the queue; a consumer-only connection goes on.
    let other = Connection::connect(&charon.url(), ConnectionProperties::default()).await.unwrap();
    let check = other.create_channel().await.unwrap();
    let declared = check
        .queue_declare(
            "held".into(),
            QueueDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!(declared.message_count(), 0);
}
