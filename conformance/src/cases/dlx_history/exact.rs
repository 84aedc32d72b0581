//! The exact renderings of one death: `x-death` with its field order and AMQP types off raw
//! 0.9.1 frames, and `x-opt-deaths` with the annotation order off raw 1.0 frames.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_amqp::Value;
use serde_amqp::primitives::Symbol;

use super::raw091::{F, Raw091};
use crate::cases::dlx_routing::kit::{self, Got, Out};
use crate::dlx_kit as dk;
use crate::raw10::message::hdr;
use crate::{CaseError, CaseResult, Ctx, Protocol, QueueKind, check, check_eq};

/// Within a minute of now (brokers under test run on this machine).
fn near_now_ms(ms: i64) -> bool {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0));
    (ms - now).abs() < 60_000
}

pub(super) async fn x_death_exact(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    let cc = ctx.name("cc");
    let out = match ctx.variant().publish {
        Protocol::Amqp091 => Out::text("m")
            .header("zeta", F::S("z".into()))
            .header("CC", F::A(vec![F::S(cc.clone())]))
            .header("alpha", F::I32(1))
            .header("x-custom", F::S("c".into()))
            .header("Beta", F::Bool(true)),
        Protocol::Amqp10 => Out::text("m")
            .header("zeta", F::S("z".into()))
            .header("alpha", F::I32(1))
            .header("Beta", F::Bool(true))
            .annotation("x-custom", Value::String("c".into())),
    }
    .ttl(60_000);
    kit::publish(&ctx, "", &s.source, &out).await?;
    kit::reject_one(&ctx, &s.source).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    let mut raw = Raw091::open(&ctx).await?;
    let got = raw.get(&s.dlq, true).await?.ok_or_else(|| CaseError::new("the DLQ is empty"))?;
    check_eq!(
        (got.exchange.as_str(), got.routing_key.as_str(), got.redelivered),
        (s.dlx.as_str(), s.source.as_str(), false),
        "exchange, routing key, redelivered"
    );
    check_eq!(got.props.expiration.clone(), None, "expiration");
    let names: Vec<&str> = got.props.headers.iter().flatten().map(|(k, _)| k.as_str()).collect();
    let deaths = [
        "x-death",
        "x-first-death-exchange",
        "x-first-death-queue",
        "x-first-death-reason",
        "x-last-death-exchange",
        "x-last-death-queue",
        "x-last-death-reason",
    ];
    let mut expected = match ctx.variant().publish {
        Protocol::Amqp091 => vec!["Beta", "CC", "alpha", "x-custom"],
        Protocol::Amqp10 => vec!["Beta", "alpha", "x-custom"],
    };
    expected.extend(deaths);
    expected.push("zeta");
    check_eq!(names, expected, "header names and order");
    let keys = match ctx.variant().publish {
        Protocol::Amqp091 => vec![F::S(s.source.clone()), F::S(cc.clone())],
        Protocol::Amqp10 => vec![F::S(s.source.clone())],
    };
    let Some(F::A(entries)) = got.header("x-death") else {
        return Err(CaseError::new(format!("x-death is not an array: {:?}", got.header("x-death"))));
    };
    check_eq!(entries.len(), 1, "x-death entries");
    let Some(F::Table(entry)) = entries.first() else {
        return Err(CaseError::new(format!("x-death[0] is not a table: {entries:?}")));
    };
    let time = entry.iter().find(|(k, _)| k == "time").map(|(_, v)| v.clone());
    let Some(F::T(seconds)) = time else {
        return Err(CaseError::new(format!("x-death time is not a timestamp: {time:?}")));
    };
    check!(near_now_ms(i64::try_from(seconds).unwrap_or(0) * 1000), "x-death time {seconds} is not now in seconds");
    let expected_entry = vec![
        ("original-expiration".to_owned(), F::S("60000".into())),
        ("count".to_owned(), F::I64(1)),
        ("reason".to_owned(), F::S("rejected".into())),
        ("queue".to_owned(), F::S(s.source.clone())),
        ("time".to_owned(), F::T(seconds)),
        ("exchange".to_owned(), F::S(String::new())),
        ("routing-keys".to_owned(), F::A(keys)),
    ];
    check_eq!(entry.clone(), expected_entry, "x-death[0]");
    for (name, value) in rejected_once_summary(&s.source) {
        check_eq!(got.header(name), Some(&F::S(value.to_owned())), "header {name}");
    }
    Ok(())
}

