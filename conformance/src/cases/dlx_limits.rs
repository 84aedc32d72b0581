//! TTL, length limits, the quorum delivery limit and queue expiry as dead-lettering triggers
//! (rabbitmq-dlx.md §1.3–1.5; reference-observations "Dead lettering" 10, 11, 14), for classic
//! and quorum source queues and 0.9.1 and 1.0 clients.

use std::time::Duration;

use lapin::options::QueueDeclareOptions;
use lapin::types::{AMQPValue, FieldTable};

use super::dlx_basic::take;
use super::dlx_settle::{
    Answer, CONSUME091_BOTH_QUEUES, How, Sender, Taker, expect_dead, got_bodies, history, publish_all, stays_empty,
};
use crate::amqprs_kit as ak;
use crate::dlx_kit::{self as dk, long, text};
use crate::lapin_kit as lk;
use crate::{Case, CaseError, CaseResult, Ctx, Protocol, QueueKind, Variant, case, case_v, check, check_eq};

const CLASSIC_091: [Variant; 1] = [Variant::AMQP091.on(QueueKind::Classic)];
const QUORUM_091: [Variant; 1] = [Variant::AMQP091.on(QueueKind::Quorum)];
const QUORUM_PUBLISH_EITHER: [Variant; 2] =
    [Variant::AMQP091.on(QueueKind::Quorum), Variant::TO091.on(QueueKind::Quorum)];

use Answer::{Accepted as Acc, Refused as Ref};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case_v!(
            "dlx.ttl.per_message_expires_to_dlq",
            "a per-message TTL (0.9.1 expiration, 1.0 header.ttl) expires messages with no consumer and no further publish: DLQ, reason expired",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            per_message_ttl
        ),
        case_v!(
            "dlx.ttl.min_of_queue_and_message",
            "the effective TTL is min(queue TTL, message TTL), whichever of the two is smaller",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            min_ttl
        ),
        case_v!(
            "dlx.ttl.expiry_only_at_head",
            "an expired message behind a live one stays in the queue until it reaches the head",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            only_at_head
        ),
        case_v!(
            "dlx.ttl.queue_ttl_zero_no_consumer",
            "x-message-ttl 0 with no consumer: every message is dead-lettered at once as expired",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            queue_ttl_zero
        ),
        case_v!(
            "dlx.ttl.message_ttl_zero_no_consumer",
            "a per-message TTL of 0 with no consumer: dead-lettered at once as expired",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            message_ttl_zero
        ),
        case_v!(
            "dlx.ttl.zero_with_consumer_delivers",
            "x-message-ttl 0 with a consumer that can take the message at once: delivered, not dead-lettered",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            ttl_zero_consumer
        ),
        case!(
            "dlx.ttl.invalid_expiration_406",
            "expiration '-5', 'abc', '12x' close the channel: 406 invalid expiration with RabbitMQ's reason",
            ["dlx"],
            invalid_expiration
        ),
        case_v!(
            "dlx.max_length_bytes.drop_head",
            "x-max-length-bytes room for two: aa, bb, cc keeps bb, cc and dead-letters aa as maxlen (a 1.0 message counts its whole bare message)",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            max_bytes
        ),
        case_v!(
            "dlx.overflow.reject_publish_refused_not_dead_lettered",
            "reject-publish: 0.9.1 basic.nack / bare 1.0 rejected, no dead letter (quorum: approximate, the crossing message is accepted)",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            reject_publish
        ),
        case_v!(
            "dlx.overflow.reject_publish_dlx_classic",
            "classic reject-publish-dlx, max-length 1: P1 kept; P2, P3 refused and dead-lettered as maxlen (#37)",
            &Variant::MATRIX_CLASSIC,
            ["dlx"],
            reject_publish_dlx_classic
        ),
        case_v!(
            "dlx.overflow.reject_publish_dlx_quorum_is_drop_head",
            "quorum reject-publish-dlx behaves as drop-head: all confirmed, P3 kept, P1, P2 dead-lettered",
            &Variant::MATRIX_QUORUM,
            ["dlx"],
            reject_publish_dlx_quorum
        ),
        case_v!(
            "dlx.overflow.quorum_reject_publish_soft_limit",
            "quorum reject-publish, max-length 2: 3 accepted, then refused until back at 80 % of the limit",
            &QUORUM_PUBLISH_EITHER,
            ["dlx"],
            quorum_soft_limit
        ),
        case_v!(
            "dlx.delivery_limit.n_plus_one_deliveries",
            "quorum x-delivery-limit 2: three deliveries with delivery counts none, 1, 2, then delivery_limit; the dead letter has no count",
            &Variant::MATRIX_QUORUM,
            ["dlx"],
            delivery_limit_two
        ),
        case_v!(
            "dlx.delivery_limit.every_return_counts",
            "4.0.5 counts every return: reject requeue, nack requeue and a channel close each raise x-delivery-count",
            &QUORUM_PUBLISH_EITHER,
            ["dlx"],
            every_return_counts
        ),
        case_v!(
            "dlx.delivery_limit.zero",
            "quorum x-delivery-limit 0: the first requeue (0.9.1 reject requeue=true, 1.0 released) dead-letters",
            &Variant::MATRIX_QUORUM,
            ["dlx"],
            delivery_limit_zero
        ),
        case_v!(
            "dlx.delivery_limit.default_20",
            "a quorum queue without a limit delivers 21 times, then dead-letters as delivery_limit",
            &Variant::MATRIX_QUORUM,
            ["dlx"],
            delivery_limit_default
        ),
        case_v!(
            "dlx.delivery_limit.negative_unlimited",
            "quorum x-delivery-limit -1: 25 returns and still delivered, nothing dead-lettered",
            &Variant::MATRIX_QUORUM,
            ["dlx"],
            delivery_limit_negative
        ),
        case_v!(
            "dlx.expires.unused_queue_not_dead_lettered",
            "x-expires: an unused queue is deleted with its messages, which are not dead-lettered",
            &CONSUME091_BOTH_QUEUES,
            ["dlx"],
            expires_deleted
        ),
        case_v!(
            "dlx.expires.passive_declare_resets_timer",
            "a passive queue.declare of a classic queue counts as use: the x-expires timer starts again",
            &CLASSIC_091,
            ["dlx"],
            expires_passive
        ),
        case_v!(
            "dlx.expires.quorum_passive_declare_no_use",
            "a quorum queue's x-expires counts only consumers and gets: passive declares do not keep it",
            &QUORUM_091,
            ["dlx"],
            expires_quorum_passive
        ),
    ]
}

