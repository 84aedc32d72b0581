//! `redrive`: N messages rejected into a dead-letter queue (untimed), then moved back to the
//! queue they died in at an unlimited rate; timed from the start of the move until the source
//! queue holds them all (issue 20's scale goal: 1M messages at ≥ 100k msg/s).
//!
//! On Charon the move is a redrive job (`POST /api/charon/redrives/{vhost}`, `--api` needed:
//! destination `original`, no rate). A broker without that API (RabbitMQ 4.0.5) gets what its
//! users write instead: a client loop consuming the dead-letter queue (prefetch 2,000) and
//! re-publishing each message to its queue with confirms, acknowledging it once confirmed —
//! the same at-least-once contract. (RabbitMQ's shovel "move messages" would need the shovel
//! plugin; the reference here runs without it.)

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};

use super::Params;
use crate::amqp091::{self, Publish, Settle};
use crate::consumers::Consumers;
use crate::report::Outcome;
use crate::target::Target;

const NACKERS: usize = 4;
const NACK_PREFETCH: u16 = 250;
/// The client loop's prefetch (and so its confirms in flight).
const LOOP_PREFETCH: u16 = 2000;
const POLL: Duration = Duration::from_millis(5);

/// Polls `queue` until it holds `expected` messages (or stops growing for [`amqp091::IDLE`]).
async fn until_holds(channel: &Channel, queue: &str, expected: u64) -> Result<Instant> {
    let (mut depth, mut grew) = (0, Instant::now());
    loop {
        let now_depth = u64::from(amqp091::count(channel, queue).await?);
        let now = Instant::now();
        if now_depth >= expected {
            return Ok(now);
        }
        if now_depth != depth {
            (depth, grew) = (now_depth, now);
        } else if now.duration_since(grew) > amqp091::IDLE {
            return Ok(grew);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The client loop: consume `dlq`, re-publish to `source`, ack once confirmed.
async fn client_loop(url: &str, dlq: &str, source: &str) -> Result<tokio::task::JoinHandle<()>> {
    let conn = amqp091::connect(url).await?;
    let consume = amqp091::channel(&conn).await?;
    let publish = amqp091::channel(&conn).await?;
    publish.confirm_select(ConfirmSelectOptions::default()).await?;
    consume.basic_qos(LOOP_PREFETCH, BasicQosOptions::default()).await?;
    let deliveries =
        consume.basic_consume(dlq.into(), "".into(), BasicConsumeOptions::default(), FieldTable::default()).await?;
    let source = source.to_owned();
    Ok(tokio::spawn(async move {
        let _conn = conn;
        let moves = deliveries.filter_map(|d| async { d.ok() }).map(|delivery| {
            let (publish, source) = (publish.clone(), source.clone());
            async move {
                let properties = BasicProperties::default();
                let sent = publish
                    .basic_publish(
                        "".into(),
                        source.as_str().into(),
                        BasicPublishOptions::default(),
                        &delivery.data,
                        properties,
                    )
                    .await?;
                if sent.await?.is_ack() {
                    delivery.acker.ack(BasicAckOptions::default()).await?;
                }
                Ok::<(), lapin::Error>(())
            }
        });
        let mut moves = std::pin::pin!(moves.buffered(usize::from(LOOP_PREFETCH)));
        while let Some(Ok(())) = moves.next().await {}
    }))
}

pub(super) async fn run(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    let conn = amqp091::connect(&target.url).await?;
    let setup = amqp091::channel(&conn).await?;
    let dlq = format!("bench-rd-dlq-{tag}");
    let source = format!("bench-rd-source-{tag}");
    amqp091::declare(&setup, &dlq, false, &[]).await?;
    let text = |s: &str| AMQPValue::LongString(s.into());
    let args = [("x-dead-letter-exchange", text("")), ("x-dead-letter-routing-key", text(&dlq))];
    amqp091::declare(&setup, &source, false, &args).await?;
    // Untimed: fill the source, reject it all into the dead-letter queue.
    let spec = Publish { messages: params.messages, persistent: false, confirms: Some(1000), rate: None };
    amqp091::publish(&setup, "", &source, spec, Instant::now()).await?;
    let nack_conn = amqp091::connect(&target.url).await?;
    let nacking = Consumers { client: crate::consumers::Client::Lapin, url: &target.url, lapin: &nack_conn };
    let mut nackers = Vec::new();
    for _ in 0..NACKERS {
        nackers.push(nacking.nack_all(&source, NACK_PREFETCH).await?);
    }
    until_holds(&setup, &dlq, params.messages).await?;
    for nacker in nackers {
        nacker.abort();
    }
    let _ = nack_conn.close(200, "done".into()).await;

    // Timed: the move back.
    let epoch = Instant::now();
    let job = match &target.api {
        Some(api) => {
            let body = format!(r#"{{"source":"{dlq}","destination":{{"type":"original","death":"first"}}}}"#);
            let (status, answer) = api.at("/api/charon/redrives/%2F").send("POST", &body).await?;
            match status {
                201 => Some(answer),
                // No such endpoint (RabbitMQ answers an unknown POST path with 405).
                404 | 405 => None,
                _ => {
                    for queue in [&source, &dlq] {
                        let _ = setup.queue_delete(queue.as_str().into(), Default::default()).await;
                    }
                    bail!("creating the redrive job: {status} {answer}")
                }
            }
        }
        None => None,
    };
    let method = if job.is_some() { "redrive job" } else { "client consume-republish loop" };
    let looping = match job {
        Some(_) => None,
        None => Some(client_loop(&target.url, &dlq, &source).await?),
    };
    let filled = until_holds(&setup, &source, params.messages).await;
    let filled = match filled {
        Ok(filled) => filled,
        Err(e) => {
            // Leave nothing behind on the broker under test.
            for queue in [&source, &dlq] {
                let _ = setup.queue_delete(queue.as_str().into(), Default::default()).await;
            }
            return Err(e);
        }
    };
    if let Some(looping) = looping {
        looping.abort();
    }
    let consumers = Consumers { client: params.consumer, url: &target.url, lapin: &conn };
    let consumed = consumers.consume(&source, params.messages, Settle::Auto, epoch).await?.await??;
    let mut outcome = Outcome::throughput(params.messages, filled.duration_since(epoch).as_secs_f64());
    outcome.lost = consumed.tracker.lost();
    outcome.duplicates = consumed.tracker.duplicates;
    for queue in [&source, &dlq] {
        setup.queue_delete(queue.as_str().into(), Default::default()).await?;
    }
    let _ = conn.close(200, "done".into()).await;
    outcome.notes.push(method.to_owned());
    Ok(outcome)
}
