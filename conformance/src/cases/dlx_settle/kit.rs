//! The protocol-neutral pieces the `dlx_*` cases share: [`Taker`], a consumer that exposes
//! delivery tags and every settlement either protocol has, [`Sender`], a publisher that reports
//! refusals and can set a per-message TTL, and small checks on what they saw.

use std::collections::HashMap;
use std::time::Duration;

use fe2o3_amqp_types::definitions::Fields;
use fe2o3_amqp_types::messaging::{Accepted, DeliveryState, Modified, Rejected, Released};
use lapin::options::{BasicAckOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions, BasicRejectOptions};
use lapin::types::AMQPValue;
use lapin::{BasicProperties, Channel};
use serde_amqp::Value;

use super::SETTLE_WAIT;
use crate::cases::dlx_basic::take;
use crate::dlx_kit as dk;
use crate::fe2o3_kit as fk;
use crate::lapin_kit as lk;
use crate::raw10::{self, Conn10, Msg, message::hdr};
use crate::wire::{Publisher, Received};
use crate::{CaseError, CaseResult, Ctx, Protocol, QueueKind, check_eq};

/// A delivery as [`Taker`] sees it.
#[derive(Clone, Debug)]
pub(in crate::cases) struct Got {
    /// Body as text.
    pub(in crate::cases) body: String,
    /// 0.9.1 delivery tag or 1.0 delivery id.
    pub(in crate::cases) tag: u64,
    /// 0.9.1 `redelivered`; 1.0 `first-acquirer = false`.
    pub(in crate::cases) redelivered: bool,
    /// 0.9.1 `x-delivery-count` header; 1.0 `header.delivery-count` (absent when 0 or unset).
    pub(in crate::cases) delivery_count: Option<i64>,
}

/// A manual-settlement consumer over the consuming protocol of the case's variant, with every
/// settlement either protocol offers.
pub(in crate::cases) enum Taker {
    /// A lapin channel and consumer.
    Amqp091(Channel, Box<lapin::Consumer>),
    /// A raw 1.0 receiver (channel 0, handle 0) and the credit it keeps topped up.
    Amqp10(Box<Conn10>, u32),
}

/// How [`Taker::settle`] settles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::cases) enum How {
    /// 0.9.1 ack, 1.0 accepted.
    Ack,
    /// 0.9.1 reject requeue=true, 1.0 released.
    Requeue,
    /// 0.9.1 reject requeue=false, 1.0 rejected.
    Reject,
}

pub(super) fn integer(value: Option<&AMQPValue>) -> Option<i64> {
    match value? {
        AMQPValue::LongLongInt(n) => Some(*n),
        AMQPValue::LongInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortShortInt(n) => Some(i64::from(*n)),
        AMQPValue::LongUInt(n) => Some(i64::from(*n)),
        _ => None,
    }
}

pub(super) fn amqp10_count(value: Option<Value>) -> Option<i64> {
    match value? {
        Value::Uint(0) => None,
        Value::Uint(n) => Some(i64::from(n)),
        _ => None,
    }
}

impl Taker {
    /// Starts consuming `queue` on a new channel of `conn` (0.9.1) or a new 1.0 connection, with
    /// room for `window` unsettled deliveries.
    pub(in crate::cases) async fn open(
        ctx: &Ctx,
        conn: &lapin::Connection,
        queue: &str,
        window: u16,
    ) -> Result<Self, CaseError> {
        match ctx.variant().consume {
            Protocol::Amqp091 => {
                let ch = conn.create_channel().await?;
                ch.basic_qos(window, BasicQosOptions::default()).await?;
                let consumer = lk::consume(&ch, queue).await?;
                Ok(Self::Amqp091(ch, Box::new(consumer)))
            }
            Protocol::Amqp10 => {
                let mut c = Conn10::open(ctx.broker()).await?;
                c.begin(0).await?;
                c.attach_receiver(0, 0, &fk::queue_addr(queue)).await?;
                c.credit(0, 0, u32::from(window), false).await?;
                Ok(Self::Amqp10(Box::new(c), u32::from(window)))
            }
        }
    }

