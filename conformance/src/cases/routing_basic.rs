//! Direct and fanout routing, unbinding, and the CC / BCC sender-selected distribution headers.

use crate::{
    Case, CaseResult, Ctx, case, case_matrix, check, check_eq,
    lapin_kit::{self as lk, confirm, drain as drain091, publish_props, queue_bound},
    wire::{Outgoing, Publisher, drain},
};
use lapin::{
    BasicProperties, ExchangeKind,
    options::ExchangeDeclareOptions,
    types::{AMQPValue, FieldArray, FieldTable},
};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case_matrix!(
            "routing.direct.exact_key",
            "a direct exchange delivers only on an exact routing-key match",
            direct_exact
        ),
        case_matrix!(
            "routing.direct.same_key_many_queues",
            "every queue bound with the key gets its own copy",
            direct_many_queues
        ),
        case_matrix!(
            "routing.direct.two_keys_one_queue",
            "a queue bound with two keys gets one copy per matching publish",
            direct_two_keys
        ),
        case_matrix!(
            "routing.fanout.ignores_key",
            "a fanout exchange delivers to every bound queue whatever the key",
            fanout
        ),
        case_matrix!("routing.unbind.stops_routing", "queue.unbind stops delivery for that key only", unbind),
        case_matrix!(
            "routing.cc.routes_in_every_protocol",
            "a 0.9.1 CC header routes copies to its keys; a 1.0 x-cc annotation does not route (4.0.5)",
            cc_routes
        ),
        case_matrix!(
            "routing.headers_exchange.app_properties_match",
            "a headers exchange matches string, integer and boolean headers from either protocol",
            headers_match
        ),
        case!(
            "routing.cc.routes_and_is_kept",
            "a CC header routes to its keys too and stays in the delivered headers",
            cc
        ),
        case!(
            "routing.bcc.routes_and_is_removed",
            "a BCC header routes to its keys too and is stripped from the delivered headers",
            bcc
        ),
    ]
}

async fn exchange(ctx: &Ctx, ch: &lapin::Channel, kind: ExchangeKind) -> Result<String, crate::CaseError> {
    let x = ctx.exchange("x");
    ch.exchange_declare(x.as_str().into(), kind, ExchangeDeclareOptions::default(), FieldTable::default()).await?;
    Ok(x)
}

async fn direct_exact(ctx: Ctx) -> CaseResult {
    let (c, ch) = ctx.lapin_channel().await?;
    let mut p = Publisher::open(&ctx, &c).await?;
    let x = exchange(&ctx, &ch, ExchangeKind::Direct).await?;
    let q = ctx.queue("q");
    queue_bound(&ch, &q, &x, "key").await?;
    for k in ["key", "Key", "key.", "ke", "", "key "] {
        p.publish(&x, k, k.as_bytes()).await?;
    }
    check_eq!(drain(&ctx, &ch, &q).await?, vec!["key".to_owned()], "bodies routed");
    p.close().await;
    Ok(())
}

async fn direct_many_queues(ctx: Ctx) -> CaseResult {
    let (c, ch) = ctx.lapin_channel().await?;
    let mut p = Publisher::open(&ctx, &c).await?;
    let x = exchange(&ctx, &ch, ExchangeKind::Direct).await?;
    let (q1, q2, q3) = (ctx.queue("q1"), ctx.queue("q2"), ctx.queue("q3"));
    queue_bound(&ch, &q1, &x, "k").await?;
    queue_bound(&ch, &q2, &x, "k").await?;
    queue_bound(&ch, &q3, &x, "other").await?;
    p.publish(&x, "k", b"m").await?;
    check_eq!(drain(&ctx, &ch, &q1).await?, vec!["m".to_owned()], "q1");
    check_eq!(drain(&ctx, &ch, &q2).await?, vec!["m".to_owned()], "q2");
    check_eq!(drain(&ctx, &ch, &q3).await?, Vec::<String>::new(), "q3");
    p.close().await;
    Ok(())
}

