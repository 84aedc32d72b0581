//! The death history a dead letter carries, exactly as RabbitMQ 4.0.5 renders it
//! (`dead_lettering_SUITE` #15, #16, #24–#31, #34, #35; rabbitmq-dlx.md §4; reference
//! observations 4–7 and 9): 0.9.1 `x-death` tables with their field order and AMQP types and the
//! header order of the whole delivery (read off raw frames: lapin's tables are sorted maps), the
//! 1.0 `x-opt-deaths` annotation and annotation order (read with the raw 1.0 peer), and the
//! `x-first-death-*` / `x-last-death-*` fields.
//!
//! [`raw091`] is the raw 0.9.1 client the `dlx.*` matrix cases use: exact field types in both
//! directions, header order preserved, `basic.get` / `basic.reject` by hand.

use lapin::ExchangeKind;
use serde_amqp::Value;
use serde_amqp::primitives::Symbol;

use self::raw091::F;
use super::dlx_routing::kit::{self, Got, Out, PUBLISH_10, PUBLISH_091};
use crate::dlx_kit::{self as dk, long, text};
use crate::raw10::message::hdr;
use crate::wire::Settle;
use crate::{Case, CaseError, CaseResult, Ctx, Protocol, QueueKind, Variant, case_v, check, check_eq};

mod exact;
pub(super) mod raw091;

/// Either publisher, a 0.9.1 consumer, both queue types.
const CONSUME_091: [Variant; 4] = [
    Variant::AMQP091.on(QueueKind::Classic),
    Variant::TO091.on(QueueKind::Classic),
    Variant::AMQP091.on(QueueKind::Quorum),
    Variant::TO091.on(QueueKind::Quorum),
];

