//! The endpoints' text, in-process: parsed by a real Prometheus parser, each family in one
//! group, the per-object rendering split into pieces without losing or repeating a line.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::HashSet;

use charon_engine::{Broker, BrokerConfig, QueueDeclare};
use metrics_exporter_prometheus::PrometheusBuilder;

use super::{Identity, Piece, Scraper, Selection};

async fn scraper(queues: usize) -> (Scraper, tempfile::TempDir) {
    let broker = Broker::new(BrokerConfig::default());
    let user = broker.authenticate("guest", "guest").unwrap();
    let vhost = broker.open_vhost(&user, "/").unwrap();
    for i in 0..queues {
        let declare = QueueDeclare { name: format!("q\"{i}\\"), ..QueueDeclare::default() };
        vhost.declare_queue(&declare, 1).await.unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let identity = Identity::load(dir.path()).unwrap();
    let handle = PrometheusBuilder::new().build_recorder().handle();
    (Scraper::new(broker, handle, identity), dir)
}

fn parse(text: &str) -> prometheus_parse::Scrape {
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("parses")
}

/// Every family's samples follow its header, and no family appears twice.
fn grouped(text: &str) {
    let mut seen = HashSet::new();
    let mut current = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            current = rest.split(' ').next().unwrap().to_owned();
            assert!(seen.insert(current.clone()), "{current} twice");
        } else if !line.starts_with('#') {
            let name = line.split(['{', ' ']).next().unwrap();
            assert!(name.starts_with(&current), "{name} outside its family {current}");
        }
    }
}

#[tokio::test]
async fn per_object_pieces_cover_every_queue_once_with_escaped_labels() {
    let (scraper, _dir) = scraper(1500).await;
    let text = Piece::concat(scraper.per_object());
    grouped(&text);
    let scrape = parse(&text);
    let ready: Vec<_> = scrape.samples.iter().filter(|s| s.metric == "rabbitmq_queue_messages_ready").collect();
    // 1,500 queues and the dead-letter fallback queue, over two pieces.
    assert_eq!(ready.len(), 1501);
    // prometheus-parse hands label values over as written, escapes included.
    assert!(ready.iter().any(|s| s.labels.get("queue") == Some(r#"q\"7\\"#)));
    let names: HashSet<_> = ready.iter().map(|s| s.labels.get("queue").unwrap().to_owned()).collect();
    assert_eq!(names.len(), 1501);
    assert!(text.contains("# TYPE rabbitmq_identity_info untyped\n"));
}

#[tokio::test]
async fn aggregated_sums_and_detailed_selects() {
    let (scraper, _dir) = scraper(3).await;
    let text = scraper.aggregated();
    grouped(&text);
    let scrape = parse(&text);
    let queues = scrape.samples.iter().find(|s| s.metric == "rabbitmq_queues").unwrap();
    assert!(matches!(queues.value, prometheus_parse::Value::Gauge(n) if n == 4.0), "{:?}", queues.value);
    assert!(!text.contains("queue=\""), "no per-queue line:\n{text}");

    let selection = Selection::parse(Some("family=queue_consumer_count&family=queue_metrics&vhost=%2F"));
    let text = Piece::concat(scraper.detailed(&selection));
    grouped(&text);
    assert_eq!(text.matches("# TYPE rabbitmq_detailed_queue_consumers gauge\n").count(), 1);
    assert_eq!(text.matches("rabbitmq_detailed_queue_messages_bytes{vhost=\"/\"").count(), 4);
    let none = Piece::concat(scraper.detailed(&Selection::parse(Some("family=queue_coarse_metrics&vhost=other"))));
    assert!(!none.contains("{vhost="), "{none}");
    assert!(none.contains("# TYPE rabbitmq_detailed_queue_messages gauge\n"));
}

#[test]
fn the_cluster_id_is_kept_across_starts() {
    let dir = tempfile::tempdir().unwrap();
    let render = || {
        let mut out = String::new();
        Identity::load(dir.path()).unwrap().render(&mut out);
        out
    };
    let first = render();
    assert!(first.contains("rabbitmq_cluster_permanent_id=\"rabbitmq-cluster-id-"), "{first}");
    assert_eq!(render(), first);
}

#[tokio::test]
async fn alarm_families_follow_the_alarms() {
    let broker = Broker::new(BrokerConfig::default());
    let text = super::charon::render_resources(&broker);
    assert!(text.contains(
        "# TYPE rabbitmq_alarms_memory_used_watermark untyped\n\
         # HELP rabbitmq_alarms_memory_used_watermark is 1 if VM memory watermark alarm is in effect\n\
         rabbitmq_alarms_memory_used_watermark 0\n"
    ));
    broker.resources().set_memory_alarm(true);
    broker.resources().set_log_failing(true);
    let text = super::charon::render_resources(&broker);
    assert!(text.contains("\nrabbitmq_alarms_memory_used_watermark 1\n"), "{text}");
    assert!(text.contains("\nrabbitmq_alarms_free_disk_space_watermark 1\n"), "{text}");
    assert!(text.contains("\nrabbitmq_alarms_file_descriptor_limit 0\n"), "{text}");
}

#[tokio::test]
async fn the_queue_series_render_the_queue_handles_figures() {
    use std::sync::atomic::Ordering::Relaxed;

    use charon_engine::metrics::DeadLetterStrategy;
    use charon_model::DeathReason;

    use super::charon::QueueSeries;

    let (scraper, _dir) = scraper(1).await;
    let queue = super::charon::sorted_queues(&scraper.broker).pop().unwrap();
    let now = 1_700_000_000_000;
    let mut out = String::new();
    QueueSeries::DeadLettered.rows(std::slice::from_ref(&queue), now, &mut out);
    assert_eq!(out, "", "a series appears on its first count");
    queue.dead_lettered.add(DeadLetterStrategy::AtLeastOnce, DeathReason::Rejected);
    queue.dead_lettered.add(DeadLetterStrategy::AtLeastOnce, DeathReason::Rejected);
    queue.dead_lettered.add(DeadLetterStrategy::Disabled, DeathReason::Expired);
    queue.dead_letters_pending.store(3, Relaxed);
    queue.oldest_ready_at.store(now - 1_500, Relaxed);
    let mut out = String::new();
    for series in QueueSeries::ALL {
        series.rows(std::slice::from_ref(&queue), now, &mut out);
    }
    assert_eq!(
        out,
        "charon_queue_messages_dead_lettered_total{vhost=\"/\",queue=\"q\\\"0\\\\\",reason=\"expired\",strategy=\"disabled\"} 1\n\
         charon_queue_messages_dead_lettered_total{vhost=\"/\",queue=\"q\\\"0\\\\\",reason=\"rejected\",strategy=\"at_least_once\"} 2\n\
         charon_queue_dead_letters_pending{vhost=\"/\",queue=\"q\\\"0\\\\\"} 3\n\
         charon_queue_oldest_message_age_seconds{vhost=\"/\",queue=\"q\\\"0\\\\\"} 1.5\n"
    );
}
