//! Where dead letters go (RabbitMQ's `dead_lettering_SUITE` #6, #13, #14, #17–#20, #33;
//! rabbitmq-dlx.md §3; reference observations 1–3, 12, 13), in the publish × consume protocol
//! matrix for classic and quorum source queues.
//!
//! [`kit`] is shared with `dlx_history`.

use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, ExchangeKind};
use serde_amqp::Value;
use serde_amqp::primitives::Symbol;

use self::kit::{
    Got, Out, PUBLISH_10, PUBLISH_091, QUIET, Sub, check_ttl_cleared, exchange, publish, reject_one, source, take_one,
};
use super::dlx_history::raw091::{F, Props};
use crate::dlx_kit::{self as dk, long, text};
use crate::lapin_kit as lk;
use crate::raw10::message::{hdr, prop};
use crate::wire::Settle;
use crate::{Case, CaseError, CaseResult, Ctx, Protocol, Variant, case_v, check, check_eq};

pub(super) mod kit;

pub(crate) fn cases() -> Vec<Case> {
    let m = &Variant::MATRIX_BOTH_QUEUES;
    vec![
        case_v!(
            "dlx.routing.missing_exchange",
            "a DLX that does not exist drops the dead letter silently; once declared and bound, dead letters arrive",
            m,
            ["dlx"],
            missing_exchange
        ),
        case_v!(
            "dlx.routing.original_key",
            "without a dead-letter routing key the dead letter is routed with the key it was published with",
            m,
            ["dlx"],
            original_key
        ),
        case_v!(
            "dlx.routing.dlrk_replaces_key",
            "x-dead-letter-routing-key replaces the routing key; history keeps the original exchange and key",
            m,
            ["dlx"],
            dlrk_replaces_key
        ),
        case_v!(
            "dlx.routing.unbound_key_dropped",
            "a dead letter the DLX routes nowhere is dropped (at most once)",
            m,
            ["dlx"],
            unbound_key_dropped
        ),
        case_v!(
            "dlx.routing.cc_keys_route",
            "the keys of a 0.9.1 CC header route the dead letter too",
            &PUBLISH_091,
            ["dlx"],
            cc_keys_route
        ),
        case_v!(
            "dlx.routing.bcc_keys_route",
            "the keys of a 0.9.1 BCC header route the dead letter too, and BCC does not reappear",
            &PUBLISH_091,
            ["dlx"],
            bcc_keys_route
        ),
        case_v!(
            "dlx.routing.amqp10_x_cc_does_not_route",
            "a 1.0 publisher's x-cc annotation neither routes the message nor its dead letter (4.0.5 routes 1.0 messages by the address key alone) and is not in routing-keys",
            &PUBLISH_10,
            ["dlx"],
            amqp10_x_cc
        ),
        case_v!(
            "dlx.routing.cycle_max_length_dropped",
            "a queue dead-lettering to itself (default exchange, no DLRK) drops its maxlen dead letters as a cycle",
            m,
            ["dlx"],
            cycle_max_length
        ),
        case_v!(
            "dlx.routing.cycle_with_reject_republished",
            "a queue dead-lettering to itself gets rejected messages back, the count growing",
            m,
            ["dlx"],
            cycle_with_reject
        ),
        case_v!(
            "dlx.routing.cycle_ttl_dropped",
            "a queue dead-lettering to itself drops its expired dead letters as a cycle",
            m,
            ["dlx"],
            cycle_ttl
        ),
        case_v!(
            "dlx.routing.reject_expire_expire_loops",
            "Q1 -rejected-> Q2 -expired-> Q3 -expired-> Q1 keeps looping: a rejection in the cycle means it is not dropped",
            m,
            ["dlx"],
            reject_expire_expire
        ),
        case_v!(
            "dlx.routing.fanout_dlx",
            "a fanout DLX delivers to every bound queue whatever the key",
            m,
            ["dlx"],
            fanout_dlx
        ),
        case_v!(
            "dlx.routing.topic_dlx",
            "a topic DLX matches the dead letter's key against patterns",
            m,
            ["dlx"],
            topic_dlx
        ),
        case_v!("dlx.routing.headers_dlx", "a headers DLX matches the dead letter's headers", m, ["dlx"], headers_dlx),
        case_v!(
            "dlx.routing.default_exchange_dlx",
            "the default exchange as DLX with a DLRK delivers to the queue of that name",
            m,
            ["dlx"],
            default_exchange_dlx
        ),
        case_v!(
            "dlx.routing.alternate_exchange",
            "a dead letter the DLX cannot route goes to the DLX's alternate exchange",
            m,
            ["dlx"],
            alternate_exchange
        ),
        case_v!("dlx.routing.internal_exchange", "an internal exchange works as a DLX", m, ["dlx"], internal_exchange),
        case_v!(
            "dlx.routing.exchange_to_exchange",
            "a DLX forwards the dead letter through an exchange-to-exchange binding",
            m,
            ["dlx"],
            exchange_to_exchange
        ),
        case_v!(
            "dlx.routing.rejected_cycle_target_kept",
            "a rejected message whose DLX routes back to its own queue and to another queue reaches both: a rejection is never a cycle",
            m,
            ["dlx"],
            rejected_cycle
        ),
        case_v!(
            "dlx.routing.cycle_drops_only_repeating_target",
            "a cyclic target is skipped while another queue bound to the same DLX still gets its copy",
            m,
            ["dlx"],
            partial_cycle
        ),
        case_v!(
            "dlx.routing.delivery_fields",
            "the dead letter shows exchange = DLX, routing key = first key, not redelivered, no TTL, all other properties and the body unchanged",
            m,
            ["dlx"],
            delivery_fields
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// Cases

async fn missing_exchange(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let (src, dlq, dlx) = (ctx.queue("src"), ctx.queue("dlq"), ctx.exchange("dlx"));
    source(&ctx, &ch, &src, &[("x-dead-letter-exchange", text(&dlx))]).await?;
    let mut sub = Sub::open(&ctx, &src).await?;
    publish(&ctx, "", &src, &Out::text("m1")).await?;
    let got = sub.next().await?;
    sub.settle(&got, Settle::Reject).await?;
    tokio::time::sleep(QUIET).await;
    check_eq!(dk::ready(&ch, &src).await?, 0, "source after the first rejection");
    exchange(&ch, &dlx, ExchangeKind::Direct, false, &[]).await?;
    lk::queue_bound(&ch, &dlq, &dlx, &src).await?;
    publish(&ctx, "", &src, &Out::text("m2")).await?;
    let got = sub.next().await?;
    sub.settle(&got, Settle::Reject).await?;
    sub.close().await;
    dk::eventually_ready(&ch, &dlq, 1).await?;
    let got = take_one(&ctx, &dlq).await?;
    check_eq!(got.body(), "m2", "dead letter");
    check_eq!(dk::ready(&ch, &dlq).await?, 0, "the first message was dropped");
    Ok(())
}

/// A source queue bound to exchange `ex` with key `orig`, its DLX (of the given type), and a
/// queue bound to the DLX with `key`.
struct Routed {
    ch: Channel,
    _conn: lapin::Connection,
    ex: String,
    src: String,
    dlx: String,
    dlq: String,
}

async fn routed(ctx: &Ctx, kind: ExchangeKind, key: &str, extra: &[(&str, AMQPValue)]) -> Result<Routed, CaseError> {
    let (conn, ch) = ctx.lapin_channel().await?;
    let (ex, dlx, src, dlq) = (ctx.exchange("ex"), ctx.exchange("dlx"), ctx.queue("src"), ctx.queue("dlq"));
    exchange(&ch, &ex, ExchangeKind::Direct, false, &[]).await?;
    exchange(&ch, &dlx, kind, false, &[]).await?;
    let mut args = vec![("x-dead-letter-exchange", text(&dlx))];
    args.extend(extra.iter().cloned());
    source(ctx, &ch, &src, &args).await?;
    lk::bind(&ch, &src, &ex, "orig", FieldTable::default()).await?;
    lk::queue_bound(&ch, &dlq, &dlx, key).await?;
    Ok(Routed { ch, _conn: conn, ex, src, dlx, dlq })
}

async fn original_key(ctx: Ctx) -> CaseResult {
    let r = routed(&ctx, ExchangeKind::Direct, "orig", &[]).await?;
    let other = ctx.queue("other");
    lk::queue_bound(&r.ch, &other, &r.dlx, &r.src).await?;
    publish(&ctx, &r.ex, "orig", &Out::text("m")).await?;
    reject_one(&ctx, &r.src).await?;
    dk::eventually_ready(&r.ch, &r.dlq, 1).await?;
    let got = take_one(&ctx, &r.dlq).await?;
    check_eq!((got.exchange(), got.routing_key()), (r.dlx.clone(), "orig".to_owned()), "exchange and routing key");
    check_eq!(dk::ready(&r.ch, &other).await?, 0, "queue bound with the source queue's name");
    Ok(())
}

async fn dlrk_replaces_key(ctx: Ctx) -> CaseResult {
    let r = routed(&ctx, ExchangeKind::Direct, "dl-key", &[("x-dead-letter-routing-key", text("dl-key"))]).await?;
    let other = ctx.queue("other");
    lk::queue_bound(&r.ch, &other, &r.dlx, "orig").await?;
    publish(&ctx, &r.ex, "orig", &Out::text("m")).await?;
    reject_one(&ctx, &r.src).await?;
    dk::eventually_ready(&r.ch, &r.dlq, 1).await?;
    let got = take_one(&ctx, &r.dlq).await?;
    check_eq!((got.exchange(), got.routing_key()), (r.dlx.clone(), "dl-key".to_owned()), "exchange and routing key");
    let first = got.deaths().into_iter().next().map(|d| (d.exchange, d.routing_keys));
    check_eq!(first, Some((r.ex.clone(), vec!["orig".to_owned()])), "history exchange and routing keys");
    check_eq!(dk::ready(&r.ch, &other).await?, 0, "queue bound with the original key");
    Ok(())
}

async fn unbound_key_dropped(ctx: Ctx) -> CaseResult {
    let r = routed(&ctx, ExchangeKind::Direct, "orig", &[("x-dead-letter-routing-key", text("nowhere"))]).await?;
    publish(&ctx, &r.ex, "orig", &Out::text("m")).await?;
    reject_one(&ctx, &r.src).await?;
    tokio::time::sleep(QUIET).await;
    check_eq!((dk::ready(&r.ch, &r.src).await?, dk::ready(&r.ch, &r.dlq).await?), (0, 0), "source and DLQ");
    Ok(())
}

async fn cc_keys_route(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    let (cc1, cc2, q1, q2) = (ctx.name("cc"), ctx.name("cc"), ctx.queue("q1"), ctx.queue("q2"));
    lk::queue_bound(&s.ch, &q1, &s.dlx, &cc1).await?;
    lk::queue_bound(&s.ch, &q2, &s.dlx, &cc2).await?;
    let out = Out::text("m").header("CC", F::A(vec![F::S(cc1.clone()), F::S(cc2.clone())]));
    publish(&ctx, "", &s.source, &out).await?;
    reject_one(&ctx, &s.source).await?;
    for q in [&s.dlq, &q1, &q2] {
        dk::eventually_ready(&s.ch, q, 1).await?;
        let got = take_one(&ctx, q).await?;
        check_eq!((got.exchange(), got.routing_key()), (s.dlx.clone(), s.source.clone()), "exchange and key in {q}");
    }
    Ok(())
}

async fn bcc_keys_route(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    let (bcc, q) = (ctx.name("bcc"), ctx.queue("q"));
    lk::queue_bound(&s.ch, &q, &s.dlx, &bcc).await?;
    publish(&ctx, "", &s.source, &Out::text("m").bcc(&bcc)).await?;
    reject_one(&ctx, &s.source).await?;
    for q in [&s.dlq, &q] {
        dk::eventually_ready(&s.ch, q, 1).await?;
        let got = take_one(&ctx, q).await?;
        check!(!got.mentions("BCC"), "the dead letter in {q} carries BCC");
        let keys = got.deaths().into_iter().next().map(|d| d.routing_keys);
        check_eq!(keys, Some(vec![s.source.clone()]), "history routing keys in {q}");
    }
    Ok(())
}

async fn amqp10_x_cc(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    let (cc, q) = (ctx.name("cc"), ctx.queue("q"));
    lk::queue_bound(&s.ch, &q, &s.dlx, &cc).await?;
    let out = Out::text("m").annotation("x-cc", Value::List(vec![Value::String(cc.clone())]));
    publish(&ctx, "", &s.source, &out).await?;
    reject_one(&ctx, &s.source).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    let got = take_one(&ctx, &s.dlq).await?;
    let keys = got.deaths().into_iter().next().map(|d| d.routing_keys);
    check_eq!(keys, Some(vec![s.source.clone()]), "history routing keys");
    check_eq!(dk::ready(&s.ch, &q).await?, 0, "queue bound with the x-cc key");
    Ok(())
}

async fn cycle_max_length(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    source(&ctx, &ch, &q, &[("x-dead-letter-exchange", text("")), ("x-max-length", long(1))]).await?;
    publish(&ctx, "", &q, &Out::text("p1")).await?;
    publish(&ctx, "", &q, &Out::text("p2")).await?;
    tokio::time::sleep(QUIET).await;
    check_eq!(dk::ready(&ch, &q).await?, 1, "queue length");
    let mut sub = Sub::open(&ctx, &q).await?;
    let got = sub.next().await?;
    check_eq!(got.body(), "p2", "kept message");
    sub.settle(&got, Settle::Ack).await?;
    sub.nothing(QUIET).await?;
    sub.close().await;
    check_eq!(dk::ready(&ch, &q).await?, 0, "queue length at the end");
    Ok(())
}

async fn cycle_with_reject(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    source(&ctx, &ch, &q, &[("x-dead-letter-exchange", text(""))]).await?;
    publish(&ctx, "", &q, &Out::text("m")).await?;
    let mut sub = Sub::open(&ctx, &q).await?;
    for count in 0..3u64 {
        let got = sub.next().await?;
        check_eq!(got.body(), "m", "body");
        let expected: Vec<_> = (count > 0).then(|| (q.clone(), "rejected".to_owned(), count)).into_iter().collect();
        check_eq!(got.triples(), expected, "history after {count} rejections");
        sub.settle(&got, if count < 2 { Settle::Reject } else { Settle::Ack }).await?;
    }
    sub.nothing(QUIET).await?;
    sub.close().await;
    Ok(())
}

async fn cycle_ttl(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    source(&ctx, &ch, &q, &[("x-dead-letter-exchange", text("")), ("x-message-ttl", long(1))]).await?;
    publish(&ctx, "", &q, &Out::text("p1")).await?;
    publish(&ctx, "", &q, &Out::text("p2")).await?;
    tokio::time::sleep(QUIET).await;
    let mut sub = Sub::open(&ctx, &q).await?;
    sub.nothing(QUIET).await?;
    sub.close().await;
    check_eq!(dk::ready(&ch, &q).await?, 0, "queue length");
    Ok(())
}

async fn reject_expire_expire(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let (q1, q2, q3) = (ctx.queue("b"), ctx.queue("a2"), ctx.queue("a3"));
    let dl = |to: &str| vec![("x-dead-letter-exchange", text("")), ("x-dead-letter-routing-key", text(to))];
    source(&ctx, &ch, &q1, &dl(&q2)).await?;
    let mut args = dl(&q3);
    args.push(("x-message-ttl", long(5)));
    source(&ctx, &ch, &q2, &args).await?;
    let mut args = dl(&q1);
    args.push(("x-message-ttl", long(5)));
    source(&ctx, &ch, &q3, &args).await?;
    publish(&ctx, "", &q1, &Out::text("m")).await?;
    let mut sub = Sub::open(&ctx, &q1).await?;
    for round in 0..3u64 {
        let got = sub.next().await?;
        let expected = if round == 0 {
            Vec::new()
        } else {
            vec![
                (q3.clone(), "expired".to_owned(), round),
                (q2.clone(), "expired".to_owned(), round),
                (q1.clone(), "rejected".to_owned(), round),
            ]
        };
        check_eq!(got.triples(), expected, "history after {round} loops");
        sub.settle(&got, if round < 2 { Settle::Reject } else { Settle::Ack }).await?;
    }
    sub.close().await;
    Ok(())
}

async fn fanout_dlx(ctx: Ctx) -> CaseResult {
    let r = routed(&ctx, ExchangeKind::Fanout, "unrelated", &[]).await?;
    let other = ctx.queue("other");
    lk::queue_bound(&r.ch, &other, &r.dlx, "").await?;
    publish(&ctx, &r.ex, "orig", &Out::text("m")).await?;
    reject_one(&ctx, &r.src).await?;
    for q in [&r.dlq, &other] {
        dk::eventually_ready(&r.ch, q, 1).await?;
        check_eq!(take_one(&ctx, q).await?.routing_key(), "orig", "routing key in {q}");
    }
    Ok(())
}

async fn topic_dlx(ctx: Ctx) -> CaseResult {
    let r = routed(&ctx, ExchangeKind::Topic, "a.*", &[("x-dead-letter-routing-key", text("a.b"))]).await?;
    let other = ctx.queue("other");
    lk::queue_bound(&r.ch, &other, &r.dlx, "b.#").await?;
    publish(&ctx, &r.ex, "orig", &Out::text("m")).await?;
    reject_one(&ctx, &r.src).await?;
    dk::eventually_ready(&r.ch, &r.dlq, 1).await?;
    check_eq!(take_one(&ctx, &r.dlq).await?.routing_key(), "a.b", "routing key");
    check_eq!(dk::ready(&r.ch, &other).await?, 0, "queue bound with b.#");
    Ok(())
}

async fn headers_dlx(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let (src, dlx, yes, no) = (ctx.queue("src"), ctx.exchange("dlx"), ctx.queue("yes"), ctx.queue("no"));
    exchange(&ch, &dlx, ExchangeKind::Headers, false, &[]).await?;
    source(&ctx, &ch, &src, &[("x-dead-letter-exchange", text(&dlx))]).await?;
    lk::declare_queue(&ch, &yes).await?;
    lk::declare_queue(&ch, &no).await?;
    lk::bind(&ch, &yes, &dlx, "", dk::args(&[("x-match", text("all")), ("h", text("v"))])).await?;
    lk::bind(&ch, &no, &dlx, "", dk::args(&[("x-match", text("all")), ("h", text("w"))])).await?;
    publish(&ctx, "", &src, &Out::text("m").header("h", F::S("v".into()))).await?;
    reject_one(&ctx, &src).await?;
    dk::eventually_ready(&ch, &yes, 1).await?;
    check_eq!(take_one(&ctx, &yes).await?.body(), "m", "dead letter");
    check_eq!(dk::ready(&ch, &no).await?, 0, "queue bound with h=w");
    Ok(())
}

async fn default_exchange_dlx(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let (src, dlq) = (ctx.queue("src"), ctx.queue("dlq"));
    lk::declare_queue(&ch, &dlq).await?;
    source(&ctx, &ch, &src, &[("x-dead-letter-exchange", text("")), ("x-dead-letter-routing-key", text(&dlq))]).await?;
    publish(&ctx, "", &src, &Out::text("m")).await?;
    reject_one(&ctx, &src).await?;
    dk::eventually_ready(&ch, &dlq, 1).await?;
    let got = take_one(&ctx, &dlq).await?;
    check_eq!((got.exchange(), got.routing_key()), (String::new(), dlq.clone()), "exchange and routing key");
    Ok(())
}

async fn alternate_exchange(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let (src, dlx, ae, aeq) = (ctx.queue("src"), ctx.exchange("dlx"), ctx.exchange("ae"), ctx.queue("aeq"));
    exchange(&ch, &ae, ExchangeKind::Fanout, false, &[]).await?;
    exchange(&ch, &dlx, ExchangeKind::Direct, false, &[("alternate-exchange", text(&ae))]).await?;
    lk::queue_bound(&ch, &aeq, &ae, "").await?;
    source(&ctx, &ch, &src, &[("x-dead-letter-exchange", text(&dlx))]).await?;
    publish(&ctx, "", &src, &Out::text("m")).await?;
    reject_one(&ctx, &src).await?;
    dk::eventually_ready(&ch, &aeq, 1).await?;
    let got = take_one(&ctx, &aeq).await?;
    check_eq!((got.body(), got.routing_key()), ("m".to_owned(), src.clone()), "body and routing key");
    Ok(())
}

async fn internal_exchange(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let (src, dlx, dlq) = (ctx.queue("src"), ctx.exchange("dlx"), ctx.queue("dlq"));
    exchange(&ch, &dlx, ExchangeKind::Direct, true, &[]).await?;
    lk::queue_bound(&ch, &dlq, &dlx, &src).await?;
    source(&ctx, &ch, &src, &[("x-dead-letter-exchange", text(&dlx))]).await?;
    publish(&ctx, "", &src, &Out::text("m")).await?;
    reject_one(&ctx, &src).await?;
    dk::eventually_ready(&ch, &dlq, 1).await?;
    check_eq!(take_one(&ctx, &dlq).await?.exchange(), dlx, "exchange");
    Ok(())
}

async fn partial_cycle(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let (src, dlx, dlq) = (ctx.queue("src"), ctx.exchange("dlx"), ctx.queue("dlq"));
    exchange(&ch, &dlx, ExchangeKind::Fanout, false, &[]).await?;
    source(&ctx, &ch, &src, &[("x-dead-letter-exchange", text(&dlx)), ("x-message-ttl", long(20))]).await?;
    lk::bind(&ch, &src, &dlx, "", FieldTable::default()).await?;
    lk::queue_bound(&ch, &dlq, &dlx, "").await?;
    publish(&ctx, "", &src, &Out::text("m")).await?;
    dk::eventually_ready(&ch, &dlq, 1).await?;
    tokio::time::sleep(QUIET).await;
    check_eq!((dk::ready(&ch, &src).await?, dk::ready(&ch, &dlq).await?), (0, 1), "source and DLQ");
    let got = take_one(&ctx, &dlq).await?;
    check_eq!(got.triples(), vec![(src.clone(), "expired".to_owned(), 1)], "history");
    Ok(())
}

async fn exchange_to_exchange(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let (src, dlx, inner, dlq) = (ctx.queue("src"), ctx.exchange("dlx"), ctx.exchange("inner"), ctx.queue("dlq"));
    exchange(&ch, &dlx, ExchangeKind::Direct, false, &[]).await?;
    exchange(&ch, &inner, ExchangeKind::Fanout, false, &[]).await?;
    ch.exchange_bind(
        inner.as_str().into(),
        dlx.as_str().into(),
        src.as_str().into(),
        lapin::options::ExchangeBindOptions::default(),
        FieldTable::default(),
    )
    .await?;
    lk::queue_bound(&ch, &dlq, &inner, "").await?;
    source(&ctx, &ch, &src, &[("x-dead-letter-exchange", text(&dlx))]).await?;
    publish(&ctx, "", &src, &Out::text("m")).await?;
    reject_one(&ctx, &src).await?;
    dk::eventually_ready(&ch, &dlq, 1).await?;
    let got = take_one(&ctx, &dlq).await?;
    check_eq!((got.exchange(), got.routing_key()), (dlx.clone(), src.clone()), "exchange and routing key");
    Ok(())
}

async fn rejected_cycle(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let (src, dlx, dlq) = (ctx.queue("src"), ctx.exchange("dlx"), ctx.queue("dlq"));
    exchange(&ch, &dlx, ExchangeKind::Fanout, false, &[]).await?;
    source(&ctx, &ch, &src, &[("x-dead-letter-exchange", text(&dlx))]).await?;
    lk::bind(&ch, &src, &dlx, "", FieldTable::default()).await?;
    lk::queue_bound(&ch, &dlq, &dlx, "").await?;
    publish(&ctx, "", &src, &Out::text("m")).await?;
    let mut sub = Sub::open(&ctx, &src).await?;
    let got = sub.next().await?;
    sub.settle(&got, Settle::Reject).await?;
    let back = sub.next().await?;
    sub.settle(&back, Settle::Ack).await?;
    sub.close().await;
    let expected = vec![(src.clone(), "rejected".to_owned(), 1)];
    check_eq!(back.triples(), expected.clone(), "history of the copy back in the source");
    dk::eventually_ready(&ch, &dlq, 1).await?;
    check_eq!(take_one(&ctx, &dlq).await?.triples(), expected, "history of the copy in the DLQ");
    Ok(())
}

async fn delivery_fields(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    let out = Out::text("body").ttl(60_000).header("h", F::S("v".into())).rich();
    publish(&ctx, "", &s.source, &out).await?;
    reject_one(&ctx, &s.source).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    let got = take_one(&ctx, &s.dlq).await?;
    check_eq!(got.body(), "body", "body");
    check_eq!((got.exchange(), got.routing_key()), (s.dlx.clone(), s.source.clone()), "exchange and routing key");
    check_ttl_cleared(&ctx, &got, 60_000)?;
    match &got {
        Got::A091(d) => {
            check!(!d.redelivered, "redelivered is set");
            let mut p = d.props.clone();
            p.headers = p.headers.map(|h| h.into_iter().filter(|(k, _)| !k.starts_with("x-")).collect());
            let from_10 = ctx.variant().publish == Protocol::Amqp10;
            let expected = Props {
                content_type: Some("text/plain".into()),
                content_encoding: Some("enc".into()),
                headers: Some(vec![("h".into(), F::S("v".into()))]),
                delivery_mode: Some(2),
                priority: Some(3),
                correlation_id: Some("corr".into()),
                reply_to: Some("rt".into()),
                expiration: None,
                message_id: Some("mid".into()),
                timestamp: Some(1_700_000_000),
                kind: (!from_10).then(|| "ty".into()),
                user_id: None,
                app_id: Some("app".into()),
            };
            check_eq!(p, expected, "properties");
        }
        Got::A10 { msg, .. } => {
            let header = (msg.header(hdr::DURABLE), msg.header(hdr::PRIORITY), msg.header(hdr::FIRST_ACQUIRER));
            check_eq!(header, (Some(Value::Bool(true)), Some(Value::Ubyte(3)), Some(Value::Bool(false))), "header");
            let props: Vec<Option<Value>> = [
                prop::MESSAGE_ID,
                prop::REPLY_TO,
                prop::CORRELATION_ID,
                prop::CONTENT_TYPE,
                prop::CONTENT_ENCODING,
                prop::GROUP_ID,
            ]
            .into_iter()
            .map(|i| msg.prop(i))
            .collect();
            let s = |v: &str| Some(Value::String(v.into()));
            let sym = |v: &str| Some(Value::Symbol(Symbol::from(v)));
            check_eq!(props, vec![s("mid"), s("rt"), s("corr"), sym("text/plain"), sym("enc"), s("app")], "properties");
            check_eq!(msg.app("h"), Some(Value::String("v".into())), "application property h");
        }
    }
    Ok(())
}