/// Either publisher, a 1.0 consumer, both queue types.
const CONSUME_10: [Variant; 4] = [
    Variant::TO10.on(QueueKind::Classic),
    Variant::AMQP10.on(QueueKind::Classic),
    Variant::TO10.on(QueueKind::Quorum),
    Variant::AMQP10.on(QueueKind::Quorum),
];

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case_v!(
            "dlx.history.appended_per_event",
            "Q -rejected-> D1 -rejected-> D2: the history has two entries, the most recent (D1) first, each with the exchange and keys it had before that death",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            appended_per_event
        ),
        case_v!(
            "dlx.history.client_x_death_not_interpreted",
            "a client-published x-death (0.9.1 header) or x-opt-deaths (1.0 annotation) is opaque: the next death replaces it with a fresh one-entry history (4.x)",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            client_history_replaced
        ),
        case_v!(
            "dlx.history.republished_as_received",
            "a dead letter a 1.0 client republishes with the message annotations it received (x-opt-deaths, x-first-death-*...) starts a fresh history when it dies again",
            &PUBLISH_10,
            ["dlx"],
            republished_as_received
        ),
        case_v!(
            "dlx.history.x_death_exact",
            "0.9.1 x-death entry fields in order original-expiration, count (l), reason, queue (S), time (T, s), exchange (S), routing-keys (A of S); x-*-death-* longstr; headers sorted by name",
            &CONSUME_091,
            ["dlx"],
            exact::x_death_exact
        ),
        case_v!(
            "dlx.history.x_opt_deaths_exact",
            "1.0 x-opt-deaths: array of maps, symbol keys ttl (uint), queue, reason (symbol), count (ulong), first-time, last-time (timestamp), exchange, routing-keys (array of string); annotation order; first-acquirer=false, no ttl",
            &CONSUME_10,
            ["dlx"],
            exact::x_opt_deaths_exact
        ),
        case_v!(
            "dlx.history.delivery_count_carried",
            "a dead letter rejected (0.9.1 reject) from a quorum queue shows delivery-count 1 to a 1.0 consumer of a classic or quorum DLQ, one from a classic queue or expired from a quorum queue 0",
            &Variant::BOTH_QUEUES,
            ["dlx"],
            delivery_count_carried
        ),
        case_v!(
            "dlx.history.reason_maxlen",
            "a message dropped from the head by x-max-length has reason maxlen in its history and x-first/last-death-reason",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            reason_maxlen
        ),
        case_v!(
            "dlx.history.same_pair_counted",
            "Q1 -rejected-> Q2 -rejected-> Q1 -rejected->: one {Q1, rejected} entry with count 2 moved to the front, keeping its first exchange and routing keys",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            same_pair_counted
        ),
        case_v!(
            "dlx.history.bcc_removed",
            "a 0.9.1 BCC header never reaches the dead letter and its keys are not in routing-keys (publish key + CC are)",
            &PUBLISH_091,
            ["dlx"],
            bcc_removed
        ),
        case_v!(
            "dlx.history.cc_kept",
            "the 0.9.1 CC header survives dead lettering (0.9.1: CC header, 1.0: x-cc annotation) and its keys are in routing-keys",
            &PUBLISH_091,
            ["dlx"],
            cc_kept
        ),
        case_v!(
            "dlx.history.cc_kept_with_dlrk",
            "with a dead-letter routing key the CC header is still kept, and routing-keys keeps the original keys",
            &PUBLISH_091,
            ["dlx"],
            cc_kept_with_dlrk
        ),
        case_v!(
            "dlx.history.first_death_fixed",
            "after two deaths x-first-death-{queue,reason,exchange} still name the first while x-last-death-* name the second",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            first_death_fixed
        ),
        case_v!(
            "dlx.history.first_death_headers_route",
            "a headers-exchange DLX routes on x-first-death-* with x-match all-with-x and any-with-x",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            first_death_route
        ),
        case_v!(
            "dlx.history.queue_ttl_no_original_expiration",
            "a message expired by x-message-ttl has no original-expiration (0.9.1) / ttl (1.0) in its history",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            queue_ttl_no_original_expiration
        ),
        case_v!(
            "dlx.history.per_message_expiration",
            "a message expired by its own expiration \"1\" / header.ttl 1 shows original-expiration \"1\" (0.9.1) or ttl 1 uint (1.0), whichever protocol published it",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            per_message_expiration
        ),
        case_v!(
            "dlx.history.original_expiration_when_queue_ttl_shorter",
            "with a message expiration of 60000 and a shorter queue TTL, the history holds the message's own value",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            expiration_with_shorter_queue_ttl
        ),
        case_v!(
            "dlx.history.original_expiration_on_reject",
            "the message's own TTL is recorded for reason rejected too",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            expiration_on_reject
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// Cases

/// `(queue, reason, count)` of each death, most recent first.
fn triples(got: &Got) -> Vec<(String, String, u64)> {
    got.deaths().into_iter().map(|d| (d.queue, d.reason, d.count)).collect()
}

fn owned(items: &[(&str, &str, u64)]) -> Vec<(String, String, u64)> {
    items.iter().map(|(q, r, c)| ((*q).to_owned(), (*r).to_owned(), *c)).collect()
}

async fn appended_per_event(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let (q, d1, d2) = (ctx.queue("q"), ctx.queue("d1"), ctx.queue("d2"));
    kit::source(&ctx, &ch, &q, &[("x-dead-letter-exchange", text("")), ("x-dead-letter-routing-key", text(&d1))])
        .await?;
    kit::source(&ctx, &ch, &d1, &[("x-dead-letter-exchange", text("")), ("x-dead-letter-routing-key", text(&d2))])
        .await?;
    crate::lapin_kit::declare_queue(&ch, &d2).await?;
    kit::publish(&ctx, "", &q, &Out::text("m")).await?;
    kit::reject_one(&ctx, &q).await?;
    kit::reject_one(&ctx, &d1).await?;
    dk::eventually_ready(&ch, &d2, 1).await?;
    let got = kit::take_one(&ctx, &d2).await?;
    check_eq!(got.body(), "m", "body");
    check_eq!(triples(&got), owned(&[(&d1, "rejected", 1), (&q, "rejected", 1)]), "history");
    let places: Vec<(String, Vec<String>)> = got.deaths().into_iter().map(|d| (d.exchange, d.routing_keys)).collect();
    check_eq!(places, vec![(String::new(), vec![d1.clone()]), (String::new(), vec![q.clone()])], "exchange and keys");
    Ok(())
}

async fn client_history_replaced(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[("x-message-ttl", long(50))]).await?;
    let forged = match ctx.variant().publish {
        Protocol::Amqp091 => {
            let entry = F::Table(vec![
                ("count".into(), F::I64(5)),
                ("reason".into(), F::S("rejected".into())),
                ("queue".into(), F::S("elsewhere".into())),
                ("time".into(), F::T(1_700_000_000)),
                ("exchange".into(), F::S(String::new())),
                ("routing-keys".into(), F::A(vec![F::S("elsewhere".into())])),
            ]);
            Out::text("m").header("x-death", F::A(vec![entry])).header("x-first-death-queue", F::S("elsewhere".into()))
        }
        Protocol::Amqp10 => {
            let key = |k: &str| Value::Symbol(Symbol::from(k));
            let entry = Value::Map(
                [
                    (key("queue"), Value::String("elsewhere".into())),
                    (key("reason"), Value::Symbol(Symbol::from("rejected"))),
                    (key("count"), Value::Ulong(5)),
                ]
                .into_iter()
                .collect(),
            );
            Out::text("m")
                .annotation("x-opt-deaths", Value::List(vec![entry]))
                .annotation("x-first-death-queue", Value::String("elsewhere".into()))
        }
    };
    kit::publish(&ctx, "", &s.source, &forged).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    let got = kit::take_one(&ctx, &s.dlq).await?;
    check_eq!(triples(&got), owned(&[(&s.source, "expired", 1)]), "history");
    check_eq!(got.text_field("x-first-death-queue"), Some(s.source.clone()), "x-first-death-queue");
    Ok(())
}

