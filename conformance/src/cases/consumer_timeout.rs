//! The consumer (delivery acknowledgement) timeout: a channel whose oldest unacknowledged
//! delivery is older than its queue's `x-consumer-timeout` argument or `consumer-timeout`
//! policy is closed with 406, and the delivery goes back to its queue, redelivered.
//!
//! RabbitMQ 4.0.5 checks on a 60-second channel tick, so it closes up to a minute after the
//! deadline: these cases allow two minutes. They check that the close never comes before the
//! timeout, which any faithful broker (checking on a tick or at the deadline) satisfies.

use std::time::{Duration, Instant};

use amqprs::channel::{BasicAckArguments, BasicConsumeArguments, BasicGetArguments, Channel, QueueDeclareArguments};
use lapin::types::{AMQPValue, FieldTable};

use crate::amqprs_kit::{self as ak, ChanEvent, Events};
use crate::dlx_kit::{self as dk, long};
use crate::lapin_kit as lk;
use crate::{Case, CaseError, CaseResult, Ctx, QueueKind, Variant, case, case_v, check, check_eq};

const BOTH_QUEUES: [Variant; 2] = [Variant::AMQP091.on(QueueKind::Classic), Variant::AMQP091.on(QueueKind::Quorum)];
/// The timeout the cases set.
const TIMEOUT_MS: i64 = 1000;
/// How long a case waits for the close: RabbitMQ's 60-second tick, twice.
const CLOSE_WITHIN: Duration = Duration::from_secs(125);
/// Each case's time limit.
const CASE_SECS: u64 = 150;

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case_v!(
            "consumer_timeout.queue_argument",
            "a delivery not acked within x-consumer-timeout closes the channel (406, RabbitMQ's text); it is redelivered",
            &BOTH_QUEUES,
            ["slow"],
            queue_argument
        )
        .timeout(CASE_SECS),
        case_v!(
            "consumer_timeout.policy",
            "a consumer-timeout policy times an unacked delivery out like the argument: 406, then redelivered",
            &BOTH_QUEUES,
            ["slow"],
            policy
        )
        .timeout(CASE_SECS),
        case!(
            "consumer_timeout.basic_get",
            "a basic.get delivery not acked within x-consumer-timeout closes its channel too (406); it is redelivered",
            ["slow"],
            basic_get
        )
        .timeout(CASE_SECS),
        case!(
            "consumer_timeout.acked_not_timed_out",
            "a channel whose delivery was acked stays open while another channel's unacked one times out",
            ["slow"],
            acked_not_timed_out
        )
        .timeout(CASE_SECS),
    ]
}

/// RabbitMQ 4.0.5's close text for `channel`.
fn close_text(channel: u16) -> String {
    format!(
        "PRECONDITION_FAILED - delivery acknowledgement on channel {channel} timed out. Timeout value used: \
         {TIMEOUT_MS} ms. This timeout value can be configured, see consumers doc guide to learn more"
    )
}

/// Declares the case's queue, of the variant's type, with `arguments`.
async fn declare(ctx: &Ctx, arguments: &[(&str, AMQPValue)]) -> Result<(lapin::Connection, String), CaseError> {
    let conn = ctx.lapin().await?;
    let ch = conn.create_channel().await?;
    let q = ctx.queue("q");
    let mut table = FieldTable::default();
    for (key, value) in arguments {
        table.insert((*key).into(), value.clone());
    }
    dk::declare_typed(ctx, &ch, &q, table).await?;
    // Confirmed: the cases then fetch it over another connection at once.
    lk::confirm(&ch).await?;
    lk::publish(&ch, "", &q, b"m").await?;
    Ok((conn, q))
}

/// Waits for the channel's close, checks it is the timeout's and came no earlier than it.
///
/// `asked` is taken before the request that fetched the delivery: the broker starts the
/// delivery's clock after that and before the client sees the delivery, so a bound measured from
/// the client's receipt would be late by the write (it failed CI once, 995 ms under load).
async fn expect_timed_out(ev: &mut Events, channel: u16, asked: Instant) -> CaseResult {
    let deadline = Instant::now() + CLOSE_WITHIN;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match ev.next(left).await? {
            ChanEvent::Close(close) => {
                close.expect(406, &close_text(channel), 0, 0)?;
                let after = asked.elapsed();
                check!(after >= Duration::from_millis(1000), "closed {} ms after the delivery", after.as_millis());
                return Ok(());
            }
            _ => continue,
        }
    }
}

