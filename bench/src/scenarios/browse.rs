//! `browse`: the dead-letter browser over a large dead-letter queue (issue 20's scale goal: "a
//! 10M-message DLQ pages without loading it into memory"). N transient messages expire (TTL 0)
//! into a DLQ (untimed); then pages of 50 are read through
//! `GET /api/charon/queues/{vhost}/{queue}/messages`: the first page oldest first, then
//! [`CURSOR_PAGES`] pages each following the last by its cursor (`after`), the first page newest
//! first, and one `page=` read deep in the queue. The score is the median cursor page in ms;
//! the notes give the other reads and the broker's memory before and after browsing.
//!
//! Charon only: RabbitMQ has no browse (its management "get messages" takes and requeues).

use std::time::Instant;

use anyhow::{Context, Result, bail};
use lapin::types::AMQPValue;

use super::Params;
use super::dead_letter::topology;
use crate::amqp091::{self, Publish};
use crate::report::{Outcome, Score, median};
use crate::target::Target;

/// Pages read one after the other by cursor.
const CURSOR_PAGES: usize = 200;
/// Messages per page (the browser's default).
const PAGE_SIZE: usize = 50;
/// The deep page read with `page=` (it reads the pages before it).
const DEEP_PAGE: usize = 200;

pub(super) async fn dlq(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    let api = target.api.as_ref().context("browse needs the broker's management API (--api)")?;
    let topology = topology(target, tag, false, &[("x-message-ttl", AMQPValue::LongLongInt(0))]).await?;
    let publisher_conn = amqp091::connect(&target.url).await?;
    let publisher = amqp091::channel(&publisher_conn).await?;
    let spec = Publish { messages: params.messages, persistent: false, confirms: None, rate: None };
    let filling = Instant::now();
    amqp091::publish(&publisher, "", &topology.source, spec, filling).await?;
    topology.until_dlq_holds(params.messages).await?;
    let fill_seconds = filling.elapsed().as_secs_f64();
    let _ = publisher_conn.close(200, "done".into()).await;
    let held = u64::from(amqp091::count(&topology.setup, &topology.dlq).await?);
    let rss_before = target.rss();

    let path = format!("/api/charon/queues/%2F/{}/messages?page_size={PAGE_SIZE}", topology.dlq);
    let read = |query: String| {
        let url = api.at(&format!("{path}{query}"));
        async move {
            let started = Instant::now();
            let (status, body) = url.send("GET", "").await?;
            if status != 200 {
                bail!("browsing answered {status}: {body}");
            }
            let page: serde_json::Value = serde_json::from_str(&body).context("a page is JSON")?;
            let items = page.get("items").and_then(|i| i.as_array()).context("a page has items")?;
            let last =
                items.last().and_then(|i| i.get("id")).and_then(|id| id.as_str()).and_then(|id| id.parse::<u64>().ok());
            Ok::<_, anyhow::Error>((started.elapsed().as_secs_f64() * 1000.0, items.len(), last))
        }
    };
    let (first_ms, first_items, mut cursor) = read(String::new()).await?;
    let mut cursor_ms = Vec::with_capacity(CURSOR_PAGES);
    for _ in 0..CURSOR_PAGES {
        let after = cursor.context("a full page has a last id")?;
        let (ms, items, last) = read(format!("&after={after}")).await?;
        if items != PAGE_SIZE {
            bail!("a cursor page held {items} messages");
        }
        cursor_ms.push(ms);
        cursor = last;
    }
    let (newest_ms, newest_items, _) = read("&order=newest".into()).await?;
    let (deep_ms, deep_items, _) = read(format!("&page={DEEP_PAGE}")).await?;
    let rss_after = target.rss();
    if first_items != PAGE_SIZE || newest_items != PAGE_SIZE || deep_items != PAGE_SIZE {
        bail!("pages held {first_items} / {newest_items} / {deep_items} messages");
    }
    topology.remove().await?;

    let millis = median(&cursor_ms);
    let slowest = cursor_ms.iter().copied().fold(0.0, f64::max);
    let mut outcome = Outcome::throughput(held, millis / 1000.0);
    outcome.score = Score::ListingMillis;
    outcome.value = millis;
    outcome.lost = params.messages.saturating_sub(held);
    let mb = |rss: Option<u64>| rss.map_or(f64::NAN, |b| b as f64 / 1e6);
    outcome.notes.push(format!(
        "DLQ of {held} filled in {fill_seconds:.1} s; first page {first_ms:.1} ms, {CURSOR_PAGES} cursor pages \
         median {millis:.1} ms (slowest {slowest:.1}), newest first {newest_ms:.1} ms, page={DEEP_PAGE} \
         {deep_ms:.1} ms; rss {:.1} MB before browsing, {:.1} MB after",
        mb(rss_before),
        mb(rss_after)
    ));
    Ok(outcome)
}
