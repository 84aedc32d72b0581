//! Settlement and dead lettering (rabbitmq-dlx.md §1.1–1.2, `dead_lettering_SUITE` #1–5, #7,
//! #9–12): which client settlements dead-letter (reason `rejected`), which requeue, and the
//! order dead letters arrive in, for 0.9.1 and 1.0 consumers of classic and quorum queues.
//!
//! Also the protocol-neutral pieces the other `dlx_*` files share: [`Taker`], a consumer that
//! exposes delivery tags and every settlement either protocol has, and [`Sender`], a publisher
//! that reports refusals and can set a per-message TTL.

use std::collections::HashMap;
use std::time::Duration;

use fe2o3_amqp_types::messaging::{Accepted, DeliveryState, Modified, Rejected, Released};
use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions, BasicRejectOptions,
};
use lapin::types::AMQPValue;
use lapin::{BasicProperties, Channel};
use serde_amqp::Value;

use super::dlx_basic::take;
use crate::dlx_kit as dk;
use crate::fe2o3_kit as fk;
use crate::lapin_kit as lk;
use crate::raw10::{self, Conn10, Msg, message::hdr};
use crate::wire::{Publisher, Received};
use crate::{Case, CaseError, CaseResult, Ctx, Protocol, QueueKind, Variant, case_v, check, check_eq};

/// Publish over 0.9.1 or 1.0, consume over 0.9.1 (cases built on `basic.nack`/`basic.get`).
pub(super) const CONSUME091_BOTH_QUEUES: [Variant; 4] = [
    Variant::AMQP091.on(QueueKind::Classic),
    Variant::TO091.on(QueueKind::Classic),
    Variant::AMQP091.on(QueueKind::Quorum),
    Variant::TO091.on(QueueKind::Quorum),
];

/// Publish over 0.9.1 or 1.0, consume over 1.0 (cases built on 1.0 outcomes).
pub(super) const CONSUME10_BOTH_QUEUES: [Variant; 4] = [
    Variant::TO10.on(QueueKind::Classic),
    Variant::AMQP10.on(QueueKind::Classic),
    Variant::TO10.on(QueueKind::Quorum),
    Variant::AMQP10.on(QueueKind::Quorum),
];

