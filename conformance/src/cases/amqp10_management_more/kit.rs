//! The raw management link pair and helpers to build and read request and response bodies.

use super::super::amqp10_attach::session;
use crate::{
    CaseError, CaseResult, Ctx, check_eq,
    fe2o3_kit::pct,
    raw10::{
        Conn10, Delivery, Msg, Received, WAIT,
        link::{attach_frame, error_parts, target_of},
        message::prop,
    },
};
use fe2o3_amqp_types::{
    definitions::{Role, SenderSettleMode},
    messaging::Source,
    performatives::{Attach, Performative},
    primitives::Value,
};
use serde_amqp::primitives::{Array, OrderedMap, Symbol};

/// The management node's address.
pub(super) const NODE: &str = "/management";

/// A raw connection with the link pair attached: handle 0 sends requests, handle 1 receives
/// responses.
pub(super) struct Mgmt {
    pub(super) c: Conn10,
    pub(super) next_id: u32,
    /// Attach replies (request link, response link) and the first flow on the request link.
    pub(super) replies: (Attach, Attach, u32),
}

/// The `paired` link property.
pub(super) fn paired() -> Option<OrderedMap<Symbol, Value>> {
    Some([(Symbol::from("paired"), Value::Bool(true))].into_iter().collect())
}

/// One response.
pub(super) struct Resp {
    pub(super) status: String,
    pub(super) body: Value,
    pub(super) msg: Received,
    pub(super) settled: bool,
    pub(super) tag: Option<Vec<u8>>,
    pub(super) format: Option<u32>,
}

impl Mgmt {
    pub(super) async fn open(ctx: &Ctx) -> Result<Self, CaseError> {
        Self::open_with(ctx, true, Some(100)).await
    }

    /// Attaches the request link, then (if `responses`) the response link with `credit`.
    pub(super) async fn open_with(ctx: &Ctx, responses: bool, credit: Option<u32>) -> Result<Self, CaseError> {
        let mut c = session(ctx).await?;
        let name = "my link pair";
        let mut src = Source::builder().build();
        src.address = Some(NODE.to_owned());
        let mut out = attach_frame(
            name,
            0,
            Role::Sender,
            SenderSettleMode::Settled,
            Some(src.clone()),
            Some(target_of(Some(NODE))),
        );
        out.properties = paired();
        c.perf(0, &out).await?;
        let request_reply = c.expect_attach(0, 0).await?;
        let request_credit = c.expect_flow(0, 0).await?.link_credit.unwrap_or_default();
        let mut inc =
            attach_frame(name, 1, Role::Receiver, SenderSettleMode::Settled, Some(src), Some(target_of(Some(NODE))));
        inc.properties = paired();
        let mut response_reply = inc.clone();
        if responses {
            c.perf(0, &inc).await?;
            response_reply = c.expect_attach(0, 1).await?;
        }
        if let Some(credit) = credit {
            c.credit(0, 1, credit, false).await?;
        }
        Ok(Self { c, next_id: 0, replies: (request_reply, response_reply, request_credit) })
    }

    /// Sends a request without waiting for the answer.
    pub(super) async fn send(&mut self, method: &str, path: &str, body: Value) -> CaseResult {
        let id = self.next_id;
        self.next_id += 1;
        let msg = Msg::new()
            .prop(prop::MESSAGE_ID, Value::Binary(id.to_be_bytes().to_vec().into()))
            .prop(prop::TO, Value::String(path.to_owned()))
            .prop(prop::SUBJECT, Value::String(method.to_owned()))
            .prop(prop::REPLY_TO, Value::String("$me".to_owned()))
            .value(body);
        self.c.transfer(0, 0, id, true, &msg.encode()?).await
    }

    /// Sends one request with a binary message-id and checks the response's correlation.
    pub(super) async fn request(&mut self, method: &str, path: &str, body: Value) -> Result<Resp, CaseError> {
        let id = self.next_id;
        self.next_id += 1;
        let message_id = Value::Binary(id.to_be_bytes().to_vec().into());
        let msg = Msg::new()
            .prop(prop::MESSAGE_ID, message_id.clone())
            .prop(prop::TO, Value::String(path.to_owned()))
            .prop(prop::SUBJECT, Value::String(method.to_owned()))
            .prop(prop::REPLY_TO, Value::String("$me".to_owned()))
            .value(body);
        self.c.transfer(0, 0, id, true, &msg.encode()?).await?;
        let d = self.response().await.map_err(|e| e.context(&format!("response to {method} {path}")))?;
        let r = Received::parse(&d.payload)?;
        check_eq!(r.prop(prop::CORRELATION_ID), Some(message_id), "correlation-id of the response to {method} {path}");
        check_eq!(r.app("http:response"), Some(Value::String("1.1".into())), "http:response of {method} {path}");
        let status = match r.prop(prop::SUBJECT) {
            Some(Value::String(s)) => s,
            other => return Err(CaseError::new(format!("response subject to {method} {path}: {other:?}"))),
        };
        let body = r.section(crate::raw10::message::code::AMQP_VALUE).unwrap_or(Value::Null);
        Ok(Resp {
            status,
            body,
            msg: r,
            settled: d.settled(),
            tag: d.transfer.delivery_tag.as_ref().map(|t| t.to_vec()),
            format: d.transfer.message_format,
        })
    }

