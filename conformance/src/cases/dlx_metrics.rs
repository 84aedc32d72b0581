//! RabbitMQ's global dead-lettering counters on the Prometheus endpoint (rabbitmq-dlx.md §6,
//! `dead_lettering_SUITE` #38–41, reference-observations "Dead lettering" 15).
//!
//! The counters are broker-wide, so every case here is tagged `serial` (the runner runs those
//! alone, after all others) and asserts deltas. Quorum queues update them asynchronously: each
//! case waits for the expected delta, then checks that it does not grow past it.

use std::time::Duration;

use lapin::BasicProperties;
use lapin::options::{BasicPublishOptions, BasicQosOptions, BasicRejectOptions};

use super::dlx_settle::{Answer, How, Sender, Taker, publish_all};
use crate::dlx_kit::{self as dk, long, text};
use crate::lapin_kit as lk;
use crate::{Case, CaseError, CaseResult, Ctx, QueueKind, Variant, case, case_v, check, check_eq};

const QUORUM_091: [Variant; 1] = [Variant::AMQP091.on(QueueKind::Quorum)];
const QUEUE_TYPES: [&str; 2] = ["rabbit_classic_queue", "rabbit_quorum_queue"];

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "dlx.metrics.series_exported",
            "every dead-lettering series RabbitMQ exports is there (at 0 from start-up)",
            ["dlx", "serial"],
            series_exported
        ),
        case_v!(
            "dlx.metrics.disabled_maxlen",
            "no DLX, max-length 1, 1000 publishes: maxlen{disabled} grows by 999 (#38)",
            &Variant::BOTH_QUEUES,
            ["dlx", "serial"],
            disabled_maxlen
        ),
        case_v!(
            "dlx.metrics.disabled_rejected",
            "no DLX, 1000 messages rejected: rejected{disabled} grows by 1000 (#39)",
            &Variant::BOTH_QUEUES,
            ["dlx", "serial"],
            disabled_rejected
        ),
        case_v!(
            "dlx.metrics.disabled_expired_queue_ttl",
            "no DLX, x-message-ttl 0, 1000 publishes: expired{disabled} grows by 1000 (#40)",
            &Variant::BOTH_QUEUES,
            ["dlx", "serial"],
            disabled_expired_queue_ttl
        ),
        case_v!(
            "dlx.metrics.disabled_expired_per_message",
            "no DLX, 1000 publishes with expiration \"0\": expired{disabled} grows by 1000 (#41)",
            &Variant::BOTH_QUEUES,
            ["dlx", "serial"],
            disabled_expired_per_message
        ),
        case_v!(
            "dlx.metrics.at_most_once_counted",
            "with a DLX: rejected, maxlen, expired (and quorum delivery_limit) count under at_most_once, nothing under disabled",
            &Variant::BOTH_QUEUES,
            ["dlx", "serial"],
            at_most_once
        ),
        case_v!(
            "dlx.metrics.at_least_once_counted",
            "quorum, at-least-once, reject-publish, a bound DLQ: 3 rejects count under rejected{at_least_once} and, once the DLQ confirmed them, confirmed{at_least_once}; nothing under at_most_once",
            &QUORUM_091,
            ["dlx", "serial"],
            at_least_once
        ),
        case_v!(
            "dlx.metrics.missing_dlx_counts_disabled",
            "a DLX that does not exist: dead letters are dropped and counted under disabled",
            &Variant::BOTH_QUEUES,
            ["dlx", "serial"],
            missing_dlx
        ),
        case_v!(
            "dlx.metrics.reject_publish_counts_nothing",
            "reject-publish refusals are no dead letters: no counter moves",
            &Variant::BOTH_QUEUES,
            ["dlx", "serial"],
            reject_publish_nothing
        ),
    ]
}

fn series(reason: &str) -> String {
    format!("rabbitmq_global_messages_dead_lettered_{reason}_total")
}

fn queue_type(ctx: &Ctx) -> &'static str {
    match dk::queue_kind(ctx) {
        QueueKind::Classic => "rabbit_classic_queue",
        QueueKind::Quorum => "rabbit_quorum_queue",
    }
}

/// The counters a case watches: `(reason, strategy)` for the variant's queue type.
struct Watch {
    queue_type: &'static str,
    keys: Vec<(&'static str, &'static str)>,
    start: Vec<f64>,
}

impl Watch {
    async fn new(ctx: &Ctx, keys: &[(&'static str, &'static str)]) -> Result<Self, CaseError> {
        let queue_type = queue_type(ctx);
        let mut start = Vec::new();
        for (reason, strategy) in keys {
            start.push(
                ctx.metric(&series(reason), &[("queue_type", queue_type), ("dead_letter_strategy", strategy)]).await?,
            );
        }
        Ok(Self { queue_type, keys: keys.to_vec(), start })
    }

