//! S7: a queue capped at 100k messages under a stream of publishes — drop-head (the rate the
//! broker takes them while dropping from the head) and reject-publish (the rate of nacks).

use std::time::Instant;

use anyhow::{Result, ensure};
use lapin::types::AMQPValue;

use super::Params;
use crate::amqp091::{self, Publish};
use crate::report::Outcome;
use crate::target::Target;

const MAX_LENGTH: i64 = 100_000;

/// Publishes everything (no confirms), then waits until the queue holds exactly the last
/// 100k: timed until then.
pub(super) async fn drop_head(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    let queue = format!("bench-s7-drop-{tag}");
    let conn = amqp091::connect(&target.url).await?;
    let channel = amqp091::channel(&conn).await?;
    amqp091::declare(&channel, &queue, false, &[("x-max-length", AMQPValue::LongLongInt(MAX_LENGTH))]).await?;
    let epoch = Instant::now();
    let spec = Publish { messages: params.messages, persistent: false, confirms: None, rate: params.rate };
    amqp091::publish(&channel, "", &queue, spec, epoch).await?;
    // A passive declare on the publishing channel is answered after the publishes before it.
    let held = amqp091::count(&channel, &queue).await?;
    let seconds = epoch.elapsed().as_secs_f64();
    let expected = u64::try_from(MAX_LENGTH).unwrap_or(0).min(params.messages);
    ensure!(u64::from(held) == expected, "the queue holds {held}, expected {expected}");
    channel.queue_delete(queue.as_str().into(), Default::default()).await?;
    let _ = conn.close(200, "done".into()).await;
    let mut outcome = Outcome::throughput(params.messages, seconds);
    outcome.notes.push(format!("{} dropped from the head", params.messages - expected));
    Ok(outcome)
}

/// Publishes with confirms (1000 in flight) into a full queue with `reject-publish`: the first
/// 100k are acked, the rest nacked. Timed until the last confirm.
pub(super) async fn reject_publish(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    let queue = format!("bench-s7-reject-{tag}");
    let conn = amqp091::connect(&target.url).await?;
    let channel = amqp091::channel(&conn).await?;
    let args = [
        ("x-max-length", AMQPValue::LongLongInt(MAX_LENGTH)),
        ("x-overflow", AMQPValue::LongString("reject-publish".into())),
    ];
    amqp091::declare(&channel, &queue, false, &args).await?;
    let epoch = Instant::now();
    let spec = Publish { messages: params.messages, persistent: false, confirms: Some(1000), rate: params.rate };
    let confirmed = amqp091::publish(&channel, "", &queue, spec, epoch).await?;
    let seconds = epoch.elapsed().as_secs_f64();
    let expected = u64::try_from(MAX_LENGTH).unwrap_or(0).min(params.messages);
    channel.queue_delete(queue.as_str().into(), Default::default()).await?;
    let _ = conn.close(200, "done".into()).await;
    let mut outcome = Outcome::throughput(params.messages, seconds);
    // Every publish is answered: acked if it fit, nacked if not. Anything else is lost.
    outcome.lost = params.messages.saturating_sub(confirmed.acked + confirmed.nacked);
    outcome.notes.push(format!("acked {} (expected {expected}) nacked {}", confirmed.acked, confirmed.nacked));
    Ok(outcome)
}
