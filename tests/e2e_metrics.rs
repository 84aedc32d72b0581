//! The Prometheus endpoint of the real binary: RabbitMQ's global dead-letter counters and
//! Charon's per-queue counter, whose series go away with their queue.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::time::Duration;

use lapin::options::{
    BasicGetOptions, BasicNackOptions, BasicPublishOptions, BasicRejectOptions, ConfirmSelectOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::AMQPValue;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

const PER_QUEUE: &str = "charon_queue_messages_dead_lettered_total";

async fn scrape(charon: &support::Charon) -> String {
    let base = format!("http://127.0.0.1:{}", charon.prometheus_port);
    let response = conformance::admin::request(&base, "GET", "/metrics/per-object", ("guest", "guest"), None)
        .await
        .expect("GET /metrics/per-object");
    assert_eq!(response.status, 200);
    response.body
}

/// The value of the one line that starts with `series` (name and labels, as rendered).
fn value(text: &str, series: &str) -> Option<u64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

fn global(reason: &str, strategy: &str) -> String {
    format!(
        "rabbitmq_global_messages_dead_lettered_{reason}_total{{queue_type=\"rabbit_classic_queue\",\
         dead_letter_strategy=\"{strategy}\"}}"
    )
}

fn per_queue(queue: &str, reason: &str) -> String {
    // metrics-src has a dead-letter exchange (at_most_once); the odd queue drops (disabled).
    let strategy = if queue == "metrics-src" { "at_most_once" } else { "disabled" };
    format!("{PER_QUEUE}{{vhost=\"/\",queue=\"{queue}\",reason=\"{reason}\",strategy=\"{strategy}\"}}")
}

async fn declare(channel: &Channel, name: &str, args: &[(&str, AMQPValue)]) {
    let table = support::field_table(args);
    channel.queue_declare(name.into(), QueueDeclareOptions::default(), table).await.expect("declare");
}

async fn publish(channel: &Channel, queue: &str, properties: BasicProperties) {
    let confirm = channel
        .basic_publish("".into(), queue.into(), BasicPublishOptions::default(), b"m", properties)
        .await
        .expect("publish");
    assert!(confirm.await.expect("confirm").is_ack());
}

async fn get_tag(channel: &Channel, queue: &str) -> u64 {
    let message = channel.basic_get(queue.into(), BasicGetOptions::default()).await.expect("get").expect("a message");
    message.delivery.delivery_tag
}

/// Polls the endpoint until `series` shows `expected` (expiry happens on the queue's timer).
async fn wait_for(charon: &support::Charon, series: &str, expected: u64) -> String {
    for _ in 0..100 {
        let text = scrape(charon).await;
        if value(&text, series) == Some(expected) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{series} never reached {expected}:\n{}", scrape(charon).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_queue_dead_letter_series_count_by_reason_and_go_away_with_the_queue() {
    let charon = support::Charon::start();
    let conn = Connection::connect(&charon.url(), ConnectionProperties::default()).await.expect("connect");
    let channel = conn.create_channel().await.expect("channel");
    channel.confirm_select(ConfirmSelectOptions::default()).await.expect("confirm.select");

    // Before any dead letter: RabbitMQ's series exist at zero, no per-queue series.
    let text = scrape(&charon).await;
    assert_eq!(value(&text, &global("maxlen", "at_most_once")), Some(0));
    assert_eq!(value(&text, &global("rejected", "disabled")), Some(0));
    assert!(text.contains(&format!("# TYPE {PER_QUEUE} counter")));
    assert!(!text.lines().any(|l| l.starts_with(&format!("{PER_QUEUE}{{"))), "{text}");

    // A queue with a dead-letter target: two drop-head overflows and one nack.
    declare(&channel, "metrics-dlq", &[]).await;
    declare(
        &channel,
        "metrics-src",
        &[
            ("x-dead-letter-exchange", AMQPValue::LongString("".into())),
            ("x-dead-letter-routing-key", AMQPValue::LongString("metrics-dlq".into())),
            ("x-max-length", AMQPValue::LongLongInt(1)),
        ],
    )
    .await;
    for _ in 0..3 {
        publish(&channel, "metrics-src", BasicProperties::default()).await;
    }
    let tag = get_tag(&channel, "metrics-src").await;
    channel.basic_nack(tag, BasicNackOptions { requeue: false, multiple: false }).await.expect("nack");

    // A queue without one (a name that needs escaping): one reject and one expiry, both dropped.
    let odd = "metrics-\"drop\"";
    declare(&channel, odd, &[]).await;
    publish(&channel, odd, BasicProperties::default()).await;
    let tag = get_tag(&channel, odd).await;
    channel.basic_reject(tag, BasicRejectOptions { requeue: false }).await.expect("reject");
    publish(&channel, odd, BasicProperties::default().with_expiration("0".into())).await;

    let escaped = "metrics-\\\"drop\\\"";
    let text = wait_for(&charon, &per_queue(escaped, "expired"), 1).await;
    let text = if value(&text, &per_queue("metrics-src", "rejected")) == Some(1) {
        text
    } else {
        wait_for(&charon, &per_queue("metrics-src", "rejected"), 1).await
    };
    assert_eq!(value(&text, &per_queue("metrics-src", "maxlen")), Some(2));
    assert_eq!(value(&text, &per_queue("metrics-src", "rejected")), Some(1));
    assert_eq!(value(&text, &per_queue("metrics-src", "expired")), None);
    assert_eq!(value(&text, &per_queue(escaped, "rejected")), Some(1));
    assert_eq!(value(&text, &per_queue(escaped, "expired")), Some(1));
    assert_eq!(value(&text, &per_queue("metrics-dlq", "maxlen")), None);
    assert_eq!(value(&text, &global("maxlen", "at_most_once")), Some(2));
    assert_eq!(value(&text, &global("rejected", "at_most_once")), Some(1));
    assert_eq!(value(&text, &global("rejected", "disabled")), Some(1));
    assert_eq!(value(&text, &global("expired", "disabled")), Some(1));

    // Deleting a queue removes its series; the global counters keep their totals.
    channel.queue_delete("metrics-src".into(), QueueDeleteOptions::default()).await.expect("delete");
    let text = scrape(&charon).await;
    assert!(!text.contains("queue=\"metrics-src\""), "{text}");
    assert_eq!(value(&text, &per_queue(escaped, "rejected")), Some(1));
    assert_eq!(value(&text, &global("maxlen", "at_most_once")), Some(2));
    assert_eq!(value(&text, &global("rejected", "at_most_once")), Some(1));
}