async fn republished_as_received(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[("x-message-ttl", long(50))]).await?;
    let (first, held) = (ctx.queue("first"), ctx.queue("held"));
    crate::lapin_kit::declare_queue(&s.ch, &held).await?;
    kit::source(
        &ctx,
        &s.ch,
        &first,
        &[("x-dead-letter-exchange", text("")), ("x-dead-letter-routing-key", text(&held))],
    )
    .await?;
    kit::publish(&ctx, "", &first, &Out::text("m")).await?;
    kit::reject_one(&ctx, &first).await?;
    dk::eventually_ready(&s.ch, &held, 1).await?;
    let mut sub = kit::Sub::open_as(&ctx, &held, Protocol::Amqp10).await?;
    let got = sub.next().await?;
    sub.settle(&got, Settle::Ack).await?;
    sub.close().await;
    let Got::A10 { msg, .. } = &got else { return Err(CaseError::new("expected a 1.0 delivery")) };
    let annotations = msg.sections.iter().find(|(code, _)| *code == crate::raw10::message::code::MESSAGE_ANNOTATIONS);
    let Some((_, annotations)) = annotations else { return Err(CaseError::new("the dead letter has no annotations")) };
    let mut payload = annotations.clone();
    payload.extend(crate::raw10::Msg::text("m").encode()?);
    kit::publish_raw10(&ctx, "", &s.source, &payload).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    let got = kit::take_one(&ctx, &s.dlq).await?;
    check_eq!(triples(&got), owned(&[(&s.source, "expired", 1)]), "history");
    check_eq!(got.text_field("x-first-death-queue"), Some(s.source.clone()), "x-first-death-queue");
    check_eq!(got.text_field("x-first-death-reason"), Some("expired".to_owned()), "x-first-death-reason");
    Ok(())
}

async fn delivery_count_carried(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    let (expired, quorum_dlq) = (ctx.queue("expired"), ctx.queue("qdlq"));
    kit::source(&ctx, &s.ch, &expired, &[("x-dead-letter-exchange", text(&s.dlx)), ("x-message-ttl", long(20))])
        .await?;
    let durable = lapin::options::QueueDeclareOptions { durable: true, ..Default::default() };
    s.ch.queue_declare(quorum_dlq.as_str().into(), durable, dk::args(&[("x-queue-type", text("quorum"))])).await?;
    for (queue, key) in [(&s.dlq, &expired), (&quorum_dlq, &s.source), (&quorum_dlq, &expired)] {
        crate::lapin_kit::bind(&s.ch, queue, &s.dlx, key, lapin::types::FieldTable::default()).await?;
    }
    kit::publish(&ctx, "", &s.source, &Out::text("rejected")).await?;
    kit::reject_one(&ctx, &s.source).await?;
    kit::publish(&ctx, "", &expired, &Out::text("expired")).await?;
    let failed = u32::from(ctx.variant().queue == Some(QueueKind::Quorum));
    let expected =
        vec![("rejected".to_owned(), Some(Value::Uint(failed))), ("expired".to_owned(), Some(Value::Uint(0)))];
    // The same counts whether the DLQ is classic or quorum (which starts from the carried count).
    for dlq in [&s.dlq, &quorum_dlq] {
        dk::eventually_ready(&s.ch, dlq, 2).await?;
        let mut sub = kit::Sub::open_as(&ctx, dlq, Protocol::Amqp10).await?;
        let mut counts = Vec::new();
        for _ in 0..2 {
            let got = sub.next().await?;
            if let Got::A10 { msg, .. } = &got {
                counts.push((got.body(), msg.header(hdr::DELIVERY_COUNT)));
            }
            sub.settle(&got, Settle::Ack).await?;
        }
        sub.close().await;
        check_eq!(counts, expected.clone(), "(body, delivery-count) in {dlq}");
    }
    Ok(())
}

