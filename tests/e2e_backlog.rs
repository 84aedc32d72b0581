//! A backlog far larger than what the broker keeps in memory: its messages live in the log and
//! come back, all of them and in order, as consumers need them — across a restart too.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::time::Duration;

use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

const BODY: usize = 4096;
const MIB: u64 = 1024 * 1024;

async fn channel(charon: &support::Charon) -> (Connection, Channel) {
    let conn = Connection::connect(&charon.url(), ConnectionProperties::default()).await.expect("connect");
    let channel = conn.create_channel().await.expect("channel");
    channel.confirm_select(ConfirmSelectOptions::default()).await.expect("confirm.select");
    (conn, channel)
}

fn body(queue: &str, i: usize) -> Vec<u8> {
    let mut body = format!("{queue} {i:08} ").into_bytes();
    body.resize(BODY, b'.');
    body
}

/// Publishes `count` messages with confirms, 1000 in flight.
async fn fill(channel: &Channel, queue: &str, count: usize, delivery_mode: u8) {
    let options = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare(queue.into(), options, FieldTable::default()).await.expect("declare");
    let properties = BasicProperties::default().with_delivery_mode(delivery_mode);
    let mut pending = Vec::new();
    for i in 0..count {
        let confirm = channel
            .basic_publish("".into(), queue.into(), BasicPublishOptions::default(), &body(queue, i), properties.clone())
            .await
            .expect("publish");
        pending.push(confirm);
        if pending.len() == 1000 {
            for confirm in pending.drain(..) {
                assert!(confirm.await.expect("confirm").is_ack());
            }
        }
    }
    for confirm in pending {
        assert!(confirm.await.expect("confirm").is_ack());
    }
}

/// Consumes `count` messages and checks each is the next one published.
async fn drain(channel: &Channel, queue: &str, count: usize) {
    channel.basic_qos(1000, BasicQosOptions::default()).await.expect("qos");
    let mut consumer = channel
        .basic_consume(queue.into(), "".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .expect("consume");
    for i in 0..count {
        let delivery = tokio::time::timeout(Duration::from_secs(30), consumer.next())
            .await
            .unwrap_or_else(|_| panic!("{queue}: message {i} of {count} did not come"))
            .expect("stream open")
            .expect("delivery");
        assert!(delivery.data == body(queue, i), "{queue}: message {i} out of order or changed");
        if i % 100 == 99 || i + 1 == count {
            delivery.acker.ack(BasicAckOptions { multiple: true }).await.expect("ack");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_larger_than_the_resident_window_stays_on_disk_and_comes_back_in_order() {
    // 240 MiB of persistent messages in a durable queue, 80 MiB of transient ones (spilled).
    let (persistent, transient) = (60_000, 20_000);
    let data = tempfile::tempdir().unwrap();
    let mut charon = support::Charon::start_on(data.path(), &[]);
    let idle = charon.rss_bytes();
    {
        let (_conn, ch) = channel(&charon).await;
        fill(&ch, "backlog-persistent", persistent, 2).await;
        fill(&ch, "backlog-transient", transient, 1).await;
    }
    let data_bytes = ((persistent + transient) * BODY) as u64;
    let grown = charon.rss_bytes().saturating_sub(idle);
    eprintln!("backlog of {} MiB: broker grew by {} MiB", data_bytes / MIB, grown / MIB);
    assert!(
        grown * 3 < data_bytes,
        "the backlog is not in memory: grew {} MiB for {} MiB",
        grown / MIB,
        data_bytes / MIB
    );

    charon.terminate();
    assert_eq!(charon.wait_exit(Duration::from_secs(30)), Some(true));
    let charon = support::Charon::start_on(data.path(), &[]);
    let (_conn, ch) = channel(&charon).await;
    // Replay reads each 64 MiB segment whole and lets it go; jemalloc hands freed pages back
    // from its background thread within a second or two, so the resident size is taken once it
    // has settled (a recovery that kept the backlog would never get there).
    let bound = (persistent * BODY) as u64 / 3;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut restarted = charon.rss_bytes();
    while restarted >= bound && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        restarted = charon.rss_bytes();
    }
    eprintln!(
        "after a restart with {} MiB of persistent backlog: {} MiB resident",
        persistent * BODY / 1024 / 1024,
        restarted / MIB
    );
    assert!(restarted < bound, "recovery reads back only the head: {} MiB", restarted / MIB);
    let options = QueueDeclareOptions { durable: true, passive: true, ..Default::default() };
    let queue = ch.queue_declare("backlog-persistent".into(), options, FieldTable::default()).await.expect("passive");
    assert_eq!(queue.message_count() as usize, persistent, "every persistent message is back");
    let gone = ch.queue_declare("backlog-transient".into(), options, FieldTable::default()).await.expect("passive");
    assert_eq!(gone.message_count(), 0, "transient messages do not survive a restart, spilled or not");
    drain(&ch, "backlog-persistent", persistent).await;

    // Transient messages of a long queue: spilled, read back in order.
    fill(&ch, "backlog-transient", transient, 1).await;
    drain(&ch, "backlog-transient", transient).await;
}
