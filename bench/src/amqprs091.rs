//! AMQP 0.9.1 consumers on amqprs: auto-ack, multi-ack, or nacking everything — the same
//! roles as lapin's in [`crate::amqp091`], each on a connection of its own (amqprs keeps one
//! reader task per connection, and a consumer's deliveries arrive on a channel of its own).

use std::time::Instant;

use amqprs::channel::{
    BasicAckArguments, BasicConsumeArguments, BasicNackArguments, BasicQosArguments, Channel, ConsumerMessage,
};
use amqprs::connection::{Connection, OpenConnectionArguments};
use anyhow::{Context, Result, bail};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::amqp091::{Consumed, IDLE, Settle};
use crate::target::parse_uri;

/// A connection and channel consuming `queue`, with the receiver its deliveries arrive on.
struct Consuming {
    conn: Connection,
    channel: Channel,
    deliveries: UnboundedReceiver<ConsumerMessage>,
}

/// The URL as amqprs takes it.
pub(crate) fn arguments(url: &str) -> Result<OpenConnectionArguments> {
    let uri = parse_uri(url)?;
    let (authority, user) = (&uri.authority, &uri.authority.userinfo);
    let mut args = OpenConnectionArguments::new(&authority.host, authority.port, &user.username, &user.password);
    args.virtual_host(&uri.vhost);
    Ok(args)
}

async fn start(url: &str, queue: &str, prefetch: Option<u16>) -> Result<Consuming> {
    let conn = Connection::open(&arguments(url)?).await.with_context(|| format!("connecting to {url}"))?;
    let channel = conn.open_channel(None).await.context("opening a channel")?;
    if let Some(prefetch) = prefetch {
        channel.basic_qos(BasicQosArguments::new(0, prefetch, false)).await.context("basic.qos")?;
    }
    let mut consume = BasicConsumeArguments::new(queue, "");
    consume.manual_ack(prefetch.is_some());
    let (_tag, deliveries) = channel.basic_consume_rx(consume).await.with_context(|| format!("consuming {queue}"))?;
    Ok(Consuming { conn, channel, deliveries })
}

impl Consuming {
    async fn close(self) {
        let _ = self.channel.close().await;
        let _ = self.conn.close().await;
    }
}

/// Starts consuming `queue` and returns once the broker confirmed the consumer; the returned
/// task finishes when `expected` distinct messages arrived (or none came for [`IDLE`]).
pub(crate) async fn consume(
    url: &str,
    queue: &str,
    expected: u64,
    settle: Settle,
    epoch: Instant,
) -> Result<tokio::task::JoinHandle<Result<Consumed>>> {
    let prefetch = match settle {
        Settle::Auto => None,
        Settle::MultiAck { prefetch, .. } => Some(prefetch),
    };
    let mut consuming = start(url, queue, prefetch).await?;
    Ok(tokio::spawn(async move {
        let mut consumed = Consumed::new(expected)?;
        let mut unacked = 0u64;
        while !consumed.tracker.complete() {
            let Ok(next) = tokio::time::timeout(IDLE, consuming.deliveries.recv()).await else {
                break;
            };
            let Some(message) = next else {
                bail!("the consumer was cancelled");
            };
            consumed.record(message.content.as_deref().unwrap_or_default(), epoch);
            if let (Settle::MultiAck { every, .. }, Some(deliver)) = (settle, &message.deliver) {
                unacked += 1;
                if unacked >= every || consumed.tracker.complete() {
                    let ack = BasicAckArguments::new(deliver.delivery_tag(), true);
                    consuming.channel.basic_ack(ack).await.context("basic.ack")?;
                    unacked = 0;
                }
            }
        }
        consuming.close().await;
        Ok(consumed)
    }))
}

/// Consumes `queue` with `prefetch` and nacks every delivery without requeueing it (a reject
/// storm), until the task is aborted or the consumer ends.
pub(crate) async fn nack_all(url: &str, queue: &str, prefetch: u16) -> Result<tokio::task::JoinHandle<()>> {
    let mut consuming = start(url, queue, Some(prefetch)).await?;
    Ok(tokio::spawn(async move {
        while let Some(message) = consuming.deliveries.recv().await {
            let Some(deliver) = message.deliver else {
                break;
            };
            let nack = BasicNackArguments::new(deliver.delivery_tag(), false, false);
            if consuming.channel.basic_nack(nack).await.is_err() {
                break;
            }
        }
        // Also what keeps the connection in the task: an async block captures only the fields
        // it uses, and a dropped amqprs connection closes itself.
        consuming.close().await;
    }))
}
