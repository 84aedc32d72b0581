//! basic.qos: per-consumer and global (per-channel) prefetch limits.

use crate::{
    Case, CaseError, CaseResult, Ctx, case, check_eq,
    lapin_kit::{self as lk, confirm, publish},
};
use lapin::{
    options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions},
    types::FieldTable,
};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "prefetch.per_consumer.limits_unacked",
            "prefetch_count=2 (global=false) allows two unacked deliveries; an ack releases one more",
            per_consumer
        ),
        case!(
            "prefetch.per_consumer.applies_to_each",
            "global=false gives each consumer of the channel its own limit",
            per_consumer_each
        ),
        case!(
            "prefetch.global.shared_by_channel",
            "global=true is one limit shared by all consumers of the channel",
            global_shared
        ),
        case!(
            "prefetch.per_consumer_then_global_both_apply",
            "qos(1,global=false) then qos(3,global=true): both limits apply",
            per_consumer_then_global
        ),
        case!(
            "prefetch.global_then_per_consumer_clears_global",
            "qos(3,global=true) then qos(1,global=false): the per-consumer qos removes the global limit (RabbitMQ quirk)",
            global_then_per_consumer
        ),
        case!("prefetch.zero_is_unlimited", "prefetch_count=0 means no limit", zero_unlimited),
        case!("prefetch.no_ack_ignores_limit", "no-ack consumers are not limited by prefetch", no_ack_ignores),
        case!("prefetch.later_consumers_only", "a qos change applies to consumers started after it", later_consumers),
    ]
}

