//! End-to-end flows through the real binary with lapin.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};

async fn connect(url: &str) -> Connection {
    Connection::connect(url, ConnectionProperties::default()).await.expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_confirmed_messages_arrive_in_order_with_prefetch() {
    let charon = support::Charon::start();
    let conn = connect(&charon.url()).await;
    let channel = conn.create_channel().await.expect("channel");
    channel.confirm_select(ConfirmSelectOptions::default()).await.expect("confirm.select");
    let queue = channel
        .queue_declare("e2e-order".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .expect("declare");
    assert_eq!(queue.name().as_str(), "e2e-order");
    for i in 0..1000u32 {
        let confirm = channel
            .basic_publish(
                "".into(),
                "e2e-order".into(),
                BasicPublishOptions::default(),
                &i.to_be_bytes(),
                BasicProperties::default(),
            )
            .await
            .expect("publish");
        if i % 100 == 99 {
            assert!(confirm.await.expect("confirm").is_ack());
        }
    }
    let consumer_channel = conn.create_channel().await.expect("channel");
    consumer_channel.basic_qos(50, BasicQosOptions::default()).await.expect("qos");
    let mut consumer = consumer_channel
        .basic_consume("e2e-order".into(), "c1".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .expect("consume");
    for expected in 0..1000u32 {
        let delivery = consumer.next().await.expect("delivery").expect("ok");
        assert_eq!(delivery.data, expected.to_be_bytes());
        assert!(!delivery.redelivered);
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    let check = channel
        .queue_declare(
            "e2e-order".into(),
            QueueDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .expect("passive");
    assert_eq!(check.message_count(), 0);
    assert_eq!(check.consumer_count(), 1);
    conn.close(200, "bye".into()).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_user_and_vhost_work_and_guest_is_gone() {
    let dir = std::env::temp_dir().join(format!("charon-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("charon.toml");
    std::fs::write(
        &file,
        r#"
        vhosts = ["/", "dev"]
        [[users]]
        name = "app"
        password = "s3cret"
        vhosts = ["dev"]
        "#,
    )
    .expect("write config");
    let charon = support::Charon::start_with(&["--config", file.to_str().expect("utf-8 path")]);
    let app = connect(&format!("amqp://app:s3cret@127.0.0.1:{}/dev", charon.port)).await;
    let channel = app.create_channel().await.expect("channel");
    channel
        .queue_declare("in-dev".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .expect("declare");
    let guest = Connection::connect(&charon.url(), ConnectionProperties::default()).await;
    assert!(guest.is_err(), "guest must be refused when the file defines its own users");
    let not_allowed = Connection::connect(
        &format!("amqp://app:s3cret@127.0.0.1:{}/%2f", charon.port),
        ConnectionProperties::default(),
    )
    .await;
    let error = not_allowed.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(error.contains("access to vhost '/' refused for user 'app'"), "{error}");
    let _ = std::fs::remove_dir_all(&dir);
}