async fn reason_maxlen(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[("x-max-length", long(1))]).await?;
    kit::publish(&ctx, "", &s.source, &Out::text("p1")).await?;
    kit::publish(&ctx, "", &s.source, &Out::text("p2")).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    let got = kit::take_one(&ctx, &s.dlq).await?;
    check_eq!(got.body(), "p1", "dead letter");
    check_eq!(triples(&got), owned(&[(&s.source, "maxlen", 1)]), "history");
    check_eq!(got.text_field("x-first-death-reason"), Some("maxlen".to_owned()), "x-first-death-reason");
    check_eq!(got.text_field("x-last-death-reason"), Some("maxlen".to_owned()), "x-last-death-reason");
    Ok(())
}

async fn same_pair_counted(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let (q1, q2, ex) = (ctx.queue("q1"), ctx.queue("q2"), ctx.exchange("ex"));
    kit::exchange(&ch, &ex, ExchangeKind::Direct, false, &[]).await?;
    kit::source(&ctx, &ch, &q1, &[("x-dead-letter-exchange", text("")), ("x-dead-letter-routing-key", text(&q2))])
        .await?;
    kit::source(&ctx, &ch, &q2, &[("x-dead-letter-exchange", text("")), ("x-dead-letter-routing-key", text(&q1))])
        .await?;
    crate::lapin_kit::bind(&ch, &q1, &ex, "k", lapin::types::FieldTable::default()).await?;
    kit::publish(&ctx, &ex, "k", &Out::text("m")).await?;
    kit::reject_one(&ctx, &q1).await?;
    kit::reject_one(&ctx, &q2).await?;
    kit::reject_one(&ctx, &q1).await?;
    dk::eventually_ready(&ch, &q2, 1).await?;
    let got = kit::take_one(&ctx, &q2).await?;
    check_eq!(triples(&got), owned(&[(&q1, "rejected", 2), (&q2, "rejected", 1)]), "history");
    let first = got.deaths().into_iter().next().map(|d| (d.exchange, d.routing_keys));
    check_eq!(first, Some((ex.clone(), vec!["k".to_owned()])), "{{q1, rejected}} keeps its first exchange and keys");
    check_eq!(got.text_field("x-first-death-exchange"), Some(ex.clone()), "x-first-death-exchange");
    check_eq!(got.text_field("x-last-death-exchange"), Some(String::new()), "x-last-death-exchange");
    check_eq!(got.text_field("x-last-death-queue"), Some(q1.clone()), "x-last-death-queue");
    // The counted entry keeps its first time: 0.9.1 `time` (seconds) and 1.0 `first-time` before
    // `last-time`; its field order is unchanged.
    match &got {
        Got::A091(d) => {
            let names: Vec<String> =
                d.x_death().first().map(|e| e.iter().map(|(k, _)| k.clone()).collect()).unwrap_or_default();
            check_eq!(names, ["count", "reason", "queue", "time", "exchange", "routing-keys"], "x-death[0] fields");
            check_eq!(d.x_death_field(0, "count"), Some(F::I64(2)), "x-death[0].count");
        }
        Got::A10 { .. } => {
            let time = |name: &str| got.death_field_debug(0, name);
            check!(
                time("first-time") < time("last-time"),
                "first-time {:?} is not before last-time {:?}",
                time("first-time"),
                time("last-time")
            );
            check_eq!(
                got.death_field_debug(0, "count"),
                Some(format!("{:?}", Value::Ulong(2))),
                "x-opt-deaths[0].count"
            );
        }
    }
    Ok(())
}

/// Publishes `out` to the source queue, rejects it and returns the dead letter.
async fn rejected_copy(ctx: &Ctx, s: &dk::Setup, out: &Out) -> Result<Got, CaseError> {
    kit::publish(ctx, "", &s.source, out).await?;
    kit::reject_one(ctx, &s.source).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    kit::take_one(ctx, &s.dlq).await
}

async fn bcc_removed(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    let (cc, bcc) = (ctx.name("cc"), ctx.name("bcc"));
    let got = rejected_copy(&ctx, &s, &Out::text("m").cc(&cc).bcc(&bcc)).await?;
    let keys = got.deaths().into_iter().next().map(|d| d.routing_keys);
    check_eq!(keys, Some(vec![s.source.clone(), cc.clone()]), "routing-keys");
    check_eq!(got.cc(), Some(vec![cc]), "CC");
    check!(!got.mentions("BCC"), "the dead letter still carries BCC");
    Ok(())
}

