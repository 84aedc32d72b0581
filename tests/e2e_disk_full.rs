//! Disk full, through the real binary with its fault-injection hook (`CHARON_FAULT_FILE`: while
//! that file exists, every write of the message log fails with ENOSPC): publishers are blocked
//! and get no confirmation, consumers keep being served, and publishing resumes — with the
//! held message confirmed and intact — once space returns.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::time::Duration;

use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties, Event};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_blocks_publishers_serves_consumers_and_recovers() {
    let data = tempfile::tempdir().unwrap();
    let fault = data.path().join("disk-full");
    let fault_env = fault.to_str().unwrap().to_owned();
    let charon = support::Charon::start_on_with_env(data.path(), &[], &[("CHARON_FAULT_FILE", &fault_env)]);
    let persistent = BasicProperties::default().with_delivery_mode(2);

    let publisher = Connection::connect(&charon.url(), ConnectionProperties::default()).await.unwrap();
    let mut events = Box::pin(publisher.events_listener());
    let pch = publisher.create_channel().await.unwrap();
    pch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    pch.queue_declare("full".into(), durable, FieldTable::default()).await.unwrap();
    for i in 0..5u8 {
        let confirm = pch
            .basic_publish("".into(), "full".into(), BasicPublishOptions::default(), &[i], persistent.clone())
            .await
            .unwrap();
        assert!(confirm.await.unwrap().is_ack());
    }

    std::fs::write(&fault, b"").unwrap();
    let held = pch
        .basic_publish("".into(), "full".into(), BasicPublishOptions::default(), b"held", persistent.clone())
        .await
        .unwrap();
    // As RabbitMQ, a connection is blocked when it publishes while the alarm is on: wait for
    // the alarm (the failed write raises it), then publish again.
    let base = format!("http://127.0.0.1:{}", charon.http_port);
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let health =
                conformance::admin::request(&base, "GET", "/api/health/checks/alarms", ("guest", "guest"), None);
            if health.await.unwrap().status == 503 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the disk alarm is raised");
    let second = pch
        .basic_publish("".into(), "full".into(), BasicPublishOptions::default(), b"second", persistent.clone())
        .await
        .unwrap();
    let blocked = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match events.next().await {
                Some(Event::ConnectionBlocked(reason)) => return reason,
                Some(_) => {}
                None => panic!("the publisher's connection ended"),
            }
        }
    })
    .await
    .expect("connection.blocked");
    assert_eq!(blocked, "low on disk");

    // A consumer on another connection is still served (and its acks accepted).
    let consumer = Connection::connect(&charon.url(), ConnectionProperties::default()).await.unwrap();
    let cch = consumer.create_channel().await.unwrap();
    cch.basic_qos(10, BasicQosOptions::default()).await.unwrap();
    let mut deliveries = cch
        .basic_consume("full".into(), "c".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    for i in 0..5u8 {
        let delivery = tokio::time::timeout(Duration::from_secs(5), deliveries.next()).await.unwrap().unwrap().unwrap();
        assert_eq!(delivery.data, [i]);
        delivery.ack(BasicAckOptions::default()).await.unwrap();
    }

    let mut held = Box::pin(held);
    let early = tokio::time::timeout(Duration::from_millis(1500), &mut held).await;
    assert!(early.is_err(), "no confirmation while the message is not on disk");

    std::fs::remove_file(&fault).unwrap();
    let confirm = tokio::time::timeout(Duration::from_secs(10), held).await.expect("confirmed once space returns");
    assert!(confirm.unwrap().is_ack());
    let confirm = tokio::time::timeout(Duration::from_secs(10), second).await.expect("the blocked publish confirmed");
    assert!(confirm.unwrap().is_ack());
    let unblocked = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some(Event::ConnectionUnblocked) = events.next().await {
                return;
            }
        }
    })
    .await;
    assert!(unblocked.is_ok(), "connection.unblocked");
    let delivery = tokio::time::timeout(Duration::from_secs(5), deliveries.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(delivery.data, b"held");
    delivery.ack(BasicAckOptions::default()).await.unwrap();
    let delivery = tokio::time::timeout(Duration::from_secs(5), deliveries.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(delivery.data, b"second");
    delivery.ack(BasicAckOptions::default()).await.unwrap();
    let empty = pch.basic_get("full".into(), BasicGetOptions { no_ack: true }).await.unwrap();
    assert!(empty.is_none());
}
