//! The `/management` node: HTTP over AMQP 1.0 on a link pair, as RabbitMQ's own AMQP 1.0
//! clients use it (rabbitmq-amqp-python-client and friends).
//!
//! Requests carry `subject` = HTTP method, `to` = path, `reply-to` = `$me`, a message-id and an
//! amqp-value body; responses carry `subject` = status code, `correlation-id` = the request's
//! message-id, application property `http:response` = `1.1` and an amqp-value body.

use super::amqp10_attach::{session, session_of};
use crate::{
    Case, CaseError, CaseResult, Ctx, case10, check, check_eq,
    fe2o3_kit::pct,
    lapin_kit as lk,
    raw10::{
        Conn10, Msg, Received, WAIT,
        link::{attach_frame, outcome, target_of},
        message::prop,
    },
};
use fe2o3_amqp_types::{
    definitions::{Role, SenderSettleMode},
    messaging::Source,
    primitives::Value,
};
use serde_amqp::primitives::{OrderedMap, Symbol};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case10!(
            "amqp10.management.link_pair_attach",
            "the /management link pair attaches (paired=true) and the node grants credit",
            link_pair
        ),
        case10!(
            "amqp10.management.declare_refused_without_configure",
            "PUT /queues/q by a user without configure on q gets no response: the session ends with amqp:unauthorized-access and RabbitMQ's text (rabbit_amqp_management raises it in the session)",
            declare_refused_without_configure
        ),
        case10!(
            "amqp10.management.queue_declare",
            "PUT /queues/q declares: 201 with the queue map (name, vhost, durable, type, counts...)",
            queue_declare
        ),
        case10!(
            "amqp10.management.queue_redeclare_same",
            "PUT /queues/q again with the same properties: 200 (201 only when created)",
            queue_redeclare
        ),
        case10!(
            "amqp10.management.queue_inequivalent_409",
            "PUT /queues/q with another durability: 409 with the 0.9.1 inequivalence text",
            queue_409
        ),
        case10!("amqp10.management.queue_get", "GET /queues/q: 200 with message_count and consumer_count", queue_get),
        case10!(
            "amqp10.management.queue_get_missing_404",
            "GET /queues/<missing>: 404 \"queue '<q>' in vhost '/' not found\"",
            queue_404
        ),
        case10!(
            "amqp10.management.queue_delete",
            "DELETE /queues/q: 200 with message_count of the deleted queue",
            queue_delete
        ),
        case10!(
            "amqp10.management.queue_purge",
            "DELETE /queues/q/messages purges: 200 with message_count",
            queue_purge
        ),
        case10!("amqp10.management.queue_reserved_name_403", "PUT /queues/amq.x: 403", queue_403),
        case10!(
            "amqp10.management.exchange_declare_delete",
            "PUT /exchanges/x: 204; inequivalent type: 409; DELETE: 204",
            exchange
        ),
        case10!(
            "amqp10.management.binding_create_list_delete",
            "POST /bindings: 204; GET /bindings?src&dstq&key: 200 with location; DELETE location: 204",
            binding
        ),
        case10!(
            "amqp10.management.bad_binding_path_400",
            "DELETE /bindings/<garbage>: 400 bad binding path segment",
            binding_400
        ),
    ]
}

/// A raw connection with the management link pair attached (handles 0 out, 1 in).
struct Mgmt {
    c: Conn10,
    next_id: u64,
}

fn paired() -> Option<OrderedMap<Symbol, Value>> {
    Some([(Symbol::from("paired"), Value::Bool(true))].into_iter().collect())
}

impl Mgmt {
    async fn open(ctx: &Ctx) -> Result<Self, CaseError> {
        Self::attach(session(ctx).await?).await
    }

    /// The link pair on a connection as another user.
    async fn open_as(broker: &crate::broker::Broker) -> Result<Self, CaseError> {
        Self::attach(session_of(broker).await?).await
    }

