//! More of the `/management` node (RabbitMQ 4's HTTP over AMQP 1.0): the attach replies of the
//! link pair, the exact AMQP types of response bodies, queue arguments, exchange-to-exchange
//! bindings and the 400/403/404/409 answers with RabbitMQ 4.0.5's texts.
//!
//! Requests go over a raw link pair so every field of every section can be checked:
//! `subject` = method, `to` = path, `reply-to` = `$me`, a message-id, an amqp-value body.

use super::amqp10_attach::session;
use crate::{
    Case, CaseError, CaseResult, Ctx, case10, check, check_eq,
    fe2o3_kit::pct,
    lapin_kit as lk,
    raw10::{
        Conn10, Delivery, Msg, Received, WAIT, codec,
        link::{attach_frame, error_parts, target_of},
        message::prop,
    },
};
use fe2o3_amqp_types::{
    definitions::{ReceiverSettleMode, Role, SenderSettleMode},
    messaging::{Source, TargetArchetype},
    performatives::{Attach, Performative},
    primitives::Value,
};
use lapin::{
    options::{BasicConsumeOptions, BasicQosOptions},
    types::FieldTable,
};
use serde_amqp::primitives::{Array, OrderedMap, Symbol};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case10!(
            "amqp10.management.attach_replies",
            "the pair's attach replies: request link role receiver (settled, paired echoed, credit granted); response link role sender with initial-delivery-count 2^32-5; responses are settled transfers with an empty tag",
            attach_replies
        ),
        case10!(
            "amqp10.management.queue_created_201_typed_body",
            "PUT /queues/<new>: 201 and the queue map with RabbitMQ's key order and AMQP types (message_count ulong, consumer_count uint, replicas array)",
            queue_created
        ),
        case10!(
            "amqp10.management.queue_quorum_arguments",
            "PUT /queues/q with x-queue-type quorum and x-max-length: 201, type quorum, arguments echoed with 0.9.1 types",
            queue_quorum
        ),
        case10!(
            "amqp10.management.queue_inequivalent_argument_409",
            "redeclaring with another x-max-length: 409 and the inequivalent-arg text",
            queue_inequivalent_arg
        ),
        case10!(
            "amqp10.management.queue_get_consumers",
            "GET /queues/q counts ready messages and consumers",
            queue_get_consumers
        ),
        case10!(
            "amqp10.management.queue_delete_purge_missing",
            "DELETE /queues/<missing>: 200 message_count 0; DELETE /queues/<missing>/messages: 400 no queue",
            queue_missing
        ),
        case10!(
            "amqp10.management.queue_bad_names",
            "PUT /queues/ with an empty name or a line feed: 400 with RabbitMQ's texts",
            queue_bad_names
        ),
        case10!(
            "amqp10.management.queue_exclusive",
            "an exclusive queue declared over /management belongs to the connection: another connection gets 400 locked",
            queue_exclusive
        ),
        case10!(
            "amqp10.management.bad_property_400",
            "an unknown key in a queue, exchange or binding body: 400 bad ... property/field with the Erlang term",
            bad_property
        ),
        case10!(
            "amqp10.management.invalid_argument",
            "a queue argument of the wrong type: 409 invalid arg; an argument keyed by a non-string: 400 unsupported argument",
            invalid_argument
        ),
        case10!(
            "amqp10.management.exchange_properties",
            "PUT /exchanges/x with type, durable, auto_delete, internal and arguments: 204; another internal: 409; DELETE twice: 204",
            exchange_properties
        ),
        case10!(
            "amqp10.management.exchange_refusals",
            "unknown exchange type: 400; the default exchange: 403; amq.* : 403",
            exchange_refusals
        ),
        case10!(
            "amqp10.management.exchange_binding_with_args",
            "POST /bindings to an exchange with arguments: 204; GET lists it with its location; DELETE of that location unbinds",
            exchange_binding
        ),
        case10!(
            "amqp10.management.binding_refusals",
            "binding a missing queue or from a missing exchange: 400; from the default exchange: 403; GET without dst: 400",
            binding_refusals
        ),
        case10!(
            "amqp10.management.binding_delete_missing",
            "DELETE of a binding location that matches nothing: 204",
            binding_delete_missing
        ),
        case10!(
            "amqp10.management.request_without_response_credit",
            "a request while the response link has no credit ends the session with amqp:precondition-failed, unexecuted",
            no_response_credit
        ),
        case10!(
            "amqp10.management.request_on_half_open_pair",
            "a request before the response link is attached ends the session with amqp:precondition-failed",
            half_open_pair
        ),
        case10!(
            "amqp10.management.sections_in_any_order",
            "a request whose amqp-value body comes before its properties (as rabbitmq-amqp-python-client sends a null body) is answered",
            sections_any_order
        ),
        case10!(
            "amqp10.management.pipelined_attach_and_flow",
            "both attaches and the response link's flow in one write (as Qpid Proton sends them): the pair works",
            pipelined
        ),
        case10!(
            "amqp10.management.attach_without_paired",
            "a /management link without the paired property ends the session with amqp:invalid-field",
            attach_without_paired
        ),
        case10!(
            "amqp10.management.bad_uri_400",
            "a request target that is no valid URI: 400 failed to normalize URI; dot segments and fragments are normalized away",
            bad_uri
        ),
        case10!(
            "amqp10.management.queue_type_refusals",
            "quorum + exclusive or auto_delete: 400 invalid property; a non-string x-dead-letter-exchange: 400; bad x-queue-type or x-expires: 409",
            queue_type_refusals
        ),
        case10!(
            "amqp10.management.binding_segment_400",
            "DELETE /bindings/<segment> with an empty name, an unknown destination kind or a bad args hash: 400 bad binding path segment",
            binding_segment_refusals
        ),
        case10!(
            "amqp10.management.unsupported_request_400",
            "an unknown method or path, a binding without destination, GET /bindings without dste/dstq: 400",
            unsupported_requests
        )
        .deliberate(
            "RabbitMQ 4.0.5 has no clause for these requests and ends the session with amqp:internal-error (function_clause); Charon answers 400"
        ),
    ]
}

