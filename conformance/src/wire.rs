//! Protocol-neutral publishing and draining for cases that run in the 4-way matrix (publish over
//! AMQP 0.9.1 or 1.0 × consume over 0.9.1 or 1.0, [`crate::Variant::MATRIX`]).
//!
//! Topology is always declared over 0.9.1 (lapin); only the message path changes protocol. A
//! 0.9.1 publish waits for its confirm, a 1.0 publish for its outcome, so a drain that follows
//! sees every routed message. A 1.0 publish to the default exchange goes to `/queues/:key`,
//! anything else to `/exchanges/:exchange/:key`.

use std::collections::HashMap;
use std::time::Duration;

use fe2o3_amqp::Sender;
use fe2o3_amqp::types::messaging::{ApplicationProperties, MessageAnnotations, Outcome};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Value};
use fe2o3_amqp_types::messaging::Message;
use lapin::options::QueueDeclareOptions;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};

use crate::fe2o3_kit::{self as fk, Amqp10};
use crate::lapin_kit::{self as lk};
use crate::raw10::{self, message::hdr};
use crate::{CaseError, CaseResult, Ctx, Protocol};

/// How long a 1.0 drain of a queue that should be empty waits for a stray delivery.
const EMPTY_WAIT: Duration = Duration::from_millis(200);

/// A message for [`Publisher::publish_with`]: headers become 0.9.1 headers or 1.0
/// application-properties; CC keys the 0.9.1 `CC` header or the 1.0 `x-cc` annotation.
#[derive(Default)]
pub(crate) struct Outgoing<'a> {
    /// Body bytes (one data section over 1.0).
    pub(crate) body: &'a [u8],
    /// Application headers (strings, integers and booleans only: those mean the same in both).
    pub(crate) headers: Vec<(&'a str, AMQPValue)>,
}

/// Publishes over the protocol of the case's variant.
pub(crate) enum Publisher {
    /// A 0.9.1 channel in confirm mode.
    Amqp091(Channel),
    /// A 1.0 connection with one sender per address.
    Amqp10 { client: Amqp10, senders: HashMap<String, Sender> },
}

impl Publisher {
    /// Opens the publishing side of `ctx`'s variant. The 0.9.1 side publishes on a new channel of
    /// `conn`.
    pub(crate) async fn open(ctx: &Ctx, conn: &lapin::Connection) -> Result<Self, CaseError> {
        match ctx.variant().publish {
            Protocol::Amqp091 => {
                let ch = conn.create_channel().await?;
                lk::confirm(&ch).await?;
                Ok(Self::Amqp091(ch))
            }
            Protocol::Amqp10 => Ok(Self::Amqp10 { client: Amqp10::open(ctx).await?, senders: HashMap::new() }),
        }
    }

    /// Publishes `body` with no properties and waits until the broker has routed it.
    pub(crate) async fn publish(&mut self, exchange: &str, key: &str, body: &[u8]) -> CaseResult {
        self.publish_with(exchange, key, Outgoing { body, ..Outgoing::default() }).await
    }

    /// Publishes a message and waits until the broker has routed it (a 1.0 `released` outcome,
    /// RabbitMQ's answer for an unroutable message, counts as routed to nowhere).
    pub(crate) async fn publish_with(&mut self, exchange: &str, key: &str, out: Outgoing<'_>) -> CaseResult {
        match self {
            Self::Amqp091(ch) => {
                let mut headers = FieldTable::default();
                for (name, value) in out.headers {
                    headers.insert(name.into(), value);
                }
                let props = if headers.inner().is_empty() {
                    BasicProperties::default()
                } else {
                    BasicProperties::default().with_headers(headers)
                };
                lk::publish_props(ch, exchange, key, out.body, props).await
            }
            Self::Amqp10 { client, senders } => {
                let address =
                    if exchange.is_empty() { fk::queue_addr(key) } else { fk::exchange_addr(exchange, Some(key)) };
                if !senders.contains_key(&address) {
                    let sender = client.sender(Some(&address)).await?;
                    senders.insert(address.clone(), sender);
                }
                let sender = senders.get_mut(&address).ok_or_else(|| CaseError::new("sender vanished"))?;
                let message = amqp10_message(out)?;
                let outcome = tokio::time::timeout(fk::ARRIVE, sender.send(message))
                    .await
                    .map_err(|_| CaseError::new(format!("no outcome for a 1.0 publish to {address} within 5 s")))?
                    .map_err(fk::err("1.0 send"))?;
                match outcome {
                    Outcome::Accepted(_) | Outcome::Released(_) => Ok(()),
                    other => Err(CaseError::new(format!("1.0 publish to {address}: outcome {other:?}"))),
                }
            }
        }
    }