async fn direct_two_keys(ctx: Ctx) -> CaseResult {
    let (c, ch) = ctx.lapin_channel().await?;
    let mut p = Publisher::open(&ctx, &c).await?;
    let x = exchange(&ctx, &ch, ExchangeKind::Direct).await?;
    let q = ctx.queue("q");
    queue_bound(&ch, &q, &x, "a").await?;
    lk::bind(&ch, &q, &x, "b", FieldTable::default()).await?;
    // Binding the same key twice is idempotent.
    lk::bind(&ch, &q, &x, "a", FieldTable::default()).await?;
    p.publish(&x, "a", b"1").await?;
    p.publish(&x, "b", b"2").await?;
    p.publish(&x, "c", b"3").await?;
    check_eq!(drain(&ctx, &ch, &q).await?, vec!["1".to_owned(), "2".to_owned()], "bodies routed");
    p.close().await;
    Ok(())
}

async fn fanout(ctx: Ctx) -> CaseResult {
    let (c, ch) = ctx.lapin_channel().await?;
    let mut p = Publisher::open(&ctx, &c).await?;
    let x = exchange(&ctx, &ch, ExchangeKind::Fanout).await?;
    let (q1, q2) = (ctx.queue("q1"), ctx.queue("q2"));
    queue_bound(&ch, &q1, &x, "ignored").await?;
    queue_bound(&ch, &q2, &x, "").await?;
    p.publish(&x, "whatever", b"a").await?;
    p.publish(&x, "", b"b").await?;
    check_eq!(drain(&ctx, &ch, &q1).await?, vec!["a".to_owned(), "b".to_owned()], "q1");
    check_eq!(drain(&ctx, &ch, &q2).await?, vec!["a".to_owned(), "b".to_owned()], "q2");
    p.close().await;
    Ok(())
}

async fn unbind(ctx: Ctx) -> CaseResult {
    let (c, ch) = ctx.lapin_channel().await?;
    let mut p = Publisher::open(&ctx, &c).await?;
    let x = exchange(&ctx, &ch, ExchangeKind::Direct).await?;
    let q = ctx.queue("q");
    queue_bound(&ch, &q, &x, "a").await?;
    lk::bind(&ch, &q, &x, "b", FieldTable::default()).await?;
    p.publish(&x, "a", b"a1").await?;
    ch.queue_unbind(q.as_str().into(), x.as_str().into(), "a".into(), FieldTable::default()).await?;
    p.publish(&x, "a", b"a2").await?;
    p.publish(&x, "b", b"b1").await?;
    check_eq!(drain(&ctx, &ch, &q).await?, vec!["a1".to_owned(), "b1".to_owned()], "bodies routed");
    p.close().await;
    Ok(())
}

async fn cc_routes(ctx: Ctx) -> CaseResult {
    let (c, ch) = ctx.lapin_channel().await?;
    let x = exchange(&ctx, &ch, ExchangeKind::Direct).await?;
    let qs = [ctx.queue("main"), ctx.queue("e1"), ctx.queue("none")];
    for (q, k) in qs.iter().zip(["main", "extra1", "unrelated"]) {
        queue_bound(&ch, q, &x, k).await?;
    }
    let mut p = Publisher::open(&ctx, &c).await?;
    p.publish_with(&x, "main", Outgoing { body: b"m", headers: vec![("CC", keys(&["extra1"]))] }).await?;
    p.close().await;
    let [main, e1, none] = &qs;
    check_eq!(drain(&ctx, &ch, main).await?, vec!["m".to_owned()], "queue bound with the publish key");
    // RabbitMQ 4.0.5 routes a 1.0 message by its target's key only: the session replaces the
    // routing keys `x-cc` added (rabbit_amqp_session:lookup_routing_key/4).
    let via_cc = if ctx.variant().publish == crate::Protocol::Amqp091 { vec!["m".to_owned()] } else { Vec::new() };
    check_eq!(drain(&ctx, &ch, e1).await?, via_cc, "queue bound with the CC key");
    check_eq!(drain(&ctx, &ch, none).await?, Vec::<String>::new(), "unrelated queue");
    Ok(())
}

/// Message headers as name/value pairs.
type Headers<'a> = Vec<(&'a str, AMQPValue)>;

