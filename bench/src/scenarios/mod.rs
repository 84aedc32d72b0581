//! The named scenarios of `BENCHMARKS.md` (the project's performance goals), each a function
//! from a broker to an [`Outcome`]; [`run`] adds the broker's CPU seconds and peak memory around it.

mod amqp10;
mod api_queues;
mod browse;
mod dead_letter;
mod declare;
mod fanout;
mod max_length;
mod memory;
mod one_to_one;
mod redrive;
mod zaqar;

use anyhow::Result;

use crate::report::Outcome;
use crate::target::Target;

/// A scenario by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Scenario {
    /// 16 B transient, 1 publisher → 1 queue → 1 consumer, no confirms, auto-ack.
    S1a,
    /// 16 B persistent into a durable queue, confirms 1000 in flight, qos 1000, multi-ack.
    S1b,
    /// S1b into a quorum queue.
    S1bQuorum,
    /// S1a with the raw client: a publisher flooding pre-encoded batches and a counting no-ack
    /// consumer for `--seconds`; consumed msg/s, published msg/s and the largest backlog.
    S1aRaw,
    /// A backlog of N (default 10M) 16 B transient messages published with the raw publisher
    /// and nobody consuming, then drained by the raw counting consumer: the drain's rate.
    S2Drain,
    /// Fanout to 10 queues, one consumer each.
    S3x10,
    /// Fanout to 100 queues, one consumer each.
    S3x100,
    /// Messages expiring by TTL into a dead-letter exchange: until the DLQ has them all.
    S5,
    /// Reject storm: a full queue nacked (requeue=false) by 4 consumers into a DLX.
    S6,
    /// S6 from a quorum queue with RabbitMQ's at-least-once strategy and reject-publish.
    S6Quorum,
    /// `x-max-length` 100k with drop-head under a stream of publishes.
    S7DropHead,
    /// `x-max-length` 100k with reject-publish: the nack rate.
    S7Reject,
    /// Broker memory per queued 16 B persistent message.
    Memory,
    /// Broker memory per at-least-once dead letter waiting for a route (quorum source).
    MemoryWaiting,
    /// AMQP 1.0: 1 sender → 1 queue → 1 receiver, credit 200, durable, settled by outcome.
    S10,
    /// `GET /api/queues` with N queues declared (default 10,000): the median of 5 listings.
    ApiQueues,
    /// N durable exchanges declared one after the other (default 500): the median declare.
    Declare,
    /// N dead letters moved back to their queue at an unlimited rate: a redrive job on Charon
    /// (`--api`), a consume-republish loop elsewhere.
    Redrive,
    /// The dead-letter browser over an N-message DLQ (Charon's API, `--api`): ms per page.
    Browse,
    /// Zaqar over HTTP: 32 clients post, claim and delete (by claim id) N messages.
    Zaqar,
    /// Zaqar's claim-count dead-letter storm: N messages claimed once, then moved to the DLQ by
    /// the next claims.
    ZaqarDlq,
}

impl Scenario {
    /// Messages per run unless told otherwise.
    pub(crate) fn default_messages(self) -> u64 {
        match self {
            Self::S1a | Self::S1b | Self::S1bQuorum | Self::S10 => 200_000,
            // Time-boxed: the count is what it moved.
            Self::S1aRaw => 0,
            Self::S2Drain => 10_000_000,
            Self::S3x10 => 100_000,
            Self::S3x100 => 20_000,
            // The goals' sizes: 1M expiring or rejected, 10M against a 100k limit.
            Self::S5 | Self::S6 | Self::S6Quorum => 1_000_000,
            Self::S7DropHead | Self::S7Reject => 10_000_000,
            Self::Memory | Self::MemoryWaiting => 1_000_000,
            Self::ApiQueues => 10_000,
            Self::Declare => 500,
            Self::Redrive => 1_000_000,
            Self::Browse => 10_000_000,
            Self::Zaqar | Self::ZaqarDlq => 100_000,
        }
    }
}

/// Settings of one run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Params {
    pub(crate) messages: u64,
    /// A fixed publish rate (msg/s) for latency; full speed when `None`.
    pub(crate) rate: Option<u64>,
    /// Whether the memory scenario leaves its backlog behind.
    pub(crate) keep: bool,
    /// Whether the AMQP 1.0 client sets `TCP_NODELAY` (fe2o3 does not).
    pub(crate) nodelay: bool,
    /// The AMQP 0.9.1 client consumers run on.
    pub(crate) consumer: crate::consumers::Client,
    /// The AMQP 0.9.1 client S1's publisher runs on.
    pub(crate) publisher: crate::consumers::Client,
    /// How long a time-boxed scenario (S1aRaw) runs.
    pub(crate) seconds: u64,
    /// Whether S2Drain drops the page cache between filling and draining (needs root).
    pub(crate) drop_caches: bool,
    /// The raw publisher's body size (S1aRaw, S2Drain).
    pub(crate) body_size: usize,
}

/// Runs `scenario` once against `target`.
pub(crate) async fn run(target: &Target, scenario: Scenario, params: Params) -> Result<Outcome> {
    let cpu_before = target.cpu_seconds();
    let rss = target.watch_rss();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let tag = format!("{now:x}");
    let result = match scenario {
        Scenario::S1a => one_to_one::transient(target, params, &tag).await,
        Scenario::S1b => one_to_one::persistent(target, params, &tag).await,
        Scenario::S1bQuorum => one_to_one::persistent_quorum(target, params, &tag).await,
        Scenario::S1aRaw => one_to_one::flood(target, params, &tag).await,
        Scenario::S2Drain => one_to_one::drain(target, params, &tag).await,
        Scenario::S3x10 => fanout::run(target, params, 10, &tag).await,
        Scenario::S3x100 => fanout::run(target, params, 100, &tag).await,
        Scenario::S5 => dead_letter::ttl(target, params, &tag).await,
        Scenario::S6 => dead_letter::reject_storm(target, params, &tag).await,
        Scenario::S6Quorum => dead_letter::reject_storm_at_least_once(target, params, &tag).await,
        Scenario::S7DropHead => max_length::drop_head(target, params, &tag).await,
        Scenario::S7Reject => max_length::reject_publish(target, params, &tag).await,
        Scenario::Memory => memory::per_message(target, params, &tag).await,
        Scenario::MemoryWaiting => dead_letter::memory_waiting(target, params, &tag).await,
        Scenario::S10 => amqp10::one_to_one(target, params, &tag).await,
        Scenario::ApiQueues => api_queues::listing(target, params, &tag).await,
        Scenario::Declare => declare::exchanges(target, params, &tag).await,
        Scenario::Redrive => redrive::run(target, params, &tag).await,
        Scenario::Browse => browse::dlq(target, params, &tag).await,
        Scenario::Zaqar => zaqar::post_claim_delete(target, params, &tag).await,
        Scenario::ZaqarDlq => zaqar::dead_letter_storm(target, params, &tag).await,
    };
    let peak = rss.finish();
    let mut outcome = result?;
    if target.pid.is_some() {
        outcome.peak_rss = Some(peak);
    }
    outcome.cpu_seconds = cpu_before.zip(target.cpu_seconds()).map(|(before, after)| after - before);
    Ok(outcome)
}
