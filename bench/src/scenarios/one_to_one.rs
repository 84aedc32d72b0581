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
    run(target, params, &format!("bench-s1a-{tag}"), false, spec, Settle::Auto).await
}

/// S1b: persistent into a durable queue, 1000 confirms in flight, qos 1000, multi-ack.
pub(super) async fn persistent(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    let spec = Publish { messages: params.messages, persistent: true, confirms: Some(1000), rate: params.rate };
    let settle = Settle::MultiAck { prefetch: 1000, every: 100 };
    run(target, params, &format!("bench-s1b-{tag}"), true, spec, settle).await
}

async fn run(
    target: &Target,
    params: Params,
    queue: &str,
    durable: bool,
    spec: Publish,
    settle: Settle,
) -> Result<Outcome> {
    let consumer_conn = amqp091::connect(&target.url).await?;
    let publisher_conn = amqp091::connect(&target.url).await?;
    let setup = amqp091::channel(&consumer_conn).await?;
    amqp091::declare(&setup, queue, durable, &[("x-queue-type", AMQPValue::LongString("classic".into()))]).await?;
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
