//! S5 and S6: dead lettering at volume — messages expiring by TTL, and a reject storm — each
//! timed until the dead-letter queue holds every message.
//!
//! As in the RabbitMQ team's suite (`publish_only_ttl`, `nack_published`), nothing consumes
//! the dead-letter queue while the clock runs: the run ends when a passive declare reports
//! every message in it. Only then does a consumer drain it, to count lost and duplicated
//! messages. (Until 2026-11-25 a consumer drained the DLQ inside the timed window; on two
//! cores its client CPU was taken from the broker under test.)

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use lapin::options::{ExchangeDeclareOptions, QueueBindOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection};

use super::Params;
use crate::amqp091::{self, Publish, Settle};
use crate::consumers::Consumers;
use crate::report::{Outcome, Score};
use crate::target::Target;

/// Queue TTL of S5, ms: messages expire about as fast as they arrive.
const TTL_MS: i64 = 100;
/// S6's nacking consumers and their prefetch.
const NACKERS: usize = 4;
const NACK_PREFETCH: u16 = 250;
/// How often the DLQ's depth is read while a run waits for it to fill: 200 passive declares a
/// second are nothing beside the tens of thousands of messages either broker moves in it, and
/// 5 ms is 1 % of the shortest run (S5 at 100k on Charon, 0.45 s).
const POLL: Duration = Duration::from_millis(5);

/// A dead-letter exchange with its queue, and a source queue dead-lettering into it.
pub(super) struct Topology {
    pub(super) conn: Connection,
    pub(super) setup: Channel,
    pub(super) source: String,
    pub(super) dlq: String,
}

pub(super) async fn topology(
    target: &Target,
    tag: &str,
    source_durable: bool,
    source_args: &[(&str, AMQPValue)],
) -> Result<Topology> {
    topology_bound(target, tag, source_durable, source_args, true).await
}