/// A second source queue of the variant's type whose dead letters reach the setup's DLQ (its
/// dead-letter routing key is the first source's name).
async fn second_source(
    ctx: &Ctx,
    s: &dk::Setup,
    extra: &[(&str, lapin::types::AMQPValue)],
) -> Result<String, CaseError> {
    let name = ctx.queue("src2");
    let mut args = dk::args(extra);
    args.insert("x-dead-letter-exchange".into(), text(&s.dlx));
    args.insert("x-dead-letter-routing-key".into(), text(&s.source));
    dk::declare_typed(ctx, &s.ch, &name, args).await?;
    Ok(name)
}

async fn per_message_ttl(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    let mut p = Sender::open(&ctx, &s.conn).await?;
    check_eq!(p.send(&s.source, "t1", Some(100)).await?, Acc, "t1");
    check_eq!(p.send(&s.source, "t2", Some(100)).await?, Acc, "t2");
    p.close().await;
    dk::eventually_ready(&s.ch, &s.dlq, 2).await?;
    check_eq!(dk::ready(&s.ch, &s.source).await?, 0, "source queue");
    expect_dead(&ctx, &s.conn, &s.dlq, &s.source, "expired", &["t1", "t2"]).await
}

async fn min_ttl(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[("x-message-ttl", long(100))]).await?;
    let other = second_source(&ctx, &s, &[("x-message-ttl", long(60_000))]).await?;
    let mut p = Sender::open(&ctx, &s.conn).await?;
    check_eq!(p.send(&s.source, "queue-ttl-shorter", Some(60_000)).await?, Acc, "publish");
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    check_eq!(p.send(&other, "message-ttl-shorter", Some(100)).await?, Acc, "publish");
    dk::eventually_ready(&s.ch, &s.dlq, 2).await?;
    p.close().await;
    let got = take(&ctx, &s.conn, &s.dlq, 2).await?;
    let seen: Vec<_> = got.iter().map(|r| (String::from_utf8_lossy(&r.body).into_owned(), history(r))).collect();
    check_eq!(
        seen,
        vec![
            ("queue-ttl-shorter".to_owned(), vec![(s.source.clone(), "expired".to_owned(), 1)]),
            ("message-ttl-shorter".to_owned(), vec![(other.clone(), "expired".to_owned(), 1)]),
        ],
        "dead letters"
    );
    Ok(())
}

