//! What a metadata change costs: N durable exchanges declared one after the other on one
//! channel, each awaited, then deleted (issue 41: "a declare's latency in the cluster against
//! RabbitMQ 4.3.6's 3-node cluster"). In a cluster each declare is a Raft write (Charon's
//! metadata group, RabbitMQ's Khepri): committed on a majority's disk before the -ok.

use std::time::Instant;

use anyhow::Result;
use lapin::options::{ExchangeDeclareOptions, ExchangeDeleteOptions};
use lapin::types::FieldTable;

use super::Params;
use crate::amqp091;
use crate::report::{Outcome, Percentiles, Score};
use crate::target::Target;

pub(super) async fn exchanges(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    let conn = amqp091::connect(&target.url).await?;
    let channel = amqp091::channel(&conn).await?;
    let mut took = hdrhistogram::Histogram::<u64>::new(3)?;
    let names: Vec<String> = (0..params.messages).map(|i| format!("bench-declare-{tag}-{i}")).collect();
    let started = Instant::now();
    for name in &names {
        let declared = Instant::now();
        let options = ExchangeDeclareOptions { durable: true, ..ExchangeDeclareOptions::default() };
        channel
            .exchange_declare(name.as_str().into(), lapin::ExchangeKind::Direct, options, FieldTable::default())
            .await?;
        took.record(u64::try_from(declared.elapsed().as_micros()).unwrap_or(u64::MAX))?;
    }
    let seconds = started.elapsed().as_secs_f64();
    for name in &names {
        channel.exchange_delete(name.as_str().into(), ExchangeDeleteOptions::default()).await?;
    }
    let _ = conn.close(200, "done".into()).await;
    let mut outcome = Outcome::throughput(params.messages, seconds);
    outcome.score = Score::DeclareMillis;
    outcome.value = took.value_at_quantile(0.5) as f64 / 1000.0;
    outcome.latency = Percentiles::of(&took);
    Ok(outcome)
}
