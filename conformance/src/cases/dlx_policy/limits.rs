//! Argument against policy for the other dead-lettering triggers: the smaller message TTL and
//! max-length win, overflow precedence per queue type, a delivery-limit policy on an existing
//! quorum queue, and removing a policy restores the argument's limit.

use lapin::types::AMQPValue;

use super::kit::exact;
use crate::cases::dlx_basic::take;
use crate::cases::dlx_limits::first_requeue_dead_letters;
use crate::cases::dlx_settle::{Answer, Sender, bodies, expect_dead, publish_all, stays_empty};
use crate::dlx_kit::{self as dk, long, text};
use crate::lapin_kit as lk;
use crate::{CaseError, CaseResult, Ctx, QueueKind, check_eq};

/// A setup plus a second source queue dead-lettering into the same DLQ.
async fn two_sources(
    ctx: &Ctx,
    first: &[(&str, AMQPValue)],
    second: &[(&str, AMQPValue)],
) -> Result<(dk::Setup, String), CaseError> {
    let s = dk::setup(ctx, first).await?;
    let other = ctx.queue("src2");
    let mut args = dk::args(second);
    args.insert("x-dead-letter-exchange".into(), text(&s.dlx));
    args.insert("x-dead-letter-routing-key".into(), text(&s.source));
    dk::declare_typed(ctx, &s.ch, &other, args).await?;
    Ok((s, other))
}

pub(super) async fn ttl_min(ctx: Ctx) -> CaseResult {
    let (s, other) = two_sources(&ctx, &[("x-message-ttl", long(60_000))], &[("x-message-ttl", long(100))]).await?;
    ctx.set_policy(&exact(&s.source), "queues", 0, r#"{"message-ttl":100}"#).await?;
    ctx.set_policy(&exact(&other), "queues", 0, r#"{"message-ttl":60000}"#).await?;
    publish_all(&ctx, &s.conn, &s.source, &["policy-shorter"]).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    publish_all(&ctx, &s.conn, &other, &["argument-shorter"]).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 2).await?;
    let got = take(&ctx, &s.conn, &s.dlq, 2).await?;
    check_eq!(bodies(&got), vec!["policy-shorter", "argument-shorter"], "dead letters");
    Ok(())
}

pub(super) async fn max_length_min(ctx: Ctx) -> CaseResult {
    let (s, other) = two_sources(&ctx, &[("x-max-length", long(10))], &[("x-max-length", long(1))]).await?;
    ctx.set_policy(&exact(&s.source), "queues", 0, r#"{"max-length":1}"#).await?;
    ctx.set_policy(&exact(&other), "queues", 0, r#"{"max-length":10}"#).await?;
    publish_all(&ctx, &s.conn, &s.source, &["a1", "a2"]).await?;
    publish_all(&ctx, &s.conn, &other, &["b1", "b2"]).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 2).await?;
    check_eq!(lk::drain(&s.ch, &s.source).await?, vec!["a2"], "kept in the first source");
    check_eq!(lk::drain(&s.ch, &other).await?, vec!["b2"], "kept in the second source");
    let got = take(&ctx, &s.conn, &s.dlq, 2).await?;
    check_eq!(bodies(&got), vec!["a1", "b1"], "dead letters");
    Ok(())
}

pub(super) async fn overflow_precedence(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[("x-max-length", long(1)), ("x-overflow", text("reject-publish"))]).await?;
    ctx.set_policy(&exact(&s.source), "queues", 0, r#"{"overflow":"drop-head"}"#).await?;
    let mut p = Sender::open(&ctx, &s.conn).await?;
    let answers = p.send_all(&s.source, &["p1", "p2", "p3"]).await?;
    p.close().await;
    match dk::queue_kind(&ctx) {
        QueueKind::Classic => {
            check_eq!(answers, vec![Answer::Accepted, Answer::Refused, Answer::Refused], "publish answers");
            check_eq!(lk::drain(&s.ch, &s.source).await?, vec!["p1"], "kept");
            stays_empty(&s.ch, &s.dlq).await
        }
        QueueKind::Quorum => {
            check_eq!(answers, vec![Answer::Accepted; 3], "publish answers");
            dk::eventually_ready(&s.ch, &s.dlq, 2).await?;
            check_eq!(lk::drain(&s.ch, &s.source).await?, vec!["p3"], "kept");
            expect_dead(&ctx, &s.conn, &s.dlq, &s.source, "maxlen", &["p1", "p2"]).await
        }
    }
}

pub(super) async fn delivery_limit_policy(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    ctx.set_policy(&exact(&s.source), "queues", 0, r#"{"delivery-limit":0}"#).await?;
    first_requeue_dead_letters(&ctx, &s).await
}

pub(super) async fn removal_restores(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[("x-max-length", long(3))]).await?;
    let policy = ctx.set_policy(&exact(&s.source), "queues", 0, r#"{"max-length":1}"#).await?;
    publish_all(&ctx, &s.conn, &s.source, &["a", "b"]).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    let deleted = ctx.delete_policy(&policy).await?;
    check_eq!(deleted.status, 204, "DELETE policy");
    publish_all(&ctx, &s.conn, &s.source, &["c", "d"]).await?;
    tokio::time::sleep(crate::cases::dlx_settle::SETTLE_WAIT).await;
    check_eq!(dk::ready(&s.ch, &s.dlq).await?, 1, "dead letters after the policy went");
    check_eq!(lk::drain(&s.ch, &s.source).await?, vec!["b", "c", "d"], "kept under x-max-length 3");
    expect_dead(&ctx, &s.conn, &s.dlq, &s.source, "maxlen", &["a"]).await
}
