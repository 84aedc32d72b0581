//! The kit the `dlx.routing.*` and `dlx.history.*` cases share: a publisher and a consumer for
//! either protocol that keep every field's exact type (raw 0.9.1 frames, the raw 1.0 peer), and a
//! protocol-neutral view of a dead letter.

use std::time::Duration;

use lapin::options::ExchangeDeclareOptions;
use lapin::types::AMQPValue;
use lapin::{Channel, ExchangeKind};
use serde_amqp::Value;
use serde_amqp::primitives::Symbol;

use super::super::dlx_history::raw091::{F, Got091, Props, Raw091};
use crate::dlx_kit as dk;
use crate::fe2o3_kit as fk;
use crate::lapin_kit as lk;
use crate::raw10::{self, Conn10, Msg, message::hdr, message::prop};
use crate::wire::Settle;
use crate::{CaseError, CaseResult, Ctx, Protocol, QueueKind, Variant, check, check_eq};

/// 0.9.1 publishers (CC and BCC headers exist only there), either consumer, both queue types.
pub(in crate::cases) const PUBLISH_091: [Variant; 4] = [
    Variant::AMQP091.on(QueueKind::Classic),
    Variant::TO10.on(QueueKind::Classic),
    Variant::AMQP091.on(QueueKind::Quorum),
    Variant::TO10.on(QueueKind::Quorum),
];

/// 1.0 publishers, either consumer, both queue types.
pub(in crate::cases) const PUBLISH_10: [Variant; 4] = [
    Variant::TO091.on(QueueKind::Classic),
    Variant::AMQP10.on(QueueKind::Classic),
    Variant::TO091.on(QueueKind::Quorum),
    Variant::AMQP10.on(QueueKind::Quorum),
];

/// Wait used by negative assertions.
pub(in crate::cases) const QUIET: Duration = Duration::from_millis(400);

/// Checks the dead letter has no per-message TTL, except where RabbitMQ 4.0.5 shows one: it
/// clears the TTL annotation but converts a 0.9.1-published message for a 1.0 consumer from its
/// unchanged properties, so the original `expiration` comes back as `header.ttl` (the message
/// does not expire by it).
pub(in crate::cases) fn check_ttl_cleared(ctx: &Ctx, got: &Got, original: u32) -> CaseResult {
    match got {
        Got::A10 { msg, .. } if ctx.variant().publish == Protocol::Amqp091 => {
            check_eq!(msg.header(hdr::TTL), Some(Value::Uint(original)), "header.ttl of a 0.9.1-published dead letter");
        }
        _ => check!(!got.has_ttl(), "the dead letter still has a TTL / expiration"),
    }
    Ok(())
}

/// Declares `name` as a queue of the variant's type with `args`.
pub(in crate::cases) async fn source(ctx: &Ctx, ch: &Channel, name: &str, args: &[(&str, AMQPValue)]) -> CaseResult {
    dk::declare_typed(ctx, ch, name, dk::args(args)).await
}

/// Declares an exchange.
pub(in crate::cases) async fn exchange(
    ch: &Channel,
    name: &str,
    kind: ExchangeKind,
    internal: bool,
    args: &[(&str, AMQPValue)],
) -> CaseResult {
    let options = ExchangeDeclareOptions { internal, ..ExchangeDeclareOptions::default() };
    ch.exchange_declare(name.into(), kind, options, dk::args(args))
        .await
        .map_err(|e| CaseError::from(e).context(&format!("declare exchange {name}")))
}

/// A message to publish over either protocol.
#[derive(Clone, Debug, Default)]
pub(in crate::cases) struct Out {
    body: String,
    ttl: Option<u32>,
    headers: Vec<(String, F)>,
    annotations: Vec<(String, Value)>,
    rich: bool,
}

