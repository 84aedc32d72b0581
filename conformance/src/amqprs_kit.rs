//! Helpers around amqprs, the client with a codec independent of Charon's.
//!
//! amqprs reports broker closes, returns and confirms through callbacks; [`Events`] turns them
//! into a channel of [`ChanEvent`]s a case can wait on.

use crate::{
    error::{CaseError, CaseResult},
    raw::CloseInfo,
};
use amqprs::{
    Ack, BasicProperties, Cancel, Close, CloseChannel, Nack, Return,
    callbacks::{ChannelCallback, ConnectionCallback},
    channel::{BasicPublishArguments, Channel, ConsumerMessage},
    connection::Connection,
};
use async_trait::async_trait;
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// Something the broker told an amqprs channel or connection asynchronously.
#[derive(Debug)]
pub(crate) enum ChanEvent {
    /// `channel.close` or `connection.close` from the broker.
    Close(CloseInfo),
    /// Server-sent `basic.cancel`.
    Cancel(String),
    /// Publisher confirm ack: `(delivery tag, multiple)`.
    Ack(u64, bool),
    /// Publisher confirm nack: `(delivery tag, multiple)`.
    Nack(u64, bool),
    /// `basic.return` with the returned message.
    Return {
        /// Reply code (312 for NO_ROUTE).
        code: u16,
        /// Reply text.
        text: String,
        /// Exchange the message was published to.
        exchange: String,
        /// Routing key it was published with.
        routing_key: String,
        /// Properties as returned.
        props: Box<BasicProperties>,
        /// Body as returned.
        body: Vec<u8>,
    },
}

/// Callback sink forwarding every event into an unbounded channel.
struct Sink(UnboundedSender<ChanEvent>);

#[async_trait]
impl ChannelCallback for Sink {
    async fn close(&mut self, _: &Channel, c: CloseChannel) -> Result<(), amqprs::error::Error> {
        let _ = self.0.send(ChanEvent::Close(CloseInfo {
            code: c.reply_code(),
            text: c.reply_text().clone(),
            class_id: c.class_id(),
            method_id: c.method_id(),
        }));
        Ok(())
    }
    async fn cancel(&mut self, _: &Channel, c: Cancel) -> Result<(), amqprs::error::Error> {
        let _ = self.0.send(ChanEvent::Cancel(c.consumer_tag().clone()));
        Ok(())
    }
    async fn flow(&mut self, _: &Channel, active: bool) -> Result<bool, amqprs::error::Error> {
        Ok(active)
    }
    async fn publish_ack(&mut self, _: &Channel, a: Ack) {
        let _ = self.0.send(ChanEvent::Ack(a.delivery_tag(), a.mutiple()));
    }
    async fn publish_nack(&mut self, _: &Channel, n: Nack) {
        let _ = self.0.send(ChanEvent::Nack(n.delivery_tag(), n.multiple()));
    }
    async fn publish_return(&mut self, _: &Channel, r: Return, props: BasicProperties, body: Vec<u8>) {
        let _ = self.0.send(ChanEvent::Return {
            code: r.reply_code(),
            text: r.reply_text().clone(),
            exchange: r.exchange().clone(),
            routing_key: r.routing_key().clone(),
            props: Box::new(props),
            body,
        });
    }
}

#[async_trait]
impl ConnectionCallback for Sink {
    async fn close(&mut self, _: &Connection, c: Close) -> Result<(), amqprs::error::Error> {
        let _ = self.0.send(ChanEvent::Close(CloseInfo {
            code: c.reply_code(),
            text: c.reply_text().clone(),
            class_id: c.class_id(),
            method_id: c.method_id(),
        }));
        Ok(())
    }
    async fn blocked(&mut self, _: &Connection, _: String) {}
    async fn unblocked(&mut self, _: &Connection) {}
    async fn secret_updated(&mut self, _: &Connection) {}
}

/// Receiving end of the events of one channel (or connection).
pub(crate) struct Events(UnboundedReceiver<ChanEvent>);

impl Events {
    /// Next event within `timeout`.
    pub(crate) async fn next(&mut self, timeout: Duration) -> Result<ChanEvent, CaseError> {
        match tokio::time::timeout(timeout, self.0.recv()).await {
            Err(_) => Err(CaseError::new(format!("no event from the broker within {} ms", timeout.as_millis()))),
            Ok(None) => Err(CaseError::new("event stream ended")),
            Ok(Some(e)) => Ok(e),
        }
    }

    /// Waits for a close and fails on anything else.
    pub(crate) async fn expect_close(&mut self) -> Result<CloseInfo, CaseError> {
        match self.next(Duration::from_secs(5)).await? {
            ChanEvent::Close(c) => Ok(c),
            other => Err(CaseError::new(format!("expected a close, got {other:?}"))),
        }
    }