/// The `x-first-death-*` / `x-last-death-*` fields after one rejection from `source` (whose
/// messages were published to the default exchange).
fn rejected_once_summary(source: &str) -> [(&'static str, &str); 6] {
    [
        ("x-first-death-exchange", ""),
        ("x-first-death-queue", source),
        ("x-first-death-reason", "rejected"),
        ("x-last-death-exchange", ""),
        ("x-last-death-queue", source),
        ("x-last-death-reason", "rejected"),
    ]
}

pub(super) async fn x_opt_deaths_exact(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    let out = match ctx.variant().publish {
        Protocol::Amqp091 => Out::text("m").header("x-custom", F::S("c".into())),
        Protocol::Amqp10 => Out::text("m").annotation("x-custom", Value::String("c".into())),
    }
    .ttl(60_000);
    kit::publish(&ctx, "", &s.source, &out).await?;
    kit::reject_one(&ctx, &s.source).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    let got = kit::take_one(&ctx, &s.dlq).await?;
    let Got::A10 { msg, .. } = &got else { return Err(CaseError::new("expected a 1.0 delivery")) };
    let names: Vec<String> = msg.annotations().into_iter().map(|(k, _)| k).collect();
    check_eq!(
        names,
        [
            "x-custom",
            "x-exchange",
            "x-routing-key",
            "x-opt-deaths",
            "x-first-death-exchange",
            "x-first-death-queue",
            "x-first-death-reason",
            "x-last-death-exchange",
            "x-last-death-queue",
            "x-last-death-reason",
        ],
        "annotation names and order"
    );
    check_eq!(msg.ann("x-exchange"), Some(Value::String(s.dlx.clone())), "x-exchange");
    check_eq!(msg.ann("x-routing-key"), Some(Value::String(s.source.clone())), "x-routing-key");
    for (name, value) in rejected_once_summary(&s.source) {
        check_eq!(msg.ann(name), Some(Value::String(value.to_owned())), "annotation {name}");
    }
    kit::check_ttl_cleared(&ctx, &got, 60_000)?;
    // A quorum queue counts the rejection as a failed delivery and the dead letter carries it.
    let failed = u32::from(ctx.variant().queue == Some(QueueKind::Quorum));
    check_eq!(
        (msg.header(hdr::FIRST_ACQUIRER), msg.header(hdr::DELIVERY_COUNT)),
        (Some(Value::Bool(false)), Some(Value::Uint(failed))),
        "header first-acquirer, delivery-count"
    );
    let Some(Value::Array(entries)) = msg.ann("x-opt-deaths") else {
        return Err(CaseError::new(format!("x-opt-deaths is not an array: {:?}", msg.ann("x-opt-deaths"))));
    };
    let entries: Vec<Value> = entries.into_iter().collect();
    check_eq!(entries.len(), 1, "x-opt-deaths entries");
    let Some(Value::Map(entry)) = entries.first() else {
        return Err(CaseError::new(format!("x-opt-deaths[0] is not a map: {entries:?}")));
    };
    let fields: Vec<(Value, Value)> = entry.clone().into_iter().collect();
    let times: Vec<i64> = fields
        .iter()
        .filter_map(|(_, v)| match v {
            Value::Timestamp(t) => Some(t.milliseconds()),
            _ => None,
        })
        .collect();
    check!(times.len() == 2 && times.iter().all(|t| near_now_ms(*t)), "first-time/last-time are not now: {fields:?}");
    let (first, last) = (times.first().copied().unwrap_or(0), times.get(1).copied().unwrap_or(0));
    check_eq!(first, last, "first-time and last-time of a single death");
    let key = |k: &str| Value::Symbol(Symbol::from(k));
    let ts = |ms: i64| Value::Timestamp(serde_amqp::primitives::Timestamp::from_milliseconds(ms));
    let expected = vec![
        (key("ttl"), Value::Uint(60_000)),
        (key("queue"), Value::String(s.source.clone())),
        (key("reason"), Value::Symbol(Symbol::from("rejected"))),
        (key("count"), Value::Ulong(1)),
        (key("first-time"), ts(first)),
        (key("last-time"), ts(last)),
        (key("exchange"), Value::String(String::new())),
        (key("routing-keys"), Value::Array(vec![Value::String(s.source.clone())].into())),
    ];
    check_eq!(fields, expected, "x-opt-deaths[0]");
    Ok(())
}
