//! Small helpers around lapin so cases read as a list of steps and checks.

use crate::{
    check,
    error::{CaseError, CaseResult},
};
use futures_util::StreamExt;
use lapin::{
    BasicProperties, Channel, Consumer, ErrorKind,
    message::{BasicGetMessage, Delivery},
    options::{
        BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueBindOptions,
        QueueDeclareOptions,
    },
    types::FieldTable,
};
use std::{fmt::Debug, future::Future, time::Duration};

/// Reply code and text of a broker close carried by a lapin error.
pub(crate) fn amqp_error(e: &lapin::Error) -> Option<(u16, String)> {
    match e.kind() {
        ErrorKind::ProtocolError(err) => Some((err.get_id(), err.get_message().to_string())),
        _ => None,
    }
}

/// Fails unless `res` is the broker error `code` with reply text `text`.
pub(crate) fn expect_error<T: Debug>(res: lapin::Result<T>, code: u16, text: &str) -> CaseResult {
    match res {
        Ok(v) => {
            Err(CaseError::new(format!("expected broker error {code} {text:?}, but the call succeeded with {v:?}")))
        }
        Err(e) => match amqp_error(&e) {
            Some((c, t)) if c == code && t == text => Ok(()),
            Some(got) => Err(CaseError::new(format!("expected broker error {:?} got {got:?}", (code, text)))),
            None => Err(CaseError::new(format!("expected broker error {code} {text:?}, got client error {e}"))),
        },
    }
}

/// Declares a plain (non-durable, non-exclusive, non-auto-delete) queue.
pub(crate) async fn declare_queue(ch: &Channel, name: &str) -> CaseResult {
    ch.queue_declare(name.into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .map_err(|e| CaseError::from(e).context(&format!("declare queue {name}")))?;
    Ok(())
}

/// Declares a plain queue and binds it to `exchange` with `key`.
pub(crate) async fn queue_bound(ch: &Channel, name: &str, exchange: &str, key: &str) -> CaseResult {
    declare_queue(ch, name).await?;
    bind(ch, name, exchange, key, FieldTable::default()).await
}

/// Binds `queue` to `exchange`.
pub(crate) async fn bind(ch: &Channel, queue: &str, exchange: &str, key: &str, args: FieldTable) -> CaseResult {
    ch.queue_bind(queue.into(), exchange.into(), key.into(), QueueBindOptions::default(), args)
        .await
        .map_err(|e| CaseError::from(e).context(&format!("bind {queue} to {exchange} with {key:?}")))
}

/// Puts the channel in confirm mode so publishes can be awaited until routed and enqueued.
pub(crate) async fn confirm(ch: &Channel) -> CaseResult {
    ch.confirm_select(ConfirmSelectOptions::default()).await?;
    Ok(())
}

/// Publishes and waits for the confirm when the channel is in confirm mode.
pub(crate) async fn publish(ch: &Channel, exchange: &str, key: &str, body: &[u8]) -> CaseResult {
    publish_props(ch, exchange, key, body, BasicProperties::default()).await
}

/// Publishes with properties and waits for the confirm when the channel is in confirm mode.
pub(crate) async fn publish_props(
    ch: &Channel,
    exchange: &str,
    key: &str,
    body: &[u8],
    props: BasicProperties,
) -> CaseResult {
    let confirm = ch.basic_publish(exchange.into(), key.into(), BasicPublishOptions::default(), body, props).await?;
    let c = confirm.await?;
    check!(!c.is_nack(), "publish to {exchange:?}/{key:?} was nacked");
    Ok(())
}

/// `basic.get` with auto-ack.
pub(crate) async fn get(ch: &Channel, queue: &str) -> Result<Option<BasicGetMessage>, CaseError> {
    Ok(ch.basic_get(queue.into(), BasicGetOptions { no_ack: true }).await?)
}

/// Drains a queue with auto-ack `basic.get` and returns the bodies as strings, in order.
pub(crate) async fn drain(ch: &Channel, queue: &str) -> Result<Vec<String>, CaseError> {
    let mut out = Vec::new();
    while let Some(m) = get(ch, queue).await? {
        out.push(String::from_utf8_lossy(&m.delivery.data).into_owned());
        check!(out.len() < 10_000, "queue {queue} never drained");
    }
    Ok(out)
}

/// Starts a manual-ack consumer with a broker-generated tag.
pub(crate) async fn consume(ch: &Channel, queue: &str) -> Result<Consumer, CaseError> {
    Ok(ch.basic_consume(queue.into(), "".into(), BasicConsumeOptions::default(), FieldTable::default()).await?)
}

/// Waits up to `timeout` for the next delivery.
pub(crate) async fn next(consumer: &mut Consumer, timeout: Duration) -> Result<Delivery, CaseError> {
    match tokio::time::timeout(timeout, consumer.next()).await {
        Err(_) => Err(CaseError::new(format!("no delivery within {} ms", timeout.as_millis()))),
        Ok(None) => Err(CaseError::new("consumer stream ended")),
        Ok(Some(Err(e))) => Err(e.into()),
        Ok(Some(Ok(d))) => Ok(d),
    }
}

/// Default wait for a delivery that must arrive.
pub(crate) const ARRIVE: Duration = Duration::from_secs(5);
/// Wait used by negative assertions ("nothing arrives").
pub(crate) const QUIET: Duration = Duration::from_millis(300);

/// Fails if a delivery arrives within `wait`.
pub(crate) async fn nothing(consumer: &mut Consumer, wait: Duration) -> CaseResult {
    match tokio::time::timeout(wait, consumer.next()).await {
        Err(_) => Ok(()),
        Ok(None) => Ok(()),
        Ok(Some(Err(e))) => Err(e.into()),
        Ok(Some(Ok(d))) => Err(CaseError::new(format!(
            "expected no delivery, got {:?} (tag {})",
            String::from_utf8_lossy(&d.data),
            d.delivery_tag
        ))),
    }
}

/// Collects `n` deliveries (bodies as strings), failing if they do not arrive in time.
pub(crate) async fn take(consumer: &mut Consumer, n: usize) -> Result<Vec<Delivery>, CaseError> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        out.push(next(consumer, ARRIVE).await.map_err(|e| e.context(&format!("delivery {} of {n}", i + 1)))?);
    }
    Ok(out)
}