    /// The next delivery (fails after 5 s).
    pub(in crate::cases) async fn next(&mut self) -> Result<Got, CaseError> {
        match self {
            Self::Amqp091(_, consumer) => {
                let d = lk::next(consumer, lk::ARRIVE).await?;
                let count = integer(d.properties.headers().as_ref().and_then(|h| h.inner().get("x-delivery-count")));
                Ok(Got { body: lk::text(&d), tag: d.delivery_tag, redelivered: d.redelivered, delivery_count: count })
            }
            Self::Amqp10(c, _) => {
                let d = c.recv(0, fk::ARRIVE).await?;
                let m = raw10::Received::parse(&d.payload)?;
                let body = String::from_utf8_lossy(&m.data().unwrap_or_default()).into_owned();
                Ok(Got {
                    body,
                    tag: u64::from(d.id()),
                    redelivered: m.header(hdr::FIRST_ACQUIRER) == Some(Value::Bool(false)),
                    delivery_count: amqp10_count(m.header(hdr::DELIVERY_COUNT)),
                })
            }
        }
    }

    /// The next `n` deliveries.
    pub(in crate::cases) async fn next_n(&mut self, n: usize) -> Result<Vec<Got>, CaseError> {
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            out.push(self.next().await.map_err(|e| e.context(&format!("delivery {} of {n}", i + 1)))?);
        }
        Ok(out)
    }

    /// Fails if a delivery arrives within `wait`.
    pub(in crate::cases) async fn nothing(&mut self, wait: Duration) -> CaseResult {
        match self {
            Self::Amqp091(_, consumer) => lk::nothing(consumer, wait).await,
            Self::Amqp10(c, _) => c.no_transfer(0, wait).await,
        }
    }

    async fn settle10(&mut self, first: u64, last: u64, state: DeliveryState) -> CaseResult {
        let Self::Amqp10(c, window) = self else {
            return Err(CaseError::new("a 1.0 settlement on a 0.9.1 consumer"));
        };
        let first = u32::try_from(first).map_err(|_| CaseError::new("delivery id out of range"))?;
        let last = u32::try_from(last).map_err(|_| CaseError::new("delivery id out of range"))?;
        c.settle(0, first, last, state).await?;
        let window = *window;
        c.credit(0, 0, window, false).await
    }

    /// Settles one delivery.
    pub(in crate::cases) async fn settle(&mut self, got: &Got, how: How) -> CaseResult {
        self.settle_range(got.tag, got.tag, how).await
    }

    /// Settles the deliveries `first..=last` at once: 0.9.1 `basic.ack`/`basic.nack` with
    /// multiple=true on `last` (covering every unsettled tag up to it), a 1.0 disposition over
    /// the range. A single delivery uses `basic.reject` on 0.9.1.
    pub(in crate::cases) async fn settle_range(&mut self, first: u64, last: u64, how: How) -> CaseResult {
        match self {
            Self::Amqp091(ch, _) => {
                let multiple = first != last;
                match (how, multiple) {
                    (How::Ack, _) => ch.basic_ack(last, BasicAckOptions { multiple }).await?,
                    (How::Requeue, false) => ch.basic_reject(last, BasicRejectOptions { requeue: true }).await?,
                    (How::Reject, false) => ch.basic_reject(last, BasicRejectOptions { requeue: false }).await?,
                    (How::Requeue, true) => ch.basic_nack(last, BasicNackOptions { multiple, requeue: true }).await?,
                    (How::Reject, true) => ch.basic_nack(last, BasicNackOptions { multiple, requeue: false }).await?,
                }
                Ok(())
            }
            Self::Amqp10(..) => {
                let state = match how {
                    How::Ack => DeliveryState::Accepted(Accepted {}),
                    How::Requeue => DeliveryState::Released(Released {}),
                    How::Reject => DeliveryState::Rejected(Rejected { error: None }),
                };
                self.settle10(first, last, state).await
            }
        }
    }

    /// 0.9.1 `basic.nack` of one delivery (multiple=false).
    pub(in crate::cases) async fn nack(&mut self, got: &Got, requeue: bool) -> CaseResult {
        match self {
            Self::Amqp091(ch, _) => {
                ch.basic_nack(got.tag, BasicNackOptions { multiple: false, requeue }).await?;
                Ok(())
            }
            Self::Amqp10(..) => self.settle(got, if requeue { How::Requeue } else { How::Reject }).await,
        }
    }

    /// 1.0 `modified` (fields left out when `None`).
    pub(in crate::cases) async fn modified(
        &mut self,
        got: &Got,
        failed: Option<bool>,
        undeliverable: Option<bool>,
    ) -> CaseResult {
        self.modified_with(got, failed, undeliverable, None).await
    }

    /// 1.0 `modified` with message annotations for the broker to merge into the message.
    pub(in crate::cases) async fn modified_with(
        &mut self,
        got: &Got,
        failed: Option<bool>,
        undeliverable: Option<bool>,
        annotations: Option<Fields>,
    ) -> CaseResult {
        let state = DeliveryState::Modified(Modified {
            delivery_failed: failed,
            undeliverable_here: undeliverable,
            message_annotations: annotations,
        });
        self.settle10(got.tag, got.tag, state).await
    }

    /// Closes the consumer's channel (0.9.1) or connection (1.0).
    pub(in crate::cases) async fn close(self) {
        match self {
            Self::Amqp091(ch, _) => {
                let _ = ch.close(200, "done".into()).await;
            }
            Self::Amqp10(mut c, _) => {
                let _ = tokio::time::timeout(Duration::from_secs(2), c.close()).await;
            }
        }
    }
}

