//! Acknowledgements: ack/nack/reject with multiple and requeue, recover, requeue order, errors.

use crate::{
    Case, CaseError, CaseResult, Ctx, amqprs_kit as ak, case, check_eq,
    lapin_kit::{self as lk, confirm, eventually, publish},
};
use amqprs::channel::{
    BasicAckArguments, BasicConsumeArguments, BasicNackArguments, BasicRejectArguments, QueueDeclareArguments,
};
use lapin::options::{BasicAckOptions, BasicNackOptions, BasicQosOptions, BasicRecoverOptions, BasicRejectOptions};
use std::time::Duration;

pub(crate) fn cases() -> Vec<Case> {
    vec![
        crate::case_matrix!(
            "acks.settle.any_protocol",
            "ack removes, requeue redelivers marked redelivered, reject removes, in every protocol pair",
            settle_any_protocol
        ),
        case!(
            "acks.requeue.channel_close_original_position",
            "unacked messages return to their original place, redelivered, when the channel closes",
            requeue_channel_close
        ),
        case!(
            "acks.requeue.connection_close_original_position",
            "unacked messages return to their original place, redelivered, when the connection closes",
            requeue_connection_close
        ),
        case!(
            "acks.ack.multiple",
            "ack multiple=true settles every tag up to and including the given one",
            ack_multiple
        ),
        case!(
            "acks.ack.multiple_zero_acks_all",
            "ack tag 0 with multiple=true settles everything outstanding",
            ack_zero_multiple
        ),
        case!(
            "acks.nack.multiple_no_requeue_removes",
            "nack multiple=true requeue=false drops all up to the tag",
            nack_multiple_drop
        ),
        case!(
            "acks.nack.requeue_redelivers",
            "nack requeue=true delivers the message again with redelivered=true",
            nack_requeue
        ),
        case!(
            "acks.reject.requeue_redelivers",
            "reject requeue=true delivers the message again with redelivered=true",
            reject_requeue
        ),
        case!("acks.reject.no_requeue_drops", "reject requeue=false removes the message", reject_drop),
        case!(
            "acks.recover.requeue",
            "basic.recover requeue=true redelivers all unacked messages with redelivered=true",
            recover
        ),
        case!(
            "acks.ack.unknown_tag_406",
            "acking a tag never delivered closes the channel with 406 unknown delivery tag",
            ["amqprs"],
            ack_unknown
        ),
        case!(
            "acks.ack.double_ack_406",
            "acking the same tag twice closes the channel with 406 unknown delivery tag",
            ["amqprs"],
            ack_double
        ),
        case!(
            "acks.nack.unknown_tag_406",
            "nacking an unknown tag closes the channel with 406",
            ["amqprs"],
            nack_unknown
        ),
        case!(
            "acks.reject.unknown_tag_406",
            "rejecting an unknown tag closes the channel with 406",
            ["amqprs"],
            reject_unknown
        ),
    ]
}

