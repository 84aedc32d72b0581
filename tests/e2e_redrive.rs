//! A redrive against the real binary, seen by its clients: dead letters go back to the queue
//! they died in with `x-charon-redrive-count` and their `x-death`, each state change of the job
//! is an event on the dead-letter event stream, and `/metrics` counts the moved messages.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::time::Duration;

use lapin::options::{
    BasicGetOptions, BasicPublishOptions, BasicRejectOptions, ConfirmSelectOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection, ConnectionProperties};
use serde_json::Value;

async fn http(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    let reply = support::http::Call::api(port, method, path).body(body).send().await;
    assert_ne!(reply.status, 0, "{method} {path} got no answer");
    (reply.status, reply.body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moved_messages_carry_their_count_and_history_and_the_job_is_counted_and_announced() {
    let charon = support::Charon::start();
    let url = format!("amqp://guest:guest@127.0.0.1:{}/%2f", charon.port);
    let conn = Connection::connect(&url, ConnectionProperties::default()).await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    ch.queue_declare("e2e-dlq".into(), durable, FieldTable::default()).await.unwrap();
    let mut args = FieldTable::default();
    args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
    args.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString("e2e-dlq".into()));
    ch.queue_declare("e2e-orders".into(), durable, args).await.unwrap();
    ch.queue_declare("e2e-events".into(), durable, FieldTable::default()).await.unwrap();
    ch.queue_bind(
        "e2e-events".into(),
        "amq.charon.dead-letter-events".into(),
        "redrive.#".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    for i in 0..5u8 {
        let properties = BasicProperties::default().with_delivery_mode(2);
        let confirm = ch
            .basic_publish("".into(), "e2e-orders".into(), BasicPublishOptions::default(), &[i], properties)
            .await
            .unwrap();
        assert!(confirm.await.unwrap().is_ack());
    }
    for _ in 0..5 {
        let got = ch.basic_get("e2e-orders".into(), BasicGetOptions::default()).await.unwrap().expect("a message");
        got.delivery.reject(BasicRejectOptions { requeue: false }).await.unwrap();
    }
    let mut depth = 0;
    for _ in 0..200 {
        let (_, body) = http(charon.http_port, "GET", "/api/queues/%2F/e2e-dlq", "").await;
        depth = serde_json::from_str::<Value>(&body).unwrap()["messages"].as_u64().unwrap_or(0);
        if depth == 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(depth, 5);

    let body = r#"{"source":"e2e-dlq","destination":{"type":"original","death":"first"}}"#;
    let (status, job) = http(charon.http_port, "POST", "/api/charon/redrives/%2F", body).await;
    assert_eq!(status, 201, "{job}");
    let id = serde_json::from_str::<Value>(&job).unwrap()["id"].as_str().unwrap().to_owned();
    let mut job = Value::Null;
    for _ in 0..200 {
        job =
            serde_json::from_str(&http(charon.http_port, "GET", &format!("/api/charon/redrives/%2F/{id}"), "").await.1)
                .unwrap();
        if job["state"] == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!((job["state"].clone(), job["progress"]["moved"].clone()), ("completed".into(), 5.into()), "{job}");

    for i in 0..5u8 {
        let got =
            ch.basic_get("e2e-orders".into(), BasicGetOptions { no_ack: true }).await.unwrap().expect("moved back");
        assert_eq!(got.delivery.data, [i]);
        let headers = got.delivery.properties.headers().clone().expect("headers");
        let headers = headers.inner();
        assert_eq!(headers.get("x-charon-redrive-count"), Some(&AMQPValue::LongLongInt(1)), "{headers:?}");
        let Some(AMQPValue::FieldArray(deaths)) = headers.get("x-death") else { panic!("x-death kept: {headers:?}") };
        let Some(AMQPValue::FieldTable(death)) = deaths.as_slice().first() else { panic!("{deaths:?}") };
        assert_eq!(death.inner().get("reason"), Some(&AMQPValue::LongString("rejected".into())));
        assert_eq!(death.inner().get("queue"), Some(&AMQPValue::LongString("e2e-orders".into())));
    }

    let mut keys = Vec::new();
    while let Some(got) = ch.basic_get("e2e-events".into(), BasicGetOptions { no_ack: true }).await.unwrap() {
        keys.push(got.delivery.routing_key.to_string());
        let event: Value = serde_json::from_slice(&got.delivery.data).unwrap();
        assert_eq!(event["id"], id.as_str());
    }
    assert_eq!(keys, ["redrive.running.e2e-dlq", "redrive.completed.e2e-dlq"]);

    let metrics = support::http::Call::new(charon.prometheus_port, "GET", "/metrics").send().await.body;
    let line = r#"charon_redrive_messages_total{vhost="/",source="e2e-dlq",destination="original",outcome="moved"} 5"#;
    assert!(
        metrics.contains(line),
        "{}",
        metrics.lines().filter(|l| l.contains("redrive")).collect::<Vec<_>>().join("\n")
    );
}