/// What a broker answered to one publish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::cases) enum Answer {
    /// 0.9.1 basic.ack, 1.0 accepted.
    Accepted,
    /// 0.9.1 basic.nack, 1.0 rejected (bare, as 4.0.5 sends it).
    Refused,
}

/// A publisher over the variant's publishing protocol that reports refusals (instead of
/// failing on them) and can give each message its own TTL.
pub(in crate::cases) enum Sender {
    /// A confirm-mode channel.
    Amqp091(Channel),
    /// A raw 1.0 session (channel 0) with one sending link per queue.
    Amqp10 { conn: Box<Conn10>, links: HashMap<String, u32>, next_id: u32 },
}

impl Sender {
    /// Opens the publishing side of the case's variant.
    pub(in crate::cases) async fn open(ctx: &Ctx, conn: &lapin::Connection) -> Result<Self, CaseError> {
        match ctx.variant().publish {
            Protocol::Amqp091 => {
                let ch = conn.create_channel().await?;
                lk::confirm(&ch).await?;
                Ok(Self::Amqp091(ch))
            }
            Protocol::Amqp10 => {
                let mut c = Conn10::open(ctx.broker()).await?;
                c.begin(0).await?;
                Ok(Self::Amqp10 { conn: Box::new(c), links: HashMap::new(), next_id: 0 })
            }
        }
    }

    /// Publishes `body` to `queue` (default exchange) with a per-message TTL in ms (0.9.1
    /// `expiration`, 1.0 `header.ttl`) and returns the broker's answer.
    pub(in crate::cases) async fn send(
        &mut self,
        queue: &str,
        body: &str,
        ttl: Option<u32>,
    ) -> Result<Answer, CaseError> {
        match self {
            Self::Amqp091(ch) => {
                let mut props = BasicProperties::default();
                if let Some(ttl) = ttl {
                    props = props.with_expiration(ttl.to_string().into());
                }
                let confirm = ch
                    .basic_publish("".into(), queue.into(), BasicPublishOptions::default(), body.as_bytes(), props)
                    .await?;
                let c = tokio::time::timeout(lk::ARRIVE, confirm)
                    .await
                    .map_err(|_| CaseError::new(format!("no confirm for {body:?} within 5 s")))??;
                Ok(if c.is_nack() { Answer::Refused } else { Answer::Accepted })
            }
            Self::Amqp10 { conn, links, next_id } => {
                let handle = match links.get(queue) {
                    Some(h) => *h,
                    None => {
                        let h = u32::try_from(links.len()).unwrap_or(u32::MAX);
                        conn.attach_sender(0, h, Some(&fk::queue_addr(queue))).await?;
                        links.insert(queue.to_owned(), h);
                        h
                    }
                };
                let mut msg = Msg::text(body);
                if let Some(ttl) = ttl {
                    msg = Msg::new().header(hdr::TTL, Value::Uint(ttl)).data(body.as_bytes());
                }
                let id = *next_id;
                *next_id = next_id.wrapping_add(1);
                let state = conn.publish(0, handle, id, &msg.encode()?).await?;
                match state {
                    Some(DeliveryState::Accepted(_)) => Ok(Answer::Accepted),
                    // 4.0.5 refuses with a bare `rejected` (4.3 adds amqp:resource-limit-exceeded).
                    Some(DeliveryState::Rejected(r)) if r.error.is_none() => Ok(Answer::Refused),
                    other => Err(CaseError::new(format!(
                        "1.0 publish of {body:?}: outcome {}",
                        raw10::link::outcome(&other)
                    ))),
                }
            }
        }
    }

