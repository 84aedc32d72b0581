//! Charon's fallback queue (a deliberate difference): the dead letters RabbitMQ drops silently —
//! a missing dead-letter exchange, no route, a full `reject-publish` target — are kept in the
//! vhost's `amq.charon.dead-letters` with their `x-death` and a `charon-drop-reason` header.
//! The named queues see exactly what RabbitMQ's do (the other `dlx.*` cases).

use std::collections::BTreeMap;
use std::time::Duration;

use lapin::types::{AMQPValue, FieldTable};

use crate::dlx_kit::{self as dk, text};
use crate::lapin_kit as lk;
use crate::{Case, CaseResult, Ctx, case, check_eq};

const FALLBACK: &str = "amq.charon.dead-letters";

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "dlx.fallback.silent_drops_kept",
            "dead letters with a missing DLX, no route, or a full reject-publish target are kept in amq.charon.dead-letters with x-death and charon-drop-reason no-dlx / unroutable / target-full; the full target stays empty",
            ["dlx"],
            silent_drops_kept
        )
        .deliberate(
            "RabbitMQ 4.0.5 drops these dead letters silently and has no amq.charon.dead-letters queue \
             (passive declare: 404); Charon keeps them there (on by default, off with dead_letter_fallback = false)",
        ),
    ]
}

fn header<'a>(table: Option<&'a FieldTable>, key: &str) -> Option<&'a AMQPValue> {
    table.and_then(|t| t.inner().get(key))
}

fn long_text(value: Option<&AMQPValue>) -> Option<String> {
    match value {
        Some(AMQPValue::LongString(s)) => Some(s.to_string()),
        _ => None,
    }
}

async fn silent_drops_kept(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let dlx = ctx.exchange("dlx");
    let options = lapin::options::ExchangeDeclareOptions::default();
    ch.exchange_declare(dlx.as_str().into(), lapin::ExchangeKind::Direct, options, FieldTable::default()).await?;
    let full = ctx.queue("full");
    let full_args = dk::args(&[("x-max-length", dk::long(0)), ("x-overflow", text("reject-publish"))]);
    ch.queue_declare(full.as_str().into(), lapin::options::QueueDeclareOptions::default(), full_args).await?;
    lk::bind(&ch, &full, &dlx, "to-full", FieldTable::default()).await?;
    let sources = [
        ("no-dlx", ctx.queue("missing"), ctx.exchange("missing"), "k"),
        ("unroutable", ctx.queue("unrouted"), dlx.clone(), "nowhere"),
        ("target-full", ctx.queue("refused"), dlx.clone(), "to-full"),
    ];
    let tag = ctx.name("m");
    for (why, source, exchange, key) in &sources {
        let arguments =
            dk::args(&[("x-dead-letter-exchange", text(exchange)), ("x-dead-letter-routing-key", text(key))]);
        ch.queue_declare(source.as_str().into(), lapin::options::QueueDeclareOptions::default(), arguments).await?;
        lk::publish(&ch, "", source, format!("{tag}-{why}").as_bytes()).await?;
        let got = ch.basic_get(source.as_str().into(), lapin::options::BasicGetOptions { no_ack: false }).await?;
        let got = got.ok_or_else(|| crate::CaseError::new("the message"))?;
        got.delivery.reject(lapin::options::BasicRejectOptions { requeue: false }).await?;
    }
    // Other cases' drops may be in the fallback queue too: read until ours are all there.
    let mut kept: BTreeMap<String, (Option<String>, Option<String>)> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while kept.len() < 3 && tokio::time::Instant::now() < deadline {
        let Some(m) = lk::get(&ch, FALLBACK).await? else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let body = String::from_utf8_lossy(&m.delivery.data).into_owned();
        if let Some(why) = body.strip_prefix(&format!("{tag}-")) {
            let headers = m.delivery.properties.headers().as_ref();
            let death_queue = match header(headers, "x-death") {
                Some(AMQPValue::FieldArray(deaths)) => match deaths.as_slice().first() {
                    Some(AMQPValue::FieldTable(death)) => long_text(death.inner().get("queue")),
                    _ => None,
                },
                _ => None,
            };
            kept.insert(why.to_owned(), (long_text(header(headers, "charon-drop-reason")), death_queue));
        }
    }
    for (why, source, _, _) in &sources {
        check_eq!(kept.get(*why).cloned(), Some((Some((*why).to_owned()), Some(source.clone()))), "kept {why}");
    }
    check_eq!(dk::ready(&ch, &full).await?, 0, "the full target took nothing");
    Ok(())
}
