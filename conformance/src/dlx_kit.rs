//! Setup shared by the dead-lettering cases (`dlx.*`), modelled on RabbitMQ's
//! `dead_lettering_SUITE`: a source queue of the variant's type whose dead letters go to a
//! direct exchange, and a dead-letter queue bound to it.

use lapin::options::{ExchangeDeclareOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{Channel, Connection, ExchangeKind};

use crate::lapin_kit as lk;
use crate::{CaseError, CaseResult, Ctx, QueueKind};

/// The variant's source queue type (classic when the case does not vary it).
pub(crate) fn queue_kind(ctx: &Ctx) -> QueueKind {
    ctx.variant().queue.unwrap_or(QueueKind::Classic)
}

/// A long string argument.
pub(crate) fn text(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s))
}

/// A signed 64-bit argument (`l`).
pub(crate) fn long(n: i64) -> AMQPValue {
    AMQPValue::LongLongInt(n)
}

/// Arguments from pairs.
pub(crate) fn args(entries: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in entries {
        t.insert((*k).into(), v.clone());
    }
    t
}

/// Declares `name` as a queue of the variant's type (quorum queues are durable) with `extra`
/// arguments.
pub(crate) async fn declare_typed(ctx: &Ctx, ch: &Channel, name: &str, mut extra: FieldTable) -> CaseResult {
    let kind = queue_kind(ctx);
    extra.insert("x-queue-type".into(), text(kind.label()));
    let options = QueueDeclareOptions { durable: kind == QueueKind::Quorum, ..QueueDeclareOptions::default() };
    ch.queue_declare(name.into(), options, extra)
        .await
        .map_err(|e| CaseError::from(e).context(&format!("declare {} queue {name}", kind.label())))?;
    Ok(())
}

/// A source queue with its dead-letter exchange and queue.
pub(crate) struct Setup {
    /// Keeps the connection open.
    pub(crate) conn: Connection,
    /// A channel for topology and checks.
    pub(crate) ch: Channel,
    /// The queue messages die in.
    pub(crate) source: String,
    /// The dead-letter exchange (direct).
    pub(crate) dlx: String,
    /// The dead-letter queue, bound to the DLX with the source queue's name.
    pub(crate) dlq: String,
}

/// Declares the DLX (direct), the DLQ (classic) bound with the source's name as key, and the
/// source queue of the variant's type with `x-dead-letter-exchange` plus `extra` arguments.
pub(crate) async fn setup(ctx: &Ctx, extra: &[(&str, AMQPValue)]) -> Result<Setup, CaseError> {
    let (conn, ch) = ctx.lapin_channel().await?;
    let dlx = ctx.exchange("dlx");
    ch.exchange_declare(
        dlx.as_str().into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await?;
    let source = ctx.queue("src");
    let dlq = ctx.queue("dlq");
    lk::queue_bound(&ch, &dlq, &dlx, &source).await?;
    let mut arguments = args(extra);
    arguments.insert("x-dead-letter-exchange".into(), text(&dlx));
    declare_typed(ctx, &ch, &source, arguments).await?;
    Ok(Setup { conn, ch, source, dlx, dlq })
}

/// Ready messages in `queue` (passive declare).
pub(crate) async fn ready(ch: &Channel, queue: &str) -> Result<u32, CaseError> {
    let passive = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
    Ok(ch.queue_declare(queue.into(), passive, FieldTable::default()).await?.message_count())
}

/// Waits up to 5 s for `queue` to hold `count` ready messages.
pub(crate) async fn eventually_ready(ch: &Channel, queue: &str, count: u32) -> CaseResult {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let got = ready(ch, queue).await?;
        if got == count {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CaseError::new(format!("queue {queue}: expected {count} ready messages, got {got}")));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