async fn headers_match(ctx: Ctx) -> CaseResult {
    let (c, ch) = ctx.lapin_channel().await?;
    let x = exchange(&ctx, &ch, ExchangeKind::Headers).await?;
    let (all, any) = (ctx.queue("all"), ctx.queue("any"));
    lk::declare_queue(&ch, &all).await?;
    lk::declare_queue(&ch, &any).await?;
    let binding = |mode: &str| {
        let mut t = FieldTable::default();
        t.insert("x-match".into(), AMQPValue::LongString(mode.into()));
        t.insert("colour".into(), AMQPValue::LongString("red".into()));
        t.insert("size".into(), AMQPValue::LongInt(7));
        t.insert("ok".into(), AMQPValue::Boolean(true));
        t
    };
    lk::bind(&ch, &all, &x, "", binding("all")).await?;
    lk::bind(&ch, &any, &x, "", binding("any")).await?;
    let text = |s: &str| AMQPValue::LongString(s.into());
    let messages: Vec<(&[u8], Headers<'_>)> = vec![
        (b"full", vec![("colour", text("red")), ("size", AMQPValue::LongLongInt(7)), ("ok", AMQPValue::Boolean(true))]),
        (b"colour-only", vec![("colour", text("red"))]),
        (
            b"wrong-bool",
            vec![("colour", text("blue")), ("size", AMQPValue::LongInt(8)), ("ok", AMQPValue::Boolean(false))],
        ),
        (b"none", vec![]),
    ];
    let mut p = Publisher::open(&ctx, &c).await?;
    for (body, headers) in messages {
        p.publish_with(&x, "", Outgoing { body, headers }).await?;
    }
    p.close().await;
    check_eq!(drain(&ctx, &ch, &all).await?, vec!["full".to_owned()], "x-match=all");
    check_eq!(drain(&ctx, &ch, &any).await?, vec!["full".to_owned(), "colour-only".to_owned()], "x-match=any");
    Ok(())
}

fn keys(keys: &[&str]) -> AMQPValue {
    let mut arr = FieldArray::default();
    for k in keys {
        arr.push(AMQPValue::LongString((*k).into()));
    }
    AMQPValue::FieldArray(arr)
}

/// Publishes to `main` with the given distribution header and returns (main, extra1, extra2, unrelated) queues.
async fn distribution(
    ctx: &Ctx,
    header: &str,
) -> Result<(lapin::Channel, lapin::Connection, [String; 4]), crate::CaseError> {
    let (c, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let x = exchange(ctx, &ch, ExchangeKind::Direct).await?;
    let qs = [ctx.queue("main"), ctx.queue("e1"), ctx.queue("e2"), ctx.queue("none")];
    for (q, k) in qs.iter().zip(["main", "extra1", "extra2", "unrelated"]) {
        queue_bound(&ch, q, &x, k).await?;
    }
    let mut headers = FieldTable::default();
    headers.insert(header.into(), keys(&["extra1", "extra2"]));
    headers.insert("keep".into(), AMQPValue::LongString("me".into()));
    publish_props(&ch, &x, "main", b"m", BasicProperties::default().with_headers(headers)).await?;
    Ok((ch, c, qs))
}

async fn cc(ctx: Ctx) -> CaseResult {
    let (ch, _c, qs) = distribution(&ctx, "CC").await?;
    let [main, e1, e2, none] = &qs;
    for q in [main, e1, e2] {
        let m = lk::get(&ch, q).await?.ok_or_else(|| crate::CaseError::new(format!("no copy in {q}")))?;
        let h = m.delivery.properties.headers().clone().unwrap_or_default();
        check!(h.contains_key("CC"), "CC header missing from the copy in {q}: {h:?}");
        check!(h.contains_key("keep"), "other header missing in {q}: {h:?}");
        check_eq!(m.delivery.routing_key.as_str(), "main", "routing key of the copy in {q}");
    }
    check_eq!(drain091(&ch, none).await?, Vec::<String>::new(), "unrelated queue");
    Ok(())
}

async fn bcc(ctx: Ctx) -> CaseResult {
    let (ch, _c, qs) = distribution(&ctx, "BCC").await?;
    let [main, e1, e2, none] = &qs;
    for q in [main, e1, e2] {
        let m = lk::get(&ch, q).await?.ok_or_else(|| crate::CaseError::new(format!("no copy in {q}")))?;
        let h = m.delivery.properties.headers().clone().unwrap_or_default();
        check!(!h.contains_key("BCC"), "BCC header must be removed, copy in {q} has {h:?}");
        check!(h.contains_key("keep"), "other header missing in {q}: {h:?}");
    }
    check_eq!(drain091(&ch, none).await?, Vec::<String>::new(), "unrelated queue");
    Ok(())
}
