//! RabbitMQ's Prometheus plugin (`rabbitmq_prometheus`, 4.0.5): the families' types and HELP
//! texts on `/metrics`, the global message counters a client's publishes, gets and acks move,
//! per-queue series on `/metrics/per-object`, and `/metrics/detailed`'s family and vhost
//! selection.
//!
//! The global counters are node-wide, so the counting case is tagged `serial` (run alone) and
//! asserts deltas. Per-queue figures come from RabbitMQ's statistics, refreshed every 5 s: the
//! cases that read them wait up to 15 s.

use std::time::Duration;

use lapin::BasicProperties;
use lapin::options::{BasicAckOptions, BasicGetOptions, BasicPublishOptions};

use crate::admin::request;
use crate::lapin_kit as lk;
use crate::{Case, CaseError, CaseResult, Ctx, case, check, check_eq};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "prometheus.families_typed",
            "/metrics has RabbitMQ's core families with their TYPE and HELP lines",
            ["prometheus"],
            families_typed
        ),
        case!(
            "prometheus.global_counters_count",
            "publishes (routed, unroutable dropped and returned, confirmed), a basic.get and its ack move the amqp091 global counters by exactly that much",
            ["prometheus", "serial"],
            global_counters_count
        ),
        case!(
            "prometheus.per_object_queue_series",
            "/metrics/per-object shows a queue's ready messages and consumers under its vhost and name",
            ["prometheus"],
            per_object_queue_series
        ),
        case!(
            "prometheus.detailed_selects",
            "/metrics/detailed renders the families asked for, with the rabbitmq_detailed_ prefix, and only the queues of the vhosts asked for",
            ["prometheus"],
            detailed_selects
        ),
    ]
}

/// GET on the Prometheus listener (`path` replaces the configured URL's `/metrics`).
async fn scrape(ctx: &Ctx, path: &str) -> Result<String, CaseError> {
    let b = ctx.broker();
    let base = b.metrics.strip_suffix("/metrics").unwrap_or(&b.metrics);
    let response = request(base, "GET", path, (&b.user, &b.password), None).await?;
    check_eq!(response.status, 200, "GET {path}");
    Ok(response.body)
}

/// The value of the sample `name{labels}` (labels in the broker's order), if any.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

async fn families_typed(ctx: Ctx) -> CaseResult {
    let text = scrape(&ctx, "/metrics").await?;
    let families = [
        ("rabbitmq_connections", "gauge", "Connections currently open"),
        ("rabbitmq_channels", "gauge", "Channels currently open"),
        ("rabbitmq_consumers", "gauge", "Consumers currently connected"),
        ("rabbitmq_queues", "gauge", "Queues available"),
        ("rabbitmq_queue_messages", "gauge", "Sum of ready and unacknowledged messages - total queue depth"),
        ("rabbitmq_queue_messages_ready", "gauge", "Messages ready to be delivered to consumers"),
        ("rabbitmq_queue_messages_unacked", "gauge", "Messages delivered to consumers but not yet acknowledged"),
        ("rabbitmq_queue_messages_bytes", "gauge", "Size in bytes of ready and unacknowledged messages"),
        ("rabbitmq_queue_consumers", "gauge", "Consumers on a queue"),
        ("rabbitmq_connections_opened_total", "counter", "Total number of connections opened"),
        ("rabbitmq_queues_declared_total", "counter", "Total number of queues declared"),
        ("rabbitmq_global_messages_received_total", "counter", "Total number of messages received from publishers"),
        ("rabbitmq_global_messages_routed_total", "counter", "Total number of messages routed to queues or streams"),
        ("rabbitmq_global_messages_delivered_total", "counter", "Total number of messages delivered to consumers"),
        ("rabbitmq_global_publishers", "gauge", "Current number of publishers"),
        ("rabbitmq_global_consumers", "gauge", "Current number of consumers"),
        ("rabbitmq_process_resident_memory_bytes", "gauge", "Memory used in bytes"),
        ("rabbitmq_disk_space_available_bytes", "gauge", "Disk space available in bytes"),
        ("rabbitmq_alarms_memory_used_watermark", "untyped", "is 1 if VM memory watermark alarm is in effect"),
        ("rabbitmq_build_info", "untyped", "RabbitMQ & Erlang/OTP version info"),
        ("rabbitmq_identity_info", "untyped", "RabbitMQ node & cluster identity info"),
    ];
    for (name, kind, help) in families {
        let header = format!("# TYPE {name} {kind}\n# HELP {name} {help}\n");
        check!(text.contains(&header), "missing {header:?}");
    }
    check!(
        text.contains("rabbitmq_build_info{rabbitmq_version=\"4.0.5\","),
        "rabbitmq_build_info's first label is rabbitmq_version=\"4.0.5\""
    );
    for protocol in ["amqp091", "amqp10"] {
        let series = format!(
            "rabbitmq_global_messages_delivered_total{{protocol=\"{protocol}\",queue_type=\"rabbit_classic_queue\"}}"
        );
        check!(sample(&text, &series).is_some(), "missing {series}");
    }
    Ok(())
}

