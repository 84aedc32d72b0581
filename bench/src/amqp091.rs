//! AMQP 0.9.1 load on lapin: publishers (with or without confirms, at full speed or at a fixed
//! rate) and consumers (auto-ack, multi-ack, or nacking everything), all counting what they
//! saw.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures_util::{StreamExt, TryStreamExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

use crate::seqs::{self, Tracker};

/// Publishes in progress at once when publishing at full speed.
const PIPELINE: usize = 256;

/// How long a consumer waits for the next message before it counts the rest as lost.
pub(crate) const IDLE: Duration = Duration::from_secs(15);

pub(crate) async fn connect(url: &str) -> Result<Connection> {
    Connection::connect(url, ConnectionProperties::default()).await.with_context(|| format!("connecting to {url}"))
}

pub(crate) async fn channel(conn: &Connection) -> Result<Channel> {
    conn.create_channel().await.context("opening a channel")
}

/// Declares a queue with arguments.
pub(crate) async fn declare(channel: &Channel, name: &str, durable: bool, args: &[(&str, AMQPValue)]) -> Result<u32> {
    let mut table = FieldTable::default();
    for (key, value) in args {
        table.insert((*key).into(), value.clone());
    }
    let options = QueueDeclareOptions { durable, ..Default::default() };
    let ok = channel.queue_declare(name.into(), options, table).await.with_context(|| format!("declaring {name}"))?;
    Ok(ok.message_count())
}

/// Ready messages in a queue (a passive declare).
pub(crate) async fn count(channel: &Channel, name: &str) -> Result<u32> {
    let options = QueueDeclareOptions { passive: true, ..Default::default() };
    let ok = channel.queue_declare(name.into(), options, FieldTable::default()).await?;
    Ok(ok.message_count())
}

/// How a publisher sends.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Publish {
    pub(crate) messages: u64,
    pub(crate) persistent: bool,
    /// Publisher confirms with this many in flight.
    pub(crate) confirms: Option<usize>,
    /// Messages per second; full speed when `None`.
    pub(crate) rate: Option<u64>,
}

/// Confirms the broker sent.
#[derive(Debug, Default)]
pub(crate) struct Confirmed {
    pub(crate) acked: u64,
    pub(crate) nacked: u64,
}

/// Publishes `spec.messages` numbered messages to `exchange` / `key`.
pub(crate) async fn publish(
    channel: &Channel,
    exchange: &str,
    key: &str,
    spec: Publish,
    epoch: Instant,
) -> Result<Confirmed> {
    if spec.confirms.is_some() {
        channel.confirm_select(ConfirmSelectOptions::default()).await?;
    }
    let properties = BasicProperties::default().with_delivery_mode(if spec.persistent { 2 } else { 1 });
    let interval_ns = spec.rate.map(|rate| 1_000_000_000 / rate.max(1));
    // lapin's publish future resolves once its frames are written: awaiting one at a time
    // would measure the client's wakeups, and at a fixed rate it fell behind its schedule
    // (20k msg/s on two cores). Up to PIPELINE are in progress at once, each waiting for its
    // send time (their frames go out in order).
    let mut publishes = futures_util::stream::iter(0..spec.messages)
        .map(|seq| {
            let properties = properties.clone();
            async move {
                let sent = seqs::send_time(seq, interval_ns, epoch).await;
                let body = seqs::body(seq, sent);
                let options = BasicPublishOptions::default();
                channel.basic_publish(exchange.into(), key.into(), options, &body, properties).await
            }
        })
        .buffered(PIPELINE);
    let mut pending = std::collections::VecDeque::new();
    let mut confirmed = Confirmed::default();
    while let Some(confirm) = publishes.next().await {
        let confirm = confirm.context("publish")?;
        if let Some(window) = spec.confirms {
            pending.push_back(confirm);
            if pending.len() >= window
                && let Some(oldest) = pending.pop_front()
            {
                tally(&mut confirmed, oldest.await?);
            }
        }
    }
    for confirm in pending {
        tally(&mut confirmed, confirm.await?);
    }
    Ok(confirmed)
}

