//! RabbitMQ's Prometheus endpoints on the real binary: `/metrics`, `/metrics/per-object` and
//! `/metrics/detailed` parse with a real Prometheus text parser and pass `promtool check
//! metrics` (Debian's `prometheus` package, installed by scripts/test.sh), count what a
//! client did, and the aggregated output does not grow with the number of queues.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};

async fn get(charon: &support::Charon, path: &str) -> String {
    let base = format!("http://127.0.0.1:{}", charon.prometheus_port);
    let response = conformance::admin::request(&base, "GET", path, ("guest", "guest"), None).await.expect(path);
    assert_eq!(response.status, 200, "{path}");
    response.body
}

/// Parses with `prometheus-parse`; every sample of the text must come out.
fn parse(text: &str) -> prometheus_parse::Scrape {
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("a Prometheus text exposition");
    let samples = text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).count();
    assert_eq!(scrape.samples.len(), samples, "every sample parsed");
    scrape
}

/// The value of the sample of `metric` whose labels include `labels`.
fn value(scrape: &prometheus_parse::Scrape, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape.samples.iter().find_map(|s| {
        let matches = s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v));
        let value = match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        };
        matches.then_some(value)
    })
}

/// `promtool check metrics` over `text`: exit status 0 (lint warnings are printed, and fail).
fn promtool(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's `prometheus` package; scripts/test.sh installs it)");
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "promtool check metrics: {said}");
}