/// How long a negative check ("nothing was dead-lettered") waits for a stray dead letter.
pub(super) const SETTLE_WAIT: Duration = Duration::from_millis(400);

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case_v!(
            "dlx.settle.reject_range_all_in_order",
            "nack multiple=true (0.9.1) or one rejected disposition over a range (1.0) dead-letters every message, in order (#2)",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            reject_range
        ),
        case_v!(
            "dlx.settle.requeue_not_dead_lettered",
            "nack requeue=true (multiple), reject requeue=true, 1.0 released: back in the source in order, redelivered, DLQ empty (#3, #4, #9)",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            requeue_not_dead_lettered
        ),
        case_v!(
            "dlx.settle.reject_one_of_three",
            "rejecting the second of three unacked deliveries dead-letters only it; the other two stay (#5)",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            reject_one_of_three
        ),
        case_v!(
            "dlx.settle.reject_many_keeps_order",
            "100 rejections one by one reach the DLQ in publish order (#7)",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            reject_many
        ),
        case_v!(
            "dlx.settle.requeue_then_reject_once",
            "requeued once, then rejected: dead-lettered exactly once, x-death count 1 (#10)",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            requeue_then_reject
        ),
        case_v!(
            "dlx.settle.nack_order_basic_get",
            "basic.get P1..P3, nack P1,P2 requeue, get them again, nack all: dead letters in delivery-tag order P3,P1,P2 (#11)",
            &CONSUME091_BOTH_QUEUES,
            ["dlx"],
            nack_order_get
        ),
        case_v!(
            "dlx.settle.nack_order_basic_consume",
            "the same with a push consumer: requeued P1,P2 come back first, dead letters P3,P1,P2 (#12)",
            &CONSUME091_BOTH_QUEUES,
            ["dlx"],
            nack_order_consume
        ),
        case_v!(
            "dlx.settle.modified_undeliverable_dead_letters",
            "1.0 modified{undeliverable-here=true} dead-letters as rejected, with or without delivery-failed",
            &CONSUME10_BOTH_QUEUES,
            ["dlx"],
            modified_undeliverable
        ),
        case_v!(
            "dlx.settle.modified_failed_and_released_requeue",
            "1.0 modified{delivery-failed=true}, modified{} and released requeue (quorum: delivery-count counts delivery-failed only); nothing dead-lettered",
            &CONSUME10_BOTH_QUEUES,
            ["dlx"],
            modified_failed_requeues
        ),
        case_v!(
            "dlx.settle.range_after_requeue_in_disposition_order",
            "requeued messages redelivered behind a new one: one reject over the whole range dead-letters in delivery order",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            range_after_requeue
        ),
        case_v!(
            "dlx.settle.connection_close_requeues",
            "a consumer's connection closing with unsettled deliveries requeues them (redelivered), nothing is dead-lettered",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            close_requeues
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// The shared kit.

/// A delivery as [`Taker`] sees it.
#[derive(Clone, Debug)]
pub(super) struct Got {
    /// Body as text.
    pub(super) body: String,
    /// 0.9.1 delivery tag or 1.0 delivery id.
    pub(super) tag: u64,
    /// 0.9.1 `redelivered`; 1.0 `first-acquirer = false`.
    pub(super) redelivered: bool,
    /// 0.9.1 `x-delivery-count` header; 1.0 `header.delivery-count` (absent when 0 or unset).
    pub(super) delivery_count: Option<i64>,
}

/// A manual-settlement consumer over the consuming protocol of the case's variant, with every
/// settlement either protocol offers.
pub(super) enum Taker {
    /// A lapin channel and consumer.
    Amqp091(Channel, Box<lapin::Consumer>),
    /// A raw 1.0 receiver (channel 0, handle 0) and the credit it keeps topped up.
    Amqp10(Box<Conn10>, u32),
}

/// How [`Taker::settle`] settles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum How {
    /// 0.9.1 ack, 1.0 accepted.
    Ack,
    /// 0.9.1 reject requeue=true, 1.0 released.
    Requeue,
    /// 0.9.1 reject requeue=false, 1.0 rejected.
    Reject,
}

fn integer(value: Option<&AMQPValue>) -> Option<i64> {
    match value? {
        AMQPValue::LongLongInt(n) => Some(*n),
        AMQPValue::LongInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortShortInt(n) => Some(i64::from(*n)),
        AMQPValue::LongUInt(n) => Some(i64::from(*n)),
        _ => None,
    }
}

fn amqp10_count(value: Option<Value>) -> Option<i64> {
    match value? {
        Value::Uint(0) => None,
        Value::Uint(n) => Some(i64::from(n)),
        _ => None,
    }
}

