//! Zaqar over HTTP (issue 21): 32 concurrent HTTP clients each post batches of 10 messages to
//! one queue, claim up to 10, and delete each claimed message with its claim id — the cost of a
//! message's whole life through the Zaqar gateway. Throughput counts messages deleted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::Params;
use crate::report::Outcome;
use crate::target::Target;
use crate::zaqar_http::ZaqarClient;

/// Concurrent HTTP clients.
const CLIENTS: usize = 32;
/// Messages per post and per claim.
const BATCH: u64 = 10;
/// A run that makes no progress for this long fails.
const STALL: Duration = Duration::from_secs(30);

pub(super) async fn post_claim_delete(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    let authority =
        target.zaqar.clone().context("the zaqar scenario needs the gateway's address (--zaqar host:port)")?;
    let queue = format!("bench-zaqar-{tag}");
    let mut setup = ZaqarClient::connect(&authority).await?;
    let (status, _) = setup.request("PUT", &format!("/v2/queues/{queue}"), "").await?;
    if status != 201 {
        bail!("creating the queue answered {status}");
    }
    let posted = Arc::new(AtomicU64::new(0));
    let deleted = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        let (authority, queue) = (authority.clone(), queue.clone());
        let (posted, deleted) = (Arc::clone(&posted), Arc::clone(&deleted));
        let total = params.messages;
        workers.push(tokio::spawn(async move { worker(&authority, &queue, total, &posted, &deleted).await }));
    }
    for worker in workers {
        worker.await??;
    }
    let seconds = started.elapsed().as_secs_f64();
    setup.request("DELETE", &format!("/v2/queues/{queue}"), "").await?;
    let done = deleted.load(Ordering::Relaxed);
    let mut outcome = Outcome::throughput(done, seconds);
    outcome.lost = params.messages.saturating_sub(done);
    outcome.notes.push(format!("{CLIENTS} HTTP clients, posts and claims of {BATCH}, one DELETE per message"));
    Ok(outcome)
}