/// Body of a delivery as a string.
pub(crate) fn text(d: &Delivery) -> String {
    String::from_utf8_lossy(&d.data).into_owned()
}

/// Polls `probe` every 50 ms until it returns `Ok(true)` or `timeout` passes.
pub(crate) async fn eventually<F, Fut>(timeout: Duration, what: &str, mut probe: F) -> CaseResult
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, CaseError>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if probe().await? {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CaseError::new(format!("{what} did not happen within {} ms", timeout.as_millis())));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether a queue exists, checked with a passive declare on a throw-away channel.
pub(crate) async fn queue_exists(conn: &lapin::Connection, name: &str) -> Result<bool, CaseError> {
    let ch = conn.create_channel().await?;
    let res = ch
        .queue_declare(name.into(), QueueDeclareOptions { passive: true, ..Default::default() }, FieldTable::default())
        .await;
    match res {
        Ok(_) => {
            let _ = ch.close(200, "OK".into()).await;
            Ok(true)
        }
        Err(e) => match amqp_error(&e) {
            Some((404, _)) => Ok(false),
            _ => Err(e.into()),
        },
    }
}

/// Message count of a queue via passive declare on a throw-away channel.
pub(crate) async fn message_count(conn: &lapin::Connection, name: &str) -> Result<u32, CaseError> {
    let ch = conn.create_channel().await?;
    let q = ch
        .queue_declare(name.into(), QueueDeclareOptions { passive: true, ..Default::default() }, FieldTable::default())
        .await?;
    let _ = ch.close(200, "OK".into()).await;
    Ok(q.message_count())
}

/// A healthy connection opened before a misbehaving one, to prove the broker as a whole
/// survives a connection being killed.
pub(crate) struct Healthy {
    _conn: lapin::Connection,
    ch: Channel,
}

impl Healthy {
    /// Opens the connection and a confirm-mode channel.
    pub(crate) async fn open(ctx: &crate::Ctx) -> Result<Self, CaseError> {
        let (conn, ch) = ctx.lapin_channel().await?;
        confirm(&ch).await?;
        Ok(Self { _conn: conn, ch })
    }

    /// Round-trips a message through a fresh server-named exclusive queue.
    pub(crate) async fn check(&self) -> CaseResult {
        let q = self
            .ch
            .queue_declare(
                "".into(),
                QueueDeclareOptions { exclusive: true, ..Default::default() },
                FieldTable::default(),
            )
            .await
            .map_err(|e| CaseError::from(e).context("healthy connection after the bad one"))?;
        let name = q.name().as_str().to_owned();
        publish(&self.ch, "", &name, b"still alive").await?;
        let got = drain(&self.ch, &name).await?;
        if got != ["still alive"] {
            return Err(CaseError::new(format!("healthy connection: expected [\"still alive\"] got {got:?}")));
        }
        Ok(())
    }
}