async fn only_at_head(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    let mut p = Sender::open(&ctx, &s.conn).await?;
    check_eq!(p.send(&s.source, "long", Some(60_000)).await?, Acc, "long");
    check_eq!(p.send(&s.source, "short", Some(50)).await?, Acc, "short");
    p.close().await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    check_eq!(dk::ready(&s.ch, &s.dlq).await?, 0, "DLQ while 'short' waits behind 'long'");
    check_eq!(dk::ready(&s.ch, &s.source).await?, 2, "source queue holds both");
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 1).await?;
    let head = t.next().await?;
    check_eq!(head.body.as_str(), "long", "head");
    t.settle(&head, How::Ack).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    t.nothing(lk::QUIET).await?;
    t.close().await;
    check_eq!(dk::ready(&s.ch, &s.source).await?, 0, "source queue");
    expect_dead(&ctx, &s.conn, &s.dlq, &s.source, "expired", &["short"]).await
}

async fn queue_ttl_zero(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[("x-message-ttl", long(0))]).await?;
    publish_all(&ctx, &s.conn, &s.source, &["z1", "z2"]).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 2).await?;
    check_eq!(dk::ready(&s.ch, &s.source).await?, 0, "source queue");
    expect_dead(&ctx, &s.conn, &s.dlq, &s.source, "expired", &["z1", "z2"]).await
}

async fn message_ttl_zero(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    let mut p = Sender::open(&ctx, &s.conn).await?;
    check_eq!(p.send(&s.source, "z1", Some(0)).await?, Acc, "z1");
    check_eq!(p.send(&s.source, "z2", Some(0)).await?, Acc, "z2");
    p.close().await;
    dk::eventually_ready(&s.ch, &s.dlq, 2).await?;
    check_eq!(dk::ready(&s.ch, &s.source).await?, 0, "source queue");
    expect_dead(&ctx, &s.conn, &s.dlq, &s.source, "expired", &["z1", "z2"]).await
}

async fn ttl_zero_consumer(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[("x-message-ttl", long(0))]).await?;
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 10).await?;
    // Let a 1.0 flow reach the queue before the publish.
    tokio::time::sleep(Duration::from_millis(100)).await;
    publish_all(&ctx, &s.conn, &s.source, &["now1", "now2"]).await?;
    let got = t.next_n(2).await?;
    check_eq!(got_bodies(&got), vec!["now1", "now2"], "deliveries");
    for g in &got {
        t.settle(g, How::Ack).await?;
    }
    t.close().await;
    stays_empty(&s.ch, &s.dlq).await
}

async fn invalid_expiration(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let q = ctx.queue("q");
    let (ch, _ev) = ak::channel(&conn).await?;
    ch.queue_declare(amqprs::channel::QueueDeclareArguments::new(&q)).await?;
    for (expiration, reason) in
        [("-5", "{value_negative,-5}"), ("abc", "no_integer"), ("12x", "{leftover_string,\"x\"}")]
    {
        let (ch, mut ev) = ak::channel(&conn).await?;
        let mut props = amqprs::BasicProperties::default();
        props.with_expiration(expiration);
        ak::publish(&ch, "", &q, props, b"m".to_vec()).await?;
        let close = ev.expect_close().await?;
        close
            .expect(406, &format!("PRECONDITION_FAILED - invalid expiration '{expiration}': {reason}"), 60, 40)
            .map_err(|e| e.context(&format!("expiration {expiration:?}")))?;
    }
    Ok(())
}

