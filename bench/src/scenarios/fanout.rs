//! S3: one publisher into a fanout exchange bound to `width` queues, one consumer per queue.

use std::time::Instant;

use anyhow::Result;
use lapin::options::{ExchangeDeclareOptions, QueueBindOptions};
use lapin::types::FieldTable;

use super::Params;
use crate::amqp091::{self, Publish, Settle};
use crate::consumers::Consumers;
use crate::report::Outcome;
use crate::target::Target;

pub(super) async fn run(target: &Target, params: Params, width: usize, tag: &str) -> Result<Outcome> {
    let exchange = format!("bench-fanout-{tag}");
    let consumer_conn = amqp091::connect(&target.url).await?;
    let publisher_conn = amqp091::connect(&target.url).await?;
    let setup = amqp091::channel(&consumer_conn).await?;
    let options = ExchangeDeclareOptions { auto_delete: true, ..Default::default() };
    setup
        .exchange_declare(exchange.as_str().into(), lapin::ExchangeKind::Fanout, options, FieldTable::default())
        .await?;
    let epoch = Instant::now();
    let starter = Consumers { client: params.consumer, url: &target.url, lapin: &consumer_conn };
    let mut consumers = Vec::new();
    let mut queues = Vec::new();
    for i in 0..width {
        let queue = format!("{exchange}-{i}");
        amqp091::declare(&setup, &queue, false, &[]).await?;
        let bind = QueueBindOptions::default();
        setup
            .queue_bind(queue.as_str().into(), exchange.as_str().into(), "".into(), bind, FieldTable::default())
            .await?;
        consumers.push(starter.consume(&queue, params.messages, Settle::Auto, epoch).await?);
        queues.push(queue);
    }
    let publisher = amqp091::channel(&publisher_conn).await?;
    let spec = Publish { messages: params.messages, persistent: false, confirms: None, rate: params.rate };
    amqp091::publish(&publisher, &exchange, "", spec, epoch).await?;
    let mut last = epoch;
    let (mut lost, mut duplicates) = (0, 0);
    for consumer in consumers {
        let consumed = consumer.await??;
        last = last.max(consumed.last);
        lost += consumed.tracker.lost();
        duplicates += consumed.tracker.duplicates;
    }
    for queue in &queues {
        setup.queue_delete(queue.as_str().into(), Default::default()).await?;
    }
    let _ = publisher_conn.close(200, "done".into()).await;
    let _ = consumer_conn.close(200, "done".into()).await;
    let seconds = last.duration_since(epoch).as_secs_f64();
    let mut outcome = Outcome::throughput(params.messages, seconds);
    outcome.lost = lost;
    outcome.duplicates = duplicates;
    let deliveries = params.messages * width as u64;
    outcome.notes.push(format!("{:.0} deliveries/s", deliveries as f64 / seconds.max(f64::EPSILON)));
    Ok(outcome)
}
