//! Consumer priorities (`x-priority`) and single active consumer (`x-single-active-consumer`):
//! who receives, who takes over, and what exclusive consumers do beside them.

use std::time::Duration;

use lapin::options::{BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};

use super::amqp10_attach::session;
use crate::{
    Case, CaseError, CaseResult, Ctx, case, case10, check, check_eq,
    fe2o3_kit::queue_addr,
    lapin_kit::{self as lk, ARRIVE, QUIET},
    raw10::WAIT,
};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "consume.priority.highest_first",
            "consumers of priority 0, 10 (prefetch 2) and 5: the 10 takes two, the 5 the rest, the 0 nothing",
            priority_order
        ),
        case!(
            "consume.priority.not_an_integer_406",
            "x-priority \"high\" is refused: 406 invalid arg 'x-priority' … expected integer, got longstr",
            priority_not_integer
        ),
        case!(
            "sac.classic.first_consumer_active_then_next_on_close",
            "a classic single-active-consumer queue delivers to its first consumer only; when its channel \
             closes the second gets everything, the unacked ones redelivered; the API names the active tag",
            classic_takeover
        ),
        case!(
            "sac.quorum.highest_priority_active",
            "a quorum single-active-consumer queue makes the higher-priority consumer active",
            quorum_priority
        ),
        case!(
            "sac.classic.exclusive_consume_403",
            "an exclusive consume on a classic single-active-consumer queue is refused, even first",
            classic_exclusive
        ),
        case10!(
            "amqp10.sac.one_receiver_active_then_the_next",
            "two AMQP 1.0 receivers with credit on a single-active-consumer queue: the first attached \
             gets every message; when it detaches, the second gets them",
            amqp10_receivers
        ),
        case!(
            "sac.quorum.exclusive_consume_ignored",
            "a quorum queue accepts an exclusive consumer beside another (4.0.5 ignores exclusivity)",
            quorum_exclusive
        ),
    ]
}

fn arguments(entries: &[(&str, AMQPValue)]) -> FieldTable {
    let mut table = FieldTable::default();
    for (key, value) in entries {
        table.insert((*key).into(), value.clone());
    }
    table
}

/// Declares the case's queue (durable, so that quorum works) with `args`.
async fn declare(ctx: &Ctx, ch: &lapin::Channel, args: FieldTable) -> Result<String, CaseError> {
    let q = ctx.queue("sac");
    ch.queue_declare(q.as_str().into(), QueueDeclareOptions { durable: true, ..Default::default() }, args).await?;
    Ok(q)
}

/// A consumer on its own channel with `prefetch` and `args`, tagged `tag`.
async fn consumer(
    conn: &lapin::Connection,
    queue: &str,
    tag: &str,
    prefetch: u16,
    args: FieldTable,
) -> Result<(lapin::Channel, lapin::Consumer), CaseError> {
    let ch = conn.create_channel().await?;
    ch.basic_qos(prefetch, BasicQosOptions::default()).await?;
    let consumer = ch.basic_consume(queue.into(), tag.into(), BasicConsumeOptions::default(), args).await?;
    Ok((ch, consumer))
}

async fn publish(ch: &lapin::Channel, queue: &str, n: usize) -> CaseResult {
    for i in 0..n {
        lk::publish(ch, "", queue, format!("m{i}").as_bytes()).await?;
    }
    Ok(())
}

/// Deliveries that arrive within `wait` of each other.
async fn received(consumer: &mut lapin::Consumer, wait: Duration) -> Result<Vec<String>, CaseError> {
    let mut got = Vec::new();
    while let Ok(d) = lk::next(consumer, wait).await {
        got.push(lk::text(&d));
    }
    Ok(got)
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|&s| s.to_owned()).collect()
}

fn priority(p: i64) -> FieldTable {
    arguments(&[("x-priority", AMQPValue::LongLongInt(p))])
}

async fn priority_order(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = declare(&ctx, &ch, FieldTable::default()).await?;
    let (_low_ch, mut low) = consumer(&conn, &q, "low", 0, priority(0)).await?;
    let (_high_ch, mut high) = consumer(&conn, &q, "high", 2, priority(10)).await?;
    let (_mid_ch, mut mid) = consumer(&conn, &q, "mid", 0, priority(5)).await?;
    publish(&ch, &q, 8).await?;
    check_eq!(received(&mut high, QUIET).await?, strings(&["m0", "m1"]), "priority 10, prefetch 2");
    check_eq!(received(&mut mid, QUIET).await?, strings(&["m2", "m3", "m4", "m5", "m6", "m7"]), "priority 5");
    lk::nothing(&mut low, QUIET).await
}