/// Scrapes `/metrics` until `check` holds (queues publish their gauges after each pass).
async fn settle(charon: &support::Charon, check: impl Fn(&prometheus_parse::Scrape) -> bool) -> String {
    for _ in 0..100 {
        let text = get(charon, "/metrics").await;
        if check(&parse(&text)) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never settled:\n{}", get(charon, "/metrics").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_three_endpoints_pass_promtool_and_count_what_a_client_did() {
    let charon = support::Charon::start();
    let conn = Connection::connect(&charon.url(), ConnectionProperties::default()).await.expect("connect");
    let channel = conn.create_channel().await.expect("channel");
    channel.confirm_select(ConfirmSelectOptions::default()).await.expect("confirm.select");
    let declare = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
    channel.queue_declare("prom-q".into(), declare, FieldTable::default()).await.expect("declare");
    for _ in 0..3 {
        let confirm = channel
            .basic_publish(
                "".into(),
                "prom-q".into(),
                BasicPublishOptions::default(),
                b"abcd",
                BasicProperties::default(),
            )
            .await
            .expect("publish");
        assert!(confirm.await.expect("confirm").is_ack());
    }
    // Unroutable, not mandatory: dropped (and confirmed, as RabbitMQ does).
    let confirm = channel
        .basic_publish("".into(), "nowhere".into(), BasicPublishOptions::default(), b"x", BasicProperties::default())
        .await
        .expect("publish");
    assert!(confirm.await.expect("confirm").is_ack());
    let got = channel.basic_get("prom-q".into(), BasicGetOptions::default()).await.expect("get").expect("a message");
    got.delivery.ack(BasicAckOptions::default()).await.expect("ack");
    let held = channel.basic_get("prom-q".into(), BasicGetOptions::default()).await.expect("get").expect("a message");

    let amqp091 = [("protocol", "amqp091")];
    let classic = [("protocol", "amqp091"), ("queue_type", "rabbit_classic_queue")];
    let text = settle(&charon, |s| {
        value(s, "rabbitmq_queue_messages_ready", &[]) == Some(1.0)
            && value(s, "rabbitmq_queue_messages_unacked", &[]) == Some(1.0)
            && value(s, "rabbitmq_global_messages_acknowledged_total", &classic) == Some(1.0)
    })
    .await;
    let scrape = parse(&text);
    let at =
        |metric: &str, labels: &[(&str, &str)]| value(&scrape, metric, labels).unwrap_or_else(|| panic!("{metric}"));
    assert_eq!(at("rabbitmq_global_messages_received_total", &amqp091), 4.0);
    assert_eq!(at("rabbitmq_global_messages_received_confirm_total", &amqp091), 4.0);
    assert_eq!(at("rabbitmq_global_messages_routed_total", &amqp091), 3.0);
    assert_eq!(at("rabbitmq_global_messages_unroutable_dropped_total", &amqp091), 1.0);
    assert_eq!(at("rabbitmq_global_messages_unroutable_returned_total", &amqp091), 0.0);
    assert_eq!(at("rabbitmq_global_messages_confirmed_total", &amqp091), 4.0);
    assert_eq!(at("rabbitmq_global_messages_delivered_get_manual_ack_total", &classic), 2.0);
    assert_eq!(at("rabbitmq_global_messages_delivered_total", &classic), 2.0);
    assert_eq!(at("rabbitmq_global_messages_received_total", &[("protocol", "amqp10")]), 0.0);
    assert_eq!(at("rabbitmq_queue_messages", &[]), 2.0);
    assert_eq!(at("rabbitmq_queue_messages_bytes", &[]), 8.0);
    assert_eq!(at("rabbitmq_queue_messages_unacked_bytes", &[]), 4.0);
    assert_eq!(at("rabbitmq_connections", &[]), 1.0);
    assert_eq!(at("rabbitmq_channels", &[]), 1.0);
    // 4.0.5: a 0.9.1 channel is a publisher from its first publish until it closes.
    assert_eq!(at("rabbitmq_global_publishers", &amqp091), 1.0);
    assert_eq!(at("rabbitmq_connections_opened_total", &[]), 1.0);
    assert_eq!(at("rabbitmq_queues_created_total", &[]), 1.0);
    assert!(at("rabbitmq_queues", &[]) >= 1.0);
    assert_eq!(at("rabbitmq_build_info", &[("rabbitmq_version", "4.0.5")]), 1.0);
    assert_eq!(at("rabbitmq_alarms_memory_used_watermark", &[]), 0.0);
    assert!(scrape.docs.get("rabbitmq_queue_messages").is_some_and(|h| h.contains("total queue depth")));
    assert!(!text.contains("queue=\"prom-q\""), "no per-queue series on the aggregated endpoint");
    promtool(&text);

    // The management overview's message_stats are the same counters, under RabbitMQ's names.
    let base = format!("http://127.0.0.1:{}", charon.http_port);
    let overview = conformance::admin::request(&base, "GET", "/api/overview", ("guest", "guest"), None).await.unwrap();
    let overview: serde_json::Value = serde_json::from_str(&overview.body).unwrap();
    let stats = &overview["message_stats"];
    for (field, expected) in [
        ("publish", 4),
        ("confirm", 4),
        ("drop_unroutable", 1),
        ("return_unroutable", 0),
        ("get", 2),
        ("get_no_ack", 0),
        ("deliver", 0),
        ("deliver_get", 2),
        ("ack", 1),
    ] {
        assert_eq!(stats[field], expected, "message_stats.{field}: {stats}");
    }

    let per_object = get(&charon, "/metrics/per-object").await;
    let scrape = parse(&per_object);
    let queue = [("vhost", "/"), ("queue", "prom-q")];
    assert_eq!(value(&scrape, "rabbitmq_queue_messages_ready", &queue), Some(1.0));
    assert_eq!(value(&scrape, "rabbitmq_queue_messages_unacked", &queue), Some(1.0));
    assert_eq!(value(&scrape, "charon_queue_dead_letters_pending", &queue), Some(0.0));
    promtool(&per_object);

    let detailed =
        get(&charon, "/metrics/detailed?family=queue_coarse_metrics&family=connection_churn_metrics&vhost=%2F").await;
    let scrape = parse(&detailed);
    assert_eq!(value(&scrape, "rabbitmq_detailed_queue_messages", &queue), Some(2.0));
    assert_eq!(value(&scrape, "rabbitmq_detailed_connections_opened_total", &[]), Some(1.0));
    assert_eq!(value(&scrape, "rabbitmq_detailed_queue_consumers", &queue), None, "not asked for");
    assert!(value(&scrape, "rabbitmq_identity_info", &[]).is_some());
    promtool(&detailed);
    // Another vhost's queues only: none here.
    let other = get(&charon, "/metrics/detailed?family=queue_coarse_metrics&vhost=elsewhere").await;
    assert!(!other.contains("queue=\""), "{other}");
    promtool(&other);

    held.delivery.ack(BasicAckOptions::default()).await.expect("ack");
    conn.close(200, "bye".into()).await.expect("close");
    settle(&charon, |s| {
        value(s, "rabbitmq_connections", &[]) == Some(0.0)
            && value(s, "rabbitmq_connections_closed_total", &[]) == Some(1.0)
            && value(s, "rabbitmq_global_publishers", &[("protocol", "amqp091")]) == Some(0.0)
            && value(s, "rabbitmq_global_messages_acknowledged_total", &classic) == Some(2.0)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aggregated_output_does_not_grow_with_the_queues() {
    let charon = support::Charon::start();
    let before = get(&charon, "/metrics").await;
    let conn = Connection::connect(&charon.url(), ConnectionProperties::default()).await.expect("connect");
    let channel = conn.create_channel().await.expect("channel");
    for i in 0..2000 {
        let name = format!("many-{i}");
        channel
            .queue_declare(name.as_str().into(), QueueDeclareOptions::default(), FieldTable::default())
            .await
            .unwrap();
    }
    let after = get(&charon, "/metrics").await;
    assert_eq!(after.lines().count(), before.lines().count(), "one line per series, whatever the queues");
    assert!(after.len() < before.len() + 200, "{} bytes then {}", before.len(), after.len());
    // The 2,000 and the dead-letter fallback queue (created at start, asynchronously: not in
    // `before` for sure).
    assert_eq!(value(&parse(&after), "rabbitmq_queues", &[]), Some(2001.0));
    let per_object = get(&charon, "/metrics/per-object").await;
    assert!(per_object.lines().count() > before.lines().count() + 2000 * 7, "per-queue series on per-object");
    promtool(&per_object);
    conn.close(200, "bye".into()).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp10_publishes_deliveries_publishers_and_consumers_are_counted_under_amqp10() {
    use fe2o3_amqp::{Receiver, Sender, Session};
    let charon = support::Charon::start();
    let conn = Connection::connect(&charon.url(), ConnectionProperties::default()).await.expect("connect");
    let channel = conn.create_channel().await.expect("channel");
    channel.queue_declare("prom10".into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    let mut connection = charon.open_amqp10("prom10").await;
    let mut session = Session::begin(&mut connection).await.unwrap();
    let mut sender = Sender::attach(&mut session, "s", "/queues/prom10").await.unwrap();
    let mut receiver = Receiver::attach(&mut session, "r", "/queues/prom10").await.unwrap();
    for body in ["one", "two"] {
        sender.send(body).await.unwrap().accepted_or("rejected").unwrap();
    }
    for _ in 0..2 {
        let delivery = tokio::time::timeout(Duration::from_secs(5), receiver.recv::<String>()).await.unwrap().unwrap();
        receiver.accept(&delivery).await.unwrap();
    }
    let amqp10 = [("protocol", "amqp10")];
    let classic = [("protocol", "amqp10"), ("queue_type", "rabbit_classic_queue")];
    let text =
        settle(&charon, |s| value(s, "rabbitmq_global_messages_acknowledged_total", &classic) == Some(2.0)).await;
    let scrape = parse(&text);
    let at =
        |metric: &str, labels: &[(&str, &str)]| value(&scrape, metric, labels).unwrap_or_else(|| panic!("{metric}"));
    assert_eq!(at("rabbitmq_global_messages_received_total", &amqp10), 2.0);
    assert_eq!(at("rabbitmq_global_messages_received_confirm_total", &amqp10), 2.0);
    assert_eq!(at("rabbitmq_global_messages_routed_total", &amqp10), 2.0);
    assert_eq!(at("rabbitmq_global_messages_confirmed_total", &amqp10), 2.0);
    assert_eq!(at("rabbitmq_global_messages_delivered_consume_manual_ack_total", &classic), 2.0);
    assert_eq!(at("rabbitmq_global_publishers", &amqp10), 1.0);
    assert_eq!(at("rabbitmq_global_consumers", &amqp10), 1.0);
    assert_eq!(at("rabbitmq_global_messages_received_total", &[("protocol", "amqp091")]), 0.0);
    assert_eq!(at("rabbitmq_connections", &[]), 2.0);
    sender.close().await.unwrap();
    receiver.close().await.unwrap();
    session.end().await.unwrap();
    connection.close().await.unwrap();
    settle(&charon, |s| {
        value(s, "rabbitmq_global_publishers", &amqp10) == Some(0.0)
            && value(s, "rabbitmq_global_consumers", &amqp10) == Some(0.0)
            && value(s, "rabbitmq_connections", &[]) == Some(1.0)
    })
    .await;
}