    /// Closes the 1.0 side (the 0.9.1 channel closes with its connection).
    pub(crate) async fn close(self) {
        if let Self::Amqp10 { client, senders } = self {
            for (_, sender) in senders {
                let _ = tokio::time::timeout(Duration::from_secs(2), sender.close()).await;
            }
            client.close().await;
        }
    }
}

fn amqp10_message(out: Outgoing<'_>) -> Result<Message<fe2o3_amqp::types::messaging::Data>, CaseError> {
    let mut properties = ApplicationProperties::builder();
    let has_headers = !out.headers.is_empty();
    let mut annotations = MessageAnnotations::builder();
    let mut has_annotations = false;
    for (name, value) in out.headers {
        if name == "CC" {
            let AMQPValue::FieldArray(keys) = value else {
                return Err(CaseError::new("CC must be an array"));
            };
            let keys = keys.as_slice().iter().map(scalar).map(|v| v.map(Value::from)).collect::<Result<Vec<_>, _>>()?;
            annotations = annotations.insert("x-cc", Value::List(keys));
            has_annotations = true;
        } else {
            properties = properties.insert(name, scalar(&value)?);
        }
    }
    let builder = Message::builder();
    let builder = if has_headers { builder.application_properties(properties.build()) } else { builder };
    let builder = if has_annotations { builder.message_annotations(annotations.build()) } else { builder };
    Ok(builder.data(Binary::from(out.body.to_vec())).build())
}

/// The 1.0 value with the same meaning as a simple 0.9.1 header value.
fn scalar(value: &AMQPValue) -> Result<SimpleValue, CaseError> {
    Ok(match value {
        AMQPValue::LongString(s) => SimpleValue::String(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => SimpleValue::String(s.as_str().to_owned()),
        AMQPValue::Boolean(b) => SimpleValue::Bool(*b),
        AMQPValue::ShortShortInt(i) => SimpleValue::Byte(*i),
        AMQPValue::ShortInt(i) => SimpleValue::Short(*i),
        AMQPValue::LongInt(i) => SimpleValue::Int(*i),
        AMQPValue::LongLongInt(i) => SimpleValue::Long(*i),
        other => return Err(CaseError::new(format!("no 1.0 equivalent used for header value {other:?}"))),
    })
}

/// Takes every message from `queue` over the consuming protocol of `ctx`'s variant and returns
/// the bodies as text, in order (settling each: 0.9.1 auto-ack `basic.get`, 1.0 `accepted`).
pub(crate) async fn drain(ctx: &Ctx, ch: &Channel, queue: &str) -> Result<Vec<String>, CaseError> {
    let bodies = drain_bytes(ctx, ch, queue).await?;
    Ok(bodies.iter().map(|b| String::from_utf8_lossy(b).into_owned()).collect())
}

/// [`drain`], returning the bodies as bytes.
pub(crate) async fn drain_bytes(ctx: &Ctx, ch: &Channel, queue: &str) -> Result<Vec<Vec<u8>>, CaseError> {
    match ctx.variant().consume {
        Protocol::Amqp091 => {
            let mut out = Vec::new();
            while let Some(m) = lk::get(ch, queue).await? {
                out.push(m.delivery.data);
                crate::check!(out.len() < 10_000, "queue {queue} never drained");
            }
            Ok(out)
        }
        Protocol::Amqp10 => drain_amqp10(ctx, ch, queue).await,
    }
}

/// Receives exactly as many messages as the queue holds (its count read with a passive
/// declare), then checks that nothing more arrives.
async fn drain_amqp10(ctx: &Ctx, ch: &Channel, queue: &str) -> Result<Vec<Vec<u8>>, CaseError> {
    let passive = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
    let count = ch.queue_declare(queue.into(), passive, FieldTable::default()).await?.message_count();
    let mut conn = raw10::Conn10::open(ctx.broker()).await?;
    conn.begin(0).await?;
    conn.attach_receiver(0, 0, &fk::queue_addr(queue)).await?;
    conn.credit(0, 0, count + 1, false).await?;
    let mut bodies = Vec::new();
    for _ in 0..count {
        let d = conn.recv(0, fk::ARRIVE).await?;
        let message = raw10::Received::parse(&d.payload)?;
        bodies.push(message.data().ok_or_else(|| CaseError::new("a 1.0 body that is not data sections"))?);
        let accepted = fe2o3_amqp_types::messaging::DeliveryState::Accepted(fe2o3_amqp_types::messaging::Accepted {});
        conn.settle(0, d.id(), d.id(), accepted).await?;
    }
    let extra = conn.no_transfer(0, EMPTY_WAIT).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), conn.close()).await;
    extra.map(|()| bodies)
}

