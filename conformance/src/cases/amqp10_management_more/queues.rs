//! `/queues`: declare, get, delete, purge, and their refusals.

use super::kit::*;
use crate::{CaseResult, Ctx, check_eq, lapin_kit as lk};
use fe2o3_amqp_types::primitives::Value;
use lapin::{
    options::{BasicConsumeOptions, BasicQosOptions},
    types::FieldTable,
};
use serde_amqp::primitives::Symbol;

pub(super) async fn queue_created(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let mut m = Mgmt::open(&ctx).await?;
    let body = m.ok("PUT", &queue_path(&q), map(vec![("durable", Value::Bool(false))]), "201").await?;
    let expected = queue_map(&q, 0, 0, [false, false, false], "classic", map(vec![("x-queue-type", s("classic"))]));
    check_eq!(&without_nodes(&body)?, &expected, "queue map of the new queue");
    let body = m.ok("PUT", &queue_path(&q), map(vec![("durable", Value::Bool(false))]), "200").await?;
    check_eq!(&without_nodes(&body)?, &expected, "queue map on redeclare");
    let body = m.ok("GET", &queue_path(&q), Value::Null, "200").await?;
    check_eq!(&without_nodes(&body)?, &expected, "queue map from GET");
    m.close().await
}

pub(super) async fn queue_quorum(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let mut m = Mgmt::open(&ctx).await?;
    let args = map(vec![("x-queue-type", s("quorum")), ("x-max-length", Value::Long(10))]);
    let body = m.ok("PUT", &queue_path(&q), map(vec![("arguments", args.clone())]), "201").await?;
    let expected = queue_map(&q, 0, 0, [true, false, false], "quorum", args);
    check_eq!(&without_nodes(&body)?, &expected, "quorum queue map");
    let body = m.ok("DELETE", &queue_path(&q), Value::Null, "200").await?;
    check_eq!(body, map(vec![("message_count", Value::Ulong(0))]), "delete response");
    m.close().await
}

pub(super) async fn queue_inequivalent_arg(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let mut m = Mgmt::open(&ctx).await?;
    let body = |n: i64| map(vec![("arguments", map(vec![("x-max-length", Value::Long(n))]))]);
    m.ok("PUT", &queue_path(&q), body(10), "201").await?;
    m.refused(
        "PUT",
        &queue_path(&q),
        body(20),
        "409",
        &format!("inequivalent arg 'x-max-length' for queue '{q}' in vhost '/': received '20' but current is '10'"),
    )
    .await?;
    m.close().await
}

