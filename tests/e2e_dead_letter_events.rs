//! The dead-letter event stream on the real binary (issue 16, docs/dead-letter-events.md): a
//! 0.9.1 queue bound with `rejected.#` and a 1.0 receiver on
//! `/exchanges/amq.charon.dead-letter-events` both get the event of a rejected message; clients
//! cannot publish to the exchange; its drop counter is on /metrics.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::time::Duration;

use fe2o3_amqp::types::messaging::Body;
use fe2o3_amqp::types::primitives::Value as Amqp;
use fe2o3_amqp::{Receiver, Session};
use lapin::options::{
    BasicGetOptions, BasicPublishOptions, BasicRejectOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
    ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ErrorKind, ExchangeKind};

const EVENTS: &str = "amq.charon.dead-letter-events";

/// The reply code and text of the broker's channel close carried by `error`.
fn close_reason(error: &lapin::Error) -> Option<(u16, String)> {
    match error.kind() {
        ErrorKind::ProtocolError(e) => Some((e.get_id(), e.get_message().to_string())),
        _ => None,
    }
}

async fn channel(connection: &Connection) -> Channel {
    connection.create_channel().await.expect("channel")
}

/// The next message in `queue` (polled for up to 5 s): its routing key, exchange and JSON body.
async fn next_event(channel: &Channel, queue: &str) -> (String, String, serde_json::Value) {
    for _ in 0..500 {
        if let Some(got) = channel.basic_get(queue.into(), BasicGetOptions { no_ack: true }).await.expect("get") {
            assert_eq!(got.properties.content_type().as_ref().map(ShortString::as_str), Some("application/json"));
            assert!(got.properties.message_id().is_some(), "each event has a message id");
            let json = serde_json::from_slice(&got.delivery.data).expect("JSON");
            return (got.delivery.routing_key.to_string(), got.delivery.exchange.to_string(), json);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no event in {queue}");
}

#[tokio::test]
async fn a_rejection_reaches_091_and_10_listeners_as_one_json_event() {
    let charon = support::Charon::start();
    let connection = Connection::connect(&charon.url(), ConnectionProperties::default()).await.expect("connect");
    let ch = channel(&connection).await;

    // A 0.9.1 listener for rejections only.
    ch.queue_declare("rejections".into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    ch.queue_bind(
        "rejections".into(),
        EVENTS.into(),
        "rejected.#".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("clients may bind to the event exchange");

    // A 1.0 listener for every event.
    let mut amqp10 = charon.open_amqp10("events-e2e").await;
    let mut session = Session::begin(&mut amqp10).await.expect("begin");
    let mut receiver = Receiver::attach(&mut session, "events", format!("/exchanges/{EVENTS}").as_str())
        .await
        .expect("the event exchange is a 1.0 source");

    // `orders` dead-letters to `orders-dlq`; a consumer rejects a message there.
    ch.queue_declare("orders-dlq".into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    let args = support::field_table(&[
        ("x-dead-letter-exchange", AMQPValue::LongString("".into())),
        ("x-dead-letter-routing-key", AMQPValue::LongString("orders-dlq".into())),
    ]);
    ch.queue_declare("orders".into(), QueueDeclareOptions::default(), args).await.unwrap();
    let properties = BasicProperties::default().with_message_id("order-1".into()).with_correlation_id("corr-1".into());
    ch.basic_publish("".into(), "orders".into(), BasicPublishOptions::default(), b"order", properties).await.unwrap();
    let got = loop {
        if let Some(got) = ch.basic_get("orders".into(), BasicGetOptions::default()).await.unwrap() {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    ch.basic_reject(got.delivery.delivery_tag, BasicRejectOptions { requeue: false }).await.unwrap();

    let (key, exchange, event) = next_event(&ch, "rejections").await;
    assert_eq!((key.as_str(), exchange.as_str()), ("rejected.orders", EVENTS));
    assert_eq!(event["vhost"], "/");
    assert_eq!(event["queue"], "orders");
    assert_eq!(event["reason"], "rejected");
    assert_eq!(event["drop_reason"], serde_json::Value::Null);
    assert_eq!(event["message_id"], "order-1");
    assert_eq!(event["correlation_id"], "corr-1");
    assert_eq!(event["count"], 1);
    assert_eq!(event["dead_letter_exchange"], "");
    assert_eq!(event["routing_keys"], serde_json::json!(["orders"]));
    assert!(event["time"].as_i64().expect("ms since epoch") > 1_700_000_000_000);
    assert_eq!(event["error_condition"], serde_json::Value::Null);

    let delivery = tokio::time::timeout(Duration::from_secs(5), receiver.recv::<Body<Amqp>>())
        .await
        .expect("a 1.0 delivery within 5 s")
        .expect("recv");
    let Body::Data(batch) = delivery.body() else { panic!("a data body, got {:?}", delivery.body()) };
    let bytes: Vec<u8> = batch.iter().flat_map(|data| data.0.to_vec()).collect();
    let from_10: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
    assert_eq!(from_10, event, "the same event over both protocols");
    receiver.accept(&delivery).await.unwrap();
    assert_eq!(link_queues(&charon).await, 1, "the link has a server-named queue");
    receiver.close().await.unwrap();
    wait_for_link_queues(&charon, 0).await;
    // With a binding key; the queue goes with the connection too.
    let filtered = Receiver::attach(&mut session, "expired", format!("/exchanges/{EVENTS}/expired.%23").as_str())
        .await
        .expect("a binding key after the exchange");
    assert_eq!(link_queues(&charon).await, 1);
    drop(filtered);
    let _ = session.end().await;
    amqp10.close().await.unwrap();
    wait_for_link_queues(&charon, 0).await;

    // The dead letter itself went where it always did.
    assert!(ch.basic_get("orders-dlq".into(), BasicGetOptions { no_ack: true }).await.unwrap().is_some());
    connection.close(200, "bye".into()).await.unwrap();
}

/// Server-named queues in vhost `/`, as the HTTP API lists them.
async fn link_queues(charon: &support::Charon) -> usize {
    let base = format!("http://127.0.0.1:{}", charon.http_port);
    let response =
        conformance::admin::request(&base, "GET", "/api/queues/%2F", ("guest", "guest"), None).await.unwrap();
    let queues: serde_json::Value = serde_json::from_str(&response.body).expect("JSON");
    queues.as_array().unwrap().iter().filter(|q| q["name"].as_str().is_some_and(|n| n.starts_with("amq.gen-"))).count()
}

async fn wait_for_link_queues(charon: &support::Charon, expected: usize) {
    for _ in 0..300 {
        if link_queues(charon).await == expected {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("expected {expected} server-named queues, have {}", link_queues(charon).await);
}

#[tokio::test]
async fn other_exchanges_stay_refused_as_1_0_sources() {
    let charon = support::Charon::start();
    let mut amqp10 = charon.open_amqp10("events-e2e-refused").await;
    let mut session = Session::begin(&mut amqp10).await.expect("begin");
    let refused = Receiver::attach(&mut session, "topic", "/exchanges/amq.topic").await;
    assert!(refused.is_err(), "RabbitMQ 4.0.5 refuses /exchanges/ sources");
    let _ = amqp10.close().await;
}

#[tokio::test]
async fn clients_cannot_publish_to_redeclare_or_delete_the_event_exchange() {
    let charon = support::Charon::start();
    let connection = Connection::connect(&charon.url(), ConnectionProperties::default()).await.expect("connect");
    let internal = "ACCESS_REFUSED - cannot publish to internal exchange 'amq.charon.dead-letter-events' in vhost '/'";

    let ch = channel(&connection).await;
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let published = ch.basic_publish(
        EVENTS.into(),
        "rejected.x".into(),
        BasicPublishOptions::default(),
        b"{}",
        BasicProperties::default(),
    );
    let error = match published.await {
        Err(error) => error,
        Ok(confirm) => match confirm.await {
            Err(error) => error,
            Ok(_) => ch
                .queue_declare("after".into(), QueueDeclareOptions::default(), FieldTable::default())
                .await
                .expect_err("the channel was closed"),
        },
    };
    assert_eq!(close_reason(&error), Some((403, internal.to_owned())));

    // Declaring it as it is passes; declaring it otherwise or deleting it does not.
    let ch = channel(&connection).await;
    let same = ExchangeDeclareOptions { durable: true, internal: true, ..ExchangeDeclareOptions::default() };
    ch.exchange_declare(EVENTS.into(), ExchangeKind::Topic, same, FieldTable::default()).await.expect("equivalent");
    let error = ch
        .exchange_declare(EVENTS.into(), ExchangeKind::Fanout, same, FieldTable::default())
        .await
        .expect_err("inequivalent");
    assert_eq!(close_reason(&error).map(|(code, _)| code), Some(406));
    let ch = channel(&connection).await;
    let error = ch.exchange_delete(EVENTS.into(), ExchangeDeleteOptions::default()).await.expect_err("reserved");
    assert_eq!(close_reason(&error).map(|(code, _)| code), Some(403));

    // A 1.0 publisher is refused like on any internal exchange.
    let mut amqp10 = charon.open_amqp10("events-e2e-sender").await;
    let mut session = Session::begin(&mut amqp10).await.expect("begin");
    let sender = fe2o3_amqp::Sender::attach(&mut session, "s", format!("/exchanges/{EVENTS}/k").as_str()).await;
    assert!(sender.is_err(), "an internal exchange is no 1.0 target");
    let _ = amqp10.close().await;

    // The drop counter is on /metrics, per vhost.
    let base = format!("http://127.0.0.1:{}", charon.prometheus_port);
    let metrics = conformance::admin::request(&base, "GET", "/metrics", ("guest", "guest"), None).await.unwrap();
    assert!(metrics.body.contains("charon_dead_letter_events_dropped_total{vhost=\"/\"} 0\n"), "{}", metrics.body);
}
