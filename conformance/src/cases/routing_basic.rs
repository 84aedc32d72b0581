//! Direct and fanout routing, unbinding, and the CC / BCC sender-selected distribution headers.

use crate::{
    Case, CaseResult, Ctx, case, check, check_eq,
    lapin_kit::{self as lk, confirm, drain, publish, publish_props, queue_bound},
};
use lapin::{
    BasicProperties, ExchangeKind,
    options::ExchangeDeclareOptions,
    types::{AMQPValue, FieldArray, FieldTable},
};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "routing.direct.exact_key",
            "a direct exchange delivers only on an exact routing-key match",
            direct_exact
        ),
        case!(
            "routing.direct.same_key_many_queues",
            "every queue bound with the key gets its own copy",
            direct_many_queues
        ),
        case!(
            "routing.direct.two_keys_one_queue",
            "a queue bound with two keys gets one copy per matching publish",
            direct_two_keys
        ),
        case!("routing.fanout.ignores_key", "a fanout exchange delivers to every bound queue whatever the key", fanout),
        case!("routing.unbind.stops_routing", "queue.unbind stops delivery for that key only", unbind),
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
    let (_c, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let x = exchange(&ctx, &ch, ExchangeKind::Direct).await?;
    let q = ctx.queue("q");
    queue_bound(&ch, &q, &x, "key").await?;
    for k in ["key", "Key", "key.", "ke", "", "key "] {
        publish(&ch, &x, k, k.as_bytes()).await?;
    }
    check_eq!(drain(&ch, &q).await?, vec!["key".to_owned()], "bodies routed");
    Ok(())
}

async fn direct_many_queues(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let x = exchange(&ctx, &ch, ExchangeKind::Direct).await?;
    let (q1, q2, q3) = (ctx.queue("q1"), ctx.queue("q2"), ctx.queue("q3"));
    queue_bound(&ch, &q1, &x, "k").await?;
    queue_bound(&ch, &q2, &x, "k").await?;
    queue_bound(&ch, &q3, &x, "other").await?;
    publish(&ch, &x, "k", b"m").await?;
    check_eq!(drain(&ch, &q1).await?, vec!["m".to_owned()], "q1");
    check_eq!(drain(&ch, &q2).await?, vec!["m".to_owned()], "q2");
    check_eq!(drain(&ch, &q3).await?, Vec::<String>::new(), "q3");
    Ok(())
}

async fn direct_two_keys(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let x = exchange(&ctx, &ch, ExchangeKind::Direct).await?;
    let q = ctx.queue("q");
    queue_bound(&ch, &q, &x, "a").await?;
    lk::bind(&ch, &q, &x, "b", FieldTable::default()).await?;
    // Binding the same key twice is idempotent.
    lk::bind(&ch, &q, &x, "a", FieldTable::default()).await?;
    publish(&ch, &x, "a", b"1").await?;
    publish(&ch, &x, "b", b"2").await?;
    publish(&ch, &x, "c", b"3").await?;
    check_eq!(drain(&ch, &q).await?, vec!["1".to_owned(), "2".to_owned()], "bodies routed");
    Ok(())
}

async fn fanout(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let x = exchange(&ctx, &ch, ExchangeKind::Fanout).await?;
    let (q1, q2) = (ctx.queue("q1"), ctx.queue("q2"));
    queue_bound(&ch, &q1, &x, "ignored").await?;
    queue_bound(&ch, &q2, &x, "").await?;
    publish(&ch, &x, "whatever", b"a").await?;
    publish(&ch, &x, "", b"b").await?;
    check_eq!(drain(&ch, &q1).await?, vec!["a".to_owned(), "b".to_owned()], "q1");
    check_eq!(drain(&ch, &q2).await?, vec!["a".to_owned(), "b".to_owned()], "q2");
    Ok(())
}

async fn unbind(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let x = exchange(&ctx, &ch, ExchangeKind::Direct).await?;
    let q = ctx.queue("q");
    queue_bound(&ch, &q, &x, "a").await?;
    lk::bind(&ch, &q, &x, "b", FieldTable::default()).await?;
    publish(&ch, &x, "a", b"a1").await?;
    ch.queue_unbind(q.as_str().into(), x.as_str().into(), "a".into(), FieldTable::default()).await?;
    publish(&ch, &x, "a", b"a2").await?;
    publish(&ch, &x, "b", b"b1").await?;
    check_eq!(drain(&ch, &q).await?, vec!["a1".to_owned(), "b1".to_owned()], "bodies routed");
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
    check_eq!(drain(&ch, none).await?, Vec::<String>::new(), "unrelated queue");
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
    check_eq!(drain(&ch, none).await?, Vec::<String>::new(), "unrelated queue");
    Ok(())
}