impl Out {
    /// A message with a text body.
    pub(in crate::cases) fn text(body: &str) -> Self {
        Self { body: body.to_owned(), ..Self::default() }
    }
    /// A per-message TTL (0.9.1 `expiration`, 1.0 `header.ttl`).
    pub(in crate::cases) fn ttl(mut self, ms: u32) -> Self {
        self.ttl = Some(ms);
        self
    }
    /// A 0.9.1 header in this order; over 1.0 an application property (simple values only).
    pub(in crate::cases) fn header(mut self, name: &str, value: F) -> Self {
        self.headers.push((name.to_owned(), value));
        self
    }
    /// A 0.9.1 `CC` header with one key.
    pub(in crate::cases) fn cc(self, key: &str) -> Self {
        self.header("CC", F::A(vec![F::S(key.to_owned())]))
    }
    /// A 0.9.1 `BCC` header with one key.
    pub(in crate::cases) fn bcc(self, key: &str) -> Self {
        self.header("BCC", F::A(vec![F::S(key.to_owned())]))
    }
    /// A 1.0 message annotation (0.9.1 publishers ignore it).
    pub(in crate::cases) fn annotation(mut self, name: &str, value: Value) -> Self {
        self.annotations.push((name.to_owned(), value));
        self
    }
    /// Sets every property both protocols can carry (content type "text/plain", encoding "enc",
    /// durable, priority 3, correlation id "corr", reply-to "rt", message id "mid", timestamp
    /// 1700000000 s, app id / group id "app", 0.9.1 type "ty").
    pub(in crate::cases) fn rich(mut self) -> Self {
        self.rich = true;
        self
    }

    fn props_091(&self) -> Props {
        let mut p = Props {
            headers: (!self.headers.is_empty()).then(|| self.headers.clone()),
            expiration: self.ttl.map(|t| t.to_string()),
            ..Props::default()
        };
        if self.rich {
            p.content_type = Some("text/plain".into());
            p.content_encoding = Some("enc".into());
            p.delivery_mode = Some(2);
            p.priority = Some(3);
            p.correlation_id = Some("corr".into());
            p.reply_to = Some("rt".into());
            p.message_id = Some("mid".into());
            p.timestamp = Some(1_700_000_000);
            p.kind = Some("ty".into());
            p.app_id = Some("app".into());
        }
        p
    }

    fn message_10(&self) -> Result<Msg, CaseError> {
        let mut m = Msg::new();
        if self.rich {
            m = m.header(hdr::DURABLE, Value::Bool(true)).header(hdr::PRIORITY, Value::Ubyte(3));
        }
        if let Some(ttl) = self.ttl {
            m = m.header(hdr::TTL, Value::Uint(ttl));
        }
        for (k, v) in &self.annotations {
            m = m.ann(k, v.clone());
        }
        if self.rich {
            let ts = serde_amqp::primitives::Timestamp::from_milliseconds(1_700_000_000_000);
            m = m
                .prop(prop::MESSAGE_ID, Value::String("mid".into()))
                .prop(prop::REPLY_TO, Value::String("rt".into()))
                .prop(prop::CORRELATION_ID, Value::String("corr".into()))
                .prop(prop::CONTENT_TYPE, Value::Symbol(Symbol::from("text/plain")))
                .prop(prop::CONTENT_ENCODING, Value::Symbol(Symbol::from("enc")))
                .prop(prop::CREATION_TIME, Value::Timestamp(ts))
                .prop(prop::GROUP_ID, Value::String("app".into()));
        }
        for (k, v) in &self.headers {
            let v = match v {
                F::S(s) => Value::String(s.clone()),
                F::I64(n) => Value::Long(*n),
                F::I32(n) => Value::Int(*n),
                F::Bool(b) => Value::Bool(*b),
                other => return Err(CaseError::new(format!("no 1.0 application property for {k} = {other:?}"))),
            };
            m = m.app(k, v);
        }
        Ok(m.data(self.body.as_bytes()))
    }
}

/// Publishes one message over the variant's publishing protocol and waits until it is routed.
pub(in crate::cases) async fn publish(ctx: &Ctx, exchange: &str, key: &str, out: &Out) -> CaseResult {
    publish_inner(ctx, exchange, key, out).await.map_err(|e| e.context(&format!("publish to {exchange:?}/{key:?}")))
}

async fn publish_inner(ctx: &Ctx, exchange: &str, key: &str, out: &Out) -> CaseResult {
    match ctx.variant().publish {
        Protocol::Amqp091 => {
            let mut raw = Raw091::open(ctx).await?;
            let result = raw.publish(exchange, key, &out.props_091(), out.body.as_bytes()).await;
            raw.close().await;
            result
        }
        Protocol::Amqp10 => publish_raw10(ctx, exchange, key, &out.message_10()?.encode()?).await,
    }
}

