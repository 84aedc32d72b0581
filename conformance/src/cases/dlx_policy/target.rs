//! Where dead letters go when policies and arguments name a dead-letter exchange: a policy set on
//! an existing queue, arguments against a policy set before or after the declare, and which of
//! two matching policies applies by priority and apply-to.

use lapin::ExchangeKind;
use lapin::options::ExchangeDeclareOptions;
use lapin::types::FieldTable;
use serde_json::json;

use super::kit::exact;
use crate::cases::dlx_settle::{How, Taker, expect_dead, publish_all, stays_empty};
use crate::dlx_kit::{self as dk, text};
use crate::lapin_kit as lk;
use crate::{CaseError, CaseResult, Ctx, QueueKind, check_eq};

/// A direct exchange and a classic queue bound to it with `keys`.
async fn dead_end(ctx: &Ctx, ch: &lapin::Channel, keys: &[&str]) -> Result<(String, String), CaseError> {
    let x = ctx.exchange("dlx");
    ch.exchange_declare(
        x.as_str().into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await?;
    let q = ctx.queue("dlq");
    lk::declare_queue(ch, &q).await?;
    for key in keys {
        lk::bind(ch, &q, &x, key, FieldTable::default()).await?;
    }
    Ok((x, q))
}

/// Publishes `body` to `queue` and rejects it over the variant's protocols.
async fn reject_one(ctx: &Ctx, conn: &lapin::Connection, queue: &str, body: &str) -> CaseResult {
    publish_all(ctx, conn, queue, &[body]).await?;
    let mut t = Taker::open(ctx, conn, queue, 1).await?;
    let g = t.next().await?;
    check_eq!(g.body.as_str(), body, "delivery");
    t.settle(&g, How::Reject).await?;
    t.close().await;
    Ok(())
}

pub(super) async fn policy_applies(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    let source = ctx.queue("src");
    let (dlx, dlq) = dead_end(&ctx, &ch, &[&source]).await?;
    dk::declare_typed(&ctx, &ch, &source, FieldTable::default()).await?;
    reject_one(&ctx, &conn, &source, "before").await?;
    stays_empty(&ch, &dlq).await?;
    ctx.set_policy(&exact(&source), "queues", 0, &json!({ "dead-letter-exchange": dlx }).to_string()).await?;
    reject_one(&ctx, &conn, &source, "after").await?;
    dk::eventually_ready(&ch, &dlq, 1).await?;
    expect_dead(&ctx, &conn, &dlq, &source, "rejected", &["after"]).await
}

/// #22 and #23: arguments name dlx1 and key k1, a policy names dlx2 and key k2.
async fn arguments_win(ctx: Ctx, policy_first: bool) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    let source = ctx.queue("src");
    let (dlx1, dlq1) = dead_end(&ctx, &ch, &["k1"]).await?;
    let (dlx2, dlq2) = dead_end(&ctx, &ch, &["k1", "k2", &source]).await?;
    // A queue on the argument's exchange that only the policy's key would reach.
    let wrong_key = ctx.queue("dlq-k2");
    lk::queue_bound(&ch, &wrong_key, &dlx1, "k2").await?;
    let definition = json!({ "dead-letter-exchange": dlx2, "dead-letter-routing-key": "k2" }).to_string();
    if policy_first {
        ctx.set_policy(&exact(&source), "queues", 0, &definition).await?;
    }
    let args = dk::args(&[("x-dead-letter-exchange", text(&dlx1)), ("x-dead-letter-routing-key", text("k1"))]);
    dk::declare_typed(&ctx, &ch, &source, args).await?;
    if !policy_first {
        ctx.set_policy(&exact(&source), "queues", 0, &definition).await?;
    }
    reject_one(&ctx, &conn, &source, "m").await?;
    dk::eventually_ready(&ch, &dlq1, 1).await?;
    stays_empty(&ch, &dlq2).await?;
    check_eq!(dk::ready(&ch, &wrong_key).await?, 0, "queue bound with the policy's key");
    expect_dead(&ctx, &conn, &dlq1, &source, "rejected", &["m"]).await
}

pub(super) async fn argument_beats_policy(ctx: Ctx) -> CaseResult {
    arguments_win(ctx, true).await
}

pub(super) async fn later_policy_ignored(ctx: Ctx) -> CaseResult {
    arguments_win(ctx, false).await
}

/// A source queue of the variant's type without DLX arguments and two dead ends.
async fn bare_source(
    ctx: &Ctx,
) -> Result<(lapin::Connection, lapin::Channel, String, [(String, String); 2]), CaseError> {
    let (conn, ch) = ctx.lapin_channel().await?;
    let source = ctx.queue("src");
    let one = dead_end(ctx, &ch, &[&source]).await?;
    let two = dead_end(ctx, &ch, &[&source]).await?;
    dk::declare_typed(ctx, &ch, &source, FieldTable::default()).await?;
    Ok((conn, ch, source, [one, two]))
}

pub(super) async fn priority(ctx: Ctx) -> CaseResult {
    let (conn, ch, source, [(x1, q1), (x2, q2)]) = bare_source(&ctx).await?;
    let pattern = format!("^{}", source.get(..source.len().saturating_sub(2)).unwrap_or(&source));
    ctx.set_policy(&pattern, "queues", 1, &json!({ "dead-letter-exchange": x1 }).to_string()).await?;
    ctx.set_policy(&exact(&source), "queues", 5, &json!({ "dead-letter-exchange": x2 }).to_string()).await?;
    reject_one(&ctx, &conn, &source, "m").await?;
    dk::eventually_ready(&ch, &q2, 1).await?;
    stays_empty(&ch, &q1).await
}

pub(super) async fn apply_to(ctx: Ctx) -> CaseResult {
    let (conn, ch, source, [(x1, q1), (x2, q2)]) = bare_source(&ctx).await?;
    let (mine, other) = match dk::queue_kind(&ctx) {
        QueueKind::Classic => ("classic_queues", "quorum_queues"),
        QueueKind::Quorum => ("quorum_queues", "classic_queues"),
    };
    ctx.set_policy(&exact(&source), mine, 0, &json!({ "dead-letter-exchange": x1 }).to_string()).await?;
    ctx.set_policy(&exact(&source), other, 9, &json!({ "dead-letter-exchange": x2 }).to_string()).await?;
    reject_one(&ctx, &conn, &source, "m").await?;
    dk::eventually_ready(&ch, &q1, 1).await?;
    stays_empty(&ch, &q2).await
}
