//! What watching the broker costs: `GET /api/queues` with N transient queues declared (issue
//! 19: "answers GET /api/queues for 10,000 queues in < 1 s"). The queues are declared over AMQP
//! in pipelined batches, listed five times (the median is the figure), then deleted.

use std::time::Instant;

use anyhow::{Context, Result, bail};
use futures_util::future::try_join_all;

use super::Params;
use crate::amqp091;
use crate::report::{Outcome, Score, median};
use crate::target::Target;

/// Declares (and deletes) in flight at once on the one channel.
const BATCH: usize = 200;
/// Listings timed.
const LISTINGS: usize = 5;

pub(super) async fn listing(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    let api = target.api.as_ref().context("api-queues needs the broker's management API (--api / --api2)")?;
    let conn = amqp091::connect(&target.url).await?;
    let channel = amqp091::channel(&conn).await?;
    let names: Vec<String> = (0..params.messages).map(|i| format!("bench-api-{tag}-{i}")).collect();
    for batch in names.chunks(BATCH) {
        try_join_all(batch.iter().map(|name| amqp091::declare(&channel, name, false, &[]))).await?;
    }
    let queues = api.at("/api/queues");
    let mut took = Vec::with_capacity(LISTINGS);
    let mut size = 0;
    for _ in 0..LISTINGS {
        let started = Instant::now();
        let (status, bytes) = queues.get().await?;
        took.push(started.elapsed().as_secs_f64() * 1000.0);
        if status != 200 {
            bail!("GET /api/queues answered {status}");
        }
        size = bytes;
    }
    for batch in names.chunks(BATCH) {
        try_join_all(batch.iter().map(|name| channel.queue_delete(name.as_str().into(), Default::default()))).await?;
    }
    let _ = conn.close(200, "done".into()).await;
    let millis = median(&took);
    let mut outcome = Outcome::throughput(params.messages, millis / 1000.0);
    outcome.score = Score::ListingMillis;
    outcome.value = millis;
    outcome.notes.push(format!("answer {:.1} MB; listings {took:.0?} ms", size as f64 / 1e6));
    Ok(outcome)
}