/// How a consumer settles a delivery, in protocol-neutral terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Settle {
    /// 0.9.1 `basic.ack`, 1.0 `accepted`.
    Ack,
    /// 0.9.1 `basic.reject requeue=true`, 1.0 `released`.
    Requeue,
    /// 0.9.1 `basic.reject requeue=false`, 1.0 `rejected`.
    Reject,
}

/// A delivery as a neutral consumer sees it.
pub(crate) struct Received {
    /// Body bytes.
    pub(crate) body: Vec<u8>,
    /// 0.9.1 `redelivered`; 1.0 `first-acquirer = false`.
    pub(crate) redelivered: bool,
    /// The death history: 0.9.1 `x-death`, 1.0 `x-opt-deaths`, most recent first.
    pub(crate) deaths: Vec<Death>,
    tag: Tag,
}

/// One death-history entry, as either protocol shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Death {
    /// Queue.
    pub(crate) queue: String,
    /// Reason.
    pub(crate) reason: String,
    /// Count.
    pub(crate) count: u64,
    /// Exchange before the first such death.
    pub(crate) exchange: String,
    /// Routing keys before the first such death.
    pub(crate) routing_keys: Vec<String>,
}

fn deaths_091(headers: Option<&FieldTable>) -> Vec<Death> {
    let Some(AMQPValue::FieldArray(entries)) = headers.and_then(|h| h.inner().get("x-death")) else {
        return Vec::new();
    };
    let text = |v: Option<&AMQPValue>| match v {
        Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        _ => String::new(),
    };
    entries
        .as_slice()
        .iter()
        .filter_map(|entry| match entry {
            AMQPValue::FieldTable(t) => {
                let t = t.inner();
                let keys = match t.get("routing-keys") {
                    Some(AMQPValue::FieldArray(keys)) => keys.as_slice().iter().map(|k| text(Some(k))).collect(),
                    _ => Vec::new(),
                };
                let count = match t.get("count") {
                    Some(AMQPValue::LongLongInt(n)) => u64::try_from(*n).unwrap_or_default(),
                    _ => 0,
                };
                Some(Death {
                    queue: text(t.get("queue")),
                    reason: text(t.get("reason")),
                    count,
                    exchange: text(t.get("exchange")),
                    routing_keys: keys,
                })
            }
            _ => None,
        })
        .collect()
}

fn deaths_10(message: &raw10::Received) -> Vec<Death> {
    let Some(Value::Array(entries)) = message.ann("x-opt-deaths") else {
        return Vec::new();
    };
    let text = |v: Option<&Value>| match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Symbol(s)) => s.0.clone(),
        _ => String::new(),
    };
    entries
        .iter()
        .filter_map(|entry| match entry {
            Value::Map(m) => {
                let field = |k: &str| m.get(&Value::Symbol(k.into()));
                let keys = match field("routing-keys") {
                    Some(Value::Array(keys)) => keys.iter().map(|k| text(Some(k))).collect(),
                    _ => Vec::new(),
                };
                let count = match field("count") {
                    Some(Value::Ulong(n)) => *n,
                    _ => 0,
                };
                Some(Death {
                    queue: text(field("queue")),
                    reason: text(field("reason")),
                    count,
                    exchange: text(field("exchange")),
                    routing_keys: keys,
                })
            }
            _ => None,
        })
        .collect()
}

enum Tag {
    Amqp091(u64),
    Amqp10(u32),
}

