//! Dead-lettering configuration (rabbitmq-dlx.md §2, `dead_lettering_SUITE` #21–23): policies
//! applied to existing queues, argument-versus-policy precedence, policy priority and apply-to,
//! the policy HTTP API with its validation answers, the queue counters of the HTTP API, and
//! the 406 texts of invalid dead-lettering arguments (reference-observations "Dead lettering"
//! 16; the inequivalent `x-max-length` case lives in `queues.rs`).

use lapin::ExchangeKind;
use lapin::options::{ExchangeDeclareOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use serde_json::json;

use super::dlx_basic::take;
use super::dlx_settle::{
    Answer, CONSUME091_BOTH_QUEUES, How, Sender, Taker, bodies, expect_dead, publish_all, stays_empty,
};
use crate::dlx_kit::{self as dk, long, text};
use crate::lapin_kit as lk;
use crate::{Case, CaseError, CaseResult, Ctx, QueueKind, Variant, case, case_v, check_eq};

const CLASSIC_ONLY: [Variant; 1] = [Variant::AMQP091.on(QueueKind::Classic)];
const QUORUM_ONLY: [Variant; 1] = [Variant::AMQP091.on(QueueKind::Quorum)];

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case_v!(
            "dlx.policy.applies_to_existing_queue",
            "a dead-letter-exchange policy set after the queue exists applies to it; rejections before it were dropped (#21)",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx", "policy"],
            policy_applies
        ),
        case_v!(
            "dlx.policy.argument_beats_policy",
            "x-dead-letter-exchange and -routing-key arguments win over a policy set before the declare (#22)",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx", "policy"],
            argument_beats_policy
        ),
        case_v!(
            "dlx.policy.later_policy_ignored",
            "a policy set after a queue declared with DLX arguments does not change where dead letters go (#23)",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx", "policy"],
            later_policy_ignored
        ),
        case_v!(
            "dlx.policy.message_ttl_min",
            "x-message-ttl and policy message-ttl: the smaller one applies, whichever it is",
            &CONSUME091_BOTH_QUEUES,
            ["dlx", "policy"],
            ttl_min
        ),
        case_v!(
            "dlx.policy.max_length_min",
            "x-max-length and policy max-length: the smaller one applies, whichever it is",
            &CONSUME091_BOTH_QUEUES,
            ["dlx", "policy"],
            max_length_min
        ),
        case_v!(
            "dlx.policy.overflow_precedence",
            "x-overflow reject-publish vs policy overflow drop-head: the argument wins on classic, the policy on quorum",
            &CONSUME091_BOTH_QUEUES,
            ["dlx", "policy"],
            overflow_precedence
        ),
        case_v!(
            "dlx.policy.delivery_limit_existing_quorum",
            "a delivery-limit 0 policy applies to an existing quorum queue: the first requeue dead-letters",
            &Variant::MATRIX_QUORUM,
            ["dlx", "policy"],
            delivery_limit_policy
        ),
        case_v!(
            "dlx.policy.removal_restores_argument",
            "deleting a max-length policy lower than x-max-length restores the argument's limit",
            &CONSUME091_BOTH_QUEUES,
            ["dlx", "policy"],
            removal_restores
        ),
        case_v!(
            "dlx.policy.priority",
            "of two matching policies the one with the higher priority applies",
            &CONSUME091_BOTH_QUEUES,
            ["dlx", "policy"],
            priority
        ),
        case_v!(
            "dlx.policy.apply_to_queue_type",
            "apply-to classic_queues / quorum_queues: a policy for the other type does not apply, whatever its priority",
            &CONSUME091_BOTH_QUEUES,
            ["dlx", "policy"],
            apply_to
        ),
        case!(
            "dlx.policy.http_lifecycle",
            "PUT 201 then 204, GET shape, DELETE 204 then 404, GET 404 with RabbitMQ's body",
            ["dlx", "policy"],
            http_lifecycle
        ),
        case!(
            "dlx.policy.http_invalid_400",
            "invalid policies: 400 with RabbitMQ's 'Validation failed' reason; nothing is created or changed",
            ["dlx", "policy"],
            http_invalid
        ),
        case_v!(
            "dlx.policy.http_queue_counts",
            "GET /api/queues/{vhost}/{name}: messages, ready, unacknowledged after rejecting 1 of 3 unacked; the policy shown",
            &CONSUME091_BOTH_QUEUES,
            ["dlx", "policy"],
            http_queue_counts
        ),
        case_v!(
            "dlx.args.routing_key_without_dlx_406",
            "x-dead-letter-routing-key without x-dead-letter-exchange: 406 routing_key_but_no_dlx_defined",
            &Variant::BOTH_QUEUES,
            ["dlx"],
            dlrk_without_dlx
        ),
        case_v!(
            "dlx.args.message_ttl_invalid_406",
            "x-message-ttl -1 / 'abc' / 10 years + 1: 406 {value_negative,-1}, \"expected integer, got longstr\", {value_too_large,...}",
            &Variant::BOTH_QUEUES,
            ["dlx"],
            ttl_invalid
        ),
        case_v!(
            "dlx.args.max_length_negative_406",
            "x-max-length / x-max-length-bytes -1: 406 {value_negative,-1}",
            &Variant::BOTH_QUEUES,
            ["dlx"],
            max_length_negative
        ),
        case_v!(
            "dlx.args.overflow_invalid_406",
            "x-overflow 'bogus': 406 invalid_overflow",
            &Variant::BOTH_QUEUES,
            ["dlx"],
            overflow_invalid
        ),
        case_v!(
            "dlx.args.dlx_strategy_invalid_406",
            "quorum x-dead-letter-strategy 'bogus': 406 invalid_dlx_strategy",
            &QUORUM_ONLY,
            ["dlx"],
            strategy_invalid
        ),
        case_v!(
            "dlx.args.dlx_not_string_406",
            "a signedint x-dead-letter-exchange: 406 invalid type 'signedint' for arg (checked before the other arguments)",
            &Variant::BOTH_QUEUES,
            ["dlx"],
            dlx_not_string
        ),
        case_v!(
            "dlx.args.dlrk_not_string_406",
            "a signedint x-dead-letter-routing-key: 406 {unacceptable_type,signedint}",
            &Variant::BOTH_QUEUES,
            ["dlx"],
            dlrk_not_string
        ),
        case_v!(
            "dlx.args.classic_quorum_only_args_406",
            "classic x-delivery-limit / x-dead-letter-strategy: 406 ... of queue type rabbit_classic_queue",
            &CLASSIC_ONLY,
            ["dlx"],
            classic_refuses
        ),
        case_v!(
            "dlx.args.inequivalent_dlx_406",
            "redeclaring with another or without x-dead-letter-exchange: 406 inequivalent arg with both values",
            &Variant::BOTH_QUEUES,
            ["dlx"],
            inequivalent_dlx
        ),
        case_v!(
            "dlx.args.quorum_delivery_limit_not_validated",
            "quorum x-delivery-limit 'abc' is accepted (no validator) and is never reached (4.0.5): 25 returns, still delivered",
            &QUORUM_ONLY,
            ["dlx"],
            delivery_limit_text
        ),
    ]
}

