//! S1a and S1b: one publisher, one queue, one consumer.

use std::time::Instant;

use anyhow::Result;
use lapin::types::AMQPValue;

use super::Params;
use crate::amqp091::{self, Publish, Settle};
use crate::amqprs_publish;
use crate::consumers::{Client, Consumers};
use crate::report::{Outcome, Percentiles};
use crate::target::Target;

/// S1a: transient, no confirms, auto-ack.
pub(super) async fn transient(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    let spec = Publish { messages: params.messages, persistent: false, confirms: None, rate: params.rate };
    run(target, params, &format!("bench-s1a-{tag}"), (false, "classic"), spec, Settle::Auto).await
}

/// S1b: persistent into a durable queue, 1000 confirms in flight, qos 1000, multi-ack.
pub(super) async fn persistent(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    let spec = Publish { messages: params.messages, persistent: true, confirms: Some(1000), rate: params.rate };
    let settle = Settle::MultiAck { prefetch: 1000, every: 100 };
    run(target, params, &format!("bench-s1b-{tag}"), (true, "classic"), spec, settle).await
}

/// S1b into a quorum queue (in a cluster, a replicated one: its members commit each batch).
pub(super) async fn persistent_quorum(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    let spec = Publish { messages: params.messages, persistent: true, confirms: Some(1000), rate: params.rate };
    let settle = Settle::MultiAck { prefetch: 1000, every: 100 };
    run(target, params, &format!("bench-s1b-qq-{tag}"), (true, "quorum"), spec, settle).await
}

/// S1a with the raw client shape (`crate::raw091`): for `params.seconds` a publisher floods
/// the queue with pre-encoded batches and a no-ack consumer counts deliveries. The rate is what
/// was consumed in that time; the notes say what was published and the largest backlog seen
/// (published and not yet delivered, sampled every 10 ms): a broker whose publishers are not
/// held back lets it grow with the run's length.
pub(super) async fn flood(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    let queue = format!("bench-s1a-raw-{tag}");
    let uri = target.uri()?;
    let mut consumer = crate::raw091::Raw::open(&uri).await?;
    consumer.declare(&queue).await?;
    let publisher = crate::raw091::Raw::open(&uri).await?;
    let (published, consumed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let stop = Arc::new(AtomicBool::new(false));
    let counting = tokio::spawn({
        let (queue, consumed) = (queue.clone(), Arc::clone(&consumed));
        async move { consumer.count(&queue, consumed).await }
    });
    let flooding = tokio::spawn({
        let (queue, stop, published) = (queue.clone(), Arc::clone(&stop), Arc::clone(&published));
        async move { publisher.flood(&queue, params.body_size, stop, u64::MAX, published).await }
    });
    let started = Instant::now();
    let deadline = started + std::time::Duration::from_secs(params.seconds);
    let mut max_backlog = 0u64;
    while Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        let backlog = published.load(Ordering::Relaxed).saturating_sub(consumed.load(Ordering::Relaxed));
        max_backlog = max_backlog.max(backlog);
    }
    let seconds = started.elapsed().as_secs_f64();
    let (sent, got) = (published.load(Ordering::Relaxed), consumed.load(Ordering::Relaxed));
    stop.store(true, Ordering::Relaxed);
    flooding.abort();
    counting.abort();
    let cleanup = amqp091::connect(&target.url).await?;
    amqp091::channel(&cleanup).await?.queue_delete(queue.as_str().into(), Default::default()).await?;
    let _ = cleanup.close(200, "done".into()).await;
    let mut outcome = Outcome::throughput(got, seconds);
    outcome.notes.push(format!("published {:.0} msg/s", sent as f64 / seconds));
    outcome.notes.push(format!("max backlog {max_backlog}"));
    outcome.notes.push(format!("backlog at the end {}", sent.saturating_sub(got)));
    Ok(outcome)
}