async fn priority_not_integer(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = declare(&ctx, &ch, FieldTable::default()).await?;
    let args = arguments(&[("x-priority", AMQPValue::LongString("high".into()))]);
    let result = ch.basic_consume(q.as_str().into(), "".into(), BasicConsumeOptions::default(), args).await;
    lk::expect_error(
        result,
        406,
        &format!(
            "PRECONDITION_FAILED - invalid arg 'x-priority' for queue '{q}' in vhost '{}': \"expected integer, got longstr\"",
            ctx.broker().vhost
        ),
    )
}

fn single_active(kind: &str) -> FieldTable {
    arguments(&[
        ("x-single-active-consumer", AMQPValue::Boolean(true)),
        ("x-queue-type", AMQPValue::LongString(kind.into())),
    ])
}

async fn classic_takeover(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = declare(&ctx, &ch, single_active("classic")).await?;
    let (first_ch, mut first) = consumer(&conn, &q, "first", 10, FieldTable::default()).await?;
    let (_second_ch, mut second) = consumer(&conn, &q, "second", 10, priority(10)).await?;
    publish(&ch, &q, 4).await?;
    check_eq!(received(&mut first, QUIET).await?, strings(&["m0", "m1", "m2", "m3"]), "the first consumer");
    lk::nothing(&mut second, QUIET).await?;
    active_tag_is(&ctx, &q, "first").await?;
    first_ch.close(200, "bye".into()).await?;
    let mut taken = Vec::new();
    for d in lk::take(&mut second, 4).await? {
        check!(d.redelivered, "{} redelivered", lk::text(&d));
        taken.push(lk::text(&d));
    }
    taken.sort();
    check_eq!(taken, strings(&["m0", "m1", "m2", "m3"]), "the second consumer takes over");
    Ok(())
}

/// Waits (up to 15 s: RabbitMQ refreshes its statistics every 5 s) until the management API
/// names `tag` as the queue's active consumer.
async fn active_tag_is(ctx: &Ctx, queue: &str, tag: &str) -> CaseResult {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let info = ctx.queue_info(queue).await?;
        let active = info.get("single_active_consumer_tag").and_then(|t| t.as_str().map(str::to_owned));
        if active.as_deref() == Some(tag) {
            return Ok(());
        }
        check!(tokio::time::Instant::now() < deadline, "single_active_consumer_tag: expected {tag:?}, got {active:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn quorum_priority(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = declare(&ctx, &ch, single_active("quorum")).await?;
    let (_low_ch, mut low) = consumer(&conn, &q, "low", 1, priority(0)).await?;
    let (_high_ch, mut high) = consumer(&conn, &q, "high", 1, priority(10)).await?;
    publish(&ch, &q, 3).await?;
    let got = lk::next(&mut high, ARRIVE).await?;
    check_eq!(lk::text(&got), "m0".to_owned(), "the high-priority consumer is active");
    lk::nothing(&mut high, QUIET).await?;
    lk::nothing(&mut low, QUIET).await
}

async fn classic_exclusive(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = declare(&ctx, &ch, single_active("classic")).await?;
    let options = BasicConsumeOptions { exclusive: true, ..Default::default() };
    let result = ch.basic_consume(q.as_str().into(), "".into(), options, FieldTable::default()).await;
    lk::expect_error(
        result,
        403,
        &format!("ACCESS_REFUSED - queue '{q}' in vhost '{}' in exclusive use", ctx.broker().vhost),
    )
}

async fn quorum_exclusive(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = declare(&ctx, &ch, arguments(&[("x-queue-type", AMQPValue::LongString("quorum".into()))])).await?;
    let exclusive = BasicConsumeOptions { exclusive: true, ..Default::default() };
    let ch1 = conn.create_channel().await?;
    ch1.basic_consume(q.as_str().into(), "one".into(), exclusive, FieldTable::default()).await?;
    let ch2 = conn.create_channel().await?;
    ch2.basic_consume(q.as_str().into(), "two".into(), BasicConsumeOptions::default(), FieldTable::default()).await?;
    ch2.basic_consume(q.as_str().into(), "three".into(), exclusive, FieldTable::default()).await?;
    Ok(())
}

async fn amqp10_receivers(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = declare(&ctx, &ch, single_active("classic")).await?;
    let mut c = session(&ctx).await?;
    for handle in [1, 2] {
        c.attach_receiver(0, handle, &queue_addr(&q)).await?;
        c.credit(0, handle, 10, false).await?;
    }
    publish(&ch, &q, 3).await?;
    for _ in 0..3 {
        let d = c.recv(0, WAIT).await?;
        check_eq!(d.transfer.handle.0, 1, "the first receiver is the active one");
    }
    c.no_transfer(0, QUIET).await?;
    // Its unsettled deliveries go back to the queue and to the next receiver.
    c.detach(0, 1).await?;
    for _ in 0..3 {
        let d = c.recv(0, WAIT).await?;
        check_eq!(d.transfer.handle.0, 2, "the second receiver took over");
    }
    c.close().await
}
