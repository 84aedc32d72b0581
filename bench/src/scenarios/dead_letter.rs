//! S5 and S6: dead lettering at volume — messages expiring by TTL, and a reject storm — each
//! timed until the dead-letter queue's consumer has every message.

use std::time::Instant;

use anyhow::Result;
use lapin::options::{ExchangeDeclareOptions, QueueBindOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection};

use super::Params;
use crate::amqp091::{self, Publish, Settle};
use crate::consumers::Consumers;
use crate::report::Outcome;
use crate::target::Target;

/// Queue TTL of S5, ms: messages expire about as fast as they arrive.
const TTL_MS: i64 = 100;
/// S6's nacking consumers and their prefetch.
const NACKERS: usize = 4;
const NACK_PREFETCH: u16 = 250;

/// A dead-letter exchange with its queue, and a source queue dead-lettering into it.
struct Topology {
    conn: Connection,
    setup: Channel,
    source: String,
    dlq: String,
}

async fn topology(target: &Target, tag: &str, source_args: &[(&str, AMQPValue)]) -> Result<Topology> {
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
    setup
        .queue_bind(
            dlq.as_str().into(),
            dlx.as_str().into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let mut args = vec![("x-dead-letter-exchange", AMQPValue::LongString(dlx.as_str().into()))];
    args.extend(source_args.iter().cloned());
    amqp091::declare(&setup, &source, false, &args).await?;
    Ok(Topology { conn, setup, source, dlq })
}

impl Topology {
    async fn remove(self) -> Result<()> {
        for queue in [&self.source, &self.dlq] {
            self.setup.queue_delete(queue.as_str().into(), Default::default()).await?;
        }
        let dlx = self.dlq.replacen("bench-dlq-", "bench-dlx-", 1);
        self.setup.exchange_delete(dlx.as_str().into(), Default::default()).await?;
        let _ = self.conn.close(200, "done".into()).await;
        Ok(())
    }
}

/// S5: publish into a queue with a 100 ms TTL and no consumer; every message expires into the
/// DLX. Timed from the first publish until the DLQ consumer has them all.
pub(super) async fn ttl(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    let topology = topology(target, tag, &[("x-message-ttl", AMQPValue::LongLongInt(TTL_MS))]).await?;
    let epoch = Instant::now();
    let consumers = Consumers { client: params.consumer, url: &target.url, lapin: &topology.conn };
    let dlq = consumers.consume(&topology.dlq, params.messages, Settle::Auto, epoch).await?;
    let publisher_conn = amqp091::connect(&target.url).await?;
    let publisher = amqp091::channel(&publisher_conn).await?;
    let spec = Publish { messages: params.messages, persistent: false, confirms: None, rate: params.rate };
    amqp091::publish(&publisher, "", &topology.source, spec, epoch).await?;
    let consumed = dlq.await??;
    let _ = publisher_conn.close(200, "done".into()).await;
    topology.remove().await?;
    let mut outcome = Outcome::throughput(params.messages, consumed.last.duration_since(epoch).as_secs_f64());
    outcome.lost = consumed.tracker.lost();
    outcome.duplicates = consumed.tracker.duplicates;
    outcome.notes.push(format!("ttl {TTL_MS} ms"));
    Ok(outcome)
}

/// S6: fill a queue (confirmed), then 4 consumers nack everything with requeue=false into the
/// DLX. Timed from the consumers' start until the DLQ consumer has every message.
pub(super) async fn reject_storm(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    let topology = topology(target, tag, &[]).await?;
    let publisher_conn = amqp091::connect(&target.url).await?;
    let publisher = amqp091::channel(&publisher_conn).await?;
    let spec = Publish { messages: params.messages, persistent: false, confirms: Some(1000), rate: None };
    amqp091::publish(&publisher, "", &topology.source, spec, Instant::now()).await?;
    let epoch = Instant::now();
    let consumers = Consumers { client: params.consumer, url: &target.url, lapin: &topology.conn };
    let dlq = consumers.consume(&topology.dlq, params.messages, Settle::Auto, epoch).await?;
    let nacking = Consumers { lapin: &publisher_conn, ..consumers };
    let mut nackers = Vec::new();
    for _ in 0..NACKERS {
        nackers.push(nacking.nack_all(&topology.source, NACK_PREFETCH).await?);
    }
    let consumed = dlq.await??;
    for nacker in nackers {
        nacker.abort();
    }
    let _ = publisher_conn.close(200, "done".into()).await;
    topology.remove().await?;
    let mut outcome = Outcome::throughput(params.messages, consumed.last.duration_since(epoch).as_secs_f64());
    outcome.lost = consumed.tracker.lost();
    outcome.duplicates = consumed.tracker.duplicates;
    Ok(outcome)
}
