//! Hostile input against the real binary: what once aborted the whole broker or lost a
//! confirmed message now costs only the sender its connection, and everything the broker
//! confirmed reads back, after paging and after a restart.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::time::Duration;

use conformance::broker::Broker;
use conformance::raw::{self, RawConn};
use conformance::raw10::Conn10;
use lapin::options::{BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

/// The same shape as a lapin table: the innermost value is 64 levels down at 63 tables.
fn nested_table(tables: usize) -> FieldTable {
    let mut value = AMQPValue::LongInt(1);
    for _ in 0..tables {
        value = AMQPValue::FieldTable(support::field_table(&[("a", value)]));
    }
    support::field_table(&[("a", value)])
}

/// An attach whose properties hold `{k: a null inside `lists` lists}`, hand-encoded.
fn deep_attach(lists: usize) -> Vec<u8> {
    let mut value = Vec::new();
    for i in 0..lists {
        value.push(0xd0);
        value.extend_from_slice(&u32::try_from(9 * (lists - i - 1) + 5).unwrap().to_be_bytes());
        value.extend_from_slice(&1u32.to_be_bytes());
    }
    value.push(0x40);
    let mut fields = vec![0xa1, 4, b'l', b'i', b'n', b'k', 0x52, 0, 0x42];
    fields.extend([0x40; 10]);
    fields.push(0xd1);
    fields.extend_from_slice(&u32::try_from(7 + value.len()).unwrap().to_be_bytes());
    fields.extend_from_slice(&2u32.to_be_bytes());
    fields.extend_from_slice(&[0xa3, 1, b'k']);
    fields.extend_from_slice(&value);
    let mut body = vec![0x00, 0x53, 0x12, 0xd0];
    body.extend_from_slice(&u32::try_from(4 + fields.len()).unwrap().to_be_bytes());
    body.extend_from_slice(&14u32.to_be_bytes());
    body.extend_from_slice(&fields);
    conformance::raw10::codec::frame(0, 1, &body)
}

async fn confirmed_channel(url: &str) -> (Connection, Channel) {
    let conn = Connection::connect(url, ConnectionProperties::default()).await.unwrap();
    let channel = conn.create_channel().await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    (conn, channel)
}

/// A 0.9.1 declare 10,000 tables deep, a publish whose headers nest 10,000 deep and a 1.0
/// attach 4,000 lists deep each aborted the broker with a stack overflow (every connection of
/// every vhost died). Now each closes only its own connection, with the protocol's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_frames_close_only_their_own_connection() {
    let mut charon = support::Charon::start();
    let broker = Broker::parse(&charon.url()).unwrap();
    let (_healthy, channel) = confirmed_channel(&charon.url()).await;
    channel.queue_declare("alive".into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();

    let mut declare = RawConn::open_with_channel(&broker).await.unwrap();
    let mut args = vec![0, 0, 1, b'q', 0];
    args.extend_from_slice(&raw::nested_table(10_000));
    declare.send(&raw::method(1, 50, 10, &args)).await.unwrap();
    let close = declare.expect_connection_close().await.unwrap();
    assert_eq!((close.code, close.class_id, close.method_id), (501, 50, 10), "{close:?}");

    let mut publish = RawConn::open_with_channel(&broker).await.unwrap();
    publish.send(&raw::basic_publish(1, "", "alive")).await.unwrap();
    let mut header = vec![0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x20, 0x00];
    header.extend_from_slice(&raw::nested_table(10_000));
    publish.send(&raw::frame(2, 1, &header)).await.unwrap();
    let close = publish.expect_connection_close().await.unwrap();
    assert_eq!((close.code, close.class_id, close.method_id), (502, 60, 40), "{close:?}");

    let mut attach = Conn10::open(&broker).await.unwrap();
    attach.begin(1).await.unwrap();
    attach.send(&deep_attach(4_000)).await.unwrap();
    let error = attach.expect_close(Duration::from_secs(5)).await.unwrap().expect("a close with an error");
    assert_eq!(conformance::raw10::codec::condition_symbol(&error.condition), "amqp:decode-error");
    assert_eq!(error.description.as_deref(), Some("values nested deeper than 64 levels"));

    let confirm = channel
        .basic_publish(
            "".into(),
            "alive".into(),
            BasicPublishOptions::default(),
            b"still here",
            BasicProperties::default(),
        )
        .await
        .unwrap();
    assert!(confirm.await.unwrap().is_ack());
    let got = channel.basic_get("alive".into(), BasicGetOptions { no_ack: true }).await.unwrap().unwrap();
    assert_eq!(got.delivery.data, b"still here");
    assert!(charon.wait_exit(Duration::from_millis(10)).is_none(), "the broker is still running");
}

/// Headers nested deeper than the store's bound were accepted and confirmed, and the message
/// vanished when a long queue paged it, or at a restart. Now the protocol decoders and the
/// store share one bound: one level more than it is refused before anything is confirmed, and
/// every confirmed message comes back with its headers, from the paged part of a long queue
/// and after a kill -9.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_at_the_nesting_limit_read_back_after_paging_and_a_restart() {
    const MESSAGES: usize = 3_000;
    let data = tempfile::tempdir().unwrap();
    let mut charon = support::Charon::start_on(data.path(), &[]);
    let headers = nested_table(63);
    let persistent = BasicProperties::default().with_delivery_mode(2).with_headers(headers.clone());
    {
        let (_conn, channel) = confirmed_channel(&charon.url()).await;
        let durable = QueueDeclareOptions { durable: true, ..Default::default() };
        for queue in ["paged", "restarted"] {
            channel.queue_declare(queue.into(), durable, FieldTable::default()).await.unwrap();
            let mut confirms = Vec::with_capacity(MESSAGES);
            for i in 0..MESSAGES {
                let body = i.to_string();
                let options = BasicPublishOptions::default();
                let confirm =
                    channel.basic_publish("".into(), queue.into(), options, body.as_bytes(), persistent.clone());
                confirms.push(confirm.await.unwrap());
            }
            for confirm in confirms {
                assert!(confirm.await.unwrap().is_ack());
            }
        }
        assert_all_back(&channel, "paged", &headers).await;
    }
    {
        let (conn, channel) = confirmed_channel(&charon.url()).await;
        let too_deep = BasicProperties::default().with_delivery_mode(2).with_headers(nested_table(64));
        let options = BasicPublishOptions::default();
        let refused = match channel.basic_publish("".into(), "restarted".into(), options, b"deep", too_deep).await {
            Ok(confirm) => confirm.await.map_or(true, |c| !c.is_ack()),
            Err(_) => true,
        };
        assert!(refused, "headers one level deeper are not confirmed");
        let _ = conn.close(0, "".into()).await;
    }
    charon.kill9();
    let charon = support::Charon::start_on(data.path(), &[]);
    let (_conn, channel) = confirmed_channel(&charon.url()).await;
    assert_all_back(&channel, "restarted", &headers).await;
}

async fn assert_all_back(channel: &Channel, queue: &str, headers: &FieldTable) {
    for i in 0..3_000 {
        let got = channel.basic_get(queue.into(), BasicGetOptions { no_ack: true }).await.unwrap();
        let got = got.unwrap_or_else(|| panic!("{queue}: message {i} is missing"));
        assert_eq!(got.delivery.data, i.to_string().as_bytes(), "{queue}");
        assert_eq!(got.delivery.properties.headers().as_ref(), Some(headers), "{queue}: message {i}");
    }
    let empty = channel.basic_get(queue.into(), BasicGetOptions { no_ack: true }).await.unwrap();
    assert!(empty.is_none(), "{queue} holds only what was published");
}