    async fn attach(mut c: Conn10) -> Result<Self, CaseError> {
        let name = "management-link-pair";
        // The client terminus addresses of both halves must match: the sender's source and the
        // receiver's target (both null here).
        let mut out = attach_frame(
            name,
            0,
            Role::Sender,
            SenderSettleMode::Settled,
            Some(Source::builder().build()),
            Some(target_of(Some("/management"))),
        );
        out.properties = paired();
        c.perf(0, &out).await?;
        c.expect_attach(0, 0).await?;
        let mut src = Source::builder().build();
        src.address = Some("/management".to_owned());
        let mut inc =
            attach_frame(name, 1, Role::Receiver, SenderSettleMode::Settled, Some(src), Some(target_of(None)));
        inc.properties = paired();
        c.perf(0, &inc).await?;
        c.expect_attach(0, 1).await?;
        c.expect_flow(0, 0).await?;
        c.credit(0, 1, 100, false).await?;
        Ok(Self { c, next_id: 0 })
    }

    /// Sends one request and returns `(status, body, response)`.
    async fn request(&mut self, method: &str, path: &str, body: Value) -> Result<(String, Value, Received), CaseError> {
        let id = self.next_id;
        self.next_id += 1;
        let msg = Msg::new()
            .prop(prop::MESSAGE_ID, Value::Ulong(id))
            .prop(prop::TO, Value::String(path.to_owned()))
            .prop(prop::SUBJECT, Value::String(method.to_owned()))
            .prop(prop::REPLY_TO, Value::String("$me".to_owned()))
            .value(body);
        self.c.transfer(0, 0, u32::try_from(id).unwrap_or_default(), true, &msg.encode()?).await?;
        let d = self.c.recv(0, WAIT).await?;
        let r = Received::parse(&d.payload)?;
        check_eq!(r.prop(prop::CORRELATION_ID), Some(Value::Ulong(id)), "response correlation-id");
        check_eq!(r.app("http:response"), Some(Value::String("1.1".into())), "http:response application property");
        let status = match r.prop(prop::SUBJECT) {
            Some(Value::String(s)) => s,
            other => return Err(CaseError::new(format!("response subject: {other:?}"))),
        };
        let body = r.body().into_iter().next().map(|(_, v)| v).unwrap_or(Value::Null);
        Ok((status, body, r))
    }

    async fn close(mut self) -> CaseResult {
        self.c.close().await
    }
}

fn map(entries: Vec<(&str, Value)>) -> Value {
    Value::Map(entries.into_iter().map(|(k, v)| (Value::String(k.to_owned()), v)).collect())
}

fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Map(m) => m.get(&Value::String(key.to_owned())),
        _ => None,
    }
}

fn queue_body(durable: bool) -> Value {
    map(vec![
        ("durable", Value::Bool(durable)),
        ("exclusive", Value::Bool(false)),
        ("auto_delete", Value::Bool(false)),
        ("arguments", map(vec![])),
    ])
}

fn s(v: &str) -> Value {
    Value::String(v.to_owned())
}

async fn link_pair(ctx: Ctx) -> CaseResult {
    Mgmt::open(&ctx).await?.close().await
}

async fn declare_refused_without_configure(ctx: Ctx) -> CaseResult {
    let user = ctx.user_with("", Some(("^$", ".*", ".*"))).await?;
    let mut m = Mgmt::open_as(&user).await?;
    let q = ctx.queue("q");
    let id = m.next_id;
    let msg = Msg::new()
        .prop(prop::MESSAGE_ID, Value::Ulong(id))
        .prop(prop::TO, Value::String(format!("/queues/{}", pct(&q))))
        .prop(prop::SUBJECT, Value::String("PUT".to_owned()))
        .prop(prop::REPLY_TO, Value::String("$me".to_owned()))
        .value(queue_body(true));
    m.c.transfer(0, 0, u32::try_from(id).unwrap_or_default(), true, &msg.encode()?).await?;
    let mut seen = Vec::new();
    let end = loop {
        let (ch, p, _) = m.c.next(WAIT).await?;
        match p {
            fe2o3_amqp_types::performatives::Performative::End(e) if ch == 0 => {
                break crate::raw10::link::error_parts(&e.error);
            }
            other => seen.push(crate::raw10::conn::short(&other)),
        }
    };
    let text = format!("configure access to queue '{q}' in vhost '{}' refused for user '{}'", user.vhost, user.user);
    check_eq!(end, ("amqp:unauthorized-access".to_owned(), Some(text)), "end (after {seen:?})");
    check!(!lk::queue_exists(&ctx.lapin().await?, &q).await?, "nothing declared");
    m.close().await
}

