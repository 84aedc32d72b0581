//! Why it died (issue 16): what an AMQP 1.0 consumer says when it refuses a message — the
//! `error` of `rejected`, the message annotations of `modified{undeliverable-here}` — is kept
//! with the death and shown to whoever reads the dead-letter queue, over 1.0 in the
//! `x-opt-deaths` entry and over 0.9.1 in the `x-death` entry, also after a restart. A refusal
//! without words shows RabbitMQ's fields only.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::time::Duration;

use conformance::broker::Broker;
use conformance::raw10::{Conn10, Received};
use fe2o3_amqp_types::definitions::{Error, ErrorCondition};
use fe2o3_amqp_types::messaging::{Accepted, DeliveryState, Modified, Rejected, Released};
use fe2o3_amqp_types::primitives::{OrderedMap, Symbol, Value};
use lapin::options::{
    BasicGetOptions, BasicNackOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

/// RabbitMQ's fields of an `x-opt-deaths` entry (this queue's messages have no TTL).
const RABBIT_FIELDS_10: [&str; 7] = ["queue", "reason", "count", "first-time", "last-time", "exchange", "routing-keys"];
/// RabbitMQ's fields of an `x-death` entry.
const RABBIT_FIELDS_091: [&str; 6] = ["count", "reason", "queue", "time", "exchange", "routing-keys"];

async fn channel(charon: &support::Charon) -> (Connection, Channel) {
    let conn = Connection::connect(&charon.url(), ConnectionProperties::default()).await.expect("connect");
    let channel = conn.create_channel().await.expect("channel");
    channel.confirm_select(ConfirmSelectOptions::default()).await.expect("confirm.select");
    (conn, channel)
}

async fn count(channel: &Channel, queue: &str) -> u32 {
    let options = QueueDeclareOptions { passive: true, ..Default::default() };
    channel.queue_declare(queue.into(), options, FieldTable::default()).await.expect("passive").message_count()
}

fn sym(s: &str) -> Value {
    Value::Symbol(Symbol::from(s))
}

/// The (only) `x-opt-deaths` entry of a 1.0 delivery, keys in order.
fn death_10(payload: &[u8]) -> Vec<(String, Value)> {
    let received = Received::parse(payload).unwrap();
    let Some(Value::Array(entries)) = received.ann("x-opt-deaths") else { panic!("x-opt-deaths") };
    assert_eq!(entries.0.len(), 1);
    let Value::Map(entry) = entries.0[0].clone() else { panic!("entry") };
    entry
        .into_iter()
        .map(|(k, v)| match k {
            Value::Symbol(s) => (s.0, v),
            other => panic!("key {other:?}"),
        })
        .collect()
}

/// The (only) `x-death` entry of a 0.9.1 delivery (lapin sorts a table's keys).
fn death_091(properties: &BasicProperties) -> Vec<(String, AMQPValue)> {
    let headers = properties.headers().clone().expect("headers");
    let Some(AMQPValue::FieldArray(entries)) = headers.inner().get("x-death") else { panic!("x-death") };
    assert_eq!(entries.as_slice().len(), 1);
    let AMQPValue::FieldTable(entry) = &entries.as_slice()[0] else { panic!("entry") };
    entry.inner().iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

fn keys<V>(entry: &[(String, V)]) -> Vec<&str> {
    entry.iter().map(|(k, _)| k.as_str()).collect()
}

fn sorted(mut keys: Vec<&str>) -> Vec<&str> {
    keys.sort_unstable();
    keys
}

fn get<'a, V>(entry: &'a [(String, V)], key: &str) -> &'a V {
    &entry.iter().find(|(k, _)| k == key).unwrap_or_else(|| panic!("{key}")).1
}