async fn worker(authority: &str, queue: &str, total: u64, posted: &AtomicU64, deleted: &AtomicU64) -> Result<()> {
    let mut client = ZaqarClient::connect(authority).await?;
    let body: String = {
        let messages: Vec<String> = (0..BATCH).map(|i| format!(r#"{{"ttl":3600,"body":{{"n":{i}}}}}"#)).collect();
        format!(r#"{{"messages":[{}]}}"#, messages.join(","))
    };
    let mut last_progress = Instant::now();
    while deleted.load(Ordering::Relaxed) < total {
        if posted.fetch_add(BATCH, Ordering::Relaxed) < total {
            let (status, _) = client.request("POST", &format!("/v2/queues/{queue}/messages"), &body).await?;
            if status != 201 {
                bail!("post answered {status}");
            }
        }
        let (status, answer) = client
            .request("POST", &format!("/v2/queues/{queue}/claims?limit={BATCH}"), r#"{"ttl":300,"grace":60}"#)
            .await?;
        if status == 204 {
            if last_progress.elapsed() > STALL {
                bail!("no message to claim for {STALL:?}");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        if status != 201 {
            bail!("claim answered {status}");
        }
        for href in hrefs(&answer) {
            let (status, _) = client.request("DELETE", &href, "").await?;
            if status != 204 {
                bail!("delete answered {status}");
            }
            deleted.fetch_add(1, Ordering::Relaxed);
        }
        last_progress = Instant::now();
    }
    Ok(())
}

/// The `href`s of a claim's messages (each ends `?claim_id=`).
fn hrefs(answer: &[u8]) -> Vec<String> {
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(answer) else { return Vec::new() };
    json.get("messages")
        .and_then(|m| m.as_array())
        .map(|messages| messages.iter().filter_map(|m| m.get("href")?.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// Claims (limit 20) until a claim comes back empty; the claim ids and how many messages.
async fn claim_all(client: &mut ZaqarClient, queue: &str) -> Result<(Vec<String>, u64)> {
    let (mut ids, mut claimed) = (Vec::new(), 0);
    loop {
        let (status, answer) =
            client.request("POST", &format!("/v2/queues/{queue}/claims?limit=20"), r#"{"ttl":300,"grace":60}"#).await?;
        match status {
            204 => return Ok((ids, claimed)),
            201 => {}
            other => bail!("claim answered {other}"),
        }
        let hrefs = hrefs(&answer);
        claimed += hrefs.len() as u64;
        if let Some(cid) = hrefs.first().and_then(|h| h.rsplit('=').next()) {
            ids.push(cid.to_owned());
        }
    }
}

/// Messages in `queue` (free and claimed).
async fn total_in(client: &mut ZaqarClient, queue: &str) -> Result<u64> {
    let (_, stats) = client.request("GET", &format!("/v2/queues/{queue}/stats"), "").await?;
    serde_json::from_slice::<serde_json::Value>(&stats)
        .ok()
        .and_then(|s| s.pointer("/messages/total").and_then(serde_json::Value::as_u64))
        .context("stats without a total")
}

/// The claim-count dead-letter storm (issue 21): N messages in a queue with
/// `_max_claim_count` 1 are each claimed once (the claims kept until every message is claimed,
/// then released), then claimed again: the second round's claims move every message they pick
/// to the DLQ (a confirmed publish into it, then the ack) and come back empty. Throughput counts
/// messages moved per second of the second round; the DLQ's count is checked.
pub(super) async fn dead_letter_storm(target: &Target, params: Params, tag: &str) -> Result<Outcome> {
    let authority =
        target.zaqar.clone().context("the zaqar-dlq scenario needs the gateway's address (--zaqar host:port)")?;
    let (queue, dlq) = (format!("bench-zaqar-src-{tag}"), format!("bench-zaqar-dlq-{tag}"));
    let mut client = ZaqarClient::connect(&authority).await?;
    let meta = format!(r#"{{"_max_claim_count": 1, "_dead_letter_queue": "{dlq}"}}"#);
    let (status, _) = client.request("PUT", &format!("/v2/queues/{queue}"), &meta).await?;
    if status != 201 {
        bail!("creating the queue answered {status}");
    }
    let posted = Arc::new(AtomicU64::new(0));
    let mut fillers = Vec::new();
    for _ in 0..CLIENTS {
        let (authority, queue, posted) = (authority.clone(), queue.clone(), Arc::clone(&posted));
        let total = params.messages;
        fillers.push(tokio::spawn(async move {
            let mut client = ZaqarClient::connect(&authority).await?;
            let messages: Vec<String> = (0..BATCH).map(|i| format!(r#"{{"ttl":3600,"body":{i}}}"#)).collect();
            let body = format!(r#"{{"messages":[{}]}}"#, messages.join(","));
            while posted.fetch_add(BATCH, Ordering::Relaxed) < total {
                let (status, _) = client.request("POST", &format!("/v2/queues/{queue}/messages"), &body).await?;
                if status != 201 {
                    bail!("post answered {status}");
                }
            }
            anyhow::Ok(())
        }));
    }
    for filler in fillers {
        filler.await??;
    }
    let total = params.messages.div_ceil(BATCH) * BATCH;
    let (claims, first) = claim_all(&mut client, &queue).await?;
    for cid in claims {
        client.request("DELETE", &format!("/v2/queues/{queue}/claims/{cid}"), "").await?;
    }
    let started = Instant::now();
    let mut last_progress = Instant::now();
    let mut left = total_in(&mut client, &queue).await?;
    let mut claims = 0u64;
    while left > 0 {
        let (status, _) =
            client.request("POST", &format!("/v2/queues/{queue}/claims?limit=20"), r#"{"ttl":300,"grace":60}"#).await?;
        if status != 204 {
            bail!("a second-round claim answered {status}: it should have moved what it picked");
        }
        claims += 1;
        // Each claim moves up to 20: the count is looked at once the claims could have moved all.
        if claims * 20 >= left {
            let now = total_in(&mut client, &queue).await?;
            if now < left {
                last_progress = Instant::now();
            } else if last_progress.elapsed() > STALL {
                bail!("no message moved for {STALL:?}");
            }
            (left, claims) = (now, 0);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let moved = total_in(&mut client, &dlq).await?;
    client.request("DELETE", &format!("/v2/queues/{queue}"), "").await?;
    client.request("DELETE", &format!("/v2/queues/{dlq}"), "").await?;
    let mut outcome = Outcome::throughput(moved, seconds);
    outcome.lost = total.saturating_sub(moved);
    outcome.duplicates = moved.saturating_sub(total);
    outcome.notes.push(format!("{first} claimed once, then moved by claims of 20"));
    Ok(outcome)
}
