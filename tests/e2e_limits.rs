//! RabbitMQ's protocol limits set from the configuration: `channel_max`, `frame_max` and
//! `max_message_size` are what both protocols negotiate and enforce.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use conformance::broker::Broker;
use conformance::raw::{self, RawConn};
use conformance::raw10::Conn10;
use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_max_frame_max_and_max_message_size_come_from_the_configuration() {
    let charon =
        support::Charon::start_with(&["--channel-max", "3", "--frame-max", "8192", "--max-message-size", "1000"]);

    let conn = Connection::connect(&charon.url(), ConnectionProperties::default()).await.unwrap();
    assert_eq!((conn.configuration().channel_max(), conn.configuration().frame_max()), (3, 8192));
    let channel = conn.create_channel().await.unwrap();
    channel.queue_declare("limits".into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    let publish = |size: usize| {
        let channel = channel.clone();
        async move {
            let options = BasicPublishOptions::default();
            let body = vec![1u8; size];
            channel.basic_publish("".into(), "limits".into(), options, &body, BasicProperties::default()).await?;
            // A round trip after the publish: its answer comes after any channel error.
            channel.queue_declare("limits".into(), QueueDeclareOptions::default(), FieldTable::default()).await
        }
    };
    assert_eq!(publish(1000).await.unwrap().message_count(), 1);
    assert!(publish(1001).await.is_err(), "the channel is closed");

    let broker = Broker::parse(&charon.url()).unwrap();
    let mut raw = RawConn::open_with_channel(&broker).await.unwrap();
    raw.send(&raw::basic_publish(1, "", "limits")).await.unwrap();
    raw.send(&raw::content_header(1, 1001)).await.unwrap();
    raw.send(&raw::body(1, &[1; 1001])).await.unwrap();
    let close = raw.expect_channel_close(1).await.unwrap();
    close
        .expect(406, "PRECONDITION_FAILED - message size 1001 is larger than configured max size 1000", 60, 40)
        .unwrap();

    let mut amqp10 = Conn10::open(&broker).await.unwrap();
    let open = amqp10.remote_open.clone().unwrap();
    assert_eq!(open.max_frame_size.0, 8192);
    amqp10.begin(1).await.unwrap();
    amqp10
        .send_attach_sender(
            1,
            0,
            "sender",
            Some("/queues/limits"),
            fe2o3_amqp_types::definitions::SenderSettleMode::Mixed,
        )
        .await
        .unwrap();
    let attach = amqp10.expect_attach(1, 0).await.unwrap();
    assert_eq!(attach.max_message_size, Some(1000));
}