/// Reads the three dead letters over 1.0 (giving them back) and checks their entries.
async fn check_10(charon: &support::Charon) {
    let broker = Broker::parse(&charon.url()).unwrap();
    let mut c = Conn10::open(&broker).await.unwrap();
    c.begin(0).await.unwrap();
    c.attach_receiver(0, 0, "/queues/why-dlq").await.unwrap();
    c.credit(0, 0, 3, false).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let d = c.recv(0, Duration::from_secs(5)).await.unwrap();
        let body = Received::parse(&d.payload).unwrap().data().unwrap();
        seen.push((String::from_utf8(body).unwrap(), death_10(&d.payload)));
        c.settle(0, d.id(), d.id(), DeliveryState::Released(Released {})).await.unwrap();
    }
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    let [(bad, bad_entry), (plain, plain_entry), (stale, stale_entry)] = &seen[..] else { panic!("{seen:?}") };
    assert_eq!((bad.as_str(), plain.as_str(), stale.as_str()), ("bad", "plain", "stale"));

    let mut expected = RABBIT_FIELDS_10.to_vec();
    expected.extend(["error-condition", "error-description", "error-info"]);
    assert_eq!(keys(bad_entry), expected);
    assert_eq!(get(bad_entry, "reason"), &sym("rejected"));
    assert_eq!(get(bad_entry, "error-condition"), &sym("app:bad-payload"));
    assert_eq!(get(bad_entry, "error-description"), &Value::String("schema v2 expected".into()));
    let info: OrderedMap<Value, Value> =
        [(sym("expected"), Value::String("v2".into())), (sym("attempt"), Value::Ulong(3))].into_iter().collect();
    assert_eq!(get(bad_entry, "error-info"), &Value::Map(info));

    // A rejection without an error: exactly RabbitMQ's entry.
    assert_eq!(keys(plain_entry), RABBIT_FIELDS_10);

    let mut expected = RABBIT_FIELDS_10.to_vec();
    expected.push("message-annotations");
    assert_eq!(keys(stale_entry), expected);
    let annotations: OrderedMap<Value, Value> =
        [(sym("x-opt-why"), Value::String("price is stale".into()))].into_iter().collect();
    assert_eq!(get(stale_entry, "message-annotations"), &Value::Map(annotations));
    c.close().await.unwrap();
}