async fn max_bytes(ctx: Ctx) -> CaseResult {
    // RabbitMQ counts a 1.0 message by its bare message (here one data section: 5 bytes of
    // section header and 2 of data), a 0.9.1 message by its body.
    let limit = if ctx.variant().publish == Protocol::Amqp10 { 14 } else { 4 };
    let s = dk::setup(&ctx, &[("x-max-length-bytes", long(limit))]).await?;
    publish_all(&ctx, &s.conn, &s.source, &["aa", "bb", "cc"]).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    check_eq!(crate::wire::drain(&ctx, &s.ch, &s.source).await?, vec!["bb", "cc"], "kept");
    expect_dead(&ctx, &s.conn, &s.dlq, &s.source, "maxlen", &["aa"]).await
}

async fn reject_publish(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[("x-max-length", long(1)), ("x-overflow", text("reject-publish"))]).await?;
    let mut p = Sender::open(&ctx, &s.conn).await?;
    let answers = p.send_all(&s.source, &["p1", "p2", "p3"]).await?;
    p.close().await;
    let (expected, kept) = match dk::queue_kind(&ctx) {
        QueueKind::Classic => (vec![Acc, Ref, Ref], vec!["p1"]),
        QueueKind::Quorum => (vec![Acc, Acc, Ref], vec!["p1", "p2"]),
    };
    check_eq!(answers, expected, "publish answers");
    stays_empty(&s.ch, &s.dlq).await?;
    check_eq!(crate::wire::drain(&ctx, &s.ch, &s.source).await?, kept, "kept");
    Ok(())
}

async fn reject_publish_dlx_classic(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[("x-max-length", long(1)), ("x-overflow", text("reject-publish-dlx"))]).await?;
    let mut p = Sender::open(&ctx, &s.conn).await?;
    let answers = p.send_all(&s.source, &["p1", "p2", "p3"]).await?;
    p.close().await;
    check_eq!(answers, vec![Acc, Ref, Ref], "publish answers");
    dk::eventually_ready(&s.ch, &s.dlq, 2).await?;
    check_eq!(crate::wire::drain(&ctx, &s.ch, &s.source).await?, vec!["p1"], "kept");
    expect_dead(&ctx, &s.conn, &s.dlq, &s.source, "maxlen", &["p2", "p3"]).await
}

async fn reject_publish_dlx_quorum(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[("x-max-length", long(1)), ("x-overflow", text("reject-publish-dlx"))]).await?;
    let mut p = Sender::open(&ctx, &s.conn).await?;
    let answers = p.send_all(&s.source, &["p1", "p2", "p3"]).await?;
    p.close().await;
    check_eq!(answers, vec![Acc, Acc, Acc], "publish answers");
    dk::eventually_ready(&s.ch, &s.dlq, 2).await?;
    check_eq!(crate::wire::drain(&ctx, &s.ch, &s.source).await?, vec!["p3"], "kept");
    expect_dead(&ctx, &s.conn, &s.dlq, &s.source, "maxlen", &["p1", "p2"]).await
}

async fn quorum_soft_limit(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[("x-max-length", long(2)), ("x-overflow", text("reject-publish"))]).await?;
    let mut p = Sender::open(&ctx, &s.conn).await?;
    check_eq!(p.send_all(&s.source, &["p1", "p2", "p3", "p4"]).await?, vec![Acc, Acc, Acc, Ref], "publishes 1-4");
    check_eq!(lk::get(&s.ch, &s.source).await?.map(|m| lk::text(&m.delivery)), Some("p1".to_owned()), "get");
    // Two left: above 80 % of 2, still refusing.
    check_eq!(p.send(&s.source, "p5", None).await?, Ref, "publish at 2 of 2");
    check_eq!(lk::get(&s.ch, &s.source).await?.map(|m| lk::text(&m.delivery)), Some("p2".to_owned()), "get");
    // One left: at most 80 % of 2 (trunc 1.6 = 1), accepting again.
    let mut answer = p.send(&s.source, "p6", None).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while answer == Ref && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        answer = p.send(&s.source, "p6", None).await?;
    }
    check_eq!(answer, Acc, "publish at 1 of 2");
    p.close().await;
    check_eq!(crate::wire::drain(&ctx, &s.ch, &s.source).await?, vec!["p3", "p6"], "left");
    stays_empty(&s.ch, &s.dlq).await
}

