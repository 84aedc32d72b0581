//! Dead lettering's triggers and where dead letters go, in every protocol pair and for classic
//! and quorum source queues (RabbitMQ's `dead_lettering_SUITE`, rabbitmq-dlx.md §1 and §3).

use crate::{
    Case, CaseResult, Ctx, Variant, case_v, check_eq,
    dlx_kit::{self as dk, long},
    wire::{Consumer, Publisher, Received, Settle},
};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case_v!(
            "dlx.nack.each_dead_lettered",
            "rejecting (nack/reject requeue=false, 1.0 rejected) three messages one by one dead-letters all three in order, reason rejected",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            nack_each
        ),
        case_v!(
            "dlx.ttl.queue_ttl_expires_to_dlq",
            "messages expire by x-message-ttl with no consumer and reach the DLQ, reason expired",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            queue_ttl
        ),
        case_v!(
            "dlx.max_length.drop_head",
            "x-max-length 1: publishing P1..P3 keeps P3 and dead-letters P1, P2 in order, reason maxlen",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx"],
            drop_head
        ),
    ]
}

/// Takes `n` deliveries from `queue` over the variant's consuming protocol, acknowledging each.
pub(crate) async fn take(
    ctx: &Ctx,
    conn: &lapin::Connection,
    queue: &str,
    n: usize,
) -> Result<Vec<Received>, crate::CaseError> {
    let mut consumer = Consumer::open(ctx, conn, queue, 100).await?;
    let mut out = Vec::new();
    for _ in 0..n {
        let d = consumer.next().await?;
        consumer.settle(&d, Settle::Ack).await?;
        out.push(d);
    }
    consumer.close().await;
    Ok(out)
}

fn bodies(received: &[Received]) -> Vec<String> {
    received.iter().map(|r| String::from_utf8_lossy(&r.body).into_owned()).collect()
}

/// `(queue, reason, count)` of each death, most recent first.
fn history(r: &Received) -> Vec<(String, String, u64)> {
    r.deaths.iter().map(|d| (d.queue.clone(), d.reason.clone(), d.count)).collect()
}

async fn publish_all(ctx: &Ctx, conn: &lapin::Connection, queue: &str, bodies: &[&str]) -> CaseResult {
    let mut p = Publisher::open(ctx, conn).await?;
    for body in bodies {
        p.publish("", queue, body.as_bytes()).await?;
    }
    p.close().await;
    Ok(())
}

async fn nack_each(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    publish_all(&ctx, &s.conn, &s.source, &["m1", "m2", "m3"]).await?;
    let mut consumer = Consumer::open(&ctx, &s.conn, &s.source, 1).await?;
    for _ in 0..3 {
        let d = consumer.next().await?;
        consumer.settle(&d, Settle::Reject).await?;
    }
    consumer.close().await;
    dk::eventually_ready(&s.ch, &s.dlq, 3).await?;
    check_eq!(dk::ready(&s.ch, &s.source).await?, 0, "source queue");
    let got = take(&ctx, &s.conn, &s.dlq, 3).await?;
    check_eq!(bodies(&got), vec!["m1", "m2", "m3"], "dead letters");
    let expected = vec![(s.source.clone(), "rejected".to_owned(), 1)];
    for r in &got {
        check_eq!(history(r), expected.clone(), "death history");
        let death = r.deaths.first().cloned();
        check_eq!(
            death.map(|d| (d.exchange, d.routing_keys)),
            Some((String::new(), vec![s.source.clone()])),
            "exchange and routing keys before the death"
        );
    }
    Ok(())
}

async fn queue_ttl(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[("x-message-ttl", long(100))]).await?;
    publish_all(&ctx, &s.conn, &s.source, &["t1", "t2"]).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 2).await?;
    check_eq!(dk::ready(&s.ch, &s.source).await?, 0, "source queue");
    let got = take(&ctx, &s.conn, &s.dlq, 2).await?;
    check_eq!(bodies(&got), vec!["t1", "t2"], "dead letters");
    for r in &got {
        check_eq!(history(r), vec![(s.source.clone(), "expired".to_owned(), 1)], "death history");
    }
    Ok(())
}

async fn drop_head(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[("x-max-length", long(1))]).await?;
    publish_all(&ctx, &s.conn, &s.source, &["p1", "p2", "p3"]).await?;
    dk::eventually_ready(&s.ch, &s.dlq, 2).await?;
    check_eq!(dk::ready(&s.ch, &s.source).await?, 1, "source queue");
    let kept = take(&ctx, &s.conn, &s.source, 1).await?;
    check_eq!(bodies(&kept), vec!["p3"], "kept");
    let got = take(&ctx, &s.conn, &s.dlq, 2).await?;
    check_eq!(bodies(&got), vec!["p1", "p2"], "dead letters");
    for r in &got {
        check_eq!(history(r), vec![(s.source.clone(), "maxlen".to_owned(), 1)], "death history");
    }
    Ok(())
}