    /// The next response, or an error naming the end or close that came instead.
    pub(super) async fn response(&mut self) -> Result<Delivery, CaseError> {
        let first = self
            .c
            .expect("a response, end or close", WAIT, |ch, p, payload| match p {
                Performative::Transfer(t) if ch == 0 => Some(Ok((t.clone(), payload.to_vec()))),
                Performative::End(e) => Some(Err(format!("session ended: {:?}", error_parts(&e.error)))),
                Performative::Close(e) => Some(Err(format!("connection closed: {:?}", error_parts(&e.error)))),
                _ => None,
            })
            .await?;
        let (transfer, payload) = first.map_err(CaseError::new)?;
        if transfer.more {
            let rest = self.c.recv(0, WAIT).await?;
            let mut payload = payload;
            payload.extend_from_slice(&rest.payload);
            return Ok(Delivery { channel: 0, transfer, payload, frames: rest.frames + 1 });
        }
        Ok(Delivery { channel: 0, transfer, payload, frames: 1 })
    }

    /// A request whose answer must be `status` with the text `text`.
    pub(super) async fn refused(
        &mut self,
        method: &str,
        path: &str,
        body: Value,
        status: &str,
        text: &str,
    ) -> CaseResult {
        let r = self.request(method, path, body).await?;
        check_eq!((r.status.as_str(), r.body), (status, s(text)), "{method} {path}");
        Ok(())
    }

    /// A request whose answer must be `status`; returns the body.
    pub(super) async fn ok(&mut self, method: &str, path: &str, body: Value, status: &str) -> Result<Value, CaseError> {
        let r = self.request(method, path, body).await?;
        check_eq!(r.status, status, "status of {method} {path} (body {:?})", r.body);
        Ok(r.body)
    }

    pub(super) async fn close(mut self) -> CaseResult {
        self.c.close().await
    }
}

pub(super) fn s(v: &str) -> Value {
    Value::String(v.to_owned())
}

pub(super) fn map(entries: Vec<(&str, Value)>) -> Value {
    Value::Map(entries.into_iter().map(|(k, v)| (s(k), v)).collect())
}

pub(super) fn keys(v: &Value) -> Vec<String> {
    match v {
        Value::Map(m) => m
            .keys()
            .map(|k| match k {
                Value::String(s) => s.clone(),
                other => format!("{other:?}"),
            })
            .collect(),
        _ => Vec::new(),
    }
}

pub(super) fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Map(m) => m.get(&s(key)),
        _ => None,
    }
}

pub(super) fn queue_path(q: &str) -> String {
    format!("/queues/{}", pct(q))
}

pub(super) fn exchange_path(x: &str) -> String {
    format!("/exchanges/{}", pct(x))
}

/// The keys of a queue map in RabbitMQ's order.
pub(super) const QUEUE_KEYS: [&str; 11] = [
    "leader",
    "replicas",
    "message_count",
    "consumer_count",
    "name",
    "vhost",
    "durable",
    "auto_delete",
    "exclusive",
    "type",
    "arguments",
];

/// Checks the node fields of a queue map (a leader string, replicas an array holding it) and
/// returns the map without them, for exact comparison.
pub(super) fn without_nodes(body: &Value) -> Result<Value, CaseError> {
    check_eq!(keys(body), QUEUE_KEYS.to_vec(), "queue map keys in order");
    let leader = match get(body, "leader") {
        Some(Value::String(l)) => l.clone(),
        other => return Err(CaseError::new(format!("leader: expected a utf8 string, got {other:?}"))),
    };
    check_eq!(
        get(body, "replicas"),
        Some(&Value::Array(Array::from(vec![s(&leader)]))),
        "replicas: an array of utf8 holding the leader"
    );
    match body {
        Value::Map(m) => {
            let rest: OrderedMap<Value, Value> = m
                .iter()
                .filter(|(k, _)| **k != s("leader") && **k != s("replicas"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            Ok(Value::Map(rest))
        }
        other => Err(CaseError::new(format!("queue body is no map: {other:?}"))),
    }
}

pub(super) fn queue_map(q: &str, messages: u64, consumers: u32, flags: [bool; 3], kind: &str, args: Value) -> Value {
    map(vec![
        ("message_count", Value::Ulong(messages)),
        ("consumer_count", Value::Uint(consumers)),
        ("name", s(q)),
        ("vhost", s("/")),
        ("durable", Value::Bool(flags[0])),
        ("auto_delete", Value::Bool(flags[1])),
        ("exclusive", Value::Bool(flags[2])),
        ("type", s(kind)),
        ("arguments", args),
    ])
}

/// Waits for the end of session 0 and returns its condition and description.
pub(super) async fn session_end(c: &mut Conn10) -> Result<(String, Option<String>), CaseError> {
    c.expect("end", WAIT, |ch, p, _| match p {
        Performative::End(e) if ch == 0 => Some(error_parts(&e.error)),
        _ => None,
    })
    .await
}