/// Publishes an encoded 1.0 message and expects `accepted`.
pub(in crate::cases) async fn publish_raw10(ctx: &Ctx, exchange: &str, key: &str, payload: &[u8]) -> CaseResult {
    let mut conn = Conn10::open(ctx.broker()).await?;
    conn.begin(0).await?;
    conn.attach_sender(0, 0, Some(&fk::publish_addr(exchange, key))).await?;
    let state = conn.publish(0, 0, 0, payload).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), conn.close()).await;
    match state? {
        Some(fe2o3_amqp_types::messaging::DeliveryState::Accepted(_)) => Ok(()),
        other => Err(CaseError::new(format!("1.0 publish to {exchange:?}/{key:?}: outcome {other:?}"))),
    }
}

/// A delivery with every field as the consuming protocol carried it.
pub(in crate::cases) enum Got {
    /// Taken with a raw 0.9.1 `basic.get`.
    A091(Box<Got091>),
    /// Received on a raw 1.0 link.
    A10 {
        /// Delivery id.
        id: u32,
        /// The sections.
        msg: raw10::Received,
    },
}

/// One death-history entry in protocol-neutral terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::cases) struct DeathView {
    pub(in crate::cases) queue: String,
    pub(in crate::cases) reason: String,
    pub(in crate::cases) count: u64,
    pub(in crate::cases) exchange: String,
    pub(in crate::cases) routing_keys: Vec<String>,
}

fn value_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Symbol(s) => Some(s.0.clone()),
        _ => None,
    }
}

fn f_text(v: &F) -> Option<String> {
    match v {
        F::S(s) => Some(s.clone()),
        _ => None,
    }
}

impl Got {
    /// The body as text.
    pub(in crate::cases) fn body(&self) -> String {
        match self {
            Self::A091(d) => String::from_utf8_lossy(&d.body).into_owned(),
            Self::A10 { msg, .. } => msg.text(),
        }
    }

    /// 0.9.1 `basic.deliver` exchange; 1.0 `x-exchange` annotation.
    pub(in crate::cases) fn exchange(&self) -> String {
        match self {
            Self::A091(d) => d.exchange.clone(),
            Self::A10 { msg, .. } => msg.ann("x-exchange").as_ref().and_then(value_text).unwrap_or_default(),
        }
    }

    /// 0.9.1 routing key; 1.0 `x-routing-key` annotation.
    pub(in crate::cases) fn routing_key(&self) -> String {
        match self {
            Self::A091(d) => d.routing_key.clone(),
            Self::A10 { msg, .. } => msg.ann("x-routing-key").as_ref().and_then(value_text).unwrap_or_default(),
        }
    }

    /// A text header (0.9.1, longstr only) or annotation (1.0, string only).
    pub(in crate::cases) fn text_field(&self, name: &str) -> Option<String> {
        match self {
            Self::A091(d) => d.header(name).and_then(f_text),
            Self::A10 { msg, .. } => match msg.ann(name) {
                Some(Value::String(s)) => Some(s),
                _ => None,
            },
        }
    }

    /// The CC keys: 0.9.1 `CC` header, 1.0 `x-cc` annotation.
    pub(in crate::cases) fn cc(&self) -> Option<Vec<String>> {
        match self {
            Self::A091(d) => match d.header("CC") {
                Some(F::A(keys)) => Some(keys.iter().filter_map(f_text).collect()),
                _ => None,
            },
            Self::A10 { msg, .. } => match msg.ann("x-cc") {
                Some(Value::List(keys)) => Some(keys.iter().filter_map(value_text).collect()),
                Some(Value::Array(keys)) => Some(keys.iter().filter_map(value_text).collect()),
                _ => None,
            },
        }
    }

    /// Whether any header, application property or annotation has this name.
    pub(in crate::cases) fn mentions(&self, name: &str) -> bool {
        match self {
            Self::A091(d) => d.header(name).is_some(),
            Self::A10 { msg, .. } => {
                msg.app(name).is_some() || msg.annotations().iter().any(|(k, _)| k == name || k == "x-bcc")
            }
        }
    }

    /// Whether the delivery has a per-message TTL (0.9.1 expiration, 1.0 header.ttl).
    pub(in crate::cases) fn has_ttl(&self) -> bool {
        match self {
            Self::A091(d) => d.props.expiration.is_some(),
            Self::A10 { msg, .. } => msg.header(hdr::TTL).is_some(),
        }
    }

