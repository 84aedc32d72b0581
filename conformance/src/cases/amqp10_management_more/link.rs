//! The link pair itself: attach replies, credit, half-open pairs, section order, pipelining,
//! request targets that are no URI and requests RabbitMQ has no answer for.

use super::super::amqp10_attach::session;
use super::kit::*;
use crate::{
    CaseError, CaseResult, Ctx, check, check_eq,
    fe2o3_kit::pct,
    lapin_kit as lk,
    raw10::{
        Msg, Received, codec,
        link::{attach_frame, target_of},
        message::prop,
    },
};
use fe2o3_amqp_types::{
    definitions::{ReceiverSettleMode, Role, SenderSettleMode},
    messaging::{Source, TargetArchetype},
    primitives::Value,
};

pub(super) async fn attach_replies(ctx: Ctx) -> CaseResult {
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

pub(super) async fn no_response_credit(ctx: Ctx) -> CaseResult {
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

pub(super) async fn half_open_pair(ctx: Ctx) -> CaseResult {
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

pub(super) async fn attach_without_paired(ctx: Ctx) -> CaseResult {
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

pub(super) async fn sections_any_order(ctx: Ctx) -> CaseResult {
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

pub(super) async fn pipelined(ctx: Ctx) -> CaseResult {
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

pub(super) async fn bad_uri(ctx: Ctx) -> CaseResult {
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

pub(super) async fn unsupported_requests(ctx: Ctx) -> CaseResult {
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
