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

async fn http(charon: &support::Charon, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let base = format!("http://127.0.0.1:{}", charon.http_port);
    let response = conformance::admin::request(&base, method, path, ("guest", "guest"), body).await.unwrap();
    (response.status, response.body)
}

/// A 0.9.1 handshake up to `connection.open`, and the close it is answered with.
async fn refused_open(broker: &Broker) -> raw::CloseInfo {
    let hs = raw::Handshake::new(broker);
    let mut conn = RawConn::connect(broker).await.unwrap();
    conn.send(b"AMQP\x00\x00\x09\x01").await.unwrap();
    conn.expect_method(0, 10, 10).await.unwrap();
    conn.send_start_ok(&hs).await.unwrap();
    let tune = conn.expect_tune().await.unwrap();
    conn.send_tune_ok(&hs, tune).await.unwrap();
    conn.send_open(&hs.vhost).await.unwrap();
    conn.expect_connection_close().await.unwrap()
}

/// RabbitMQ's vhost and user limits, set over the HTTP API: refusals with RabbitMQ 4.0.5's
/// codes and texts (observed on the live broker), counts given back when connections and
/// channels go, and the limits still in force after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vhost_and_user_limits_refuse_as_rabbitmq_and_survive_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let mut charon = support::Charon::start_on(data.path(), &[]);
    let broker = Broker::parse(&charon.url()).unwrap();
    let put = |path: &'static str, value: i64| {
        let charon = &charon;
        async move { http(charon, "PUT", path, Some(&format!("{{\"value\":{value}}}"))).await.0 }
    };
    assert_eq!(put("/api/vhost-limits/%2F/max-connections", 1).await, 204);

    let mut first = RawConn::open_with_channel(&broker).await.unwrap();
    let close = refused_open(&broker).await;
    close
        .expect(
            530,
            "NOT_ALLOWED - access to vhost '/' refused for user 'guest': connection limit (1) is reached",
            10,
            40,
        )
        .unwrap();

    // Over 1.0 RabbitMQ 4.0.5 answers a refused open with no frame and drops the socket.
    let mut amqp10 = Conn10::connect(&broker).await.unwrap();
    assert_eq!(amqp10.sasl(&conformance::raw10::conn::plain("guest", "guest")).await.unwrap(), 0);
    amqp10.send(b"AMQP\x00\x01\x00\x00").await.unwrap();
    amqp10.read_header(std::time::Duration::from_secs(5)).await.unwrap();
    amqp10.perf(0, &conformance::raw10::conn::default_open(&broker)).await.unwrap();
    let answered = amqp10.read_until_eof(std::time::Duration::from_secs(10)).await.unwrap();
    assert!(answered.is_empty(), "{answered:?}");

    // max-queues: the first declare fits, the second is refused on its channel.
    assert_eq!(put("/api/vhost-limits/%2F/max-queues", 1).await, 204);
    let declare = |name: &str| raw::method(1, 50, 10, &raw::Enc::new().u16(0).shortstr(name).u8(0).u32(0).done());
    first.send(&declare("limited-1")).await.unwrap();
    first.expect_method(1, 50, 11).await.unwrap();
    first.send(&declare("limited-2")).await.unwrap();
    let close = first.expect_channel_close(1).await.unwrap();
    close
        .expect(
            406,
            "PRECONDITION_FAILED - cannot declare queue 'limited-2': queue limit in vhost '/' (1) is reached",
            50,
            10,
        )
        .unwrap();
    drop(first);

    // The dropped connection's count comes back; then the user's own limits.
    assert_eq!(put("/api/vhost-limits/%2F/max-connections", -1).await, 204);
    assert_eq!(put("/api/user-limits/guest/max-connections", 1).await, 204);
    let mut only = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            if let Ok(conn) = RawConn::open_with_channel(&broker).await {
                return conn;
            }
        }
    })
    .await
    .expect("the closed connection's count is given back");
    let close = refused_open(&broker).await;
    close
        .expect(530, "NOT_ALLOWED - connection refused for user 'guest': user connection limit (1) is reached", 10, 40)
        .unwrap();

    assert_eq!(put("/api/user-limits/guest/max-channels", 1).await, 204);
    only.send(&raw::channel_open(2)).await.unwrap();
    let close = only.expect_connection_close().await.unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let node = format!("charon@{}", host.trim());
    let text = format!(
        "NOT_ALLOWED - number of channels opened for user '{node}' has reached the maximum allowed user limit of (1)"
    );
    close.expect(530, &text, 0, 0).unwrap();

    // Validation as RabbitMQ's API, and the limits after a restart.
    let (status, body) = http(&charon, "PUT", "/api/vhost-limits/%2F/bogus", Some("{\"value\":1}")).await;
    assert_eq!(status, 400);
    assert!(body.contains(r#"Unrecognised terms [{<<\"bogus\">>,1}] in limits"#), "{body}");
    assert_eq!(http(&charon, "PUT", "/api/user-limits/guest/max-channels", Some("{}")).await.0, 400);
    charon.terminate();
    assert_eq!(charon.wait_exit(std::time::Duration::from_secs(20)), Some(true));
    let charon = support::Charon::start_on(data.path(), &[]);
    let (status, body) = http(&charon, "GET", "/api/vhost-limits", None).await;
    assert_eq!(status, 200);
    let limits: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(limits, serde_json::json!([{"vhost": "/", "value": {"max-connections": -1, "max-queues": 1}}]));
    let (_, body) = http(&charon, "GET", "/api/user-limits/guest", None).await;
    let limits: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(limits, serde_json::json!([{"user": "guest", "value": {"max-channels": 1, "max-connections": 1}}]));
    assert_eq!(http(&charon, "DELETE", "/api/user-limits/guest/max-channels", None).await.0, 204);
    assert_eq!(http(&charon, "GET", "/api/user-limits/nobody", None).await.0, 404);
}