async fn queue_declare(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let mut m = Mgmt::open(&ctx).await?;
    let (status, body, _) = m.request("PUT", &format!("/queues/{}", pct(&q)), queue_body(true)).await?;
    check_eq!(status, "201", "status of a new queue");
    let keys: Vec<String> = match &body {
        Value::Map(mm) => mm.keys().map(|k| format!("{k:?}")).collect(),
        other => return Err(CaseError::new(format!("body: {other:?}"))),
    };
    let expected_keys = [
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
    check_eq!(keys, expected_keys.map(|k| format!("{:?}", s(k))).to_vec(), "response map keys, in order");
    check!(matches!(get(&body, "leader"), Some(Value::String(_))), "leader: {:?}", get(&body, "leader"));
    check!(matches!(get(&body, "replicas"), Some(Value::Array(_))), "replicas: {:?}", get(&body, "replicas"));
    check_eq!(get(&body, "name"), Some(&s(&q)), "name");
    check_eq!(get(&body, "vhost"), Some(&s("/")), "vhost");
    check_eq!(get(&body, "durable"), Some(&Value::Bool(true)), "durable");
    check_eq!(get(&body, "auto_delete"), Some(&Value::Bool(false)), "auto_delete");
    check_eq!(get(&body, "exclusive"), Some(&Value::Bool(false)), "exclusive");
    check_eq!(get(&body, "type"), Some(&s("classic")), "type");
    check_eq!(get(&body, "message_count"), Some(&Value::Ulong(0)), "message_count");
    check_eq!(get(&body, "consumer_count"), Some(&Value::Uint(0)), "consumer_count");
    check_eq!(
        get(&body, "arguments"),
        Some(&map(vec![("x-queue-type", s("classic"))])),
        "arguments (x-queue-type added)"
    );
    m.close().await
}

async fn queue_redeclare(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let mut m = Mgmt::open(&ctx).await?;
    let path = format!("/queues/{}", pct(&q));
    check_eq!(m.request("PUT", &path, queue_body(false)).await?.0, "201", "first declare");
    check_eq!(m.request("PUT", &path, queue_body(false)).await?.0, "200", "second declare (existing queue)");
    m.close().await
}

async fn queue_409(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let mut m = Mgmt::open(&ctx).await?;
    let path = format!("/queues/{}", pct(&q));
    check_eq!(m.request("PUT", &path, queue_body(false)).await?.0, "201", "first declare");
    let (status, body, _) = m.request("PUT", &path, queue_body(true)).await?;
    check_eq!(
        (status.as_str(), body),
        (
            "409",
            s(&format!(
                "inequivalent arg 'durable' for queue '{q}' in vhost '/': received 'true' but current is 'false'"
            ))
        ),
        "inequivalent declare"
    );
    m.close().await
}

async fn queue_get(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    lk::publish(&ch, "", &q, b"1").await?;
    lk::publish(&ch, "", &q, b"2").await?;
    let mut m = Mgmt::open(&ctx).await?;
    let (status, body, _) = m.request("GET", &format!("/queues/{}", pct(&q)), Value::Null).await?;
    check_eq!(status, "200", "status");
    check_eq!(get(&body, "message_count"), Some(&Value::Ulong(2)), "message_count");
    check_eq!(get(&body, "durable"), Some(&Value::Bool(false)), "durable");
    m.close().await
}

async fn queue_404(ctx: Ctx) -> CaseResult {
    let q = ctx.name("missing");
    let mut m = Mgmt::open(&ctx).await?;
    let (status, body, _) = m.request("GET", &format!("/queues/{}", pct(&q)), Value::Null).await?;
    check_eq!((status.as_str(), body), ("404", s(&format!("queue '{q}' in vhost '/' not found"))), "response");
    m.close().await
}

async fn queue_delete(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    lk::publish(&ch, "", &q, b"1").await?;
    let mut m = Mgmt::open(&ctx).await?;
    let (status, body, _) = m.request("DELETE", &format!("/queues/{}", pct(&q)), Value::Null).await?;
    check_eq!((status.as_str(), body), ("200", map(vec![("message_count", Value::Ulong(1))])), "response");
    check!(!lk::queue_exists(&conn, &q).await?, "queue still exists");
    m.close().await
}

async fn queue_purge(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    for b in [b"1", b"2", b"3"] {
        lk::publish(&ch, "", &q, b).await?;
    }
    let mut m = Mgmt::open(&ctx).await?;
    let (status, body, _) = m.request("DELETE", &format!("/queues/{}/messages", pct(&q)), Value::Null).await?;
    check_eq!((status.as_str(), body), ("200", map(vec![("message_count", Value::Ulong(3))])), "response");
    check_eq!(lk::message_count(&conn, &q).await?, 0, "messages left");
    m.close().await
}

async fn queue_403(ctx: Ctx) -> CaseResult {
    let mut m = Mgmt::open(&ctx).await?;
    let (status, body, _) = m.request("PUT", "/queues/amq.reserved", queue_body(false)).await?;
    check_eq!(
        (status.as_str(), body),
        ("403", s("queue 'amq.reserved' in vhost '/' starts with reserved prefix 'amq.'")),
        "response"
    );
    m.close().await
}

fn exchange_body(kind: &str) -> Value {
    map(vec![
        ("type", s(kind)),
        ("durable", Value::Bool(true)),
        ("auto_delete", Value::Bool(false)),
        ("internal", Value::Bool(false)),
        ("arguments", map(vec![])),
    ])
}

async fn exchange(ctx: Ctx) -> CaseResult {
    let x = ctx.exchange("x");
    let mut m = Mgmt::open(&ctx).await?;
    let path = format!("/exchanges/{}", pct(&x));
    check_eq!(m.request("PUT", &path, exchange_body("direct")).await?.0, "204", "declare");
    check_eq!(m.request("PUT", &path, exchange_body("direct")).await?.0, "204", "same declare again");
    let (status, body, _) = m.request("PUT", &path, exchange_body("fanout")).await?;
    check_eq!(
        (status.as_str(), body),
        (
            "409",
            s(&format!(
                "inequivalent arg 'type' for exchange '{x}' in vhost '/': received 'fanout' but current is 'direct'"
            ))
        ),
        "inequivalent declare"
    );
    let (status, body, _) = m.request("DELETE", &path, Value::Null).await?;
    check_eq!((status.as_str(), body), ("204", Value::Null), "delete");
    m.close().await
}

async fn binding(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    let mut m = Mgmt::open(&ctx).await?;
    let req = map(vec![
        ("source", s("amq.direct")),
        ("destination_queue", s(&q)),
        ("binding_key", s("k/1")),
        ("arguments", map(vec![])),
    ]);
    check_eq!(m.request("POST", "/bindings", req).await?.0, "204", "create binding");
    let query = format!("/bindings?src=amq.direct&dstq={}&key={}", pct(&q), pct("k/1"));
    let (status, body, _) = m.request("GET", &query, Value::Null).await?;
    check_eq!(status, "200", "list status");
    let location = format!("/bindings/src=amq.direct;dstq={};key={};args=", pct(&q), pct("k/1"));
    let expected = Value::List(vec![map(vec![
        ("source", s("amq.direct")),
        ("destination_queue", s(&q)),
        ("binding_key", s("k/1")),
        ("arguments", map(vec![])),
        ("location", s(&location)),
    ])]);
    check_eq!(body, expected, "binding list");
    check_eq!(m.request("DELETE", &location, Value::Null).await?.0, "204", "delete binding");
    let (_, body, _) = m.request("GET", &query, Value::Null).await?;
    check_eq!(body, Value::List(vec![]), "bindings after delete");
    let out = outcome(&None);
    check_eq!(out, "none", "");
    m.close().await
}

async fn binding_400(ctx: Ctx) -> CaseResult {
    let mut m = Mgmt::open(&ctx).await?;
    let (status, body, _) = m.request("DELETE", "/bindings/garbage", Value::Null).await?;
    check_eq!((status.as_str(), body), ("400", s("bad binding path segment 'garbage'")), "response");
    m.close().await
}