    /// Publishes each body and returns the answers.
    pub(in crate::cases) async fn send_all(&mut self, queue: &str, bodies: &[&str]) -> Result<Vec<Answer>, CaseError> {
        let mut out = Vec::new();
        for body in bodies {
            out.push(self.send(queue, body, None).await?);
        }
        Ok(out)
    }

    /// Closes the 1.0 connection (the 0.9.1 channel goes with its connection).
    pub(in crate::cases) async fn close(self) {
        if let Self::Amqp10 { mut conn, .. } = self {
            let _ = tokio::time::timeout(Duration::from_secs(2), conn.close()).await;
        }
    }
}

/// Publishes `bodies` to `queue` over the variant's publishing protocol, each one confirmed.
pub(in crate::cases) async fn publish_all(
    ctx: &Ctx,
    conn: &lapin::Connection,
    queue: &str,
    bodies: &[&str],
) -> CaseResult {
    let mut p = Publisher::open(ctx, conn).await?;
    for body in bodies {
        p.publish("", queue, body.as_bytes()).await?;
    }
    p.close().await;
    Ok(())
}

/// Bodies of received messages as text.
pub(in crate::cases) fn bodies(received: &[Received]) -> Vec<String> {
    received.iter().map(|r| String::from_utf8_lossy(&r.body).into_owned()).collect()
}

/// Bodies of [`Got`]s.
pub(in crate::cases) fn got_bodies(got: &[Got]) -> Vec<String> {
    got.iter().map(|g| g.body.clone()).collect()
}

/// `(queue, reason, count)` of each death, most recent first.
pub(in crate::cases) fn history(r: &Received) -> Vec<(String, String, u64)> {
    r.deaths.iter().map(|d| (d.queue.clone(), d.reason.clone(), d.count)).collect()
}

/// Takes `n` dead letters from `dlq` and checks their bodies and that each died once in
/// `source` for `reason`.
pub(in crate::cases) async fn expect_dead(
    ctx: &Ctx,
    conn: &lapin::Connection,
    dlq: &str,
    source: &str,
    reason: &str,
    expected: &[&str],
) -> CaseResult {
    let got = take(ctx, conn, dlq, expected.len()).await?;
    check_eq!(bodies(&got), expected.to_vec(), "dead letters in {dlq}");
    for r in &got {
        check_eq!(
            history(r),
            vec![(source.to_owned(), reason.to_owned(), 1)],
            "death history of {:?}",
            String::from_utf8_lossy(&r.body)
        );
    }
    Ok(())
}

/// The delivery counts the variant's consumer sees on the first `n` messages of `dlq` (0.9.1:
/// `x-delivery-count`, 1.0: `header.delivery-count`), which are then requeued in place.
pub(in crate::cases) async fn dead_counts(
    ctx: &Ctx,
    conn: &lapin::Connection,
    dlq: &str,
    n: usize,
) -> Result<Vec<Option<i64>>, CaseError> {
    let mut t = Taker::open(ctx, conn, dlq, u16::try_from(n).unwrap_or(u16::MAX)).await?;
    let got = t.next_n(n).await?;
    for g in &got {
        t.settle(g, How::Requeue).await?;
    }
    t.close().await;
    dk::eventually_ready(&conn.create_channel().await?, dlq, u32::try_from(n).unwrap_or(u32::MAX)).await?;
    Ok(got.iter().map(|g| g.delivery_count).collect())
}

/// `Some(n)` for a 1.0 consumer of a quorum source's dead letters, `None` otherwise: a quorum
/// queue's failed deliveries travel with its dead letters, only 1.0 shows them.
pub(super) fn carried(ctx: &Ctx, n: i64) -> Option<i64> {
    let quorum = dk::queue_kind(ctx) == QueueKind::Quorum;
    (quorum && ctx.variant().consume == Protocol::Amqp10 && n > 0).then_some(n)
}

/// Waits a moment, then checks that `queue` has no ready message.
pub(in crate::cases) async fn stays_empty(ch: &Channel, queue: &str) -> CaseResult {
    tokio::time::sleep(SETTLE_WAIT).await;
    check_eq!(dk::ready(ch, queue).await?, 0, "ready messages in {queue}");
    Ok(())
}
