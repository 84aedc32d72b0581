//! AMQP 0.9.1 publisher on amqprs: the same role as lapin's [`crate::amqp091::publish`]. amqprs
//! writes each publish with its own syscall (and sets `TCP_NODELAY`), so the broker sees one
//! small segment per message where lapin coalesces a pipeline of publishes into few writes: a
//! broker that only does well with batched input shows it here.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use amqprs::callbacks::ChannelCallback;
use amqprs::channel::{BasicPublishArguments, Channel, ConfirmSelectArguments};
use amqprs::connection::Connection;
use amqprs::{Ack, BasicProperties, Cancel, CloseChannel, Nack, Return};
use anyhow::{Context, Result, bail};
use tokio::sync::Semaphore;

use crate::amqp091::{Confirmed, IDLE, Publish};
use crate::seqs;

/// Publish confirms as they arrive: frees a window slot per confirmed message.
#[derive(Clone)]
struct Confirms {
    /// Delivery tags published and not yet confirmed.
    outstanding: Arc<Mutex<BTreeSet<u64>>>,
    tally: Arc<Mutex<Confirmed>>,
    window: Arc<Semaphore>,
}

impl Confirms {
    fn new(window: usize) -> Self {
        Self { outstanding: Arc::default(), tally: Arc::default(), window: Arc::new(Semaphore::new(window)) }
    }

    /// Settles `tag` (and every earlier tag when `multiple`).
    fn settle(&self, tag: u64, multiple: bool, acked: bool) {
        let settled = {
            let Ok(mut outstanding) = self.outstanding.lock() else { return };
            if multiple {
                let rest = outstanding.split_off(&(tag + 1));
                let settled = outstanding.len();
                *outstanding = rest;
                settled
            } else {
                usize::from(outstanding.remove(&tag))
            }
        };
        if let Ok(mut tally) = self.tally.lock() {
            let count = settled as u64;
            if acked { tally.acked += count } else { tally.nacked += count }
        }
        self.window.add_permits(settled);
    }
}

#[async_trait::async_trait]
impl ChannelCallback for Confirms {
    async fn close(&mut self, _: &Channel, _: CloseChannel) -> std::result::Result<(), amqprs::error::Error> {
        Ok(())
    }
    async fn cancel(&mut self, _: &Channel, _: Cancel) -> std::result::Result<(), amqprs::error::Error> {
        Ok(())
    }
    async fn flow(&mut self, _: &Channel, active: bool) -> std::result::Result<bool, amqprs::error::Error> {
        Ok(active)
    }
    async fn publish_ack(&mut self, _: &Channel, ack: Ack) {
        self.settle(ack.delivery_tag(), ack.mutiple(), true);
    }
    async fn publish_nack(&mut self, _: &Channel, nack: Nack) {
        self.settle(nack.delivery_tag(), nack.multiple(), false);
    }
    async fn publish_return(&mut self, _: &Channel, _: Return, _: BasicProperties, _: Vec<u8>) {}
}

/// Publishes `spec.messages` numbered messages to `exchange` / `key` on a connection of its own.
pub(crate) async fn publish(url: &str, exchange: &str, key: &str, spec: Publish, epoch: Instant) -> Result<Confirmed> {
    let conn =
        Connection::open(&crate::amqprs091::arguments(url)?).await.with_context(|| format!("connecting to {url}"))?;
    let channel = conn.open_channel(None).await.context("opening a channel")?;
    let confirms = spec.confirms.map(Confirms::new);
    if let Some(confirms) = &confirms {
        channel.register_callback(confirms.clone()).await.context("registering the confirm callback")?;
        channel.confirm_select(ConfirmSelectArguments::new(false)).await.context("confirm.select")?;
    }
    let mut properties = BasicProperties::default();
    properties.with_delivery_mode(if spec.persistent { 2 } else { 1 });
    let interval_ns = spec.rate.map(|rate| 1_000_000_000 / rate.max(1));
    for seq in 0..spec.messages {
        let sent = seqs::send_time(seq, interval_ns, epoch).await;
        if let Some(confirms) = &confirms {
            confirms.window.acquire().await.context("confirm window")?.forget();
            if let Ok(mut outstanding) = confirms.outstanding.lock() {
                outstanding.insert(seq + 1);
            }
        }
        let args = BasicPublishArguments::new(exchange, key);
        channel.basic_publish(properties.clone(), seqs::body(seq, sent).to_vec(), args).await.context("publish")?;
    }
    let mut confirmed = Confirmed::default();
    if let (Some(confirms), Some(window)) = (&confirms, spec.confirms) {
        let all = u32::try_from(window).unwrap_or(u32::MAX);
        let Ok(Ok(permits)) = tokio::time::timeout(IDLE, confirms.window.acquire_many(all)).await else {
            bail!("not every publish was confirmed within {IDLE:?}");
        };
        permits.forget();
        if let Ok(tally) = confirms.tally.lock() {
            confirmed = Confirmed { acked: tally.acked, nacked: tally.nacked };
        }
    }
    let _ = channel.close().await;
    let _ = conn.close().await;
    Ok(confirmed)
}