/// Returns the delivery the variant's way: 0.9.1 reject requeue=true, 1.0 modified{delivery-failed}
/// (so the 1.0 delivery-count grows too).
async fn fail(t: &mut Taker, got: &super::dlx_settle::Got) -> CaseResult {
    match t {
        Taker::Amqp091(..) => t.settle(got, How::Requeue).await,
        Taker::Amqp10(..) => t.modified(got, Some(true), None).await,
    }
}

/// Reads the single dead letter the variant's way: it has the delivery count `count` (0.9.1: no
/// `x-delivery-count`; 1.0: the failed deliveries it carries), and died once in `source` for
/// `delivery_limit`.
async fn expect_delivery_limit_dead(ctx: &Ctx, s: &dk::Setup, body: &str, count: Option<i64>) -> CaseResult {
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    let mut t = Taker::open(ctx, &s.conn, &s.dlq, 1).await?;
    let dead = t.next().await?;
    check_eq!((dead.body.as_str(), dead.delivery_count), (body, count), "dead letter and its delivery count");
    t.settle(&dead, How::Requeue).await?;
    t.close().await;
    expect_dead(ctx, &s.conn, &s.dlq, &s.source, "delivery_limit", &[body]).await
}

async fn delivery_limit_two(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[("x-delivery-limit", long(2))]).await?;
    publish_all(&ctx, &s.conn, &s.source, &["m"]).await?;
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 10).await?;
    let mut counts = Vec::new();
    for _ in 0..3 {
        let g = t.next().await?;
        counts.push((g.redelivered, g.delivery_count));
        fail(&mut t, &g).await?;
    }
    check_eq!(
        counts,
        vec![(false, None), (true, Some(1)), (true, Some(2))],
        "(redelivered, delivery count) of each delivery"
    );
    t.nothing(lk::QUIET).await?;
    t.close().await;
    check_eq!(dk::ready(&s.ch, &s.source).await?, 0, "source queue");
    // The failed-delivery count travels with the dead letter: a 1.0 consumer of the DLQ sees it.
    let carried = if ctx.variant().consume == Protocol::Amqp10 { Some(3) } else { None };
    expect_delivery_limit_dead(&ctx, &s, "m", carried).await
}

async fn every_return_counts(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[("x-delivery-limit", long(3))]).await?;
    publish_all(&ctx, &s.conn, &s.source, &["m"]).await?;
    let mut counts = Vec::new();
    // reject requeue=true, then nack requeue=true, on one channel.
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 10).await?;
    let g = t.next().await?;
    counts.push(g.delivery_count);
    t.settle(&g, How::Requeue).await?;
    let g = t.next().await?;
    counts.push(g.delivery_count);
    t.nack(&g, true).await?;
    let g = t.next().await?;
    counts.push(g.delivery_count);
    // Then the channel closes with the delivery unacked.
    t.close().await;
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 10).await?;
    let g = t.next().await?;
    counts.push(g.delivery_count);
    check_eq!(counts, vec![None, Some(1), Some(2), Some(3)], "x-delivery-count of each delivery");
    t.settle(&g, How::Requeue).await?;
    t.nothing(lk::QUIET).await?;
    t.close().await;
    expect_delivery_limit_dead(&ctx, &s, "m", None).await
}

async fn delivery_limit_zero(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[("x-delivery-limit", long(0))]).await?;
    first_requeue_dead_letters(&ctx, &s).await
}