/// The message came back: redelivered, and on a quorum queue with one delivery counted.
async fn expect_redelivered(ctx: &Ctx, conn: &lapin::Connection, q: &str) -> CaseResult {
    let ch = conn.create_channel().await?;
    let mut consumer = lk::consume(&ch, q).await?;
    let d = lk::next(&mut consumer, lk::ARRIVE).await?;
    check_eq!(String::from_utf8_lossy(&d.data).into_owned(), "m", "body");
    check!(d.redelivered, "the timed-out delivery comes back redelivered");
    let count = d.properties.headers().as_ref().and_then(|h| h.inner().get("x-delivery-count").cloned());
    let count = count.and_then(|v| match v {
        AMQPValue::LongLongInt(n) => Some(n),
        AMQPValue::LongInt(n) => Some(i64::from(n)),
        AMQPValue::LongUInt(n) => Some(i64::from(n)),
        _ => None,
    });
    let expected = (dk::queue_kind(ctx) == QueueKind::Quorum).then_some(1);
    check_eq!(count, expected, "x-delivery-count");
    Ok(())
}

/// Consumes the queue with manual acks on a fresh channel and takes the one delivery.
async fn consume_one(conn: &amqprs::connection::Connection, q: &str) -> Result<(Channel, Events, u64), CaseError> {
    let (ch, ev) = ak::channel(conn).await?;
    let (_tag, mut rx) = ch.basic_consume_rx(BasicConsumeArguments::new(q, "")).await?;
    let m = ak::recv(&mut rx, lk::ARRIVE).await?;
    let tag = m.deliver.map(|d| d.delivery_tag()).ok_or_else(|| CaseError::new("delivery without deliver method"))?;
    Ok((ch, ev, tag))
}

async fn queue_argument(ctx: Ctx) -> CaseResult {
    let (conn, q) = declare(&ctx, &[("x-consumer-timeout", long(TIMEOUT_MS))]).await?;
    let a = ctx.amqprs().await?;
    let asked = Instant::now();
    let (ch, mut ev, _tag) = consume_one(&a, &q).await?;
    expect_timed_out(&mut ev, ch.channel_id(), asked).await?;
    expect_redelivered(&ctx, &conn, &q).await
}

async fn policy(ctx: Ctx) -> CaseResult {
    let (conn, q) = declare(&ctx, &[]).await?;
    ctx.set_policy(&format!("^{q}$"), "queues", 0, &format!(r#"{{"consumer-timeout":{TIMEOUT_MS}}}"#)).await?;
    let a = ctx.amqprs().await?;
    let asked = Instant::now();
    let (ch, mut ev, _tag) = consume_one(&a, &q).await?;
    expect_timed_out(&mut ev, ch.channel_id(), asked).await?;
    expect_redelivered(&ctx, &conn, &q).await
}

async fn basic_get(ctx: Ctx) -> CaseResult {
    let (conn, q) = declare(&ctx, &[("x-consumer-timeout", long(TIMEOUT_MS))]).await?;
    let a = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&a).await?;
    let asked = Instant::now();
    let got = ch.basic_get(BasicGetArguments::new(&q)).await?;
    check!(got.is_some(), "basic.get returns the message");
    expect_timed_out(&mut ev, ch.channel_id(), asked).await?;
    expect_redelivered(&ctx, &conn, &q).await
}

async fn acked_not_timed_out(ctx: Ctx) -> CaseResult {
    let (conn, q) = declare(&ctx, &[("x-consumer-timeout", long(TIMEOUT_MS))]).await?;
    let a = ctx.amqprs().await?;
    // The acking channel opens first: RabbitMQ's tick for it runs before the other's.
    let (acking, mut acking_ev) = ak::channel(&a).await?;
    let (first, ..) =
        acking.basic_get(BasicGetArguments::new(&q)).await?.ok_or_else(|| CaseError::new("no message"))?;
    acking.basic_ack(BasicAckArguments::new(first.delivery_tag(), false)).await?;
    let publishing = conn.create_channel().await?;
    lk::confirm(&publishing).await?;
    lk::publish(&publishing, "", &q, b"m").await?;
    let (holding, mut holding_ev) = ak::channel(&a).await?;
    let asked = Instant::now();
    let got = holding.basic_get(BasicGetArguments::new(&q)).await?;
    check!(got.is_some(), "basic.get returns the second message");
    expect_timed_out(&mut holding_ev, holding.channel_id(), asked).await?;
    acking_ev.quiet(lk::QUIET).await?;
    check!(acking.is_open(), "the channel that acked is still open");
    // It still answers.
    acking.queue_declare(QueueDeclareArguments::new(&q).passive(true).finish()).await?;
    expect_redelivered(&ctx, &conn, &q).await
}