    async fn deltas(&self, ctx: &Ctx) -> Result<Vec<i64>, CaseError> {
        let mut out = Vec::new();
        for ((reason, strategy), start) in self.keys.iter().zip(&self.start) {
            let now = ctx
                .metric(&series(reason), &[("queue_type", self.queue_type), ("dead_letter_strategy", strategy)])
                .await?;
            // Counter values are integers well below 2^53.
            #[allow(clippy::cast_possible_truncation)]
            out.push((now - start).round() as i64);
        }
        Ok(out)
    }

    /// Waits (up to 5 s) for the deltas to reach `expected`, then checks they stay there.
    async fn expect(&self, ctx: &Ctx, expected: &[i64]) -> CaseResult {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let mut got = self.deltas(ctx).await?;
        while got.iter().zip(expected).any(|(g, e)| g < e) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            got = self.deltas(ctx).await?;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let got = self.deltas(ctx).await?;
        let names: Vec<String> = self.keys.iter().map(|(r, s)| format!("{r}{{{},{s}}}", self.queue_type)).collect();
        check_eq!(got, expected.to_vec(), "deltas of {names:?}");
        Ok(())
    }
}

/// Declares a queue of the variant's type with `args` (no DLX unless given).
async fn plain_queue(
    ctx: &Ctx,
    ch: &lapin::Channel,
    args: &[(&str, lapin::types::AMQPValue)],
) -> Result<String, CaseError> {
    let q = ctx.queue("q");
    dk::declare_typed(ctx, ch, &q, dk::args(args)).await?;
    Ok(q)
}

/// Publishes `n` messages with confirms, all in flight at once.
async fn publish_many(conn: &lapin::Connection, queue: &str, n: usize, expiration: Option<&str>) -> CaseResult {
    let ch = conn.create_channel().await?;
    lk::confirm(&ch).await?;
    let mut confirms = Vec::with_capacity(n);
    for i in 0..n {
        let mut props = BasicProperties::default();
        if let Some(e) = expiration {
            props = props.with_expiration(e.into());
        }
        let body = i.to_string();
        confirms.push(
            ch.basic_publish("".into(), queue.into(), BasicPublishOptions::default(), body.as_bytes(), props).await?,
        );
    }
    for c in confirms {
        c.await?;
    }
    let _ = ch.close(200, "done".into()).await;
    Ok(())
}

async fn series_exported(ctx: Ctx) -> CaseResult {
    let mut wanted: Vec<(String, &str, &str)> = Vec::new();
    for queue_type in QUEUE_TYPES {
        for reason in ["maxlen", "expired", "rejected"] {
            for strategy in ["disabled", "at_most_once"] {
                wanted.push((series(reason), queue_type, strategy));
            }
        }
    }
    let quorum = "rabbit_quorum_queue";
    for strategy in ["disabled", "at_most_once", "at_least_once"] {
        wanted.push((series("delivery_limit"), quorum, strategy));
    }
    for reason in ["expired", "rejected", "confirmed"] {
        wanted.push((series(reason), quorum, "at_least_once"));
    }
    for (name, queue_type, strategy) in &wanted {
        ctx.metric(name, &[("queue_type", queue_type), ("dead_letter_strategy", strategy)]).await?;
    }
    Ok(())
}

async fn disabled_maxlen(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    let q = plain_queue(&ctx, &ch, &[("x-max-length", long(1)), ("x-overflow", text("drop-head"))]).await?;
    let watch = Watch::new(&ctx, &[("maxlen", "disabled"), ("maxlen", "at_most_once")]).await?;
    publish_many(&conn, &q, 1000, None).await?;
    watch.expect(&ctx, &[999, 0]).await
}

async fn disabled_rejected(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    let q = plain_queue(&ctx, &ch, &[]).await?;
    let watch = Watch::new(&ctx, &[("rejected", "disabled"), ("rejected", "at_most_once")]).await?;
    publish_many(&conn, &q, 1000, None).await?;
    let consumer_ch = conn.create_channel().await?;
    consumer_ch.basic_qos(200, BasicQosOptions::default()).await?;
    let mut consumer = lk::consume(&consumer_ch, &q).await?;
    for _ in 0..1000 {
        let d = lk::next(&mut consumer, lk::ARRIVE).await?;
        consumer_ch.basic_reject(d.delivery_tag, BasicRejectOptions { requeue: false }).await?;
    }
    watch.expect(&ctx, &[1000, 0]).await
}