fn tally(confirmed: &mut Confirmed, confirmation: lapin::Confirmation) {
    if confirmation.is_ack() {
        confirmed.acked += 1;
    } else {
        confirmed.nacked += 1;
    }
}

/// How a consumer settles.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Settle {
    /// `no-ack`.
    Auto,
    /// Prefetch, and an ack with `multiple` every so many deliveries.
    MultiAck { prefetch: u16, every: u64 },
}

/// What a consumer saw.
#[derive(Debug)]
pub(crate) struct Consumed {
    pub(crate) tracker: Tracker,
    /// When the last new message arrived.
    pub(crate) last: Instant,
    /// Delivery latency from the scheduled send time, µs.
    pub(crate) latency: hdrhistogram::Histogram<u64>,
}

impl Consumed {
    pub(crate) fn new(expected: u64) -> Result<Self> {
        Ok(Self { tracker: Tracker::new(expected), last: Instant::now(), latency: hdrhistogram::Histogram::new(3)? })
    }

    /// Counts a delivered body, and its latency when it is new.
    pub(crate) fn record(&mut self, body: &[u8], epoch: Instant) {
        if let Some((seq, sent)) = seqs::read(body)
            && self.tracker.saw(seq)
        {
            self.last = Instant::now();
            let _ = self.latency.record(seqs::since(epoch).saturating_sub(sent) / 1000);
        }
    }
}

/// Starts consuming `queue` and returns once the broker confirmed the consumer; the returned
/// task finishes when `expected` distinct messages arrived (or none came for [`IDLE`]).
pub(crate) async fn consume(
    channel: Channel,
    queue: &str,
    expected: u64,
    settle: Settle,
    epoch: Instant,
) -> Result<tokio::task::JoinHandle<Result<Consumed>>> {
    if let Settle::MultiAck { prefetch, .. } = settle {
        channel.basic_qos(prefetch, BasicQosOptions::default()).await?;
    }
    let options = BasicConsumeOptions { no_ack: matches!(settle, Settle::Auto), ..Default::default() };
    let mut consumer = channel.basic_consume(queue.into(), "".into(), options, FieldTable::default()).await?;
    Ok(tokio::spawn(async move {
        let mut consumed = Consumed::new(expected)?;
        let mut unacked = 0u64;
        while !consumed.tracker.complete() {
            let Ok(next) = tokio::time::timeout(IDLE, consumer.next()).await else {
                break;
            };
            let Some(delivery) = next else {
                bail!("the consumer was cancelled");
            };
            let delivery = delivery?;
            consumed.record(&delivery.data, epoch);
            match settle {
                Settle::Auto => {}
                Settle::MultiAck { every, .. } => {
                    unacked += 1;
                    if unacked >= every || consumed.tracker.complete() {
                        delivery.acker.ack(BasicAckOptions { multiple: true }).await?;
                        unacked = 0;
                    }
                }
            }
        }
        Ok(consumed)
    }))
}

/// Consumes `queue` with `prefetch` and nacks every delivery without requeueing it (a reject
/// storm), until the task is aborted or the consumer ends.
pub(crate) async fn nack_all(channel: Channel, queue: &str, prefetch: u16) -> Result<tokio::task::JoinHandle<()>> {
    channel.basic_qos(prefetch, BasicQosOptions::default()).await?;
    let consumer =
        channel.basic_consume(queue.into(), "".into(), BasicConsumeOptions::default(), FieldTable::default()).await?;
    // Like a publish, a nack's future resolves once lapin wrote its frame: awaiting each before
    // taking the next delivery would hand every message to lapin's I/O thread and back. Up to
    // PIPELINE nacks are in progress at once instead, as a client that does not wait would.
    let mut nacks = consumer
        .map_ok(
            |delivery| async move { delivery.acker.nack(BasicNackOptions { multiple: false, requeue: false }).await },
        )
        .try_buffer_unordered(PIPELINE);
    Ok(tokio::spawn(async move { while let Some(Ok(_)) = nacks.next().await {} }))
}