    fn death_maps_10(msg: &raw10::Received) -> Vec<Vec<(Value, Value)>> {
        let entries: Vec<Value> = match msg.ann("x-opt-deaths") {
            Some(Value::Array(a)) => a.into_iter().collect(),
            Some(Value::List(l)) => l,
            _ => Vec::new(),
        };
        entries
            .into_iter()
            .filter_map(|e| match e {
                Value::Map(m) => Some(m.into_iter().collect()),
                _ => None,
            })
            .collect()
    }

    /// Field names of each history entry, in wire order.
    pub(in crate::cases) fn death_field_names(&self) -> Vec<Vec<String>> {
        match self {
            Self::A091(d) => d.x_death().into_iter().map(|e| e.into_iter().map(|(k, _)| k).collect()).collect(),
            Self::A10 { msg, .. } => Self::death_maps_10(msg)
                .into_iter()
                .map(|e| e.into_iter().map(|(k, _)| value_text(&k).unwrap_or_default()).collect())
                .collect(),
        }
    }

    /// `{:?}` of field `name` of entry `i`, with its exact type.
    pub(in crate::cases) fn death_field_debug(&self, i: usize, name: &str) -> Option<String> {
        match self {
            Self::A091(d) => d.x_death_field(i, name).map(|v| format!("{v:?}")),
            Self::A10 { msg, .. } => Self::death_maps_10(msg)
                .get(i)?
                .iter()
                .find(|(k, _)| value_text(k).as_deref() == Some(name))
                .map(|(_, v)| format!("{v:?}")),
        }
    }

    /// The history, most recent first.
    pub(in crate::cases) fn deaths(&self) -> Vec<DeathView> {
        match self {
            Self::A091(d) => d
                .x_death()
                .into_iter()
                .map(|e| {
                    let get = |k: &str| e.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
                    let text = |k: &str| get(k).as_ref().and_then(f_text).unwrap_or_default();
                    DeathView {
                        queue: text("queue"),
                        reason: text("reason"),
                        count: match get("count") {
                            Some(F::I64(n)) => u64::try_from(n).unwrap_or_default(),
                            _ => 0,
                        },
                        exchange: text("exchange"),
                        routing_keys: match get("routing-keys") {
                            Some(F::A(keys)) => keys.iter().filter_map(f_text).collect(),
                            _ => Vec::new(),
                        },
                    }
                })
                .collect(),
            Self::A10 { msg, .. } => Self::death_maps_10(msg)
                .into_iter()
                .map(|e| {
                    let get =
                        |k: &str| e.iter().find(|(n, _)| value_text(n).as_deref() == Some(k)).map(|(_, v)| v.clone());
                    let text = |k: &str| get(k).as_ref().and_then(value_text).unwrap_or_default();
                    let keys: Vec<Value> = match get("routing-keys") {
                        Some(Value::Array(a)) => a.into_iter().collect(),
                        Some(Value::List(l)) => l,
                        _ => Vec::new(),
                    };
                    DeathView {
                        queue: text("queue"),
                        reason: text("reason"),
                        count: match get("count") {
                            Some(Value::Ulong(n)) => n,
                            _ => 0,
                        },
                        exchange: text("exchange"),
                        routing_keys: keys.iter().filter_map(value_text).collect(),
                    }
                })
                .collect(),
        }
    }

    /// `(queue, reason, count)` of each death, most recent first.
    pub(in crate::cases) fn triples(&self) -> Vec<(String, String, u64)> {
        self.deaths().into_iter().map(|d| (d.queue, d.reason, d.count)).collect()
    }
}

/// A consumer over the variant's consuming protocol: 0.9.1 polls with `basic.get` on raw
/// frames, 1.0 keeps credit on a raw link.
pub(in crate::cases) enum Sub {
    /// Raw 0.9.1 and the queue it polls.
    A091(Box<Raw091>, String),
    /// A raw 1.0 receiving link (channel 0, handle 0) and its credit window.
    A10(Box<Conn10>, u32),
}

impl Sub {
    /// Starts consuming `queue`.
    pub(in crate::cases) async fn open(ctx: &Ctx, queue: &str) -> Result<Self, CaseError> {
        Self::open_as(ctx, queue, ctx.variant().consume).await
    }