async fn cc_kept(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    let cc = ctx.name("cc");
    let got = rejected_copy(&ctx, &s, &Out::text("m").cc(&cc)).await?;
    check_eq!(got.cc(), Some(vec![cc.clone()]), "CC");
    let keys = got.deaths().into_iter().next().map(|d| d.routing_keys);
    check_eq!(keys, Some(vec![s.source.clone(), cc]), "routing-keys");
    Ok(())
}

async fn cc_kept_with_dlrk(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let (src, dlq, dlx, cc) = (ctx.queue("src"), ctx.queue("dlq"), ctx.exchange("dlx"), ctx.name("cc"));
    kit::exchange(&ch, &dlx, ExchangeKind::Direct, false, &[]).await?;
    crate::lapin_kit::queue_bound(&ch, &dlq, &dlx, "dl-key").await?;
    kit::source(
        &ctx,
        &ch,
        &src,
        &[("x-dead-letter-exchange", text(&dlx)), ("x-dead-letter-routing-key", text("dl-key"))],
    )
    .await?;
    kit::publish(&ctx, "", &src, &Out::text("m").cc(&cc)).await?;
    kit::reject_one(&ctx, &src).await?;
    dk::eventually_ready(&ch, &dlq, 1).await?;
    let got = kit::take_one(&ctx, &dlq).await?;
    check_eq!(got.routing_key(), "dl-key", "delivery routing key");
    check_eq!(got.cc(), Some(vec![cc.clone()]), "CC");
    let keys = got.deaths().into_iter().next().map(|d| d.routing_keys);
    check_eq!(keys, Some(vec![src.clone(), cc]), "routing-keys");
    Ok(())
}

async fn first_death_fixed(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let (q1, q2, q3) = (ctx.queue("q1"), ctx.queue("q2"), ctx.queue("q3"));
    let (ex, dx1) = (ctx.exchange("ex"), ctx.exchange("dx1"));
    kit::exchange(&ch, &ex, ExchangeKind::Direct, false, &[]).await?;
    kit::exchange(&ch, &dx1, ExchangeKind::Direct, false, &[]).await?;
    kit::source(&ctx, &ch, &q1, &[("x-dead-letter-exchange", text(&dx1))]).await?;
    kit::source(
        &ctx,
        &ch,
        &q2,
        &[("x-dead-letter-exchange", text("")), ("x-dead-letter-routing-key", text(&q3)), ("x-message-ttl", long(50))],
    )
    .await?;
    crate::lapin_kit::declare_queue(&ch, &q3).await?;
    let none = lapin::types::FieldTable::default;
    crate::lapin_kit::bind(&ch, &q1, &ex, "k", none()).await?;
    crate::lapin_kit::bind(&ch, &q2, &dx1, "k", none()).await?;
    kit::publish(&ctx, &ex, "k", &Out::text("m")).await?;
    kit::reject_one(&ctx, &q1).await?;
    dk::eventually_ready(&ch, &q3, 1).await?;
    let got = kit::take_one(&ctx, &q3).await?;
    check_eq!(triples(&got), owned(&[(&q2, "expired", 1), (&q1, "rejected", 1)]), "history");
    let fields = [
        ("x-first-death-exchange", ex.as_str()),
        ("x-first-death-queue", q1.as_str()),
        ("x-first-death-reason", "rejected"),
        ("x-last-death-exchange", dx1.as_str()),
        ("x-last-death-queue", q2.as_str()),
        ("x-last-death-reason", "expired"),
    ];
    for (name, value) in fields {
        check_eq!(got.text_field(name), Some(value.to_owned()), "{name}");
    }
    Ok(())
}