/// Reads the three dead letters over 0.9.1 (giving them back) and checks their entries.
async fn check_091(channel: &Channel) {
    let mut seen = Vec::new();
    for _ in 0..3 {
        let got = channel.basic_get("why-dlq".into(), BasicGetOptions::default()).await.unwrap().expect("a message");
        seen.push((
            got.delivery.delivery_tag,
            String::from_utf8(got.delivery.data.clone()).unwrap(),
            death_091(&got.delivery.properties),
        ));
    }
    for (tag, _, _) in &seen {
        channel.basic_nack(*tag, BasicNackOptions { requeue: true, multiple: false }).await.unwrap();
    }
    seen.sort_by(|a, b| a.1.cmp(&b.1));
    let [(_, bad, bad_entry), (_, plain, plain_entry), (_, stale, stale_entry)] = &seen[..] else { panic!() };
    assert_eq!((bad.as_str(), plain.as_str(), stale.as_str()), ("bad", "plain", "stale"));

    let mut expected = RABBIT_FIELDS_091.to_vec();
    expected.extend(["error-condition", "error-description", "error-info"]);
    assert_eq!(keys(bad_entry), sorted(expected));
    assert_eq!(get(bad_entry, "error-condition"), &AMQPValue::LongString("app:bad-payload".into()));
    assert_eq!(get(bad_entry, "error-description"), &AMQPValue::LongString("schema v2 expected".into()));
    let AMQPValue::FieldTable(info) = get(bad_entry, "error-info") else { panic!("error-info") };
    assert_eq!(info.inner().get("expected"), Some(&AMQPValue::LongString("v2".into())));
    assert_eq!(info.inner().get("attempt"), Some(&AMQPValue::LongLongInt(3)));

    assert_eq!(keys(plain_entry), sorted(RABBIT_FIELDS_091.to_vec()));

    let mut expected = RABBIT_FIELDS_091.to_vec();
    expected.push("message-annotations");
    assert_eq!(keys(stale_entry), sorted(expected));
    let AMQPValue::FieldTable(annotations) = get(stale_entry, "message-annotations") else { panic!() };
    assert_eq!(annotations.inner().get("x-opt-why"), Some(&AMQPValue::LongString("price is stale".into())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1_0_consumers_reason_reaches_the_dead_letter_queue_on_both_protocols_and_survives_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let charon = support::Charon::start_on(data.path(), &[]);
    {
        let (_conn, ch) = channel(&charon).await;
        let durable = QueueDeclareOptions { durable: true, ..Default::default() };
        ch.queue_declare("why-dlq".into(), durable, FieldTable::default()).await.unwrap();
        let dlx = support::field_table(&[
            ("x-dead-letter-exchange", AMQPValue::LongString("".into())),
            ("x-dead-letter-routing-key", AMQPValue::LongString("why-dlq".into())),
        ]);
        ch.queue_declare("why-src".into(), durable, dlx).await.unwrap();
        for body in ["bad", "plain", "stale"] {
            let properties = BasicProperties::default().with_delivery_mode(2);
            let options = BasicPublishOptions::default();
            let confirm = ch.basic_publish("".into(), "why-src".into(), options, body.as_bytes(), properties);
            confirm.await.unwrap().await.unwrap();
        }

        // A 1.0 consumer refuses each message its own way.
        let broker = Broker::parse(&charon.url()).unwrap();
        let mut c = Conn10::open(&broker).await.unwrap();
        c.begin(0).await.unwrap();
        c.attach_receiver(0, 0, "/queues/why-src").await.unwrap();
        c.credit(0, 0, 3, false).await.unwrap();
        for _ in 0..3 {
            let d = c.recv(0, Duration::from_secs(5)).await.unwrap();
            let body = Received::parse(&d.payload).unwrap().data().unwrap();
            let state = match body.as_slice() {
                b"bad" => {
                    let info: OrderedMap<Symbol, Value> = [
                        (Symbol::from("expected"), Value::String("v2".into())),
                        (Symbol::from("attempt"), Value::Ulong(3)),
                    ]
                    .into_iter()
                    .collect();
                    let error = Error {
                        condition: ErrorCondition::Custom(Symbol::from("app:bad-payload")),
                        description: Some("schema v2 expected".into()),
                        info: Some(Box::new(info)),
                    };
                    DeliveryState::Rejected(Rejected { error: Some(error) })
                }
                b"plain" => DeliveryState::Rejected(Rejected { error: None }),
                _ => {
                    let annotations: OrderedMap<Symbol, Value> =
                        [(Symbol::from("x-opt-why"), Value::String("price is stale".into()))].into_iter().collect();
                    DeliveryState::Modified(Modified {
                        delivery_failed: None,
                        undeliverable_here: Some(true),
                        message_annotations: Some(annotations),
                    })
                }
            };
            c.settle(0, d.id(), d.id(), state).await.unwrap();
        }
        let mut arrived = 0;
        for _ in 0..50 {
            arrived = count(&ch, "why-dlq").await;
            if arrived == 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(arrived, 3, "every refused message reached the dead-letter queue");
        c.close().await.unwrap();

        check_10(&charon).await;
        check_091(&ch).await;
    }
    charon.terminate();
    let mut charon = charon;
    assert_eq!(charon.wait_exit(Duration::from_secs(20)), Some(true), "charon exits cleanly");

    // The durable dead-letter queue kept the persistent messages with their causes.
    let charon = support::Charon::start_on(data.path(), &[]);
    let (_conn, ch) = channel(&charon).await;
    assert_eq!(count(&ch, "why-dlq").await, 3);
    check_091(&ch).await;
    check_10(&charon).await;
    // Taken for good by a 1.0 consumer that accepts them.
    let broker = Broker::parse(&charon.url()).unwrap();
    let mut c = Conn10::open(&broker).await.unwrap();
    c.begin(0).await.unwrap();
    c.attach_receiver(0, 0, "/queues/why-dlq").await.unwrap();
    c.credit(0, 0, 3, false).await.unwrap();
    for _ in 0..3 {
        let d = c.recv(0, Duration::from_secs(5)).await.unwrap();
        c.settle(0, d.id(), d.id(), DeliveryState::Accepted(Accepted {})).await.unwrap();
    }
}