/// A manual-settlement consumer over the consuming protocol of the case's variant.
pub(crate) enum Consumer {
    /// A lapin consumer with its channel.
    Amqp091(Channel, Box<lapin::Consumer>),
    /// A 1.0 receiving link (handle 0 on channel 0) on the suite's raw peer (fe2o3 cannot
    /// decode RabbitMQ's `x-opt-deaths`), with the credit it keeps topped up.
    Amqp10(Box<raw10::Conn10>, u32),
}

impl Consumer {
    /// Starts consuming `queue` with room for `window` unsettled deliveries (0.9.1 prefetch,
    /// 1.0 link credit).
    pub(crate) async fn open(ctx: &Ctx, conn: &lapin::Connection, queue: &str, window: u16) -> Result<Self, CaseError> {
        match ctx.variant().consume {
            Protocol::Amqp091 => {
                let ch = conn.create_channel().await?;
                ch.basic_qos(window, lapin::options::BasicQosOptions::default()).await?;
                let consumer = lk::consume(&ch, queue).await?;
                Ok(Self::Amqp091(ch, Box::new(consumer)))
            }
            Protocol::Amqp10 => {
                let mut conn = raw10::Conn10::open(ctx.broker()).await?;
                conn.begin(0).await?;
                conn.attach_receiver(0, 0, &fk::queue_addr(queue)).await?;
                conn.credit(0, 0, u32::from(window), false).await?;
                Ok(Self::Amqp10(Box::new(conn), u32::from(window)))
            }
        }
    }

    /// The next delivery (fails after 5 s).
    pub(crate) async fn next(&mut self) -> Result<Received, CaseError> {
        match self {
            Self::Amqp091(_, consumer) => {
                let d = lk::next(consumer, lk::ARRIVE).await?;
                let headers = d.properties.headers().as_ref();
                let deaths = deaths_091(headers);
                let tag = Tag::Amqp091(d.delivery_tag);
                Ok(Received { body: d.data, redelivered: d.redelivered, deaths, tag })
            }
            Self::Amqp10(conn, _) => {
                let d = conn.recv(0, fk::ARRIVE).await?;
                let message = raw10::Received::parse(&d.payload)?;
                let body = message.data().ok_or_else(|| CaseError::new("a 1.0 body that is not data sections"))?;
                let redelivered = message.header(hdr::FIRST_ACQUIRER) == Some(Value::Bool(false));
                let deaths = deaths_10(&message);
                Ok(Received { body, redelivered, deaths, tag: Tag::Amqp10(d.id()) })
            }
        }
    }

    /// Settles one delivery.
    pub(crate) async fn settle(&mut self, delivery: &Received, how: Settle) -> CaseResult {
        match (self, &delivery.tag) {
            (Self::Amqp091(ch, _), Tag::Amqp091(tag)) => {
                use lapin::options::{BasicAckOptions, BasicRejectOptions};
                match how {
                    Settle::Ack => ch.basic_ack(*tag, BasicAckOptions::default()).await?,
                    Settle::Requeue => ch.basic_reject(*tag, BasicRejectOptions { requeue: true }).await?,
                    Settle::Reject => ch.basic_reject(*tag, BasicRejectOptions { requeue: false }).await?,
                }
                Ok(())
            }
            (Self::Amqp10(conn, window), Tag::Amqp10(id)) => {
                use fe2o3_amqp_types::messaging::{Accepted, DeliveryState, Rejected, Released};
                let state = match how {
                    Settle::Ack => DeliveryState::Accepted(Accepted {}),
                    Settle::Requeue => DeliveryState::Released(Released {}),
                    Settle::Reject => DeliveryState::Rejected(Rejected { error: None }),
                };
                conn.settle(0, *id, *id, state).await?;
                conn.credit(0, 0, *window, false).await
            }
            _ => Err(CaseError::new("delivery settled on another consumer")),
        }
    }

    /// Closes the consumer (unsettled deliveries go back to the queue).
    pub(crate) async fn close(self) {
        match self {
            Self::Amqp091(ch, _) => {
                let _ = ch.close(200, "done".into()).await;
            }
            Self::Amqp10(mut conn, _) => {
                let _ = tokio::time::timeout(Duration::from_secs(2), conn.close()).await;
            }
        }
    }
}