/// S2's drain: `params.messages` 16-byte transient messages published with the raw publisher
/// into a queue nobody consumes (on Charon they page), then consumed by the raw counting
/// consumer. The rate is the drain's; the notes say how long publishing took.
pub(super) async fn drain(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    let queue = format!("bench-s2-drain-{tag}");
    let uri = target.uri()?;
    let setup_conn = amqp091::connect(&target.url).await?;
    let setup = amqp091::channel(&setup_conn).await?;
    amqp091::declare(&setup, &queue, false, &[]).await?;
    let published = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    crate::raw091::Raw::open(&uri)
        .await?
        .flood(&queue, params.body_size, Arc::new(AtomicBool::new(false)), params.messages, Arc::clone(&published))
        .await?;
    let total = published.load(Ordering::Relaxed);
    while u64::from(amqp091::count(&setup, &queue).await?) < total {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let publish_seconds = started.elapsed().as_secs_f64();
    if params.drop_caches {
        // The backlog is read from the device, not from memory the publishing left behind.
        std::process::Command::new("sync").status()?;
        std::fs::write("/proc/sys/vm/drop_caches", "3\n")?;
    }
    let consumed = Arc::new(AtomicU64::new(0));
    let consumer = crate::raw091::Raw::open(&uri).await?;
    let (broker_before, client_before) = (target.cpu_seconds(), own_cpu_seconds());
    let draining = Instant::now();
    let counting = tokio::spawn({
        let (queue, consumed) = (queue.clone(), Arc::clone(&consumed));
        async move { consumer.count(&queue, consumed).await }
    });
    while consumed.load(Ordering::Relaxed) < total {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let seconds = draining.elapsed().as_secs_f64();
    let (broker_after, client_after) = (target.cpu_seconds(), own_cpu_seconds());
    counting.abort();
    setup.queue_delete(queue.as_str().into(), Default::default()).await?;
    let _ = setup_conn.close(200, "done".into()).await;
    let mut outcome = Outcome::throughput(total, seconds);
    outcome.notes.push(format!("published in {publish_seconds:.1} s"));
    if let (Some(before), Some(after)) = (broker_before, broker_after) {
        outcome.notes.push(format!("drain: broker {:.2} CPU-s", after - before));
    }
    if let (Some(before), Some(after)) = (client_before, client_after) {
        outcome.notes.push(format!("client {:.2} CPU-s", after - before));
    }
    Ok(outcome)
}

/// This process's CPU seconds so far (user + system), from `/proc/self/stat`.
fn own_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

async fn run(
    target: &Target,
    params: Params,
    queue: &str,
    (durable, queue_type): (bool, &str),
    spec: Publish,
    settle: Settle,
) -> Result<Outcome> {
    let consumer_conn = amqp091::connect(&target.url).await?;
    let publisher_conn = amqp091::connect(&target.url).await?;
    let home_conn = match &target.home {
        Some(home) => Some(amqp091::connect(home).await?),
        None => None,
    };
    let setup = amqp091::channel(home_conn.as_ref().unwrap_or(&consumer_conn)).await?;
    amqp091::declare(&setup, queue, durable, &[("x-queue-type", AMQPValue::LongString(queue_type.into()))]).await?;
    if target.home.is_some() {
        // The other nodes follow the declare a moment later.
        for _ in 0..100 {
            // A passive declare that finds nothing closes its channel: a new one each time.
            let through = amqp091::channel(&consumer_conn).await?;
            let passive = lapin::options::QueueDeclareOptions { passive: true, ..Default::default() };
            if through.queue_declare(queue.into(), passive, Default::default()).await.is_ok() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    let epoch = Instant::now();
    let consumers = Consumers { client: params.consumer, url: &target.url, lapin: &consumer_conn };
    let consumer = consumers.consume(queue, spec.messages, settle, epoch).await?;
    let confirmed = match params.publisher {
        Client::Lapin => amqp091::publish(&amqp091::channel(&publisher_conn).await?, "", queue, spec, epoch).await?,
        Client::Amqprs => amqprs_publish::publish(&target.url, "", queue, spec, epoch).await?,
    };
    let consumed = consumer.await??;
    let seconds = consumed.last.duration_since(epoch).as_secs_f64();
    setup.queue_delete(queue.into(), Default::default()).await?;
    if let Some(home) = home_conn {
        let _ = home.close(200, "done".into()).await;
    }
    let _ = publisher_conn.close(200, "done".into()).await;
    let _ = consumer_conn.close(200, "done".into()).await;
    let mut outcome = Outcome::throughput(spec.messages, seconds);
    outcome.lost = consumed.tracker.lost();
    outcome.duplicates = consumed.tracker.duplicates;
    if spec.rate.is_some() {
        outcome.latency = Percentiles::of(&consumed.latency);
    }
    if spec.confirms.is_some() {
        outcome.notes.push(format!("confirmed {} nacked {}", confirmed.acked, confirmed.nacked));
    }
    Ok(outcome)
}
