//! End-to-end flows through the real binary with amqprs (an independent 0.9.1 codec), and
//! graceful shutdown and the confirms owed before a channel's close-ok seen on a raw socket.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::time::Duration;

use amqprs::channel::{BasicGetArguments, BasicPublishArguments, QueueDeclareArguments};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::{BasicProperties, FieldTable, FieldValue};
use conformance::raw::RawConn;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqprs_properties_and_headers_survive_the_broker() {
    let charon = support::Charon::start();
    let args = OpenConnectionArguments::new("127.0.0.1", charon.port, "guest", "guest");
    let conn = Connection::open(&args).await.expect("open");
    let channel = conn.open_channel(None).await.expect("channel");
    channel.queue_declare(QueueDeclareArguments::new("e2e-props")).await.expect("declare");
    let mut headers = FieldTable::new();
    headers.insert("x-first".try_into().expect("key"), FieldValue::I(7));
    headers.insert("name".try_into().expect("key"), FieldValue::S("charon".try_into().expect("longstr")));
    let props = BasicProperties::default()
        .with_content_type("application/json")
        .with_correlation_id("corr-1")
        .with_message_id("msg-1")
        .with_priority(3)
        .with_headers(headers)
        .finish();
    channel
        .basic_publish(props, b"{\"ok\":true}".to_vec(), BasicPublishArguments::new("", "e2e-props"))
        .await
        .expect("publish");
    let mut got = None;
    for _ in 0..50 {
        got = channel.basic_get(BasicGetArguments::new("e2e-props").no_ack(true).finish()).await.expect("get");
        if got.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (get_ok, props, body) = got.expect("a message");
    assert_eq!(body, b"{\"ok\":true}");
    assert_eq!(get_ok.message_count(), 0);
    assert_eq!(props.content_type().map(String::as_str), Some("application/json"));
    assert_eq!(props.correlation_id().map(String::as_str), Some("corr-1"));
    assert_eq!(props.message_id().map(String::as_str), Some("msg-1"));
    assert_eq!(props.priority(), Some(3));
    let headers = props.headers().expect("headers");
    assert_eq!(headers.get(&"x-first".try_into().expect("key")), Some(&FieldValue::I(7)));
    conn.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_connections_with_320_and_exits() {
    let mut charon = support::Charon::start();
    let broker =
        conformance::broker::Broker::parse(&format!("amqp://guest:guest@127.0.0.1:{}/", charon.port)).expect("url");
    let mut raw = RawConn::open_with_channel(&broker).await.expect("raw open");
    charon.terminate();
    // Answers close-ok and waits for the broker to drop the socket.
    let close = raw.expect_connection_close().await.expect("connection.close");
    assert_eq!(close.code, 320);
    assert_eq!(close.text, "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'");
    assert_eq!(charon.wait_exit(Duration::from_secs(10)), Some(true));
}

/// Charon answers `channel.close` only once every publish before it is confirmed (RabbitMQ
/// sends the confirms that reached the channel first, and drops later ones): 1,000 publishes,
/// half of them unroutable, and the close in one write get 1,000 acks, then close-ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_confirm_goes_out_before_channel_close_ok() {
    use conformance::raw::{self, Dec, Enc};
    let charon = support::Charon::start();
    let broker =
        conformance::broker::Broker::parse(&format!("amqp://guest:guest@127.0.0.1:{}/", charon.port)).expect("url");
    let mut c = RawConn::open_with_channel(&broker).await.expect("raw open");
    c.send(&raw::method(1, 50, 10, &Enc::new().u16(0).shortstr("e2e-close-acks").u8(0).table(&[]).done()))
        .await
        .expect("declare");
    c.expect_method(1, 50, 11).await.expect("declare-ok");
    for round in 0..5 {
        c.send(&raw::channel_open(2)).await.expect("open");
        c.expect_method(2, 20, 11).await.expect("open-ok");
        c.send(&raw::method(2, 85, 10, &[0])).await.expect("confirm.select");
        c.expect_method(2, 85, 11).await.expect("select-ok");
        let mut burst = Vec::new();
        for i in 0..1000u32 {
            burst.extend(raw::basic_publish(2, "", if i.is_multiple_of(2) { "e2e-close-acks" } else { "nowhere" }));
            burst.extend(raw::content_header(2, 1));
            burst.extend(raw::body(2, b"x"));
        }
        burst.extend(raw::method(2, 20, 40, &Enc::new().u16(200).shortstr("bye").u16(0).u16(0).done()));
        c.send(&burst).await.expect("burst");
        let mut acked = std::collections::BTreeSet::new();
        loop {
            let f = c.read_frame(Duration::from_secs(5)).await.expect("read").expect("socket open");
            match f.method_id() {
                Some((60, 80)) => {
                    let mut d = Dec::new(f.args());
                    let (tag, multiple) = (d.u64().expect("tag"), d.u8().expect("multiple") == 1);
                    if multiple {
                        acked.extend(1..=tag);
                    } else {
                        acked.insert(tag);
                    }
                }
                Some((20, 41)) => break,
                other => panic!("round {round}: unexpected {other:?}"),
            }
        }
        assert_eq!(acked, (1..=1000).collect(), "round {round}: acks before close-ok");
    }
}