async fn setup(ctx: &Ctx, n: usize) -> Result<(lapin::Connection, lapin::Channel, String), CaseError> {
    let (conn, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    for i in 1..=n {
        publish(&ch, "", &q, format!("m{i}").as_bytes()).await?;
    }
    Ok((conn, ch, q))
}

async fn per_consumer(ctx: Ctx) -> CaseResult {
    let (conn, _ch, q) = setup(&ctx, 5).await?;
    let cch = conn.create_channel().await?;
    cch.basic_qos(2, BasicQosOptions { global: false }).await?;
    let mut c = lk::consume(&cch, &q).await?;
    let got = lk::take(&mut c, 2).await?;
    lk::nothing(&mut c, lk::QUIET).await?;
    let first = got.first().ok_or_else(|| CaseError::new("no delivery"))?;
    cch.basic_ack(first.delivery_tag, BasicAckOptions::default()).await?;
    let third = lk::next(&mut c, lk::ARRIVE).await?;
    check_eq!(lk::text(&third), "m3", "delivery released by the ack");
    lk::nothing(&mut c, lk::QUIET).await
}

async fn per_consumer_each(ctx: Ctx) -> CaseResult {
    let (conn, _ch, q) = setup(&ctx, 6).await?;
    let cch = conn.create_channel().await?;
    cch.basic_qos(1, BasicQosOptions { global: false }).await?;
    let mut c1 = lk::consume(&cch, &q).await?;
    let mut c2 = lk::consume(&cch, &q).await?;
    lk::take(&mut c1, 1).await?;
    lk::take(&mut c2, 1).await?;
    lk::nothing(&mut c1, lk::QUIET).await?;
    lk::nothing(&mut c2, lk::QUIET).await?;
    check_eq!(lk::message_count(&conn, &q).await?, 4, "messages still ready");
    Ok(())
}

async fn global_shared(ctx: Ctx) -> CaseResult {
    let (conn, _ch, q) = setup(&ctx, 6).await?;
    let cch = conn.create_channel().await?;
    cch.basic_qos(2, BasicQosOptions { global: true }).await?;
    let mut c1 = lk::consume(&cch, &q).await?;
    let mut c2 = lk::consume(&cch, &q).await?;
    // Whichever consumer gets them, the channel as a whole holds 2 unacked deliveries.
    tokio::time::sleep(lk::QUIET).await;
    let ready = lk::message_count(&conn, &q).await?;
    check_eq!(ready, 4, "messages still ready with a global prefetch of 2 over two consumers");
    let mut total = 0;
    while lk::next(&mut c1, std::time::Duration::from_millis(50)).await.is_ok() {
        total += 1;
    }
    while lk::next(&mut c2, std::time::Duration::from_millis(50)).await.is_ok() {
        total += 1;
    }
    check_eq!(total, 2, "deliveries across both consumers");
    Ok(())
}

/// Applies the qos calls in order, starts `consumers` consumers on 10 messages, returns how
/// many were delivered.
async fn delivered_with(ctx: &Ctx, steps: &[(u16, bool)], consumers: usize) -> Result<u32, CaseError> {
    let (conn, _ch, q) = setup(ctx, 10).await?;
    let cch = conn.create_channel().await?;
    for &(n, global) in steps {
        cch.basic_qos(n, BasicQosOptions { global }).await?;
    }
    let mut cs = Vec::new();
    for _ in 0..consumers {
        cs.push(lk::consume(&cch, &q).await?);
    }
    tokio::time::sleep(lk::QUIET).await;
    Ok(10 - lk::message_count(&conn, &q).await?)
}

async fn per_consumer_then_global(ctx: Ctx) -> CaseResult {
    let n = delivered_with(&ctx, &[(1, false), (3, true)], 4).await?;
    check_eq!(n, 3, "deliveries to 4 consumers under per-consumer 1 and global 3");
    let n = delivered_with(&ctx, &[(5, false), (3, true)], 1).await?;
    check_eq!(n, 3, "deliveries to 1 consumer under per-consumer 5 and global 3");
    Ok(())
}

async fn global_then_per_consumer(ctx: Ctx) -> CaseResult {
    // rabbit_channel handles basic.qos global=false with rabbit_limiter:unlimit_prefetch, so a
    // per-consumer qos issued after a global one silently drops the global limit.
    let n = delivered_with(&ctx, &[(3, true), (1, false)], 4).await?;
    check_eq!(n, 4, "deliveries to 4 consumers under global 3 then per-consumer 1");
    let n = delivered_with(&ctx, &[(3, true), (2, false)], 4).await?;
    check_eq!(n, 8, "deliveries to 4 consumers under global 3 then per-consumer 2");
    Ok(())
}

async fn zero_unlimited(ctx: Ctx) -> CaseResult {
    let (conn, _ch, q) = setup(&ctx, 20).await?;
    let cch = conn.create_channel().await?;
    cch.basic_qos(0, BasicQosOptions { global: false }).await?;
    let mut c = lk::consume(&cch, &q).await?;
    lk::take(&mut c, 20).await?;
    Ok(())
}

async fn no_ack_ignores(ctx: Ctx) -> CaseResult {
    let (conn, _ch, q) = setup(&ctx, 5).await?;
    let cch = conn.create_channel().await?;
    cch.basic_qos(1, BasicQosOptions { global: false }).await?;
    let mut c = cch
        .basic_consume(
            q.as_str().into(),
            "".into(),
            BasicConsumeOptions { no_ack: true, ..Default::default() },
            FieldTable::default(),
        )
        .await?;
    lk::take(&mut c, 5).await?;
    Ok(())
}

async fn later_consumers(ctx: Ctx) -> CaseResult {
    let (conn, _ch, q) = setup(&ctx, 0).await?;
    let cch = conn.create_channel().await?;
    cch.basic_qos(1, BasicQosOptions { global: false }).await?;
    let mut c1 = lk::consume(&cch, &q).await?;
    cch.basic_qos(3, BasicQosOptions { global: false }).await?;
    let mut c2 = lk::consume(&cch, &q).await?;
    let pch = conn.create_channel().await?;
    confirm(&pch).await?;
    for i in 1..=8 {
        publish(&pch, "", &q, format!("m{i}").as_bytes()).await?;
    }
    tokio::time::sleep(lk::QUIET).await;
    let mut n1 = 0;
    while lk::next(&mut c1, std::time::Duration::from_millis(50)).await.is_ok() {
        n1 += 1;
    }
    let mut n2 = 0;
    while lk::next(&mut c2, std::time::Duration::from_millis(50)).await.is_ok() {
        n2 += 1;
    }
    check_eq!((n1, n2), (1, 3), "(deliveries to the consumer started under qos 1, under qos 3)");
    Ok(())
}