    /// Starts consuming `queue` over `protocol`.
    pub(in crate::cases) async fn open_as(ctx: &Ctx, queue: &str, protocol: Protocol) -> Result<Self, CaseError> {
        match protocol {
            Protocol::Amqp091 => Ok(Self::A091(Box::new(Raw091::open(ctx).await?), queue.to_owned())),
            Protocol::Amqp10 => {
                let mut conn = Conn10::open(ctx.broker()).await?;
                conn.begin(0).await?;
                conn.attach_receiver(0, 0, &fk::queue_addr(queue)).await?;
                conn.credit(0, 0, 10, false).await?;
                Ok(Self::A10(Box::new(conn), 10))
            }
        }
    }

    /// The next message (fails after 5 s).
    pub(in crate::cases) async fn next(&mut self) -> Result<Got, CaseError> {
        match self {
            Self::A091(raw, queue) => {
                let deadline = tokio::time::Instant::now() + lk::ARRIVE;
                loop {
                    if let Some(d) = raw.get(queue, false).await? {
                        return Ok(Got::A091(Box::new(d)));
                    }
                    check!(tokio::time::Instant::now() < deadline, "no message in {queue} within 5 s");
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
            }
            Self::A10(conn, _) => {
                let d = conn.recv(0, fk::ARRIVE).await.map_err(|e| e.context("1.0 receive"))?;
                Ok(Got::A10 { id: d.id(), msg: raw10::Received::parse(&d.payload)? })
            }
        }
    }

    /// Settles a message this consumer got.
    pub(in crate::cases) async fn settle(&mut self, got: &Got, how: Settle) -> CaseResult {
        match (self, got) {
            (Self::A091(raw, _), Got::A091(d)) => raw.settle(d.tag, how).await,
            (Self::A10(conn, window), Got::A10 { id, .. }) => {
                use fe2o3_amqp_types::messaging::{Accepted, DeliveryState, Rejected, Released};
                let state = match how {
                    Settle::Ack => DeliveryState::Accepted(Accepted {}),
                    Settle::Requeue => DeliveryState::Released(Released {}),
                    Settle::Reject => DeliveryState::Rejected(Rejected { error: None }),
                };
                conn.settle(0, *id, *id, state).await?;
                conn.credit(0, 0, *window, false).await
            }
            _ => Err(CaseError::new("settled on the other protocol")),
        }
    }

    /// Fails if a message arrives within `wait`.
    pub(in crate::cases) async fn nothing(&mut self, wait: Duration) -> CaseResult {
        match self {
            Self::A091(raw, queue) => {
                tokio::time::sleep(wait).await;
                match raw.get(queue, false).await? {
                    None => Ok(()),
                    Some(d) => {
                        Err(CaseError::new(format!("expected no message, got {:?}", String::from_utf8_lossy(&d.body))))
                    }
                }
            }
            Self::A10(conn, _) => conn.no_transfer(0, wait).await,
        }
    }

    /// Closes the consumer (unsettled messages return to the queue).
    pub(in crate::cases) async fn close(self) {
        match self {
            Self::A091(raw, _) => raw.close().await,
            Self::A10(mut conn, _) => {
                let _ = tokio::time::timeout(Duration::from_secs(2), conn.close()).await;
            }
        }
    }
}

/// Takes one message from `queue` and rejects it (requeue=false / 1.0 `rejected`).
pub(in crate::cases) async fn reject_one(ctx: &Ctx, queue: &str) -> Result<Got, CaseError> {
    let mut sub = Sub::open(ctx, queue).await?;
    let got = sub.next().await?;
    sub.settle(&got, Settle::Reject).await?;
    // Give the settlement time to be processed before the connection goes away.
    let result = sub.nothing(Duration::from_millis(50)).await;
    sub.close().await;
    result.map(|()| got)
}

/// Takes one message from `queue`, acknowledges it and checks nothing else is there.
pub(in crate::cases) async fn take_one(ctx: &Ctx, queue: &str) -> Result<Got, CaseError> {
    let mut sub = Sub::open(ctx, queue).await?;
    let got = sub.next().await?;
    sub.settle(&got, Settle::Ack).await?;
    let result = sub.nothing(Duration::from_millis(50)).await;
    sub.close().await;
    result.map(|()| got)
}