/// [`topology`], with the DLQ bound to the DLX or not (`bind`).
async fn topology_bound(
    target: &Target,
    tag: &str,
    source_durable: bool,
    source_args: &[(&str, AMQPValue)],
    bind: bool,
) -> Result<Topology> {
    let conn = amqp091::connect(&target.url).await?;
    let setup = amqp091::channel(&conn).await?;
    let dlx = format!("bench-dlx-{tag}");
    let dlq = format!("bench-dlq-{tag}");
    let source = format!("bench-dl-source-{tag}");
    setup
        .exchange_declare(
            dlx.as_str().into(),
            lapin::ExchangeKind::Fanout,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await?;
    amqp091::declare(&setup, &dlq, false, &[]).await?;
    if bind {
        setup
            .queue_bind(
                dlq.as_str().into(),
                dlx.as_str().into(),
                "".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
    }
    let mut args = vec![("x-dead-letter-exchange", AMQPValue::LongString(dlx.as_str().into()))];
    args.extend(source_args.iter().cloned());
    amqp091::declare(&setup, &source, source_durable, &args).await?;
    Ok(Topology { conn, setup, source, dlq })
}

impl Topology {
    pub(super) async fn remove(self) -> Result<()> {
        for queue in [&self.source, &self.dlq] {
            self.setup.queue_delete(queue.as_str().into(), Default::default()).await?;
        }
        let dlx = self.dlq.replacen("bench-dlq-", "bench-dlx-", 1);
        self.setup.exchange_delete(dlx.as_str().into(), Default::default()).await?;
        let _ = self.conn.close(200, "done".into()).await;
        Ok(())
    }

    /// Waits until the DLQ holds `expected` messages and returns when it did. If its depth
    /// stops growing for [`amqp091::IDLE`], returns when it last grew: the drain that follows
    /// counts what is missing.
    pub(super) async fn until_dlq_holds(&self, expected: u64) -> Result<Instant> {
        let mut depth = 0;
        let mut grew = Instant::now();
        loop {
            let now_depth = u64::from(amqp091::count(&self.setup, &self.dlq).await?);
            let now = Instant::now();
            if now_depth >= expected {
                return Ok(now);
            }
            if now_depth != depth {
                depth = now_depth;
                grew = now;
            } else if now.duration_since(grew) > amqp091::IDLE {
                return Ok(grew);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// After the clock stopped: consumes the DLQ and writes the run's outcome, timed from
    /// `epoch` until `filled`, with what the drain found lost or duplicated.
    async fn drain(
        &self,
        consumers: &Consumers<'_>,
        messages: u64,
        epoch: Instant,
        filled: Instant,
    ) -> Result<Outcome> {
        let consumed = consumers.consume(&self.dlq, messages, Settle::Auto, epoch).await?.await??;
        let mut outcome = Outcome::throughput(messages, filled.duration_since(epoch).as_secs_f64());
        outcome.lost = consumed.tracker.lost();
        outcome.duplicates = consumed.tracker.duplicates;
        Ok(outcome)
    }
}

/// S5: publish into a queue with a 100 ms TTL and no consumer; every message expires into the
/// DLX. Timed from the first publish until the DLQ holds them all.
pub(super) async fn ttl(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    let topology = topology(target, tag, false, &[("x-message-ttl", AMQPValue::LongLongInt(TTL_MS))]).await?;
    let epoch = Instant::now();
    let publisher_conn = amqp091::connect(&target.url).await?;
    let publisher = amqp091::channel(&publisher_conn).await?;
    let spec = Publish { messages: params.messages, persistent: false, confirms: None, rate: params.rate };
    amqp091::publish(&publisher, "", &topology.source, spec, epoch).await?;
    let filled = topology.until_dlq_holds(params.messages).await?;
    let _ = publisher_conn.close(200, "done".into()).await;
    let consumers = Consumers { client: params.consumer, url: &target.url, lapin: &topology.conn };
    let mut outcome = topology.drain(&consumers, params.messages, epoch, filled).await?;
    topology.remove().await?;
    outcome.notes.push(format!("ttl {TTL_MS} ms"));
    Ok(outcome)
}

/// S6: fill a queue (confirmed), then 4 consumers nack everything with requeue=false into the
/// DLX. Timed from the consumers' start until the DLQ holds every message.
pub(super) async fn reject_storm(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    storm(target, params, topology(target, tag, false, &[]).await?).await
}

/// The source of RabbitMQ's at-least-once dead lettering: a quorum queue with the strategy
/// and `reject-publish`.
fn at_least_once_args() -> [(&'static str, AMQPValue); 3] {
    let text = |s: &str| AMQPValue::LongString(s.into());
    [
        ("x-queue-type", text("quorum")),
        ("x-dead-letter-strategy", text("at-least-once")),
        ("x-overflow", text("reject-publish")),
    ]
}

/// Memory per waiting dead letter: a quorum at-least-once source whose DLX has no binding is
/// filled (16 B, confirmed) and rejected by 4 consumers; every letter then waits in it for a
/// route. Resident memory once they all wait, minus resident memory before, over the letters.
pub(super) async fn memory_waiting(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    let topology = topology_bound(target, tag, true, &at_least_once_args(), false).await?;
    let publisher_conn = amqp091::connect(&target.url).await?;
    let publisher = amqp091::channel(&publisher_conn).await?;
    // Warm up the paths (pages code in, makes first-use buffers) through a plain queue.
    let warm = format!("bench-warm-{tag}");
    amqp091::declare(&publisher, &warm, true, &[]).await?;
    let warm_up = Publish { messages: 20_000, persistent: true, confirms: Some(1000), rate: None };
    amqp091::publish(&publisher, "", &warm, warm_up, Instant::now()).await?;
    publisher.queue_delete(warm.as_str().into(), Default::default()).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let empty = target.rss().context("memory needs the broker's pid")?;
    let epoch = Instant::now();
    let spec = Publish { messages: params.messages, persistent: true, confirms: Some(1000), rate: None };
    amqp091::publish(&publisher, "", &topology.source, spec, epoch).await?;
    let consumers = Consumers { client: params.consumer, url: &target.url, lapin: &publisher_conn };
    let mut nackers = Vec::new();
    for _ in 0..NACKERS {
        nackers.push(consumers.nack_all(&topology.source, NACK_PREFETCH).await?);
    }
    // Every message rejected: none ready (the waiting letters are not).
    let mut settled_since = None;
    while settled_since.is_none_or(|at: Instant| at.elapsed() < Duration::from_secs(2)) {
        let ready = amqp091::count(&topology.setup, &topology.source).await?;
        settled_since = if ready == 0 { settled_since.or(Some(Instant::now())) } else { None };
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seconds = epoch.elapsed().as_secs_f64();
    for nacker in nackers {
        nacker.abort();
    }
    // Let the brokers settle: RabbitMQ collects garbage, the allocator returns freed pages.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let full = target.rss().context("memory needs the broker's pid")?;
    let _ = publisher_conn.close(200, "done".into()).await;
    topology.remove().await?;
    let per_letter = full.saturating_sub(empty) as f64 / params.messages.max(1) as f64;
    let mut outcome = Outcome::throughput(params.messages, seconds);
    outcome.score = Score::BytesPerMessage;
    outcome.value = per_letter;
    outcome.notes.push(format!(
        "rss before {:.1} MB, with {} letters waiting {:.1} MB",
        empty as f64 / 1e6,
        params.messages,
        full as f64 / 1e6
    ));
    Ok(outcome)
}

/// S6 from a quorum queue with RabbitMQ's at-least-once dead lettering (`reject-publish`): each
/// dead letter leaves the source only once the DLQ confirmed it.
pub(super) async fn reject_storm_at_least_once(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    let args = at_least_once_args();
    let mut outcome = storm(target, params, topology(target, tag, true, &args).await?).await?;
    outcome.notes.push("quorum source, at-least-once".to_owned());
    Ok(outcome)
}

async fn storm(target: &Target, params: Params, topology: Topology) -> Result<Outcome> {
    let publisher_conn = amqp091::connect(&target.url).await?;
    let publisher = amqp091::channel(&publisher_conn).await?;
    let spec = Publish { messages: params.messages, persistent: false, confirms: Some(1000), rate: None };
    amqp091::publish(&publisher, "", &topology.source, spec, Instant::now()).await?;
    let epoch = Instant::now();
    let consumers = Consumers { client: params.consumer, url: &target.url, lapin: &publisher_conn };
    let mut nackers = Vec::new();
    for _ in 0..NACKERS {
        nackers.push(consumers.nack_all(&topology.source, NACK_PREFETCH).await?);
    }
    let filled = topology.until_dlq_holds(params.messages).await?;
    for nacker in nackers {
        nacker.abort();
    }
    let outcome = topology.drain(&consumers, params.messages, epoch, filled).await?;
    let _ = publisher_conn.close(200, "done".into()).await;
    topology.remove().await?;
    Ok(outcome)
}