/// A quorum source `s` with a delivery limit of 0 (argument or policy): one message requeued
/// once is not delivered again but dead-lettered as `delivery_limit` (also `dlx.policy.*`).
pub(super) async fn first_requeue_dead_letters(ctx: &Ctx, s: &dk::Setup) -> CaseResult {
    publish_all(ctx, &s.conn, &s.source, &["m"]).await?;
    let mut t = Taker::open(ctx, &s.conn, &s.source, 10).await?;
    let g = t.next().await?;
    t.settle(&g, How::Requeue).await?;
    t.nothing(lk::QUIET).await?;
    t.close().await;
    expect_dead(ctx, &s.conn, &s.dlq, &s.source, "delivery_limit", &["m"]).await
}

async fn delivery_limit_default(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    publish_all(&ctx, &s.conn, &s.source, &["m"]).await?;
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 10).await?;
    let mut last = None;
    for _ in 0..21 {
        let g = t.next().await?;
        last = g.delivery_count;
        t.settle(&g, How::Requeue).await?;
    }
    t.nothing(lk::QUIET).await?;
    t.close().await;
    // 1.0 `released` is no failed delivery: header.delivery-count stays 0 there.
    let expected = if ctx.variant().consume == Protocol::Amqp091 { Some(20) } else { None };
    check_eq!(last, expected, "delivery count of the 21st delivery");
    expect_dead(&ctx, &s.conn, &s.dlq, &s.source, "delivery_limit", &["m"]).await
}

async fn delivery_limit_negative(ctx: Ctx) -> CaseResult {
    limit_never_reached(&ctx, long(-1)).await
}

/// A quorum source with `x-delivery-limit` `limit` that is never reached: one message requeued
/// 25 times is delivered a 26th time and nothing is dead-lettered (also `dlx.args.*`).
pub(super) async fn limit_never_reached(ctx: &Ctx, limit: AMQPValue) -> CaseResult {
    let s = dk::setup(ctx, &[("x-delivery-limit", limit)]).await?;
    publish_all(ctx, &s.conn, &s.source, &["m"]).await?;
    let mut t = Taker::open(ctx, &s.conn, &s.source, 10).await?;
    for _ in 0..25 {
        let g = t.next().await?;
        t.settle(&g, How::Requeue).await?;
    }
    let g = t.next().await?;
    check_eq!(g.body.as_str(), "m", "26th delivery");
    t.settle(&g, How::Ack).await?;
    t.close().await;
    stays_empty(&s.ch, &s.dlq).await
}

async fn expires_deleted(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[("x-expires", long(500))]).await?;
    publish_all(&ctx, &s.conn, &s.source, &["e1", "e2"]).await?;
    // Polled over HTTP: a passive declare would count as use of a classic queue. Quorum queues
    // check x-expires on their 5 s tick.
    gone(&ctx, &s.source, Duration::from_secs(9)).await?;
    stays_empty(&s.ch, &s.dlq).await
}

/// Waits until the management API no longer knows `queue`.
async fn gone(ctx: &Ctx, queue: &str, within: Duration) -> CaseResult {
    lk::eventually(within, &format!("deletion of queue {queue}"), || async {
        match ctx.queue_info(queue).await {
            Err(e) if e.message().contains(": 404") => Ok(true),
            Err(e) => Err(e),
            Ok(_) => Ok(false),
        }
    })
    .await
}

async fn expires_passive(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    dk::declare_typed(&ctx, &ch, &q, dk::args(&[("x-expires", long(1000))])).await?;
    let passive = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        ch.queue_declare(q.as_str().into(), passive, FieldTable::default())
            .await
            .map_err(|e| CaseError::from(e).context("passive declare while in use"))?;
    }
    check!(lk::queue_exists(&conn, &q).await?, "queue expired although declared every 300 ms");
    gone(&ctx, &q, Duration::from_secs(4)).await
}

async fn expires_quorum_passive(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    dk::declare_typed(&ctx, &ch, &q, dk::args(&[("x-expires", long(1000))])).await?;
    // Passive declares every 300 ms do not keep it: it goes within its 5 s tick.
    lk::eventually(Duration::from_secs(9), "quorum queue expiry despite passive declares", || async {
        tokio::time::sleep(Duration::from_millis(250)).await;
        Ok(!lk::queue_exists(&conn, &q).await?)
    })
    .await
}
