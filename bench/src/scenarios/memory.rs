//! Broker memory per queued message: resident memory with N 16 B persistent messages in one
//! durable queue, minus resident memory with the queue empty, over N. The empty figure is taken
//! after a warm-up (a few thousand messages through the same queue), so that code paged in and
//! buffers made on first use do not count as memory per message.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::Params;
use crate::amqp091::{self, Publish};
use crate::report::{Outcome, Score};
use crate::target::Target;

/// Messages through the queue before the empty figure is taken.
const WARM_UP: u64 = 20_000;

pub(super) async fn per_message(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    let queue = format!("bench-memory-{tag}");
    let conn = amqp091::connect(&target.url).await?;
    let channel = amqp091::channel(&conn).await?;
    amqp091::declare(&channel, &queue, true, &[]).await?;
    let warm_up = Publish { messages: WARM_UP, persistent: true, confirms: Some(1000), rate: None };
    amqp091::publish(&channel, "", &queue, warm_up, Instant::now()).await?;
    channel.queue_purge(queue.as_str().into(), Default::default()).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let empty = target.rss().context("memory needs the broker's pid")?;
    let epoch = Instant::now();
    let spec = Publish { messages: params.messages, persistent: true, confirms: Some(1000), rate: None };
    amqp091::publish(&channel, "", &queue, spec, epoch).await?;
    let seconds = epoch.elapsed().as_secs_f64();
    // Let the broker settle (RabbitMQ moves messages to its store in the background).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let full = target.rss().context("memory needs the broker's pid")?;
    let held = amqp091::count(&channel, &queue).await?;
    if !params.keep {
        channel.queue_delete(queue.as_str().into(), Default::default()).await?;
    }
    let _ = conn.close(200, "done".into()).await;
    let per_message = full.saturating_sub(empty) as f64 / params.messages.max(1) as f64;
    let mut outcome = Outcome::throughput(params.messages, seconds);
    outcome.score = Score::BytesPerMessage;
    outcome.value = per_message;
    outcome.lost = params.messages.saturating_sub(u64::from(held));
    outcome.notes.push(format!(
        "rss empty {:.1} MB, with {held} queued {:.1} MB; published at {:.0} msg/s{}",
        empty as f64 / 1e6,
        full as f64 / 1e6,
        params.messages as f64 / seconds.max(f64::EPSILON),
        if params.keep { format!("; kept in queue {queue}") } else { String::new() }
    ));
    Ok(outcome)
}