pub(super) async fn queue_get_consumers(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    for b in [b"1", b"2", b"3"] {
        lk::publish(&ch, "", &q, b).await?;
    }
    let (_c2, ch2) = ctx.lapin_channel().await?;
    ch2.basic_qos(1, BasicQosOptions::default()).await?;
    let mut consumer = ch2
        .basic_consume(q.as_str().into(), "c1".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await?;
    lk::next(&mut consumer, lk::ARRIVE).await?;
    let mut m = Mgmt::open(&ctx).await?;
    let body = m.ok("GET", &queue_path(&q), Value::Null, "200").await?;
    check_eq!(get(&body, "message_count"), Some(&Value::Ulong(2)), "message_count (ready only)");
    check_eq!(get(&body, "consumer_count"), Some(&Value::Uint(1)), "consumer_count");
    m.close().await
}

pub(super) async fn queue_missing(ctx: Ctx) -> CaseResult {
    let q = ctx.name("missing");
    let mut m = Mgmt::open(&ctx).await?;
    let body = m.ok("DELETE", &queue_path(&q), Value::Null, "200").await?;
    check_eq!(body, map(vec![("message_count", Value::Ulong(0))]), "delete of a missing queue");
    m.refused(
        "DELETE",
        &format!("{}/messages", queue_path(&q)),
        Value::Null,
        "400",
        &format!("no queue '{q}' in vhost '/'"),
    )
    .await?;
    m.close().await
}

pub(super) async fn queue_bad_names(ctx: Ctx) -> CaseResult {
    let mut m = Mgmt::open(&ctx).await?;
    m.refused("PUT", "/queues/", map(vec![]), "400", "declare queue with empty name not allowed").await?;
    let lf = "Bad name 'a\nb': line feed and carriage return characters not allowed";
    let cr = "Bad name 'a\rb': line feed and carriage return characters not allowed";
    m.refused("PUT", &queue_path("a\nb"), map(vec![]), "400", lf).await?;
    m.refused("DELETE", &queue_path("a\nb"), Value::Null, "400", lf).await?;
    m.refused("PUT", &exchange_path("a\rb"), map(vec![]), "400", cr).await?;
    m.refused("DELETE", &exchange_path("a\rb"), Value::Null, "400", cr).await?;
    let bind = map(vec![
        ("source", s("a\nb")),
        ("destination_queue", s("q")),
        ("binding_key", s("k")),
        ("arguments", map(vec![])),
    ]);
    m.refused("POST", "/bindings", bind, "400", lf).await?;
    m.refused("DELETE", "/bindings/src=amq.direct;dstq=a%0Ab;key=k;args=", Value::Null, "400", lf).await?;
    // The body is checked before the name.
    m.refused(
        "PUT",
        "/queues/amq.q",
        map(vec![("unknown", s("x"))]),
        "400",
        "bad queue property {{utf8,<<\"unknown\">>},{utf8,<<\"x\">>}}",
    )
    .await?;
    m.close().await
}

pub(super) async fn queue_type_refusals(ctx: Ctx) -> CaseResult {
    let mut m = Mgmt::open(&ctx).await?;
    let quorum = |extra: (&str, Value)| map(vec![extra, ("arguments", map(vec![("x-queue-type", s("quorum"))]))]);
    let q = ctx.queue("q");
    m.refused(
        "PUT",
        &queue_path(&q),
        quorum(("exclusive", Value::Bool(true))),
        "400",
        &format!("invalid property 'exclusive-owner' for queue '{q}' in vhost '/'"),
    )
    .await?;
    m.refused(
        "PUT",
        &queue_path(&q),
        quorum(("auto_delete", Value::Bool(true))),
        "400",
        &format!("invalid property 'auto-delete' for queue '{q}' in vhost '/'"),
    )
    .await?;
    let args = |k: &str, v: Value| map(vec![("arguments", map(vec![(k, v)]))]);
    m.refused(
        "PUT",
        &queue_path(&q),
        args("x-dead-letter-exchange", Value::Long(1)),
        "400",
        "invalid type 'long' for arg 'x-dead-letter-exchange'",
    )
    .await?;
    m.refused(
        "PUT",
        &queue_path(&q),
        args("x-queue-type", s("foo")),
        "409",
        &format!("invalid arg 'x-queue-type' for queue '{q}' in vhost '/': \"unsupported queue type 'foo'\""),
    )
    .await?;
    m.refused(
        "PUT",
        &queue_path(&q),
        args("x-expires", Value::Long(0)),
        "409",
        &format!("invalid arg 'x-expires' for queue '{q}' in vhost '/': {{value_zero,0}}"),
    )
    .await?;
    m.ok("PUT", &queue_path(&q), map(vec![]), "201").await?;
    m.refused(
        "PUT",
        &queue_path(&q),
        args("x-queue-type", s("quorum")),
        "409",
        &format!(
            "inequivalent arg 'x-queue-type' for queue '{q}' in vhost '/': received 'quorum' but current is 'classic'"
        ),
    )
    .await?;
    m.close().await
}

pub(super) async fn queue_exclusive(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let mut m = Mgmt::open(&ctx).await?;
    let body = m.ok("PUT", &queue_path(&q), map(vec![("exclusive", Value::Bool(true))]), "201").await?;
    check_eq!(get(&body, "exclusive"), Some(&Value::Bool(true)), "exclusive");
    let mut other = Mgmt::open(&ctx).await?;
    let locked = format!(
        "cannot obtain exclusive access to locked queue '{q}' in vhost '/'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration."
    );
    other.refused("DELETE", &queue_path(&q), Value::Null, "400", &locked).await?;
    other.refused("DELETE", &format!("{}/messages", queue_path(&q)), Value::Null, "400", &locked).await?;
    other.close().await?;
    m.ok("DELETE", &queue_path(&q), Value::Null, "200").await?;
    m.close().await
}

pub(super) async fn bad_property(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let x = ctx.exchange("x");
    let mut m = Mgmt::open(&ctx).await?;
    let unknown = map(vec![("unknown", s("bla"))]);
    m.refused(
        "PUT",
        &queue_path(&q),
        unknown.clone(),
        "400",
        "bad queue property {{utf8,<<\"unknown\">>},{utf8,<<\"bla\">>}}",
    )
    .await?;
    m.refused(
        "PUT",
        &exchange_path(&x),
        unknown.clone(),
        "400",
        "bad exchange property {{utf8,<<\"unknown\">>},{utf8,<<\"bla\">>}}",
    )
    .await?;
    m.refused(
        "PUT",
        &queue_path(&q),
        map(vec![("durable", s("yes"))]),
        "400",
        "bad queue property {{utf8,<<\"durable\">>},{utf8,<<\"yes\">>}}",
    )
    .await?;
    m.refused(
        "PUT",
        &exchange_path(&x),
        map(vec![("type", Value::Symbol(Symbol::from("direct")))]),
        "400",
        "bad exchange property {{utf8,<<\"type\">>},{symbol,<<\"direct\">>}}",
    )
    .await?;
    m.refused("POST", "/bindings", unknown, "400", "bad binding field {{utf8,<<\"unknown\">>},{utf8,<<\"bla\">>}}")
        .await?;
    m.close().await
}

pub(super) async fn invalid_argument(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let mut m = Mgmt::open(&ctx).await?;
    m.refused(
        "PUT",
        &queue_path(&q),
        map(vec![("arguments", map(vec![("x-max-length", s("ten"))]))]),
        "409",
        &format!("invalid arg 'x-max-length' for queue '{q}' in vhost '/': \"expected integer, got longstr\""),
    )
    .await?;
    let keyed = Value::Map([(Value::Ulong(1), s("v"))].into_iter().collect());
    m.refused(
        "PUT",
        &queue_path(&q),
        map(vec![("arguments", keyed)]),
        "400",
        "unsupported argument {{ulong,1},{utf8,<<\"v\">>}}",
    )
    .await?;
    m.close().await
}

pub(super) async fn queue_exclusive_durable(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let mut m = Mgmt::open(&ctx).await?;
    let body = m.ok("PUT", &queue_path(&q), map(vec![("exclusive", Value::Bool(true))]), "201").await?;
    let expected = queue_map(&q, 0, 0, [true, false, true], "classic", map(vec![("x-queue-type", s("classic"))]));
    check_eq!(&without_nodes(&body)?, &expected, "exclusive queue map from PUT");
    let body = m.ok("GET", &queue_path(&q), Value::Null, "200").await?;
    check_eq!(without_nodes(&body)?, expected, "exclusive queue map from GET");
    m.refused(
        "PUT",
        &queue_path(&q),
        map(vec![("exclusive", Value::Bool(true)), ("durable", Value::Bool(false))]),
        "409",
        &format!("inequivalent arg 'durable' for queue '{q}' in vhost '/': received 'false' but current is 'true'"),
    )
    .await?;
    m.ok("PUT", &queue_path(&q), map(vec![("exclusive", Value::Bool(true))]), "200").await?;
    m.close().await
}