/// `^name$` for a generated name (letters, digits and dashes only).
fn exact(name: &str) -> String {
    format!("^{name}$")
}

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

async fn policy_applies(ctx: Ctx) -> CaseResult {
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

async fn argument_beats_policy(ctx: Ctx) -> CaseResult {
    arguments_win(ctx, true).await
}

async fn later_policy_ignored(ctx: Ctx) -> CaseResult {
    arguments_win(ctx, false).await
}

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

async fn ttl_min(ctx: Ctx) -> CaseResult {
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

async fn max_length_min(ctx: Ctx) -> CaseResult {
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

async fn overflow_precedence(ctx: Ctx) -> CaseResult {
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

async fn delivery_limit_policy(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    ctx.set_policy(&exact(&s.source), "queues", 0, r#"{"delivery-limit":0}"#).await?;
    publish_all(&ctx, &s.conn, &s.source, &["m"]).await?;
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 10).await?;
    let g = t.next().await?;
    t.settle(&g, How::Requeue).await?;
    t.nothing(lk::QUIET).await?;
    t.close().await;
    expect_dead(&ctx, &s.conn, &s.dlq, &s.source, "delivery_limit", &["m"]).await
}

async fn removal_restores(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[("x-max-length", long(3))]).await?;
    let policy = ctx.set_policy(&exact(&s.source), "queues", 0, r#"{"max-length":1}"#).await?;
    publish_all(&ctx, &s.conn, &s.source, &["a", "b"]).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    let deleted = ctx.delete_policy(&policy).await?;
    check_eq!(deleted.status, 204, "DELETE policy");
    publish_all(&ctx, &s.conn, &s.source, &["c", "d"]).await?;
    tokio::time::sleep(super::dlx_settle::SETTLE_WAIT).await;
    check_eq!(dk::ready(&s.ch, &s.dlq).await?, 1, "dead letters after the policy went");
    check_eq!(lk::drain(&s.ch, &s.source).await?, vec!["b", "c", "d"], "kept under x-max-length 3");
    expect_dead(&ctx, &s.conn, &s.dlq, &s.source, "maxlen", &["a"]).await
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

async fn priority(ctx: Ctx) -> CaseResult {
    let (conn, ch, source, [(x1, q1), (x2, q2)]) = bare_source(&ctx).await?;
    let pattern = format!("^{}", source.get(..source.len().saturating_sub(2)).unwrap_or(&source));
    ctx.set_policy(&pattern, "queues", 1, &json!({ "dead-letter-exchange": x1 }).to_string()).await?;
    ctx.set_policy(&exact(&source), "queues", 5, &json!({ "dead-letter-exchange": x2 }).to_string()).await?;
    reject_one(&ctx, &conn, &source, "m").await?;
    dk::eventually_ready(&ch, &q2, 1).await?;
    stays_empty(&ch, &q1).await
}

async fn apply_to(ctx: Ctx) -> CaseResult {
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

fn parse(body: &str) -> Result<serde_json::Value, CaseError> {
    serde_json::from_str(body).map_err(|e| CaseError::new(format!("not JSON ({e}): {body}")))
}

async fn http_lifecycle(ctx: Ctx) -> CaseResult {
    let name = ctx.name("policy");
    let body = |priority: i64| {
        json!({ "pattern": "^nothing-matches$", "apply-to": "queues", "priority": priority,
                "definition": { "dead-letter-exchange": "dlx", "message-ttl": 1000 } })
        .to_string()
    };
    let created = ctx.put_policy_raw(&name, &body(0)).await?;
    check_eq!(created.status, 201, "first PUT");
    let updated = ctx.put_policy_raw(&name, &body(3)).await?;
    check_eq!(updated.status, 204, "second PUT");
    let got = ctx.get_policy(&name).await?;
    check_eq!(got.status, 200, "GET");
    let expected = json!({
        "vhost": ctx.broker().vhost, "name": name, "pattern": "^nothing-matches$", "apply-to": "queues",
        "definition": { "dead-letter-exchange": "dlx", "message-ttl": 1000 }, "priority": 3
    });
    check_eq!(parse(&got.body)?, expected, "GET body");
    check_eq!(ctx.delete_policy(&name).await?.status, 204, "DELETE");
    let again = ctx.delete_policy(&name).await?;
    check_eq!(again.status, 404, "second DELETE");
    let missing = ctx.get_policy(&name).await?;
    check_eq!(
        (missing.status, parse(&missing.body)?),
        (404, json!({ "error": "Object Not Found", "reason": "Not Found" })),
        "GET after DELETE"
    );
    Ok(())
}

async fn http_invalid(ctx: Ctx) -> CaseResult {
    let invalid = [
        (r#"{"dead-letter-exchange":1}"#, "1 is not a valid dead letter exchange name"),
        (r#"{"dead-letter-routing-key":1}"#, "1 is not a valid dead letter routing key"),
        (r#"{"message-ttl":-1}"#, "-1 is not a valid message TTL"),
        (r#"{"message-ttl":"x"}"#, "&lt;&lt;\"x\"&gt;&gt; is not a valid message TTL"),
        (r#"{"max-length":-1}"#, "-1 is not a valid maximum length"),
        (r#"{"max-length-bytes":-2}"#, "-2 is not a valid maximum length in bytes"),
        (r#"{"overflow":"bogus"}"#, "&lt;&lt;\"bogus\"&gt;&gt; is not a valid overflow value"),
        (r#"{"delivery-limit":"x"}"#, "&lt;&lt;\"x\"&gt;&gt; is not a valid delivery limit"),
        (r#"{"dead-letter-strategy":"bogus"}"#, "&lt;&lt;\"bogus\"&gt;&gt; is not a valid dead letter strategy"),
        (r#"{"expires":0}"#, "0 is not a valid queue expiry"),
        (r#"{"bogus-key":1}"#, "[{&lt;&lt;\"bogus-key\"&gt;&gt;,1}] are not recognised policy settings"),
        (r#"{}"#, "no policy provided"),
    ];
    let name = ctx.name("policy");
    for (definition, reason) in invalid {
        let body =
            format!(r#"{{"pattern":"^nothing-matches$","apply-to":"queues","priority":0,"definition":{definition}}}"#);
        let response = ctx.put_policy_raw(&name, &body).await?;
        let expected = json!({ "error": "bad_request", "reason": format!("Validation failed\n\n{reason}\n") });
        check_eq!((response.status, parse(&response.body)?), (400, expected), "PUT {definition}");
    }
    let bad_apply = r#"{"pattern":"^x$","apply-to":"bogus","definition":{"message-ttl":1}}"#;
    let response = ctx.put_policy_raw(&name, bad_apply).await?;
    let reason = "Validation failed\n\napply-to 'bogus' unrecognised; should be one of: 'queues', 'classic_queues',  'quorum_queues', 'streams', 'exchanges', or 'all'\n";
    check_eq!(
        (response.status, parse(&response.body)?),
        (400, json!({ "error": "bad_request", "reason": reason })),
        "PUT apply-to bogus"
    );
    let no_pattern = ctx.put_policy_raw(&name, r#"{"apply-to":"queues","definition":{"message-ttl":1}}"#).await?;
    check_eq!(
        (no_pattern.status, parse(&no_pattern.body)?),
        (400, json!({ "error": "bad_request", "reason": "[{key_missing,pattern}]" })),
        "PUT without a pattern"
    );
    check_eq!(ctx.get_policy(&name).await?.status, 404, "GET after the refused PUTs");
    // A refused update leaves the existing policy as it was.
    let good = r#"{"pattern":"^nothing-matches$","apply-to":"queues","priority":0,"definition":{"message-ttl":5}}"#;
    check_eq!(ctx.put_policy_raw(&name, good).await?.status, 201, "valid PUT");
    let bad = r#"{"pattern":"^other$","apply-to":"queues","priority":0,"definition":{"message-ttl":-5}}"#;
    check_eq!(ctx.put_policy_raw(&name, bad).await?.status, 400, "invalid update");
    let kept = parse(&ctx.get_policy(&name).await?.body)?;
    check_eq!(
        (kept.get("pattern").cloned(), kept.get("definition").cloned()),
        (Some(json!("^nothing-matches$")), Some(json!({ "message-ttl": 5 }))),
        "policy after the refused update"
    );
    Ok(())
}

async fn http_queue_counts(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    let policy = ctx.set_policy(&exact(&s.source), "queues", 0, r#"{"message-ttl":600000}"#).await?;
    publish_all(&ctx, &s.conn, &s.source, &["m1", "m2", "m3"]).await?;
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 10).await?;
    let got = t.next_n(3).await?;
    if let Some(second) = got.get(1) {
        t.settle(second, How::Reject).await?;
    }
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    ctx.expect_queue_counts(&s.source, (2, 0, 2)).await?;
    // RabbitMQ shows a quorum queue's policy with its next stats refresh.
    let expected = (Some(json!(policy)), Some(json!({ "message-ttl": 600000 })));
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(6);
    loop {
        let info = ctx.queue_info(&s.source).await?;
        let shown = (info.get("policy").cloned(), info.get("effective_policy_definition").cloned());
        if shown == expected {
            break;
        }
        crate::check!(
            tokio::time::Instant::now() < deadline,
            "policy shown for the queue: expected {expected:?} got {shown:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    t.close().await;
    Ok(())
}

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

async fn dlrk_without_dlx(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let key = "x-dead-letter-routing-key";
    refused(&ctx, &q, &[(key, text("k"))], &invalid_arg(&ctx, &q, key, "routing_key_but_no_dlx_defined")).await
}

async fn ttl_invalid(ctx: Ctx) -> CaseResult {
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

async fn max_length_negative(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    for key in ["x-max-length", "x-max-length-bytes"] {
        refused(&ctx, &q, &[(key, long(-1))], &invalid_arg(&ctx, &q, key, "{value_negative,-1}")).await?;
    }
    Ok(())
}

async fn overflow_invalid(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let key = "x-overflow";
    refused(&ctx, &q, &[(key, text("bogus"))], &invalid_arg(&ctx, &q, key, "invalid_overflow")).await
}

async fn strategy_invalid(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let key = "x-dead-letter-strategy";
    let args = [("x-dead-letter-exchange", text("d")), (key, text("bogus"))];
    refused(&ctx, &q, &args, &invalid_arg(&ctx, &q, key, "invalid_dlx_strategy")).await
}

async fn dlx_not_string(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let expected = format!(
        "invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue '{q}' in vhost '{}'",
        ctx.broker().vhost
    );
    refused(&ctx, &q, &[("x-dead-letter-exchange", AMQPValue::LongInt(1))], &expected).await?;
    // Checked before the arguments' own validation.
    refused(&ctx, &q, &[("x-expires", long(0)), ("x-dead-letter-exchange", AMQPValue::LongInt(1))], &expected).await
}

async fn dlrk_not_string(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let key = "x-dead-letter-routing-key";
    let args = [("x-dead-letter-exchange", text("d")), (key, AMQPValue::LongInt(1))];
    refused(&ctx, &q, &args, &invalid_arg(&ctx, &q, key, "{unacceptable_type,signedint}")).await
}

async fn classic_refuses(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let vhost = ctx.broker().vhost.clone();
    for (key, value) in [("x-delivery-limit", long(5)), ("x-dead-letter-strategy", text("at-least-once"))] {
        let expected =
            format!("invalid arg '{key}' for queue '{q}' in vhost '{vhost}' of queue type rabbit_classic_queue");
        refused(&ctx, &q, &[(key, value)], &expected).await?;
    }
    Ok(())
}

async fn inequivalent_dlx(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let (_conn, ch) = ctx.lapin_channel().await?;
    dk::declare_typed(&ctx, &ch, &q, dk::args(&[("x-dead-letter-exchange", text("a"))])).await?;
    let prefix = format!("inequivalent arg 'x-dead-letter-exchange' for queue '{q}' in vhost '{}'", ctx.broker().vhost);
    refused(&ctx, &q, &[("x-dead-letter-exchange", text("b"))], &format!("{prefix}: received 'b' but current is 'a'"))
        .await?;
    refused(&ctx, &q, &[], &format!("{prefix}: received none but current is the value 'a' of type 'longstr'")).await
}

async fn delivery_limit_text(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[("x-delivery-limit", text("abc"))]).await?;
    publish_all(&ctx, &s.conn, &s.source, &["m"]).await?;
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 10).await?;
    // 4.0.5 compares the count with the binary "abc", which Erlang orders above every number.
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
