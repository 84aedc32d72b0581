//! `/exchanges` and `/bindings`: declare, delete, bind, list, unbind, and their refusals.

use super::kit::*;
use crate::{CaseError, CaseResult, Ctx, check, check_eq, fe2o3_kit::pct, lapin_kit as lk};
use fe2o3_amqp_types::primitives::Value;
use lapin::types::FieldTable;

pub(super) fn exchange_body(kind: &str, internal: bool) -> Value {
    map(vec![
        ("type", s(kind)),
        ("durable", Value::Bool(false)),
        ("auto_delete", Value::Bool(true)),
        ("internal", Value::Bool(internal)),
        ("arguments", map(vec![("alternate-exchange", s("amq.fanout"))])),
    ])
}

pub(super) async fn exchange_properties(ctx: Ctx) -> CaseResult {
    let x = ctx.exchange("x");
    let mut m = Mgmt::open(&ctx).await?;
    let body = m.ok("PUT", &exchange_path(&x), exchange_body("topic", false), "204").await?;
    check_eq!(body, Value::Null, "declare body");
    m.ok("PUT", &exchange_path(&x), exchange_body("topic", false), "204").await?;
    m.refused(
        "PUT",
        &exchange_path(&x),
        exchange_body("topic", true),
        "409",
        &format!("inequivalent arg 'internal' for exchange '{x}' in vhost '/': received 'true' but current is 'false'"),
    )
    .await?;
    // Over 0.9.1 the exchange is a non-durable topic exchange.
    let (_conn, ch) = ctx.lapin_channel().await?;
    let opts = lapin::options::ExchangeDeclareOptions { passive: true, ..Default::default() };
    ch.exchange_declare(x.as_str().into(), lapin::ExchangeKind::Topic, opts, FieldTable::default()).await?;
    check_eq!(m.ok("DELETE", &exchange_path(&x), Value::Null, "204").await?, Value::Null, "delete body");
    m.ok("DELETE", &exchange_path(&x), Value::Null, "204").await?;
    m.close().await
}

pub(super) async fn exchange_refusals(ctx: Ctx) -> CaseResult {
    let x = ctx.exchange("x");
    let mut m = Mgmt::open(&ctx).await?;
    m.refused(
        "PUT",
        &exchange_path(&x),
        map(vec![("type", s("no-such-type"))]),
        "400",
        "unknown exchange type 'no-such-type'",
    )
    .await?;
    m.refused("PUT", "/exchanges/", map(vec![]), "403", "operation not permitted on the default exchange").await?;
    m.refused("DELETE", "/exchanges/", Value::Null, "403", "operation not permitted on the default exchange").await?;
    m.refused(
        "PUT",
        "/exchanges/amq.cf-new",
        map(vec![]),
        "403",
        "exchange 'amq.cf-new' in vhost '/' starts with reserved prefix 'amq.'",
    )
    .await?;
    m.refused(
        "DELETE",
        "/exchanges/amq.fanout",
        Value::Null,
        "403",
        "exchange 'amq.fanout' in vhost '/' starts with reserved prefix 'amq.'",
    )
    .await?;
    // Declaring an existing amq.* exchange equivalently is fine.
    let fanout = map(vec![("type", s("fanout"))]);
    m.ok("PUT", "/exchanges/amq.fanout", fanout, "204").await?;
    m.close().await
}

