//! Bodies larger than frame_max, empty bodies, and bodies on frame boundaries.

use crate::{
    Case, CaseError, CaseResult, Ctx, amqprs_kit as ak, case, case_matrix, check, check_eq,
    lapin_kit::{self as lk, confirm, publish},
};
use amqprs::{
    BasicProperties,
    channel::{BasicConsumeArguments, QueueDeclareArguments},
};
use rand::RngCore;

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "large.body_300k_lapin_to_amqprs",
            "a 300 KB random body published by lapin arrives intact at amqprs",
            body_300k
        ),
        case!(
            "large.body_1m_amqprs_to_lapin",
            "a 1 MB random body published by amqprs arrives intact at lapin",
            body_1m
        ),
        case_matrix!(
            "large.bodies_any_protocol",
            "bodies of 0 B, 1 B, one frame's payload and 300 KB arrive byte for byte in every protocol pair",
            bodies_any_protocol
        ),
        case!("large.body_empty", "an empty body arrives as an empty body (both clients)", body_empty),
        case!(
            "large.frame_boundaries",
            "bodies of frame_max-9, -8, -7 and 2*(frame_max-8) bytes arrive intact and in order",
            boundaries
        ),
    ]
}

fn random(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rand::rng().fill_bytes(&mut v);
    v
}

fn same(got: &[u8], want: &[u8], what: &str) -> CaseResult {
    check_eq!(got.len(), want.len(), "{what}: body length");
    let first = got.iter().zip(want).position(|(a, b)| a != b);
    check!(first.is_none(), "{what}: bodies differ first at byte {first:?}");
    Ok(())
}

async fn body_300k(ctx: Ctx) -> CaseResult {
    let body = random(300 * 1024);
    let (_c, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    publish(&ch, "", &q, &body).await?;
    let conn = ctx.amqprs().await?;
    let (ach, _ev) = ak::channel(&conn).await?;
    let (_t, mut rx) = ach.basic_consume_rx(BasicConsumeArguments::new(&q, "").manual_ack(false).finish()).await?;
    let m = ak::recv(&mut rx, lk::ARRIVE).await?;
    same(&m.content.unwrap_or_default(), &body, "300 KB")
}

async fn body_1m(ctx: Ctx) -> CaseResult {
    let body = random(1024 * 1024);
    let conn = ctx.amqprs().await?;
    let (ach, _ev) = ak::channel(&conn).await?;
    let q = ctx.queue("q");
    ach.queue_declare(QueueDeclareArguments::new(&q)).await?;
    ak::publish(&ach, "", &q, BasicProperties::default(), body.clone()).await?;
    let (_c, ch) = ctx.lapin_channel().await?;
    let mut consumer = lk::consume(&ch, &q).await?;
    let d = lk::next(&mut consumer, lk::ARRIVE).await?;
    same(&d.data, &body, "1 MB")
}

async fn body_empty(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    publish(&ch, "", &q, b"").await?;
    let conn = ctx.amqprs().await?;
    let (ach, _ev) = ak::channel(&conn).await?;
    ak::publish(&ach, "", &q, BasicProperties::default(), Vec::new()).await?;
    let (_t, mut rx) = ach.basic_consume_rx(BasicConsumeArguments::new(&q, "").manual_ack(false).finish()).await?;
    for i in 0..2 {
        let m = ak::recv(&mut rx, lk::ARRIVE).await?;
        check_eq!(m.content.unwrap_or_default().len(), 0, "length of empty body {}", i + 1);
    }
    let mut consumer = lk::consume(&ch, &q).await?;
    lk::nothing(&mut consumer, lk::QUIET).await
}

async fn boundaries(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let max = usize::try_from(conn.frame_max()).map_err(|_| CaseError::new("frame_max"))?;
    check!(max > 8, "negotiated frame_max {max} too small");
    let room = max - 8;
    let sizes = [room - 1, room, room + 1, 2 * room, 2 * room + 1];
    let bodies: Vec<Vec<u8>> = sizes.iter().map(|&n| random(n)).collect();
    let (ach, _ev) = ak::channel(&conn).await?;
    let q = ctx.queue("q");
    ach.queue_declare(QueueDeclareArguments::new(&q)).await?;
    for b in &bodies {
        ak::publish(&ach, "", &q, BasicProperties::default(), b.clone()).await?;
    }
    let (_c, ch) = ctx.lapin_channel().await?;
    let mut consumer = lk::consume(&ch, &q).await?;
    for (b, n) in bodies.iter().zip(sizes) {
        let d = lk::next(&mut consumer, lk::ARRIVE).await?;
        same(&d.data, b, &format!("{n}-byte body"))?;
    }
    Ok(())
}

async fn bodies_any_protocol(ctx: Ctx) -> CaseResult {
    let (c, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    crate::lapin_kit::declare_queue(&ch, &q).await?;
    // 131_064 fills one 0.9.1 body frame of the default frame_max exactly.
    let bodies: Vec<Vec<u8>> =
        [0usize, 1, 131_064, 300_000].iter().map(|n| (0..*n).map(|i| (i % 251) as u8).collect()).collect();
    let mut p = crate::wire::Publisher::open(&ctx, &c).await?;
    for body in &bodies {
        p.publish("", &q, body).await?;
    }
    p.close().await;
    let got = crate::wire::drain_bytes(&ctx, &ch, &q).await?;
    let sizes = |v: &[Vec<u8>]| v.iter().map(Vec::len).collect::<Vec<_>>();
    check_eq!(sizes(&got), sizes(&bodies), "body sizes");
    check!(got == bodies, "bodies differ in content");
    Ok(())
}