/// The management node's address.
const NODE: &str = "/management";

/// A raw connection with the link pair attached: handle 0 sends requests, handle 1 receives
/// responses.
struct Mgmt {
    c: Conn10,
    next_id: u32,
    /// Attach replies (request link, response link) and the first flow on the request link.
    replies: (Attach, Attach, u32),
}

/// The `paired` link property.
fn paired() -> Option<OrderedMap<Symbol, Value>> {
    Some([(Symbol::from("paired"), Value::Bool(true))].into_iter().collect())
}

/// One response.
struct Resp {
    status: String,
    body: Value,
    msg: Received,
    settled: bool,
    tag: Option<Vec<u8>>,
    format: Option<u32>,
}

impl Mgmt {
    async fn open(ctx: &Ctx) -> Result<Self, CaseError> {
        Self::open_with(ctx, true, Some(100)).await
    }

    /// Attaches the request link, then (if `responses`) the response link with `credit`.
    async fn open_with(ctx: &Ctx, responses: bool, credit: Option<u32>) -> Result<Self, CaseError> {
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
    async fn send(&mut self, method: &str, path: &str, body: Value) -> CaseResult {
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
    async fn request(&mut self, method: &str, path: &str, body: Value) -> Result<Resp, CaseError> {
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
    async fn response(&mut self) -> Result<Delivery, CaseError> {
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
    async fn refused(&mut self, method: &str, path: &str, body: Value, status: &str, text: &str) -> CaseResult {
        let r = self.request(method, path, body).await?;
        check_eq!((r.status.as_str(), r.body), (status, s(text)), "{method} {path}");
        Ok(())
    }

    /// A request whose answer must be `status`; returns the body.
    async fn ok(&mut self, method: &str, path: &str, body: Value, status: &str) -> Result<Value, CaseError> {
        let r = self.request(method, path, body).await?;
        check_eq!(r.status, status, "status of {method} {path} (body {:?})", r.body);
        Ok(r.body)
    }

    async fn close(mut self) -> CaseResult {
        self.c.close().await
    }
}

fn s(v: &str) -> Value {
    Value::String(v.to_owned())
}

fn map(entries: Vec<(&str, Value)>) -> Value {
    Value::Map(entries.into_iter().map(|(k, v)| (s(k), v)).collect())
}

fn keys(v: &Value) -> Vec<String> {
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

fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Map(m) => m.get(&s(key)),
        _ => None,
    }
}

fn queue_path(q: &str) -> String {
    format!("/queues/{}", pct(q))
}

fn exchange_path(x: &str) -> String {
    format!("/exchanges/{}", pct(x))
}

/// The keys of a queue map in RabbitMQ's order.
const QUEUE_KEYS: [&str; 11] = [
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
fn without_nodes(body: &Value) -> Result<Value, CaseError> {
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

fn queue_map(q: &str, messages: u64, consumers: u32, flags: [bool; 3], kind: &str, args: Value) -> Value {
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

async fn attach_replies(ctx: Ctx) -> CaseResult {
    let mut m = Mgmt::open(&ctx).await?;
    let (req, resp, credit) = m.replies.clone();
    check_eq!(req.role, Role::Receiver, "request link reply role");
    check_eq!(req.snd_settle_mode, SenderSettleMode::Settled, "request link snd-settle-mode");
    check_eq!(req.rcv_settle_mode, ReceiverSettleMode::First, "request link rcv-settle-mode");
    check_eq!(req.properties, paired(), "request link properties echoed");
    check_eq!(req.source.as_ref().and_then(|s| s.address.clone()), Some(NODE.to_owned()), "request link source");
    let target = match req.target.as_deref() {
        Some(TargetArchetype::Target(t)) => t.address.clone(),
        None => None,
    };
    check_eq!(target, Some(NODE.to_owned()), "request link target");
    check!(credit > 0, "the request link got no credit");
    check_eq!(resp.role, Role::Sender, "response link reply role");
    check_eq!(resp.snd_settle_mode, SenderSettleMode::Settled, "response link snd-settle-mode");
    check_eq!(resp.initial_delivery_count, Some(u32::MAX - 4), "response link initial-delivery-count");
    check_eq!(resp.properties, paired(), "response link properties echoed");
    check_eq!(resp.source.as_ref().and_then(|s| s.address.clone()), Some(NODE.to_owned()), "response link source");
    let r = m.request("GET", "/queues/amq.no-such-queue", Value::Null).await?;
    check_eq!(r.settled, true, "response transfer settled");
    check_eq!(r.tag, Some(Vec::new()), "response delivery-tag");
    check_eq!(r.format, Some(0), "response message-format");
    check_eq!(
        r.msg.codes(),
        vec![
            crate::raw10::message::code::PROPERTIES,
            crate::raw10::message::code::APPLICATION_PROPERTIES,
            crate::raw10::message::code::AMQP_VALUE
        ],
        "response sections"
    );
    // properties hold only subject and correlation-id.
    let props = r.msg.section(crate::raw10::message::code::PROPERTIES);
    let set: Vec<usize> = match props {
        Some(Value::List(l)) => l.iter().enumerate().filter(|(_, v)| **v != Value::Null).map(|(i, _)| i).collect(),
        other => return Err(CaseError::new(format!("properties: {other:?}"))),
    };
    check_eq!(set, vec![prop::SUBJECT, prop::CORRELATION_ID], "properties fields set");
    m.close().await
}

async fn queue_created(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let mut m = Mgmt::open(&ctx).await?;
    let body = m.ok("PUT", &queue_path(&q), map(vec![("durable", Value::Bool(false))]), "201").await?;
    let expected = queue_map(&q, 0, 0, [false, false, false], "classic", map(vec![("x-queue-type", s("classic"))]));
    check_eq!(&without_nodes(&body)?, &expected, "queue map of the new queue");
    let body = m.ok("PUT", &queue_path(&q), map(vec![("durable", Value::Bool(false))]), "200").await?;
    check_eq!(&without_nodes(&body)?, &expected, "queue map on redeclare");
    let body = m.ok("GET", &queue_path(&q), Value::Null, "200").await?;
    check_eq!(&without_nodes(&body)?, &expected, "queue map from GET");
    m.close().await
}

async fn queue_quorum(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let mut m = Mgmt::open(&ctx).await?;
    let args = map(vec![("x-queue-type", s("quorum")), ("x-max-length", Value::Long(10))]);
    let body = m.ok("PUT", &queue_path(&q), map(vec![("arguments", args.clone())]), "201").await?;
    let expected = queue_map(&q, 0, 0, [true, false, false], "quorum", args);
    check_eq!(&without_nodes(&body)?, &expected, "quorum queue map");
    let body = m.ok("DELETE", &queue_path(&q), Value::Null, "200").await?;
    check_eq!(body, map(vec![("message_count", Value::Ulong(0))]), "delete response");
    m.close().await
}

async fn queue_inequivalent_arg(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let mut m = Mgmt::open(&ctx).await?;
    let body = |n: i64| map(vec![("arguments", map(vec![("x-max-length", Value::Long(n))]))]);
    m.ok("PUT", &queue_path(&q), body(10), "201").await?;
    m.refused(
        "PUT",
        &queue_path(&q),
        body(20),
        "409",
        &format!("inequivalent arg 'x-max-length' for queue '{q}' in vhost '/': received '20' but current is '10'"),
    )
    .await?;
    m.close().await
}

async fn queue_get_consumers(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    for b in [b"1", b"2", b"3"] {
        lk::publish(&ch, "", &q, b).await?;
    }
    let (_c2, ch2) = ctx.lapin_channel().await?;
    ch2.basic_qos(1, BasicQosOptions::default()).await?;
    let mut consumer = ch2
        .basic_consume(q.as_str().into(), "c1".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await?;
    lk::next(&mut consumer, lk::ARRIVE).await?;
    let mut m = Mgmt::open(&ctx).await?;
    let body = m.ok("GET", &queue_path(&q), Value::Null, "200").await?;
    check_eq!(get(&body, "message_count"), Some(&Value::Ulong(2)), "message_count (ready only)");
    check_eq!(get(&body, "consumer_count"), Some(&Value::Uint(1)), "consumer_count");
    m.close().await
}

async fn queue_missing(ctx: Ctx) -> CaseResult {
    let q = ctx.name("missing");
    let mut m = Mgmt::open(&ctx).await?;
    let body = m.ok("DELETE", &queue_path(&q), Value::Null, "200").await?;
    check_eq!(body, map(vec![("message_count", Value::Ulong(0))]), "delete of a missing queue");
    m.refused(
        "DELETE",
        &format!("{}/messages", queue_path(&q)),
        Value::Null,
        "400",
        &format!("no queue '{q}' in vhost '/'"),
    )
    .await?;
    m.close().await
}

async fn queue_bad_names(ctx: Ctx) -> CaseResult {
    let mut m = Mgmt::open(&ctx).await?;
    m.refused("PUT", "/queues/", map(vec![]), "400", "declare queue with empty name not allowed").await?;
    let lf = "Bad name 'a\nb': line feed and carriage return characters not allowed";
    let cr = "Bad name 'a\rb': line feed and carriage return characters not allowed";
    m.refused("PUT", &queue_path("a\nb"), map(vec![]), "400", lf).await?;
    m.refused("DELETE", &queue_path("a\nb"), Value::Null, "400", lf).await?;
    m.refused("PUT", &exchange_path("a\rb"), map(vec![]), "400", cr).await?;
    m.refused("DELETE", &exchange_path("a\rb"), Value::Null, "400", cr).await?;
    let bind = map(vec![
        ("source", s("a\nb")),
        ("destination_queue", s("q")),
        ("binding_key", s("k")),
        ("arguments", map(vec![])),
    ]);
    m.refused("POST", "/bindings", bind, "400", lf).await?;
    m.refused("DELETE", "/bindings/src=amq.direct;dstq=a%0Ab;key=k;args=", Value::Null, "400", lf).await?;
    // The body is checked before the name.
    m.refused(
        "PUT",
        "/queues/amq.q",
        map(vec![("unknown", s("x"))]),
        "400",
        "bad queue property {{utf8,<<\"unknown\">>},{utf8,<<\"x\">>}}",
    )
    .await?;
    m.close().await
}

async fn bad_uri(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    let mut m = Mgmt::open(&ctx).await?;
    for (uri, what) in [
        ("/queues/a b", "invalid_uri \" \""),
        ("/queues/\u{e9}", "invalid_uri \"\u{e9}\""),
        ("/queues/\u{e9} b", "invalid_uri \"\u{e9}\""),
        ("/queues/a\"b", "invalid_uri \"\\\"\""),
        ("/queues/a\tb", "invalid_uri \"\\t\""),
        ("/queues/a\u{7f}b", "invalid_uri [127]"),
        ("/queues/a[b", "invalid_uri \"[\""),
        ("/queues/a%zz", "invalid_percent_encoding <<\"%zz\">>"),
        ("/bindings?src=a b", "invalid_uri \" \""),
    ] {
        m.refused("GET", uri, Value::Null, "400", &format!("failed to normalize URI '{uri}': {what}")).await?;
    }
    // Dot segments are removed, a fragment ignored, and unreserved escapes decoded.
    for uri in [format!("/queues/../queues/{}", pct(&q)), format!("/queues/./{}#frag", pct(&q))] {
        let body = m.ok("GET", &uri, Value::Null, "200").await?;
        check_eq!(get(&body, "name"), Some(&s(&q)), "queue named by {uri}");
    }
    m.refused("GET", "/queues/%61%2Fb", Value::Null, "404", "queue 'a/b' in vhost '/' not found").await?;
    m.close().await
}

async fn queue_type_refusals(ctx: Ctx) -> CaseResult {
    let mut m = Mgmt::open(&ctx).await?;
    let quorum = |extra: (&str, Value)| map(vec![extra, ("arguments", map(vec![("x-queue-type", s("quorum"))]))]);
    let q = ctx.queue("q");
    m.refused(
        "PUT",
        &queue_path(&q),
        quorum(("exclusive", Value::Bool(true))),
        "400",
        &format!("invalid property 'exclusive-owner' for queue '{q}' in vhost '/'"),
    )
    .await?;
    m.refused(
        "PUT",
        &queue_path(&q),
        quorum(("auto_delete", Value::Bool(true))),
        "400",
        &format!("invalid property 'auto-delete' for queue '{q}' in vhost '/'"),
    )
    .await?;
    let args = |k: &str, v: Value| map(vec![("arguments", map(vec![(k, v)]))]);
    m.refused(
        "PUT",
        &queue_path(&q),
        args("x-dead-letter-exchange", Value::Long(1)),
        "400",
        "invalid type 'long' for arg 'x-dead-letter-exchange'",
    )
    .await?;
    m.refused(
        "PUT",
        &queue_path(&q),
        args("x-queue-type", s("foo")),
        "409",
        &format!("invalid arg 'x-queue-type' for queue '{q}' in vhost '/': \"unsupported queue type 'foo'\""),
    )
    .await?;
    m.refused(
        "PUT",
        &queue_path(&q),
        args("x-expires", Value::Long(0)),
        "409",
        &format!("invalid arg 'x-expires' for queue '{q}' in vhost '/': {{value_zero,0}}"),
    )
    .await?;
    m.ok("PUT", &queue_path(&q), map(vec![]), "201").await?;
    m.refused(
        "PUT",
        &queue_path(&q),
        args("x-queue-type", s("quorum")),
        "409",
        &format!(
            "inequivalent arg 'x-queue-type' for queue '{q}' in vhost '/': received 'quorum' but current is 'classic'"
        ),
    )
    .await?;
    m.close().await
}

async fn binding_segment_refusals(ctx: Ctx) -> CaseResult {
    let mut m = Mgmt::open(&ctx).await?;
    for segment in [
        "src=;dstq=q;key=k;args=",
        "src=amq.direct;dstq=;key=k;args=",
        "src=amq.direct;dstx=q;key=k;args=",
        "src=e1;dstq=q1;invalidkey=k1;args=",
        "src=amq.direct;dstq=q;key=k;args=a.b",
    ] {
        m.refused(
            "DELETE",
            &format!("/bindings/{segment}"),
            Value::Null,
            "400",
            &format!("bad binding path segment '{segment}'"),
        )
        .await?;
    }
    m.close().await
}

async fn unsupported_requests(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let mut m = Mgmt::open(&ctx).await?;
    for (method, path) in
        [("GET", "/queues".to_owned()), ("PATCH", queue_path(&q)), ("GET", "/exchanges/amq.direct".to_owned())]
    {
        m.refused(method, &path, Value::Null, "400", &format!("unsupported request {method} {path}")).await?;
    }
    let no_destination = map(vec![("source", s("amq.direct")), ("binding_key", s("k")), ("arguments", map(vec![]))]);
    m.refused("POST", "/bindings", no_destination, "400", "missing destination").await?;
    m.refused(
        "GET",
        "/bindings?src=amq.direct&key=k",
        Value::Null,
        "400",
        "missing 'dste' or 'dstq' in query: src=amq.direct&key=k",
    )
    .await?;
    m.close().await
}

async fn queue_exclusive(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let mut m = Mgmt::open(&ctx).await?;
    let body = m.ok("PUT", &queue_path(&q), map(vec![("exclusive", Value::Bool(true))]), "201").await?;
    check_eq!(get(&body, "exclusive"), Some(&Value::Bool(true)), "exclusive");
    let mut other = Mgmt::open(&ctx).await?;
    let locked = format!(
        "cannot obtain exclusive access to locked queue '{q}' in vhost '/'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration."
    );
    other.refused("DELETE", &queue_path(&q), Value::Null, "400", &locked).await?;
    other.refused("DELETE", &format!("{}/messages", queue_path(&q)), Value::Null, "400", &locked).await?;
    other.close().await?;
    m.ok("DELETE", &queue_path(&q), Value::Null, "200").await?;
    m.close().await
}

async fn bad_property(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let x = ctx.exchange("x");
    let mut m = Mgmt::open(&ctx).await?;
    let unknown = map(vec![("unknown", s("bla"))]);
    m.refused(
        "PUT",
        &queue_path(&q),
        unknown.clone(),
        "400",
        "bad queue property {{utf8,<<\"unknown\">>},{utf8,<<\"bla\">>}}",
    )
    .await?;
    m.refused(
        "PUT",
        &exchange_path(&x),
        unknown.clone(),
        "400",
        "bad exchange property {{utf8,<<\"unknown\">>},{utf8,<<\"bla\">>}}",
    )
    .await?;
    m.refused(
        "PUT",
        &queue_path(&q),
        map(vec![("durable", s("yes"))]),
        "400",
        "bad queue property {{utf8,<<\"durable\">>},{utf8,<<\"yes\">>}}",
    )
    .await?;
    m.refused(
        "PUT",
        &exchange_path(&x),
        map(vec![("type", Value::Symbol(Symbol::from("direct")))]),
        "400",
        "bad exchange property {{utf8,<<\"type\">>},{symbol,<<\"direct\">>}}",
    )
    .await?;
    m.refused("POST", "/bindings", unknown, "400", "bad binding field {{utf8,<<\"unknown\">>},{utf8,<<\"bla\">>}}")
        .await?;
    m.close().await
}

async fn invalid_argument(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let mut m = Mgmt::open(&ctx).await?;
    m.refused(
        "PUT",
        &queue_path(&q),
        map(vec![("arguments", map(vec![("x-max-length", s("ten"))]))]),
        "409",
        &format!("invalid arg 'x-max-length' for queue '{q}' in vhost '/': \"expected integer, got longstr\""),
    )
    .await?;
    let keyed = Value::Map([(Value::Ulong(1), s("v"))].into_iter().collect());
    m.refused(
        "PUT",
        &queue_path(&q),
        map(vec![("arguments", keyed)]),
        "400",
        "unsupported argument {{ulong,1},{utf8,<<\"v\">>}}",
    )
    .await?;
    m.close().await
}

fn exchange_body(kind: &str, internal: bool) -> Value {
    map(vec![
        ("type", s(kind)),
        ("durable", Value::Bool(false)),
        ("auto_delete", Value::Bool(true)),
        ("internal", Value::Bool(internal)),
        ("arguments", map(vec![("alternate-exchange", s("amq.fanout"))])),
    ])
}

async fn exchange_properties(ctx: Ctx) -> CaseResult {
    let x = ctx.exchange("x");
    let mut m = Mgmt::open(&ctx).await?;
    let body = m.ok("PUT", &exchange_path(&x), exchange_body("topic", false), "204").await?;
    check_eq!(body, Value::Null, "declare body");
    m.ok("PUT", &exchange_path(&x), exchange_body("topic", false), "204").await?;
    m.refused(
        "PUT",
        &exchange_path(&x),
        exchange_body("topic", true),
        "409",
        &format!("inequivalent arg 'internal' for exchange '{x}' in vhost '/': received 'true' but current is 'false'"),
    )
    .await?;
    // Over 0.9.1 the exchange is a non-durable topic exchange.
    let (_conn, ch) = ctx.lapin_channel().await?;
    let opts = lapin::options::ExchangeDeclareOptions { passive: true, ..Default::default() };
    ch.exchange_declare(x.as_str().into(), lapin::ExchangeKind::Topic, opts, FieldTable::default()).await?;
    check_eq!(m.ok("DELETE", &exchange_path(&x), Value::Null, "204").await?, Value::Null, "delete body");
    m.ok("DELETE", &exchange_path(&x), Value::Null, "204").await?;
    m.close().await
}

async fn exchange_refusals(ctx: Ctx) -> CaseResult {
    let x = ctx.exchange("x");
    let mut m = Mgmt::open(&ctx).await?;
    m.refused(
        "PUT",
        &exchange_path(&x),
        map(vec![("type", s("no-such-type"))]),
        "400",
        "unknown exchange type 'no-such-type'",
    )
    .await?;
    m.refused("PUT", "/exchanges/", map(vec![]), "403", "operation not permitted on the default exchange").await?;
    m.refused("DELETE", "/exchanges/", Value::Null, "403", "operation not permitted on the default exchange").await?;
    m.refused(
        "PUT",
        "/exchanges/amq.cf-new",
        map(vec![]),
        "403",
        "exchange 'amq.cf-new' in vhost '/' starts with reserved prefix 'amq.'",
    )
    .await?;
    m.refused(
        "DELETE",
        "/exchanges/amq.fanout",
        Value::Null,
        "403",
        "exchange 'amq.fanout' in vhost '/' starts with reserved prefix 'amq.'",
    )
    .await?;
    // Declaring an existing amq.* exchange equivalently is fine.
    let fanout = map(vec![("type", s("fanout"))]);
    m.ok("PUT", "/exchanges/amq.fanout", fanout, "204").await?;
    m.close().await
}

async fn exchange_binding(ctx: Ctx) -> CaseResult {
    let src = ctx.exchange("src");
    let dst = ctx.exchange("dst");
    let q = ctx.queue("q");
    let mut m = Mgmt::open(&ctx).await?;
    m.ok("PUT", &exchange_path(&src), map(vec![("type", s("headers"))]), "204").await?;
    m.ok("PUT", &exchange_path(&dst), map(vec![("type", s("fanout"))]), "204").await?;
    m.ok("PUT", &queue_path(&q), map(vec![]), "201").await?;
    let args = map(vec![("x-match", s("any")), ("k", Value::Long(7))]);
    // RabbitMQ keeps binding arguments sorted by key.
    let args_sorted = map(vec![("k", Value::Long(7)), ("x-match", s("any"))]);
    let bind = |dst_key: &str, dst: &str, args: Value| {
        map(vec![("source", s(&src)), (dst_key, s(dst)), ("binding_key", s("")), ("arguments", args)])
    };
    check_eq!(
        m.ok("POST", "/bindings", bind("destination_exchange", &dst, args.clone()), "204").await?,
        Value::Null,
        "bind body"
    );
    m.ok("POST", "/bindings", bind("destination_exchange", &dst, args.clone()), "204").await?;
    m.ok("POST", "/bindings", bind("destination_queue", &q, map(vec![])), "204").await?;
    m.ok(
        "POST",
        "/bindings",
        map(vec![
            ("source", s(&dst)),
            ("destination_queue", s(&q)),
            ("binding_key", s("")),
            ("arguments", map(vec![])),
        ]),
        "204",
    )
    .await?;
    let query = format!("/bindings?src={}&dste={}&key=", pct(&src), pct(&dst));
    let list = m.ok("GET", &query, Value::Null, "200").await?;
    let items = match &list {
        Value::List(l) => l.clone(),
        other => return Err(CaseError::new(format!("binding list: {other:?}"))),
    };
    check_eq!(items.len(), 1, "bindings listed: {list:?}");
    let b = items.first().cloned().unwrap_or(Value::Null);
    check_eq!(
        keys(&b),
        vec!["source", "destination_exchange", "binding_key", "arguments", "location"],
        "binding map keys in order"
    );
    check_eq!(get(&b, "source"), Some(&s(&src)), "source");
    check_eq!(get(&b, "destination_exchange"), Some(&s(&dst)), "destination_exchange");
    check_eq!(get(&b, "binding_key"), Some(&s("")), "binding_key");
    check_eq!(get(&b, "arguments"), Some(&args_sorted), "arguments");
    let location = match get(&b, "location") {
        Some(Value::String(l)) => l.clone(),
        other => return Err(CaseError::new(format!("location: {other:?}"))),
    };
    let prefix = format!("/bindings/src={};dste={};key=;args=", pct(&src), pct(&dst));
    let hash = location.strip_prefix(&prefix).unwrap_or_default();
    check!(
        hash.len() == 6 && hash.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'),
        "location {location:?}: expected {prefix}<6 url-safe base64 characters>"
    );
    // Without the arguments hash the location matches no binding: nothing is removed.
    m.ok("DELETE", &prefix, Value::Null, "204").await?;
    check_eq!(m.ok("GET", &query, Value::Null, "200").await?, list.clone(), "bindings after deleting another location");
    let both = format!("/bindings?src={}&dstq={}&key=&dste={}", pct(&src), pct(&q), pct(&dst));
    check_eq!(m.ok("GET", &both, Value::Null, "200").await?, list, "dste wins over dstq");
    check_eq!(m.ok("DELETE", &location, Value::Null, "204").await?, Value::Null, "unbind body");
    check_eq!(m.ok("GET", &query, Value::Null, "200").await?, Value::List(vec![]), "bindings after unbind");
    let query = format!("/bindings?src={}&dstq={}&key=", pct(&src), pct(&q));
    let list = m.ok("GET", &query, Value::Null, "200").await?;
    let expected = Value::List(vec![map(vec![
        ("source", s(&src)),
        ("destination_queue", s(&q)),
        ("binding_key", s("")),
        ("arguments", map(vec![])),
        ("location", s(&format!("/bindings/src={};dstq={};key=;args=", pct(&src), pct(&q)))),
    ])]);
    check_eq!(list, expected, "queue binding listed");
    m.close().await
}

async fn binding_refusals(ctx: Ctx) -> CaseResult {
    let q = ctx.name("missing");
    let x = ctx.name("missing-x");
    let (_conn, ch) = ctx.lapin_channel().await?;
    let real = ctx.queue("q");
    lk::declare_queue(&ch, &real).await?;
    let mut m = Mgmt::open(&ctx).await?;
    let bind = |src: &str, q: &str| {
        map(vec![("source", s(src)), ("destination_queue", s(q)), ("binding_key", s("k")), ("arguments", map(vec![]))])
    };
    m.refused("POST", "/bindings", bind("amq.direct", &q), "400", &format!("no queue '{q}' in vhost '/'")).await?;
    m.refused("POST", "/bindings", bind(&x, &real), "400", &format!("no exchange '{x}' in vhost '/'")).await?;
    m.refused("POST", "/bindings", bind("", &real), "403", "operation not permitted on the default exchange").await?;
    m.close().await
}

async fn binding_delete_missing(ctx: Ctx) -> CaseResult {
    let q = ctx.name("missing");
    let mut m = Mgmt::open(&ctx).await?;
    let location = format!("/bindings/src=amq.direct;dstq={};key=k;args=", pct(&q));
    check_eq!(m.ok("DELETE", &location, Value::Null, "204").await?, Value::Null, "body");
    let list = m.ok("GET", &format!("/bindings?src=amq.direct&dstq={}&key=k", pct(&q)), Value::Null, "200").await?;
    check_eq!(list, Value::List(vec![]), "bindings of a missing queue");
    m.close().await
}

/// Waits for the end of session 0 and returns its condition and description.
async fn session_end(c: &mut Conn10) -> Result<(String, Option<String>), CaseError> {
    c.expect("end", WAIT, |ch, p, _| match p {
        Performative::End(e) if ch == 0 => Some(error_parts(&e.error)),
        _ => None,
    })
    .await
}

async fn no_response_credit(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let mut m = Mgmt::open_with(&ctx, true, None).await?;
    m.send("PUT", &queue_path(&q), map(vec![])).await?;
    check_eq!(
        session_end(&mut m.c).await?,
        (
            "amqp:precondition-failed".to_owned(),
            Some("insufficient credit (0) for management link from RabbitMQ to client".to_owned())
        ),
        "end"
    );
    let (conn, _ch) = ctx.lapin_channel().await?;
    check!(!lk::queue_exists(&conn, &q).await?, "the request was executed");
    Ok(())
}

async fn half_open_pair(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let mut m = Mgmt::open_with(&ctx, false, None).await?;
    m.send("PUT", &queue_path(&q), map(vec![])).await?;
    check_eq!(
        session_end(&mut m.c).await?,
        ("amqp:precondition-failed".to_owned(), Some("received transfer on half open management link pair".to_owned())),
        "end"
    );
    let (conn, _ch) = ctx.lapin_channel().await?;
    check!(!lk::queue_exists(&conn, &q).await?, "the request was executed");
    Ok(())
}

async fn attach_without_paired(ctx: Ctx) -> CaseResult {
    for role in [Role::Sender, Role::Receiver] {
        let mut c = session(&ctx).await?;
        let mut src = Source::builder().build();
        src.address = Some(NODE.to_owned());
        let a =
            attach_frame("pair", 0, role.clone(), SenderSettleMode::Settled, Some(src), Some(target_of(Some(NODE))));
        c.perf(0, &a).await?;
        check_eq!(
            session_end(&mut c).await?,
            (
                "amqp:invalid-field".to_owned(),
                Some("Link property 'paired' is not set to boolean value 'true'".to_owned())
            ),
            "end after a {role:?} attach"
        );
    }
    Ok(())
}

async fn sections_any_order(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let mut m = Mgmt::open(&ctx).await?;
    m.ok("PUT", &queue_path(&q), map(vec![]), "201").await?;
    let id = Value::String("any-order".to_owned());
    let mut payload = Msg::new().value(Value::Null).encode()?;
    let props = Msg::new()
        .prop(prop::MESSAGE_ID, id.clone())
        .prop(prop::TO, Value::String(queue_path(&q)))
        .prop(prop::SUBJECT, Value::String("GET".to_owned()))
        .prop(prop::REPLY_TO, Value::String("$me".to_owned()));
    payload.extend(props.encode()?);
    m.c.transfer(0, 0, 100, true, &payload).await?;
    let d = m.response().await?;
    let r = Received::parse(&d.payload)?;
    check_eq!(r.prop(prop::CORRELATION_ID), Some(id), "correlation-id");
    check_eq!(r.prop(prop::SUBJECT), Some(s("200")), "status");
    m.close().await
}

async fn pipelined(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let mut c = session(&ctx).await?;
    let mut src = Source::builder().build();
    src.address = Some(NODE.to_owned());
    let mut out =
        attach_frame("p", 0, Role::Sender, SenderSettleMode::Settled, Some(src.clone()), Some(target_of(Some(NODE))));
    out.properties = paired();
    let mut inc =
        attach_frame("p", 1, Role::Receiver, SenderSettleMode::Settled, Some(src), Some(target_of(Some(NODE))));
    inc.properties = paired();
    let flow = fe2o3_amqp_types::performatives::Flow {
        next_incoming_id: c.sessions.get(&0).map(|ids| ids.next_incoming),
        incoming_window: 5000,
        next_outgoing_id: 0,
        outgoing_window: 5000,
        handle: Some(fe2o3_amqp_types::definitions::Handle(1)),
        delivery_count: Some(u32::MAX - 4),
        link_credit: Some(10),
        available: None,
        drain: false,
        echo: false,
        properties: None,
    };
    let mut bytes = codec::perf(0, &out, &[])?;
    bytes.extend(codec::perf(0, &inc, &[])?);
    bytes.extend(codec::perf(0, &flow, &[])?);
    c.send(&bytes).await?;
    c.expect_attach(0, 0).await?;
    c.expect_attach(0, 1).await?;
    let mut m = Mgmt { c, next_id: 0, replies: (out, inc, 0) };
    m.ok("PUT", &queue_path(&q), map(vec![]), "201").await?;
    m.close().await
}