async fn setup(ctx: &Ctx, n: usize) -> Result<(lapin::Connection, lapin::Channel, String), CaseError> {
    let (conn, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    for i in 1..=n {
        publish(&ch, "", &q, format!("m{i}").as_bytes()).await?;
    }
    Ok((conn, ch, q))
}

/// Drains with basic.get, returning `(body, redelivered)` pairs.
async fn drain_flags(ch: &lapin::Channel, q: &str) -> Result<Vec<(String, bool)>, CaseError> {
    let mut out = Vec::new();
    while let Some(m) = lk::get(ch, q).await? {
        out.push((String::from_utf8_lossy(&m.delivery.data).into_owned(), m.delivery.redelivered));
    }
    Ok(out)
}

fn flags(v: &[(&str, bool)]) -> Vec<(String, bool)> {
    v.iter().map(|(s, b)| ((*s).to_owned(), *b)).collect()
}

/// Takes m1..m3 on a consumer channel (prefetch 3), acks m2, then `close` returns the rest.
async fn requeue_after(ctx: &Ctx, close_connection: bool) -> CaseResult {
    let (conn, ch, q) = setup(ctx, 5).await?;
    let cconn = ctx.lapin().await?;
    let cch = cconn.create_channel().await?;
    cch.basic_qos(3, BasicQosOptions::default()).await?;
    let mut c = lk::consume(&cch, &q).await?;
    let got = lk::take(&mut c, 3).await?;
    let m2 = got.get(1).ok_or_else(|| CaseError::new("missing m2"))?;
    cch.basic_ack(m2.delivery_tag, BasicAckOptions::default()).await?;
    // The ack frees a prefetch slot, so m4 is delivered too; wait for it so the state is exact.
    let m4 = lk::next(&mut c, lk::ARRIVE).await?;
    check_eq!(lk::text(&m4), "m4", "delivery after the ack");
    if close_connection {
        cconn.close(200, "bye".into()).await?;
    } else {
        cch.close(200, "bye".into()).await?;
    }
    eventually(Duration::from_secs(5), "requeue of unacked messages", || async {
        Ok(lk::message_count(&conn, &q).await? == 4)
    })
    .await?;
    // RabbitMQ puts requeued messages back at their original position (ahead of m5).
    check_eq!(
        drain_flags(&ch, &q).await?,
        flags(&[("m1", true), ("m3", true), ("m4", true), ("m5", false)]),
        "queue contents (body, redelivered) after requeue"
    );
    Ok(())
}

async fn requeue_channel_close(ctx: Ctx) -> CaseResult {
    requeue_after(&ctx, false).await
}

async fn requeue_connection_close(ctx: Ctx) -> CaseResult {
    requeue_after(&ctx, true).await
}

/// Consumer channel holding all `n` messages unacked.
async fn holding(
    ctx: &Ctx,
    n: usize,
) -> Result<
    (lapin::Connection, lapin::Channel, lapin::Channel, lapin::Consumer, Vec<lapin::message::Delivery>, String),
    CaseError,
> {
    let (conn, ch, q) = setup(ctx, n).await?;
    let cch = conn.create_channel().await?;
    let mut c = lk::consume(&cch, &q).await?;
    let got = lk::take(&mut c, n).await?;
    Ok((conn, ch, cch, c, got, q))
}

async fn ack_multiple(ctx: Ctx) -> CaseResult {
    let (conn, ch, cch, _c, _got, q) = holding(&ctx, 5).await?;
    cch.basic_ack(3, BasicAckOptions { multiple: true }).await?;
    cch.close(200, "bye".into()).await?;
    eventually(Duration::from_secs(5), "requeue", || async { Ok(lk::message_count(&conn, &q).await? == 2) }).await?;
    check_eq!(drain_flags(&ch, &q).await?, flags(&[("m4", true), ("m5", true)]), "left after ack multiple of tag 3");
    Ok(())
}

async fn ack_zero_multiple(ctx: Ctx) -> CaseResult {
    let (conn, _ch, cch, _c, _got, q) = holding(&ctx, 4).await?;
    cch.basic_ack(0, BasicAckOptions { multiple: true }).await?;
    cch.close(200, "bye".into()).await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    check_eq!(lk::message_count(&conn, &q).await?, 0, "messages left after ack 0 multiple");
    Ok(())
}

async fn nack_multiple_drop(ctx: Ctx) -> CaseResult {
    let (conn, ch, cch, _c, _got, q) = holding(&ctx, 4).await?;
    cch.basic_nack(3, BasicNackOptions { multiple: true, requeue: false }).await?;
    cch.close(200, "bye".into()).await?;
    eventually(Duration::from_secs(5), "requeue", || async { Ok(lk::message_count(&conn, &q).await? == 1) }).await?;
    check_eq!(drain_flags(&ch, &q).await?, flags(&[("m4", true)]), "left after nack multiple requeue=false of tag 3");
    Ok(())
}

async fn nack_requeue(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, cch, mut c, _got, _q) = holding(&ctx, 2).await?;
    cch.basic_nack(1, BasicNackOptions { multiple: false, requeue: true }).await?;
    let again = lk::next(&mut c, lk::ARRIVE).await?;
    check_eq!(
        (lk::text(&again), again.redelivered, again.delivery_tag),
        ("m1".to_owned(), true, 3),
        "(body, redelivered, tag) of the redelivery"
    );
    Ok(())
}

async fn reject_requeue(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, cch, mut c, _got, _q) = holding(&ctx, 2).await?;
    cch.basic_reject(2, BasicRejectOptions { requeue: true }).await?;
    let again = lk::next(&mut c, lk::ARRIVE).await?;
    check_eq!(
        (lk::text(&again), again.redelivered, again.delivery_tag),
        ("m2".to_owned(), true, 3),
        "(body, redelivered, tag) of the redelivery"
    );
    lk::nothing(&mut c, lk::QUIET).await
}

async fn reject_drop(ctx: Ctx) -> CaseResult {
    let (conn, ch, cch, mut c, _got, q) = holding(&ctx, 2).await?;
    cch.basic_reject(1, BasicRejectOptions { requeue: false }).await?;
    lk::nothing(&mut c, lk::QUIET).await?;
    cch.close(200, "bye".into()).await?;
    eventually(Duration::from_secs(5), "requeue", || async { Ok(lk::message_count(&conn, &q).await? == 1) }).await?;
    check_eq!(drain_flags(&ch, &q).await?, flags(&[("m2", true)]), "left after reject requeue=false of m1");
    Ok(())
}

