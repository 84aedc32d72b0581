//! Invalid dead-lettering queue arguments and the 406 texts they are refused with, and a quorum
//! `x-delivery-limit` that is not a number.

use lapin::options::QueueDeclareOptions;
use lapin::types::AMQPValue;

use crate::cases::dlx_limits::limit_never_reached;
use crate::dlx_kit::{self as dk, long, text};
use crate::lapin_kit as lk;
use crate::{CaseResult, Ctx, QueueKind};

/// Declares `name` with `args` (plus `x-queue-type`) and expects the channel to close with
/// `406 PRECONDITION_FAILED - <text>`.
async fn refused(ctx: &Ctx, name: &str, args: &[(&str, AMQPValue)], text_after: &str) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let kind = dk::queue_kind(ctx);
    let mut table = dk::args(args);
    table.insert("x-queue-type".into(), text(kind.label()));
    let options = QueueDeclareOptions { durable: kind == QueueKind::Quorum, ..QueueDeclareOptions::default() };
    let res = ch.queue_declare(name.into(), options, table).await;
    lk::expect_error(res, 406, &format!("PRECONDITION_FAILED - {text_after}"))
        .map_err(|e| e.context(&format!("{args:?}")))
}

fn invalid_arg(ctx: &Ctx, q: &str, key: &str, reason: &str) -> String {
    format!("invalid arg '{key}' for queue '{q}' in vhost '{}': {reason}", ctx.broker().vhost)
}

pub(super) async fn dlrk_without_dlx(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let key = "x-dead-letter-routing-key";
    refused(&ctx, &q, &[(key, text("k"))], &invalid_arg(&ctx, &q, key, "routing_key_but_no_dlx_defined")).await
}

pub(super) async fn ttl_invalid(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let key = "x-message-ttl";
    refused(&ctx, &q, &[(key, long(-1))], &invalid_arg(&ctx, &q, key, "{value_negative,-1}")).await?;
    refused(&ctx, &q, &[(key, text("abc"))], &invalid_arg(&ctx, &q, key, "\"expected integer, got longstr\"")).await?;
    let too_large = 315_360_000_001;
    refused(
        &ctx,
        &q,
        &[(key, long(too_large))],
        &invalid_arg(&ctx, &q, key, &format!("{{value_too_large,{too_large}}}")),
    )
    .await
}

pub(super) async fn max_length_negative(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    for key in ["x-max-length", "x-max-length-bytes"] {
        refused(&ctx, &q, &[(key, long(-1))], &invalid_arg(&ctx, &q, key, "{value_negative,-1}")).await?;
    }
    Ok(())
}

pub(super) async fn overflow_invalid(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let key = "x-overflow";
    refused(&ctx, &q, &[(key, text("bogus"))], &invalid_arg(&ctx, &q, key, "invalid_overflow")).await
}

pub(super) async fn strategy_invalid(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let key = "x-dead-letter-strategy";
    let args = [("x-dead-letter-exchange", text("d")), (key, text("bogus"))];
    refused(&ctx, &q, &args, &invalid_arg(&ctx, &q, key, "invalid_dlx_strategy")).await
}

pub(super) async fn dlx_not_string(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let expected = format!(
        "invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue '{q}' in vhost '{}'",
        ctx.broker().vhost
    );
    refused(&ctx, &q, &[("x-dead-letter-exchange", AMQPValue::LongInt(1))], &expected).await?;
    // Checked before the arguments' own validation.
    refused(&ctx, &q, &[("x-expires", long(0)), ("x-dead-letter-exchange", AMQPValue::LongInt(1))], &expected).await
}

pub(super) async fn dlrk_not_string(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let key = "x-dead-letter-routing-key";
    let args = [("x-dead-letter-exchange", text("d")), (key, AMQPValue::LongInt(1))];
    refused(&ctx, &q, &args, &invalid_arg(&ctx, &q, key, "{unacceptable_type,signedint}")).await
}

pub(super) async fn classic_refuses(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let vhost = ctx.broker().vhost.clone();
    for (key, value) in [("x-delivery-limit", long(5)), ("x-dead-letter-strategy", text("at-least-once"))] {
        let expected =
            format!("invalid arg '{key}' for queue '{q}' in vhost '{vhost}' of queue type rabbit_classic_queue");
        refused(&ctx, &q, &[(key, value)], &expected).await?;
    }
    Ok(())
}

pub(super) async fn inequivalent_dlx(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let (_conn, ch) = ctx.lapin_channel().await?;
    dk::declare_typed(&ctx, &ch, &q, dk::args(&[("x-dead-letter-exchange", text("a"))])).await?;
    let prefix = format!("inequivalent arg 'x-dead-letter-exchange' for queue '{q}' in vhost '{}'", ctx.broker().vhost);
    refused(&ctx, &q, &[("x-dead-letter-exchange", text("b"))], &format!("{prefix}: received 'b' but current is 'a'"))
        .await?;
    refused(&ctx, &q, &[], &format!("{prefix}: received none but current is the value 'a' of type 'longstr'")).await
}

pub(super) async fn delivery_limit_text(ctx: Ctx) -> CaseResult {
    // 4.0.5 compares the count with the binary "abc", which Erlang orders above every number.
    limit_never_reached(&ctx, text("abc")).await
}