    /// Fails if any event arrives within `wait`.
    pub(crate) async fn quiet(&mut self, wait: Duration) -> CaseResult {
        match tokio::time::timeout(wait, self.0.recv()).await {
            Err(_) | Ok(None) => Ok(()),
            Ok(Some(e)) => Err(CaseError::new(format!("expected no event, got {e:?}"))),
        }
    }
}

/// Opens a channel whose callbacks feed an [`Events`] stream.
pub(crate) async fn channel(conn: &Connection) -> Result<(Channel, Events), CaseError> {
    let ch = conn.open_channel(None).await?;
    let (tx, rx) = unbounded_channel();
    ch.register_callback(Sink(tx)).await?;
    Ok((ch, Events(rx)))
}

/// Registers a connection callback feeding an [`Events`] stream.
pub(crate) async fn connection_events(conn: &Connection) -> Result<Events, CaseError> {
    let (tx, rx) = unbounded_channel();
    conn.register_callback(Sink(tx)).await?;
    Ok(Events(rx))
}

/// Publishes a message (fire and forget).
pub(crate) async fn publish(
    ch: &Channel,
    exchange: &str,
    key: &str,
    props: BasicProperties,
    body: Vec<u8>,
) -> CaseResult {
    ch.basic_publish(props, body, BasicPublishArguments::new(exchange, key)).await?;
    Ok(())
}

/// Waits for the next consumer message within `timeout`.
pub(crate) async fn recv(
    rx: &mut UnboundedReceiver<ConsumerMessage>,
    timeout: Duration,
) -> Result<ConsumerMessage, CaseError> {
    match tokio::time::timeout(timeout, rx.recv()).await {
        Err(_) => Err(CaseError::new(format!("no delivery within {} ms", timeout.as_millis()))),
        Ok(None) => Err(CaseError::new("consumer channel ended")),
        Ok(Some(m)) => Ok(m),
    }
}

/// Runs a call the broker must refuse by closing the channel (or connection) and checks the
/// close's code, text and class/method ids, as delivered to the callback behind `ev`.
pub(crate) async fn expect_call_close<T: std::fmt::Debug>(
    call: impl std::future::Future<Output = Result<T, amqprs::error::Error>>,
    ev: &mut Events,
    code: u16,
    text: &str,
    class_id: u16,
    method_id: u16,
) -> CaseResult {
    if let Ok(Ok(v)) = tokio::time::timeout(Duration::from_secs(5), call).await {
        return Err(CaseError::new(format!("expected close {code} {text:?}, but the call succeeded with {v:?}")));
    }
    ev.expect_close().await?.expect(code, text, class_id, method_id)
}

/// Builds an amqprs field table from `(name, value)` pairs.
pub(crate) fn table(entries: Vec<(&str, amqprs::FieldValue)>) -> amqprs::FieldTable {
    let mut t = amqprs::FieldTable::new();
    for (k, v) in entries {
        if let Ok(k) = amqprs::ShortStr::try_from(k) {
            t.insert(k, v);
        }
    }
    t
}

/// A longstr field value.
pub(crate) fn s(v: &str) -> amqprs::FieldValue {
    amqprs::FieldValue::from(v)
}

/// Waits until the broker has confirmed `n` publishes on this channel (tags 1..=n).
pub(crate) async fn wait_acks(ev: &mut Events, n: u64) -> CaseResult {
    let mut acked = 0u64;
    while acked < n {
        match ev.next(Duration::from_secs(5)).await? {
            ChanEvent::Ack(tag, true) => acked = acked.max(tag),
            ChanEvent::Ack(tag, false) => acked = acked.max(tag),
            ChanEvent::Nack(tag, multiple) => {
                return Err(CaseError::new(format!("publish {tag} was nacked (multiple={multiple})")));
            }
            other => {
                return Err(CaseError::new(format!("waiting for confirms (got {acked} of {n}): unexpected {other:?}")));
            }
        }
    }
    Ok(())
}

/// Drains a queue with auto-ack `basic.get`, returning the bodies as strings.
pub(crate) async fn drain(ch: &Channel, queue: &str) -> Result<Vec<String>, CaseError> {
    let mut out = Vec::new();
    loop {
        let mut args = amqprs::channel::BasicGetArguments::new(queue);
        args.no_ack = true;
        match ch.basic_get(args).await? {
            Some((_, _, body)) => out.push(String::from_utf8_lossy(&body).into_owned()),
            None => return Ok(out),
        }
        if out.len() > 10_000 {
            return Err(CaseError::new(format!("queue {queue} never drained")));
        }
    }
}