pub(super) async fn exchange_binding(ctx: Ctx) -> CaseResult {
    let src = ctx.exchange("src");
    let dst = ctx.exchange("dst");
    let q = ctx.queue("q");
    let mut m = Mgmt::open(&ctx).await?;
    m.ok("PUT", &exchange_path(&src), map(vec![("type", s("headers"))]), "204").await?;
    m.ok("PUT", &exchange_path(&dst), map(vec![("type", s("fanout"))]), "204").await?;
    m.ok("PUT", &queue_path(&q), map(vec![]), "201").await?;
    let args = map(vec![("x-match", s("any")), ("k", Value::Long(7))]);
    // RabbitMQ keeps binding arguments sorted by key.
    let args_sorted = map(vec![("k", Value::Long(7)), ("x-match", s("any"))]);
    let bind = |dst_key: &str, dst: &str, args: Value| {
        map(vec![("source", s(&src)), (dst_key, s(dst)), ("binding_key", s("")), ("arguments", args)])
    };
    check_eq!(
        m.ok("POST", "/bindings", bind("destination_exchange", &dst, args.clone()), "204").await?,
        Value::Null,
        "bind body"
    );
    m.ok("POST", "/bindings", bind("destination_exchange", &dst, args.clone()), "204").await?;
    m.ok("POST", "/bindings", bind("destination_queue", &q, map(vec![])), "204").await?;
    m.ok(
        "POST",
        "/bindings",
        map(vec![
            ("source", s(&dst)),
            ("destination_queue", s(&q)),
            ("binding_key", s("")),
            ("arguments", map(vec![])),
        ]),
        "204",
    )
    .await?;
    let query = format!("/bindings?src={}&dste={}&key=", pct(&src), pct(&dst));
    let list = m.ok("GET", &query, Value::Null, "200").await?;
    let items = match &list {
        Value::List(l) => l.clone(),
        other => return Err(CaseError::new(format!("binding list: {other:?}"))),
    };
    check_eq!(items.len(), 1, "bindings listed: {list:?}");
    let b = items.first().cloned().unwrap_or(Value::Null);
    check_eq!(
        keys(&b),
        vec!["source", "destination_exchange", "binding_key", "arguments", "location"],
        "binding map keys in order"
    );
    check_eq!(get(&b, "source"), Some(&s(&src)), "source");
    check_eq!(get(&b, "destination_exchange"), Some(&s(&dst)), "destination_exchange");
    check_eq!(get(&b, "binding_key"), Some(&s("")), "binding_key");
    check_eq!(get(&b, "arguments"), Some(&args_sorted), "arguments");
    let location = match get(&b, "location") {
        Some(Value::String(l)) => l.clone(),
        other => return Err(CaseError::new(format!("location: {other:?}"))),
    };
    let prefix = format!("/bindings/src={};dste={};key=;args=", pct(&src), pct(&dst));
    let hash = location.strip_prefix(&prefix).unwrap_or_default();
    check!(
        hash.len() == 6 && hash.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'),
        "location {location:?}: expected {prefix}<6 url-safe base64 characters>"
    );
    // Without the arguments hash the location matches no binding: nothing is removed.
    m.ok("DELETE", &prefix, Value::Null, "204").await?;
    check_eq!(m.ok("GET", &query, Value::Null, "200").await?, list.clone(), "bindings after deleting another location");
    let both = format!("/bindings?src={}&dstq={}&key=&dste={}", pct(&src), pct(&q), pct(&dst));
    check_eq!(m.ok("GET", &both, Value::Null, "200").await?, list, "dste wins over dstq");
    check_eq!(m.ok("DELETE", &location, Value::Null, "204").await?, Value::Null, "unbind body");
    check_eq!(m.ok("GET", &query, Value::Null, "200").await?, Value::List(vec![]), "bindings after unbind");
    let query = format!("/bindings?src={}&dstq={}&key=", pct(&src), pct(&q));
    let list = m.ok("GET", &query, Value::Null, "200").await?;
    let expected = Value::List(vec![map(vec![
        ("source", s(&src)),
        ("destination_queue", s(&q)),
        ("binding_key", s("")),
        ("arguments", map(vec![])),
        ("location", s(&format!("/bindings/src={};dstq={};key=;args=", pct(&src), pct(&q)))),
    ])]);
    check_eq!(list, expected, "queue binding listed");
    m.close().await
}

pub(super) async fn binding_refusals(ctx: Ctx) -> CaseResult {
    let q = ctx.name("missing");
    let x = ctx.name("missing-x");
    let (_conn, ch) = ctx.lapin_channel().await?;
    let real = ctx.queue("q");
    lk::declare_queue(&ch, &real).await?;
    let mut m = Mgmt::open(&ctx).await?;
    let bind = |src: &str, q: &str| {
        map(vec![("source", s(src)), ("destination_queue", s(q)), ("binding_key", s("k")), ("arguments", map(vec![]))])
    };
    m.refused("POST", "/bindings", bind("amq.direct", &q), "400", &format!("no queue '{q}' in vhost '/'")).await?;
    m.refused("POST", "/bindings", bind(&x, &real), "400", &format!("no exchange '{x}' in vhost '/'")).await?;
    m.refused("POST", "/bindings", bind("", &real), "403", "operation not permitted on the default exchange").await?;
    m.close().await
}

pub(super) async fn binding_delete_missing(ctx: Ctx) -> CaseResult {
    let q = ctx.name("missing");
    let mut m = Mgmt::open(&ctx).await?;
    let location = format!("/bindings/src=amq.direct;dstq={};key=k;args=", pct(&q));
    check_eq!(m.ok("DELETE", &location, Value::Null, "204").await?, Value::Null, "body");
    let list = m.ok("GET", &format!("/bindings?src=amq.direct&dstq={}&key=k", pct(&q)), Value::Null, "200").await?;
    check_eq!(list, Value::List(vec![]), "bindings of a missing queue");
    m.close().await
}

pub(super) async fn binding_segment_refusals(ctx: Ctx) -> CaseResult {
    let mut m = Mgmt::open(&ctx).await?;
    for segment in [
        "src=;dstq=q;key=k;args=",
        "src=amq.direct;dstq=;key=k;args=",
        "src=amq.direct;dstx=q;key=k;args=",
        "src=e1;dstq=q1;invalidkey=k1;args=",
        "src=amq.direct;dstq=q;key=k;args=a.b",
    ] {
        m.refused(
            "DELETE",
            &format!("/bindings/{segment}"),
            Value::Null,
            "400",
            &format!("bad binding path segment '{segment}'"),
        )
        .await?;
    }
    m.close().await
}