async fn disabled_expired_queue_ttl(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    let q = plain_queue(&ctx, &ch, &[("x-message-ttl", long(0))]).await?;
    let watch = Watch::new(&ctx, &[("expired", "disabled"), ("expired", "at_most_once")]).await?;
    publish_many(&conn, &q, 1000, None).await?;
    watch.expect(&ctx, &[1000, 0]).await
}

async fn disabled_expired_per_message(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    let q = plain_queue(&ctx, &ch, &[]).await?;
    let watch = Watch::new(&ctx, &[("expired", "disabled"), ("expired", "at_most_once")]).await?;
    publish_many(&conn, &q, 1000, Some("0")).await?;
    watch.expect(&ctx, &[1000, 0]).await
}

async fn at_most_once(ctx: Ctx) -> CaseResult {
    let quorum = dk::queue_kind(&ctx) == QueueKind::Quorum;
    let mut keys = vec![
        ("rejected", "at_most_once"),
        ("maxlen", "at_most_once"),
        ("expired", "at_most_once"),
        ("rejected", "disabled"),
        ("maxlen", "disabled"),
        ("expired", "disabled"),
    ];
    if quorum {
        keys.extend([("delivery_limit", "at_most_once"), ("delivery_limit", "disabled")]);
    }
    let s = if quorum {
        dk::setup(&ctx, &[("x-max-length", long(3)), ("x-delivery-limit", long(0))]).await?
    } else {
        dk::setup(&ctx, &[("x-max-length", long(3))]).await?
    };
    let watch = Watch::new(&ctx, &keys).await?;
    // Five publishes into room for three: two maxlen.
    publish_all(&ctx, &s.conn, &s.source, &["1", "2", "3", "4", "5"]).await?;
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 10).await?;
    let got = t.next_n(3).await?;
    // Two rejected and, on quorum, one requeue past the limit 0.
    for (i, g) in got.iter().enumerate() {
        let how = if i == 2 && quorum { How::Requeue } else { How::Reject };
        t.settle(g, how).await?;
    }
    t.close().await;
    // One expired (per-message TTL 0).
    let mut p = Sender::open(&ctx, &s.conn).await?;
    check_eq!(p.send(&s.source, "ttl", Some(0)).await?, Answer::Accepted, "publish with TTL 0");
    p.close().await;
    let mut expected = vec![if quorum { 2 } else { 3 }, 2, 1, 0, 0, 0];
    if quorum {
        expected.extend([1, 0]);
    }
    watch.expect(&ctx, &expected).await
}

async fn at_least_once(ctx: Ctx) -> CaseResult {
    let keys = [("rejected", "at_least_once"), ("confirmed", "at_least_once"), ("rejected", "at_most_once")];
    let strategy = [("x-dead-letter-strategy", text("at-least-once")), ("x-overflow", text("reject-publish"))];
    let s = dk::setup(&ctx, &strategy).await?;
    let watch = Watch::new(&ctx, &keys).await?;
    publish_all(&ctx, &s.conn, &s.source, &["1", "2", "3"]).await?;
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 10).await?;
    for g in t.next_n(3).await? {
        t.settle(&g, How::Reject).await?;
    }
    t.close().await;
    dk::eventually_ready(&s.ch, &s.dlq, 3).await?;
    watch.expect(&ctx, &[3, 3, 0]).await
}

async fn missing_dlx(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    let absent = ctx.name("absent-dlx");
    let q = plain_queue(&ctx, &ch, &[("x-dead-letter-exchange", text(&absent))]).await?;
    let watch = Watch::new(&ctx, &[("rejected", "disabled"), ("rejected", "at_most_once")]).await?;
    publish_many(&conn, &q, 5, None).await?;
    let mut t = Taker::open(&ctx, &conn, &q, 10).await?;
    for _ in 0..5 {
        let g = t.next().await?;
        t.settle(&g, How::Reject).await?;
    }
    t.close().await;
    watch.expect(&ctx, &[5, 0]).await?;
    check_eq!(dk::ready(&ch, &q).await?, 0, "source queue");
    Ok(())
}

async fn reject_publish_nothing(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[("x-max-length", long(1)), ("x-overflow", text("reject-publish"))]).await?;
    let watch = Watch::new(&ctx, &[("maxlen", "at_most_once"), ("maxlen", "disabled")]).await?;
    let mut p = Sender::open(&ctx, &s.conn).await?;
    let answers = p.send_all(&s.source, &["1", "2", "3", "4", "5"]).await?;
    p.close().await;
    check!(answers.contains(&Answer::Refused), "no publish was refused: {answers:?}");
    watch.expect(&ctx, &[0, 0]).await?;
    check_eq!(dk::ready(&s.ch, &s.dlq).await?, 0, "DLQ");
    Ok(())
}