async fn first_death_route(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let (q1, q2, expired, rejected) = (ctx.queue("q1"), ctx.queue("q2"), ctx.queue("exp"), ctx.queue("rej"));
    let hx = ctx.exchange("hx");
    kit::exchange(&ch, &hx, ExchangeKind::Headers, false, &[]).await?;
    kit::source(&ctx, &ch, &q1, &[("x-dead-letter-exchange", text(&hx))]).await?;
    kit::source(&ctx, &ch, &q2, &[("x-dead-letter-exchange", text(&hx))]).await?;
    crate::lapin_kit::declare_queue(&ch, &expired).await?;
    crate::lapin_kit::declare_queue(&ch, &rejected).await?;
    let all = dk::args(&[
        ("x-match", text("all-with-x")),
        ("x-first-death-reason", text("expired")),
        ("x-first-death-queue", text(&q1)),
    ]);
    crate::lapin_kit::bind(&ch, &expired, &hx, "", all).await?;
    let any = dk::args(&[("x-match", text("any-with-x")), ("x-first-death-reason", text("rejected"))]);
    crate::lapin_kit::bind(&ch, &rejected, &hx, "", any).await?;
    kit::publish(&ctx, "", &q1, &Out::text("m1").ttl(0)).await?;
    dk::eventually_ready(&ch, &expired, 1).await?;
    check_eq!(kit::take_one(&ctx, &expired).await?.body(), "m1", "expired from q1");
    kit::publish(&ctx, "", &q2, &Out::text("m2").ttl(0)).await?;
    tokio::time::sleep(kit::QUIET).await;
    check_eq!(
        (dk::ready(&ch, &q2).await?, dk::ready(&ch, &expired).await?, dk::ready(&ch, &rejected).await?),
        (0, 0, 0),
        "q2 expired into no queue"
    );
    kit::publish(&ctx, "", &q2, &Out::text("m3")).await?;
    kit::reject_one(&ctx, &q2).await?;
    dk::eventually_ready(&ch, &rejected, 1).await?;
    check_eq!(kit::take_one(&ctx, &rejected).await?.body(), "m3", "rejected from q2");
    check_eq!(dk::ready(&ch, &expired).await?, 0, "expired queue");
    Ok(())
}

async fn expired_copy(ctx: &Ctx, queue_ttl: Option<i64>, ttl: Option<u32>) -> Result<Got, CaseError> {
    let extra: Vec<(&str, lapin::types::AMQPValue)> =
        queue_ttl.map(|t| ("x-message-ttl", long(t))).into_iter().collect();
    let s = dk::setup(ctx, &extra).await?;
    let mut out = Out::text("m");
    if let Some(ttl) = ttl {
        out = out.ttl(ttl);
    }
    kit::publish(ctx, "", &s.source, &out).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    let got = kit::take_one(ctx, &s.dlq).await?;
    check_eq!(triples(&got), owned(&[(&s.source, "expired", 1)]), "history");
    Ok(got)
}

/// Checks the rendered TTL of the only death: `original-expiration` text (0.9.1) or `ttl` uint
/// (1.0), as the entry's first field, or no such field.
fn check_recorded_ttl(got: &Got, ttl: Option<u32>) -> CaseResult {
    let (mut expected, name, wanted) = match got {
        Got::A091(_) => (
            vec!["count", "reason", "queue", "time", "exchange", "routing-keys"],
            "original-expiration",
            ttl.map(|t| format!("{:?}", F::S(t.to_string()))),
        ),
        Got::A10 { .. } => (
            vec!["queue", "reason", "count", "first-time", "last-time", "exchange", "routing-keys"],
            "ttl",
            ttl.map(|t| format!("{:?}", Value::Uint(t))),
        ),
    };
    if ttl.is_some() {
        expected.insert(0, name);
    }
    let expected: Vec<String> = expected.into_iter().map(str::to_owned).collect();
    check_eq!(got.death_field_names(), vec![expected], "death entry field names");
    check_eq!(got.death_field_debug(0, name), wanted, "recorded TTL");
    Ok(())
}

async fn queue_ttl_no_original_expiration(ctx: Ctx) -> CaseResult {
    let got = expired_copy(&ctx, Some(50), None).await?;
    check_recorded_ttl(&got, None)
}

async fn per_message_expiration(ctx: Ctx) -> CaseResult {
    let got = expired_copy(&ctx, None, Some(1)).await?;
    check_recorded_ttl(&got, Some(1))?;
    kit::check_ttl_cleared(&ctx, &got, 1)
}

async fn expiration_with_shorter_queue_ttl(ctx: Ctx) -> CaseResult {
    let got = expired_copy(&ctx, Some(50), Some(60_000)).await?;
    check_recorded_ttl(&got, Some(60_000))
}

async fn expiration_on_reject(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    let got = rejected_copy(&ctx, &s, &Out::text("m").ttl(60_000)).await?;
    check_eq!(triples(&got), owned(&[(&s.source, "rejected", 1)]), "history");
    check_recorded_ttl(&got, Some(60_000))?;
    kit::check_ttl_cleared(&ctx, &got, 60_000)
}