impl Taker {
    /// Starts consuming `queue` on a new channel of `conn` (0.9.1) or a new 1.0 connection, with
    /// room for `window` unsettled deliveries.
    pub(super) async fn open(ctx: &Ctx, conn: &lapin::Connection, queue: &str, window: u16) -> Result<Self, CaseError> {
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
    pub(super) async fn next(&mut self) -> Result<Got, CaseError> {
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
    pub(super) async fn next_n(&mut self, n: usize) -> Result<Vec<Got>, CaseError> {
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            out.push(self.next().await.map_err(|e| e.context(&format!("delivery {} of {n}", i + 1)))?);
        }
        Ok(out)
    }

    /// Fails if a delivery arrives within `wait`.
    pub(super) async fn nothing(&mut self, wait: Duration) -> CaseResult {
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
    pub(super) async fn settle(&mut self, got: &Got, how: How) -> CaseResult {
        self.settle_range(got.tag, got.tag, how).await
    }

    /// Settles the deliveries `first..=last` at once: 0.9.1 `basic.ack`/`basic.nack` with
    /// multiple=true on `last` (covering every unsettled tag up to it), a 1.0 disposition over
    /// the range. A single delivery uses `basic.reject` on 0.9.1.
    pub(super) async fn settle_range(&mut self, first: u64, last: u64, how: How) -> CaseResult {
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
    pub(super) async fn nack(&mut self, got: &Got, requeue: bool) -> CaseResult {
        match self {
            Self::Amqp091(ch, _) => {
                ch.basic_nack(got.tag, BasicNackOptions { multiple: false, requeue }).await?;
                Ok(())
            }
            Self::Amqp10(..) => self.settle(got, if requeue { How::Requeue } else { How::Reject }).await,
        }
    }

    /// 1.0 `modified` (fields left out when `None`).
    pub(super) async fn modified(
        &mut self,
        got: &Got,
        failed: Option<bool>,
        undeliverable: Option<bool>,
    ) -> CaseResult {
        let state = DeliveryState::Modified(Modified {
            delivery_failed: failed,
            undeliverable_here: undeliverable,
            message_annotations: None,
        });
        self.settle10(got.tag, got.tag, state).await
    }

    /// Closes the consumer's channel (0.9.1) or connection (1.0).
    pub(super) async fn close(self) {
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
pub(super) enum Answer {
    /// 0.9.1 basic.ack, 1.0 accepted.
    Accepted,
    /// 0.9.1 basic.nack, 1.0 rejected (bare, as 4.0.5 sends it).
    Refused,
}

/// A publisher over the variant's publishing protocol that reports refusals (instead of
/// failing on them) and can give each message its own TTL.
pub(super) enum Sender {
    /// A confirm-mode channel.
    Amqp091(Channel),
    /// A raw 1.0 session (channel 0) with one sending link per queue.
    Amqp10 { conn: Box<Conn10>, links: HashMap<String, u32>, next_id: u32 },
}

impl Sender {
    /// Opens the publishing side of the case's variant.
    pub(super) async fn open(ctx: &Ctx, conn: &lapin::Connection) -> Result<Self, CaseError> {
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
    pub(super) async fn send(&mut self, queue: &str, body: &str, ttl: Option<u32>) -> Result<Answer, CaseError> {
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
    pub(super) async fn send_all(&mut self, queue: &str, bodies: &[&str]) -> Result<Vec<Answer>, CaseError> {
        let mut out = Vec::new();
        for body in bodies {
            out.push(self.send(queue, body, None).await?);
        }
        Ok(out)
    }

    /// Closes the 1.0 connection (the 0.9.1 channel goes with its connection).
    pub(super) async fn close(self) {
        if let Self::Amqp10 { mut conn, .. } = self {
            let _ = tokio::time::timeout(Duration::from_secs(2), conn.close()).await;
        }
    }
}

/// Publishes `bodies` to `queue` over the variant's publishing protocol, each one confirmed.
pub(super) async fn publish_all(ctx: &Ctx, conn: &lapin::Connection, queue: &str, bodies: &[&str]) -> CaseResult {
    let mut p = Publisher::open(ctx, conn).await?;
    for body in bodies {
        p.publish("", queue, body.as_bytes()).await?;
    }
    p.close().await;
    Ok(())
}

/// Bodies of received messages as text.
pub(super) fn bodies(received: &[Received]) -> Vec<String> {
    received.iter().map(|r| String::from_utf8_lossy(&r.body).into_owned()).collect()
}

/// Bodies of [`Got`]s.
pub(super) fn got_bodies(got: &[Got]) -> Vec<String> {
    got.iter().map(|g| g.body.clone()).collect()
}

/// `(queue, reason, count)` of each death, most recent first.
pub(super) fn history(r: &Received) -> Vec<(String, String, u64)> {
    r.deaths.iter().map(|d| (d.queue.clone(), d.reason.clone(), d.count)).collect()
}

/// Takes `n` dead letters from `dlq` and checks their bodies and that each died once in
/// `source` for `reason`.
pub(super) async fn expect_dead(
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
pub(super) async fn dead_counts(
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
fn carried(ctx: &Ctx, n: i64) -> Option<i64> {
    let quorum = dk::queue_kind(ctx) == QueueKind::Quorum;
    (quorum && ctx.variant().consume == Protocol::Amqp10 && n > 0).then_some(n)
}

/// Waits a moment, then checks that `queue` has no ready message.
pub(super) async fn stays_empty(ch: &Channel, queue: &str) -> CaseResult {
    tokio::time::sleep(SETTLE_WAIT).await;
    check_eq!(dk::ready(ch, queue).await?, 0, "ready messages in {queue}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The cases.

async fn reject_range(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    publish_all(&ctx, &s.conn, &s.source, &["m1", "m2", "m3"]).await?;
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 10).await?;
    let got = t.next_n(3).await?;
    check_eq!(got_bodies(&got), vec!["m1", "m2", "m3"], "deliveries");
    let (first, last) = (got.first().map_or(0, |g| g.tag), got.last().map_or(0, |g| g.tag));
    t.settle_range(first, last, How::Reject).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 3).await?;
    t.close().await;
    check_eq!(dk::ready(&s.ch, &s.source).await?, 0, "source queue");
    // A rejection is a failed delivery: a quorum queue's dead letters carry delivery-count 1.
    check_eq!(dead_counts(&ctx, &s.conn, &s.dlq, 3).await?, vec![carried(&ctx, 1); 3], "dead letters' delivery counts");
    expect_dead(&ctx, &s.conn, &s.dlq, &s.source, "rejected", &["m1", "m2", "m3"]).await
}

async fn requeue_not_dead_lettered(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    publish_all(&ctx, &s.conn, &s.source, &["m1", "m2", "m3"]).await?;
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 10).await?;
    let got = t.next_n(3).await?;
    let tag = |i: usize| got.get(i).map_or(0, |g| g.tag);
    // m1, m2 with one nack multiple requeue=true (1.0: released over the range), m3 alone
    // with reject requeue=true (1.0: released).
    t.settle_range(tag(0), tag(1), How::Requeue).await?;
    if let Some(third) = got.get(2) {
        t.settle(third, How::Requeue).await?;
    }
    let again = t.next_n(3).await?;
    check_eq!(got_bodies(&again), vec!["m1", "m2", "m3"], "redeliveries");
    check!(again.iter().all(|g| g.redelivered), "every redelivery is marked redelivered: {again:?}");
    check_eq!(dk::ready(&s.ch, &s.dlq).await?, 0, "DLQ");
    // A single nack requeue=true (0.9.1) too.
    if let Some(first) = again.first() {
        t.nack(first, true).await?;
    }
    let last = t.next().await?;
    check_eq!((last.body.as_str(), last.redelivered), ("m1", true), "after nack requeue=true");
    for g in again.iter().skip(1).chain(std::iter::once(&last)) {
        t.settle(g, How::Ack).await?;
    }
    t.nothing(lk::QUIET).await?;
    t.close().await;
    stays_empty(&s.ch, &s.dlq).await?;
    check_eq!(dk::ready(&s.ch, &s.source).await?, 0, "source queue after the acks");
    Ok(())
}

async fn reject_one_of_three(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    publish_all(&ctx, &s.conn, &s.source, &["m1", "m2", "m3"]).await?;
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 10).await?;
    let got = t.next_n(3).await?;
    if let Some(second) = got.get(1) {
        t.settle(second, How::Reject).await?;
    }
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    check_eq!(dk::ready(&s.ch, &s.source).await?, 0, "source ready while m1, m3 are unacked");
    t.close().await;
    dk::eventually_ready(&s.ch, &s.source, 2).await?;
    let left = crate::wire::drain(&ctx, &s.ch, &s.source).await?;
    check_eq!(left, vec!["m1", "m3"], "left in the source");
    expect_dead(&ctx, &s.conn, &s.dlq, &s.source, "rejected", &["m2"]).await
}

async fn reject_many(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    let names: Vec<String> = (1..=100).map(|i| format!("m{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    publish_all(&ctx, &s.conn, &s.source, &refs).await?;
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 100).await?;
    for _ in 0..100 {
        let g = t.next().await?;
        t.settle(&g, How::Reject).await?;
    }
    dk::eventually_ready(&s.ch, &s.dlq, 100).await?;
    t.close().await;
    let got = take(&ctx, &s.conn, &s.dlq, 100).await?;
    check_eq!(bodies(&got), names, "dead letters");
    Ok(())
}

async fn requeue_then_reject(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    publish_all(&ctx, &s.conn, &s.source, &["m"]).await?;
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 10).await?;
    let first = t.next().await?;
    check!(!first.redelivered, "first delivery marked redelivered");
    t.settle(&first, How::Requeue).await?;
    let second = t.next().await?;
    check_eq!((second.body.as_str(), second.redelivered), ("m", true), "redelivery");
    t.settle(&second, How::Reject).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    t.nothing(lk::QUIET).await?;
    t.close().await;
    check_eq!(dk::ready(&s.ch, &s.source).await?, 0, "source queue");
    expect_dead(&ctx, &s.conn, &s.dlq, &s.source, "rejected", &["m"]).await?;
    stays_empty(&s.ch, &s.dlq).await
}

async fn get_one(ch: &Channel, queue: &str) -> Result<(String, u64, bool), CaseError> {
    let m = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: false })
        .await?
        .ok_or_else(|| CaseError::new(format!("basic.get on {queue}: empty")))?;
    Ok((lk::text(&m.delivery), m.delivery.delivery_tag, m.delivery.redelivered))
}

async fn nack_order_get(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    publish_all(&ctx, &s.conn, &s.source, &["P1", "P2", "P3"]).await?;
    let ch = s.conn.create_channel().await?;
    let mut tags = Vec::new();
    for expected in ["P1", "P2", "P3"] {
        let (body, tag, _) = get_one(&ch, &s.source).await?;
        check_eq!(body, expected, "basic.get");
        tags.push(tag);
    }
    let tag2 = tags.get(1).copied().unwrap_or_default();
    ch.basic_nack(tag2, BasicNackOptions { multiple: true, requeue: true }).await?;
    dk::eventually_ready(&s.ch, &s.source, 2).await?;
    let (b4, _, r4) = get_one(&ch, &s.source).await?;
    let (b5, tag5, r5) = get_one(&ch, &s.source).await?;
    check_eq!((b4.as_str(), r4, b5.as_str(), r5), ("P1", true, "P2", true), "requeued messages got again");
    ch.basic_nack(tag5, BasicNackOptions { multiple: true, requeue: false }).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 3).await?;
    check_eq!(dk::ready(&s.ch, &s.source).await?, 0, "source queue");
    let got = take(&ctx, &s.conn, &s.dlq, 3).await?;
    check_eq!(bodies(&got), vec!["P3", "P1", "P2"], "dead letters in delivery-tag order");
    Ok(())
}

async fn nack_order_consume(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    publish_all(&ctx, &s.conn, &s.source, &["m1", "m2", "m3"]).await?;
    let ch = s.conn.create_channel().await?;
    let mut consumer = lk::consume(&ch, &s.source).await?;
    let first = lk::take(&mut consumer, 3).await?;
    check_eq!(first.iter().map(lk::text).collect::<Vec<_>>(), vec!["m1", "m2", "m3"], "deliveries");
    let d2 = first.get(1).map_or(0, |d| d.delivery_tag);
    ch.basic_nack(d2, BasicNackOptions { multiple: true, requeue: true }).await?;
    let again = lk::take(&mut consumer, 2).await?;
    check_eq!(
        again.iter().map(|d| (lk::text(d), d.redelivered)).collect::<Vec<_>>(),
        vec![("m1".to_owned(), true), ("m2".to_owned(), true)],
        "redeliveries"
    );
    let last = again.last().map_or(0, |d| d.delivery_tag);
    ch.basic_nack(last, BasicNackOptions { multiple: true, requeue: false }).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 3).await?;
    lk::nothing(&mut consumer, lk::QUIET).await?;
    let got = take(&ctx, &s.conn, &s.dlq, 3).await?;
    check_eq!(bodies(&got), vec!["m3", "m1", "m2"], "dead letters in delivery-tag order");
    Ok(())
}

async fn modified_undeliverable(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    publish_all(&ctx, &s.conn, &s.source, &["m1", "m2", "m3"]).await?;
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 10).await?;
    let got = t.next_n(3).await?;
    let combos = [(Some(false), Some(true)), (Some(true), Some(true)), (None, Some(true))];
    for (g, (failed, undeliverable)) in got.iter().zip(combos) {
        t.modified(g, failed, undeliverable).await?;
    }
    dk::eventually_ready(&s.ch, &s.dlq, 3).await?;
    t.nothing(lk::QUIET).await?;
    t.close().await;
    check_eq!(dk::ready(&s.ch, &s.source).await?, 0, "source queue");
    // Only delivery-failed=true counts a failed delivery.
    let expected = vec![carried(&ctx, 0), carried(&ctx, 1), carried(&ctx, 0)];
    check_eq!(dead_counts(&ctx, &s.conn, &s.dlq, 3).await?, expected, "dead letters' delivery counts");
    expect_dead(&ctx, &s.conn, &s.dlq, &s.source, "rejected", &["m1", "m2", "m3"]).await
}

async fn modified_failed_requeues(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    publish_all(&ctx, &s.conn, &s.source, &["m1", "m2", "m3", "m4"]).await?;
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 10).await?;
    let got = t.next_n(4).await?;
    check!(got.iter().all(|g| !g.redelivered && g.delivery_count.is_none()), "first deliveries: {got:?}");
    let combos = [(Some(true), None), (Some(true), Some(false)), (None, None)];
    for (g, (failed, undeliverable)) in got.iter().zip(combos) {
        t.modified(g, failed, undeliverable).await?;
    }
    if let Some(fourth) = got.get(3) {
        t.settle(fourth, How::Requeue).await?;
    }
    let again = t.next_n(4).await?;
    check_eq!(got_bodies(&again), vec!["m1", "m2", "m3", "m4"], "redeliveries");
    check!(again.iter().all(|g| g.redelivered), "redeliveries marked first-acquirer=false: {again:?}");
    let counts: Vec<Option<i64>> = again.iter().map(|g| g.delivery_count).collect();
    let expected = match dk::queue_kind(&ctx) {
        QueueKind::Quorum => vec![Some(1), Some(1), None, None],
        QueueKind::Classic => vec![None, None, None, None],
    };
    check_eq!(counts, expected, "header.delivery-count of the redeliveries");
    if let (Some(first), Some(last)) = (again.first(), again.last()) {
        t.settle_range(first.tag, last.tag, How::Ack).await?;
    }
    t.close().await;
    stays_empty(&s.ch, &s.dlq).await
}

async fn range_after_requeue(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    publish_all(&ctx, &s.conn, &s.source, &["m1", "m2", "m3"]).await?;
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 10).await?;
    let got = t.next_n(3).await?;
    // Requeue m1 and m2 one by one; they come back after m3 was already delivered.
    for g in got.iter().take(2) {
        t.settle(g, How::Requeue).await?;
    }
    let again = t.next_n(2).await?;
    check_eq!(got_bodies(&again), vec!["m1", "m2"], "redeliveries");
    let first = got.get(2).map_or(0, |g| g.tag);
    let last = again.last().map_or(0, |g| g.tag);
    t.settle_range(first, last, How::Reject).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 3).await?;
    t.close().await;
    expect_dead(&ctx, &s.conn, &s.dlq, &s.source, "rejected", &["m3", "m1", "m2"]).await
}

async fn close_requeues(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    publish_all(&ctx, &s.conn, &s.source, &["m1", "m2"]).await?;
    // The consumer gets a connection of its own, which then goes away.
    let own = ctx.lapin().await?;
    let mut t = Taker::open(&ctx, &own, &s.source, 10).await?;
    let got = t.next_n(2).await?;
    check_eq!(got_bodies(&got), vec!["m1", "m2"], "deliveries");
    match t {
        Taker::Amqp091(..) => {
            let _ = own.close(200, "bye".into()).await;
        }
        Taker::Amqp10(..) => t.close().await,
    }
    dk::eventually_ready(&s.ch, &s.source, 2).await?;
    stays_empty(&s.ch, &s.dlq).await?;
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 10).await?;
    let again = t.next_n(2).await?;
    check_eq!(got_bodies(&again), vec!["m1", "m2"], "redeliveries");
    check!(again.iter().all(|g| g.redelivered), "redeliveries marked redelivered: {again:?}");
    t.close().await;
    Ok(())
}