const COUNTERS: [&str; 8] = [
    "received",
    "received_confirm",
    "routed",
    "unroutable_dropped",
    "unroutable_returned",
    "confirmed",
    "delivered_get_manual_ack",
    "acknowledged",
];

fn counter_series(name: &str) -> String {
    match name {
        "delivered_get_manual_ack" | "acknowledged" => {
            format!("rabbitmq_global_messages_{name}_total{{protocol=\"amqp091\",queue_type=\"rabbit_classic_queue\"}}")
        }
        _ => format!("rabbitmq_global_messages_{name}_total{{protocol=\"amqp091\"}}"),
    }
}

async fn counters(ctx: &Ctx) -> Result<Vec<f64>, CaseError> {
    let text = scrape(ctx, "/metrics").await?;
    COUNTERS
        .iter()
        .map(|c| sample(&text, &counter_series(c)).ok_or_else(|| CaseError::new(format!("no {}", counter_series(c)))))
        .collect()
}

async fn global_counters_count(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("counted");
    lk::declare_queue(&ch, &q).await?;
    lk::confirm(&ch).await?;
    let before = counters(&ctx).await?;
    for _ in 0..5 {
        lk::publish(&ch, "", &q, b"m").await?;
    }
    let nowhere = ctx.name("nowhere");
    for mandatory in [false, false, true] {
        let options = BasicPublishOptions { mandatory, ..BasicPublishOptions::default() };
        let confirm =
            ch.basic_publish("".into(), nowhere.as_str().into(), options, b"x", BasicProperties::default()).await?;
        check!(confirm.await?.is_ack(), "an unroutable publish is confirmed");
    }
    let got = ch.basic_get(q.as_str().into(), BasicGetOptions { no_ack: false }).await?;
    let got = got.ok_or_else(|| CaseError::new("basic.get found nothing"))?;
    got.delivery.ack(BasicAckOptions::default()).await?;
    // received, received_confirm, routed, dropped, returned, confirmed, get (manual), acked.
    let expected = [8.0, 8.0, 5.0, 2.0, 1.0, 8.0, 1.0, 1.0];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let now = counters(&ctx).await?;
        let deltas: Vec<f64> = now.iter().zip(&before).map(|(n, b)| n - b).collect();
        if deltas == expected {
            return Ok(());
        }
        check!(tokio::time::Instant::now() < deadline, "deltas of {COUNTERS:?}: expected {expected:?}, got {deltas:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn per_object_queue_series(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("perobj");
    lk::declare_queue(&ch, &q).await?;
    lk::confirm(&ch).await?;
    lk::publish(&ch, "", &q, b"a").await?;
    lk::publish(&ch, "", &q, b"b").await?;
    let vhost = &ctx.broker().vhost;
    let labels = format!("{{vhost=\"{vhost}\",queue=\"{q}\"}}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let text = scrape(&ctx, "/metrics/per-object").await?;
        let ready = sample(&text, &format!("rabbitmq_queue_messages_ready{labels}"));
        let consumers = sample(&text, &format!("rabbitmq_queue_consumers{labels}"));
        if ready == Some(2.0) && consumers == Some(0.0) {
            return Ok(());
        }
        check!(tokio::time::Instant::now() < deadline, "{q}: ready {ready:?}, consumers {consumers:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn detailed_selects(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("detailed");
    lk::declare_queue(&ch, &q).await?;
    let churn = scrape(&ctx, "/metrics/detailed?family=connection_churn_metrics").await?;
    check!(churn.contains("# TYPE rabbitmq_detailed_connections_opened_total counter\n"), "churn family");
    check!(!churn.contains("rabbitmq_detailed_queue_messages"), "no queue family unless asked for");
    check!(churn.contains("# TYPE rabbitmq_identity_info untyped\n"), "identity always");
    let vhost = ctx.broker().vhost.clone();
    let encoded = vhost.replace('%', "%25").replace('/', "%2F");
    let series = format!("rabbitmq_detailed_queue_messages{{vhost=\"{vhost}\",queue=\"{q}\"}}");
    let path = format!("/metrics/detailed?family=queue_coarse_metrics&vhost={encoded}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let text = scrape(&ctx, &path).await?;
        if sample(&text, &series) == Some(0.0) {
            break;
        }
        check!(tokio::time::Instant::now() < deadline, "no {series} in:\n{text}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let other = scrape(&ctx, "/metrics/detailed?family=queue_coarse_metrics&vhost=cf-no-such-vhost").await?;
    check!(!other.contains(&format!("queue=\"{q}\"")), "another vhost's selection shows none of this vhost's queues");
    check!(other.contains("# TYPE rabbitmq_detailed_queue_messages gauge\n"), "the family's header stays");
    Ok(())
}