async fn recover(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, cch, mut c, _got, _q) = holding(&ctx, 3).await?;
    cch.basic_ack(2, BasicAckOptions::default()).await?;
    cch.basic_recover(BasicRecoverOptions { requeue: true }).await?;
    let again = lk::take(&mut c, 2).await?;
    let seen: Vec<(String, bool, u64)> = again.iter().map(|d| (lk::text(d), d.redelivered, d.delivery_tag)).collect();
    check_eq!(
        seen,
        vec![("m1".to_owned(), true, 4), ("m3".to_owned(), true, 5)],
        "(body, redelivered, tag) after recover"
    );
    lk::nothing(&mut c, lk::QUIET).await
}

/// amqprs channel with `n` unacked deliveries from a fresh queue.
async fn amqprs_holding(ctx: &Ctx, n: usize) -> Result<(amqprs::channel::Channel, ak::Events), CaseError> {
    let a = ctx.amqprs().await?;
    let (ch, ev) = ak::channel(&a).await?;
    let q = ctx.queue("q");
    ch.queue_declare(QueueDeclareArguments::new(&q)).await?;
    for i in 0..n {
        ak::publish(&ch, "", &q, amqprs::BasicProperties::default(), format!("m{i}").into_bytes()).await?;
    }
    let (_tag, mut rx) = ch.basic_consume_rx(BasicConsumeArguments::new(&q, "")).await?;
    for _ in 0..n {
        ak::recv(&mut rx, lk::ARRIVE).await?;
    }
    // Keep the receiver alive by leaking it into a task that drains it.
    tokio::spawn(async move { while rx.recv().await.is_some() {} });
    Ok((ch, ev))
}

async fn ack_unknown(ctx: Ctx) -> CaseResult {
    let (ch, mut ev) = amqprs_holding(&ctx, 1).await?;
    ch.basic_ack(BasicAckArguments::new(42, false)).await?;
    ev.expect_close().await?.expect(406, "PRECONDITION_FAILED - unknown delivery tag 42", 60, 80)
}

async fn ack_double(ctx: Ctx) -> CaseResult {
    let (ch, mut ev) = amqprs_holding(&ctx, 1).await?;
    ch.basic_ack(BasicAckArguments::new(1, false)).await?;
    ch.basic_ack(BasicAckArguments::new(1, false)).await?;
    ev.expect_close().await?.expect(406, "PRECONDITION_FAILED - unknown delivery tag 1", 60, 80)
}

async fn nack_unknown(ctx: Ctx) -> CaseResult {
    let (ch, mut ev) = amqprs_holding(&ctx, 1).await?;
    ch.basic_nack(BasicNackArguments::new(7, false, true)).await?;
    ev.expect_close().await?.expect(406, "PRECONDITION_FAILED - unknown delivery tag 7", 60, 120)
}

async fn reject_unknown(ctx: Ctx) -> CaseResult {
    let (ch, mut ev) = amqprs_holding(&ctx, 1).await?;
    ch.basic_reject(BasicRejectArguments::new(9, true)).await?;
    ev.expect_close().await?.expect(406, "PRECONDITION_FAILED - unknown delivery tag 9", 60, 90)
}

async fn settle_any_protocol(ctx: Ctx) -> CaseResult {
    use crate::wire::{Consumer, Publisher, Settle};
    let (c, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    let mut p = Publisher::open(&ctx, &c).await?;
    for body in ["a", "b", "c"] {
        p.publish("", &q, body.as_bytes()).await?;
    }
    p.close().await;
    // One delivery at a time, so a requeued message is the next one delivered.
    let mut consumer = Consumer::open(&ctx, &c, &q, 1).await?;
    let mut seen = Vec::new();
    for how in [Settle::Ack, Settle::Requeue, Settle::Reject, Settle::Ack] {
        let d = consumer.next().await?;
        seen.push((String::from_utf8_lossy(&d.body).into_owned(), d.redelivered));
        consumer.settle(&d, how).await?;
    }
    consumer.close().await;
    let expected: Vec<(String, bool)> =
        [("a", false), ("b", false), ("b", true), ("c", false)].iter().map(|(b, r)| ((*b).to_owned(), *r)).collect();
    check_eq!(seen, expected, "(body, redelivered): ack a, requeue b, reject the redelivered b, ack c");
    check_eq!(lk::message_count(&c, &q).await?, 0, "messages left");
    Ok(())
}
