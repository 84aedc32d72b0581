//! Settlement and dead lettering (rabbitmq-dlx.md §1.1–1.2, `dead_lettering_SUITE` #1–5, #7,
//! #9–12): which client settlements dead-letter (reason `rejected`), which requeue, and the
//! order dead letters arrive in, for 0.9.1 and 1.0 consumers of classic and quorum queues.
//!
//! The pieces the other `dlx_*` files share live in [`kit`].

use std::time::Duration;

use lapin::Channel;
use lapin::options::{BasicGetOptions, BasicNackOptions};

use super::dlx_basic::take;
use crate::dlx_kit as dk;
use crate::lapin_kit as lk;
use crate::{Case, CaseError, CaseResult, Ctx, QueueKind, Variant, case_v, check, check_eq};

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
            "dlx.settle.modified_annotations_on_the_dead_letter",
            "1.0 modified{undeliverable-here, message-annotations}: a quorum queue merges the consumer's x- \
             annotations into the dead letter (a 0.9.1 consumer sees them as headers); a classic queue does not",
            &CONSUME10_BOTH_QUEUES,
            ["dlx"],
            modified_annotations
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

mod kit;

pub(super) use kit::*;

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

async fn modified_annotations(ctx: Ctx) -> CaseResult {
    use crate::fe2o3_kit::queue_addr;
    use crate::raw10::{Received as Received10, WAIT};
    use fe2o3_amqp_types::messaging::{DeliveryState, Released};
    use fe2o3_amqp_types::primitives::{OrderedMap, Symbol, Value};
    let s = dk::setup(&ctx, &[]).await?;
    publish_all(&ctx, &s.conn, &s.source, &["m1"]).await?;
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 10).await?;
    let got = t.next_n(1).await?;
    let mut annotations = OrderedMap::new();
    annotations.insert(Symbol::from("x-opt-reason"), Value::String("poison".into()));
    annotations.insert(Symbol::from("x-opt-attempt"), Value::Long(3));
    if let Some(g) = got.first() {
        t.modified_with(g, Some(true), Some(true), Some(annotations)).await?;
    }
    t.close().await;
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    let merged = dk::queue_kind(&ctx) == QueueKind::Quorum;
    // Over 1.0: the message annotations.
    let mut c = super::amqp10_attach::session(&ctx).await?;
    c.attach_receiver(0, 0, &queue_addr(&s.dlq)).await?;
    c.credit(0, 0, 1, false).await?;
    let d = c.recv(0, WAIT).await?;
    let m = Received10::parse(&d.payload)?;
    let (reason, attempt) = (m.ann("x-opt-reason"), m.ann("x-opt-attempt"));
    if merged {
        check_eq!(reason, Some(Value::String("poison".into())), "x-opt-reason on the dead letter");
        check_eq!(attempt, Some(Value::Long(3)), "x-opt-attempt on the dead letter");
    } else {
        check_eq!((reason, attempt), (None, None), "annotations on a classic queue's dead letter");
    }
    c.settle(0, d.id(), d.id(), DeliveryState::Released(Released {})).await?;
    c.close().await?;
    // Over 0.9.1: headers.
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    let got = lk::get(&s.ch, &s.dlq).await?.ok_or_else(|| CaseError::new("the dead letter is gone"))?;
    let headers = got.delivery.properties.headers().clone().unwrap_or_default();
    let reason = headers.inner().get("x-opt-reason").cloned();
    let attempt = headers.inner().get("x-opt-attempt").cloned();
    if merged {
        check_eq!(reason, Some(lapin::types::AMQPValue::LongString("poison".into())), "x-opt-reason header");
        check_eq!(attempt, Some(lapin::types::AMQPValue::LongLongInt(3)), "x-opt-attempt header");
    } else {
        check_eq!((reason, attempt), (None, None), "headers of a classic queue's dead letter");
    }
    Ok(())
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
