//! One message across both protocols: every row of docs/fidelity.md, published over one
//! protocol and read over the other with the exact AMQP types, and the 1.0 bare message kept
//! byte for byte.
//!
//! The 1.0 side is the raw peer ([`crate::raw10`]) so sections can be built and read with their
//! exact types; the 0.9.1 side is lapin.

use super::amqp10_attach::session;
use crate::{
    Case, CaseError, CaseResult, Ctx, case10, check_eq,
    fe2o3_kit::queue_addr,
    lapin_kit::{self as lk, publish_props},
    raw10::{
        Msg, Received, WAIT,
        message::{hdr, prop},
    },
};
use fe2o3_amqp_types::messaging::{Accepted, DeliveryState};
use lapin::{
    BasicProperties,
    message::BasicGetMessage,
    types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString},
};
use serde_amqp::{
    Value,
    primitives::{Symbol, Timestamp, Uuid},
};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case10!(
            "fidelity.091_to_10.properties",
            "every 0.9.1 basic property reaches a 1.0 consumer in its header, properties or annotations, typed",
            props_091_to_10
        ),
        case10!(
            "fidelity.091_to_10.delivery_mode",
            "delivery-mode 2 becomes durable=true; 1 or absent becomes durable=false",
            delivery_mode_091_to_10
        ),
        case10!(
            "fidelity.091_to_10.headers",
            "simple headers become typed application properties, x- headers annotations, CC x-cc; tables and arrays are dropped",
            headers_091_to_10
        ),
        case10!(
            "fidelity.091_to_10.body",
            "a 0.9.1 body (also an empty one) arrives as exactly one data section",
            body_091_to_10
        ),
        case10!(
            "fidelity.10_to_091.properties",
            "1.0 header and properties reach a 0.9.1 consumer as basic properties; to and subject are dropped",
            props_10_to_091
        ),
        case10!(
            "fidelity.10_to_091.durable",
            "no header or no durable field → delivery-mode 2; durable=false → no delivery-mode",
            durable_10_to_091
        ),
        case10!(
            "fidelity.10_to_091.application_property_types",
            "each 1.0 application-property type becomes the 0.9.1 field type RabbitMQ picks",
            app_types_10_to_091
        ),
        case10!(
            "fidelity.10_to_091.ids",
            "ulong and uuid message-ids become strings; binary ids move to x-message-id / x-correlation-id headers",
            ids_10_to_091
        ),
        case10!(
            "fidelity.10_to_091.annotations",
            "x- message annotations become headers; the broker's internal ones do not",
            annotations_10_to_091
        ),
        case10!(
            "fidelity.10_to_091.non_data_body",
            "an amqp-value body reaches 0.9.1 as its raw 1.0 encoding with type amqp-1.0",
            value_body_10_to_091
        ),
        case10!(
            "fidelity.10_to_10.bare_message_unchanged",
            "a 1.0 consumer gets the bare message byte for byte as published",
            bare_unchanged
        ),
    ]
}

/// Declares a queue over 0.9.1.
async fn queue(ctx: &Ctx) -> Result<(lapin::Connection, lapin::Channel, String), CaseError> {
    let (c, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    Ok((c, ch, q))
}

/// Receives `n` messages from `q` over 1.0, accepting each.
async fn recv10(ctx: &Ctx, q: &str, n: u32) -> Result<Vec<Received>, CaseError> {
    let mut c = session(ctx).await?;
    c.attach_receiver(0, 0, &queue_addr(q)).await?;
    c.credit(0, 0, n, false).await?;
    let mut out = Vec::new();
    for _ in 0..n {
        let d = c.recv(0, WAIT).await?;
        c.settle(0, d.id(), d.id(), DeliveryState::Accepted(Accepted {})).await?;
        out.push(Received::parse(&d.payload)?);
    }
    c.close().await?;
    Ok(out)
}

/// Publishes `msgs` over 1.0 to `q`, each accepted.
async fn send10(ctx: &Ctx, q: &str, msgs: &[Msg]) -> CaseResult {
    let mut c = session(ctx).await?;
    c.attach_sender(0, 0, Some(&queue_addr(q))).await?;
    for (id, m) in (0u32..).zip(msgs) {
        let state = c.publish(0, 0, id, &m.encode()?).await?;
        check_eq!(crate::raw10::link::outcome(&state), "accepted", "outcome of message {id}");
    }
    c.close().await
}

async fn get091(ch: &lapin::Channel, q: &str) -> Result<BasicGetMessage, CaseError> {
    lk::get(ch, q).await?.ok_or_else(|| CaseError::new(format!("no message in {q}")))
}

fn s(text: &str) -> Value {
    Value::String(text.to_owned())
}

fn sym(text: &str) -> Value {
    Value::Symbol(Symbol::from(text))
}

fn longstr(text: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(text))
}

async fn props_091_to_10(ctx: Ctx) -> CaseResult {
    let (_c, ch, q) = queue(&ctx).await?;
    let props = BasicProperties::default()
        .with_content_type(ShortString::from("application/json"))
        .with_content_encoding(ShortString::from("gzip"))
        .with_delivery_mode(2)
        .with_priority(5)
        .with_correlation_id(ShortString::from("corr-1"))
        .with_reply_to(ShortString::from("reply-q"))
        .with_expiration(ShortString::from("60000"))
        .with_message_id(ShortString::from("msg-1"))
        .with_timestamp(1_700_000_000)
        .with_type(ShortString::from("order.created"))
        .with_user_id(ShortString::from(ctx.broker().user.as_str()))
        .with_app_id(ShortString::from("shop"));
    publish_props(&ch, "", &q, b"{}", props).await?;
    let m = recv10(&ctx, &q, 1).await?.remove(0);
    check_eq!(m.header(hdr::DURABLE), Some(Value::Bool(true)), "header.durable");
    check_eq!(m.header(hdr::PRIORITY), Some(Value::Ubyte(5)), "header.priority");
    check_eq!(m.header(hdr::TTL), Some(Value::Uint(60_000)), "header.ttl");
    check_eq!(m.prop(prop::MESSAGE_ID), Some(s("msg-1")), "message-id");
    let user = ctx.broker().user.as_bytes().to_vec();
    check_eq!(m.prop(prop::USER_ID), Some(Value::Binary(user.into())), "user-id");
    check_eq!(m.prop(prop::REPLY_TO), Some(s("reply-q")), "reply-to");
    check_eq!(m.prop(prop::CORRELATION_ID), Some(s("corr-1")), "correlation-id");
    check_eq!(m.prop(prop::CONTENT_TYPE), Some(sym("application/json")), "content-type");
    check_eq!(m.prop(prop::CONTENT_ENCODING), Some(sym("gzip")), "content-encoding");
    check_eq!(
        m.prop(prop::CREATION_TIME),
        Some(Value::Timestamp(Timestamp::from_milliseconds(1_700_000_000_000))),
        "creation-time"
    );
    check_eq!(m.prop(prop::GROUP_ID), Some(s("shop")), "group-id");
    check_eq!(m.ann("x-basic-type"), Some(s("order.created")), "x-basic-type annotation");
    check_eq!(m.ann("x-exchange"), Some(s("")), "x-exchange annotation");
    check_eq!(m.ann("x-routing-key"), Some(s(&q)), "x-routing-key annotation");
    Ok(())
}

async fn delivery_mode_091_to_10(ctx: Ctx) -> CaseResult {
    let (_c, ch, q) = queue(&ctx).await?;
    publish_props(&ch, "", &q, b"2", BasicProperties::default().with_delivery_mode(2)).await?;
    publish_props(&ch, "", &q, b"1", BasicProperties::default().with_delivery_mode(1)).await?;
    publish_props(&ch, "", &q, b"none", BasicProperties::default()).await?;
    let got: Vec<(String, Option<Value>)> =
        recv10(&ctx, &q, 3).await?.into_iter().map(|m| (m.text(), m.header(hdr::DURABLE))).collect();
    check_eq!(
        got,
        vec![
            ("2".to_owned(), Some(Value::Bool(true))),
            ("1".to_owned(), Some(Value::Bool(false))),
            ("none".to_owned(), Some(Value::Bool(false)))
        ],
        "(body, header.durable)"
    );
    Ok(())
}

async fn headers_091_to_10(ctx: Ctx) -> CaseResult {
    let (_c, ch, q) = queue(&ctx).await?;
    let mut headers = FieldTable::default();
    headers.insert("text".into(), longstr("hello"));
    headers.insert("int".into(), AMQPValue::LongInt(-7));
    headers.insert("long".into(), AMQPValue::LongLongInt(1 << 40));
    headers.insert("flag".into(), AMQPValue::Boolean(true));
    headers.insert("when".into(), AMQPValue::Timestamp(1_700_000_000));
    headers.insert("dbl".into(), AMQPValue::Double(1.5));
    let mut nested = FieldTable::default();
    nested.insert("a".into(), AMQPValue::LongInt(1));
    headers.insert("table".into(), AMQPValue::FieldTable(nested));
    headers.insert("array".into(), AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::LongInt(1)])));
    headers.insert("x-custom".into(), longstr("annotated"));
    headers.insert("CC".into(), AMQPValue::FieldArray(FieldArray::from(vec![longstr("nowhere")])));
    publish_props(&ch, "", &q, b"h", BasicProperties::default().with_headers(headers)).await?;
    let m = recv10(&ctx, &q, 1).await?.remove(0);
    let mut app = m.app_props();
    app.sort_by(|a, b| a.0.cmp(&b.0));
    check_eq!(
        app,
        vec![
            ("dbl".to_owned(), Value::Double(1.5.into())),
            ("flag".to_owned(), Value::Bool(true)),
            ("int".to_owned(), Value::Int(-7)),
            ("long".to_owned(), Value::Long(1 << 40)),
            ("text".to_owned(), s("hello")),
            ("when".to_owned(), Value::Timestamp(Timestamp::from_milliseconds(1_700_000_000_000))),
        ],
        "application properties (tables and arrays dropped)"
    );
    check_eq!(m.ann("x-custom"), Some(s("annotated")), "x- header as annotation");
    check_eq!(m.ann("x-cc"), Some(Value::List(vec![s("nowhere")])), "CC as x-cc annotation");
    Ok(())
}

async fn body_091_to_10(ctx: Ctx) -> CaseResult {
    let (_c, ch, q) = queue(&ctx).await?;
    let binary: Vec<u8> = (0..=255u8).collect();
    publish_props(&ch, "", &q, &binary, BasicProperties::default()).await?;
    publish_props(&ch, "", &q, b"", BasicProperties::default()).await?;
    let got = recv10(&ctx, &q, 2).await?;
    let bodies: Vec<Vec<(u64, Value)>> = got.iter().map(Received::body).collect();
    check_eq!(
        bodies,
        vec![
            vec![(crate::raw10::message::code::DATA, Value::Binary(binary.into()))],
            vec![(crate::raw10::message::code::DATA, Value::Binary(Vec::new().into()))]
        ],
        "body sections"
    );
    Ok(())
}

async fn props_10_to_091(ctx: Ctx) -> CaseResult {
    let (_c, ch, q) = queue(&ctx).await?;
    let user = ctx.broker().user.clone();
    let m = Msg::new()
        .header(hdr::DURABLE, Value::Bool(true))
        .header(hdr::PRIORITY, Value::Ubyte(4))
        .header(hdr::TTL, Value::Uint(30_000))
        .prop(prop::MESSAGE_ID, s("m-1"))
        .prop(prop::USER_ID, Value::Binary(user.as_bytes().to_vec().into()))
        .prop(prop::TO, s("/queues/elsewhere"))
        .prop(prop::SUBJECT, s("subj"))
        .prop(prop::REPLY_TO, s("/queues/replies"))
        .prop(prop::CORRELATION_ID, s("c-1"))
        .prop(prop::CONTENT_TYPE, sym("text/plain"))
        .prop(prop::CONTENT_ENCODING, sym("utf-8"))
        .prop(prop::CREATION_TIME, Value::Timestamp(Timestamp::from_milliseconds(1_700_000_000_999)))
        .prop(prop::GROUP_ID, s("grp"))
        .data(b"p");
    send10(&ctx, &q, &[m]).await?;
    let got = get091(&ch, &q).await?;
    let p = &got.delivery.properties;
    let text = |v: &Option<ShortString>| v.as_ref().map(|s| s.as_str().to_owned());
    check_eq!(*p.delivery_mode(), Some(2), "delivery-mode");
    check_eq!(*p.priority(), Some(4), "priority");
    check_eq!(text(p.expiration()), Some("30000".to_owned()), "expiration");
    check_eq!(text(p.message_id()), Some("m-1".to_owned()), "message-id");
    check_eq!(text(p.user_id()), Some(user), "user-id");
    check_eq!(text(p.reply_to()), Some("/queues/replies".to_owned()), "reply-to");
    check_eq!(text(p.correlation_id()), Some("c-1".to_owned()), "correlation-id");
    check_eq!(text(p.content_type()), Some("text/plain".to_owned()), "content-type");
    check_eq!(text(p.content_encoding()), Some("utf-8".to_owned()), "content-encoding");
    check_eq!(*p.timestamp(), Some(1_700_000_000), "timestamp (milliseconds cut)");
    check_eq!(text(p.app_id()), Some("grp".to_owned()), "app-id from group-id");
    check_eq!(text(p.kind()), None, "type");
    check_eq!(p.headers().as_ref().map(|h| h.inner().len()), None, "headers");
    Ok(())
}

async fn durable_10_to_091(ctx: Ctx) -> CaseResult {
    let (_c, ch, q) = queue(&ctx).await?;
    let msgs = [
        Msg::new().data(b"no-header"),
        Msg::new().header(hdr::PRIORITY, Value::Ubyte(1)).data(b"no-durable"),
        Msg::new().header(hdr::DURABLE, Value::Bool(false)).data(b"false"),
        Msg::new().header(hdr::DURABLE, Value::Bool(true)).data(b"true"),
    ];
    send10(&ctx, &q, &msgs).await?;
    let mut got = Vec::new();
    for _ in 0..msgs.len() {
        let m = get091(&ch, &q).await?;
        got.push((String::from_utf8_lossy(&m.delivery.data).into_owned(), *m.delivery.properties.delivery_mode()));
    }
    check_eq!(
        got,
        vec![
            ("no-header".to_owned(), Some(2)),
            ("no-durable".to_owned(), Some(2)),
            ("false".to_owned(), None),
            ("true".to_owned(), Some(2))
        ],
        "(body, delivery-mode)"
    );
    Ok(())
}

async fn app_types_10_to_091(ctx: Ctx) -> CaseResult {
    let (_c, ch, q) = queue(&ctx).await?;
    let m = Msg::new()
        .app("string", s("text"))
        .app("long", Value::Long(-5_000_000_000))
        .app("ulong", Value::Ulong(42))
        .app("int", Value::Int(-7))
        .app("uint", Value::Uint(7))
        .app("short", Value::Short(-3))
        .app("ushort", Value::Ushort(3))
        .app("byte", Value::Byte(-1))
        .app("ubyte", Value::Ubyte(1))
        .app("bool", Value::Bool(false))
        .app("float", Value::Float(0.5.into()))
        .app("double", Value::Double(2.5.into()))
        .app("timestamp", Value::Timestamp(Timestamp::from_milliseconds(1_700_000_000_500)))
        .app("binary", Value::Binary(b"bin".to_vec().into()))
        .app("null", Value::Null)
        .data(b"t");
    send10(&ctx, &q, &[m]).await?;
    let got = get091(&ch, &q).await?;
    let headers = got.delivery.properties.headers().clone().unwrap_or_default();
    let entries: Vec<(String, AMQPValue)> =
        headers.inner().iter().map(|(k, v)| (k.as_str().to_owned(), v.clone())).collect();
    check_eq!(
        entries,
        vec![
            ("binary".to_owned(), longstr("bin")),
            ("bool".to_owned(), AMQPValue::Boolean(false)),
            ("byte".to_owned(), AMQPValue::ShortShortInt(-1)),
            ("double".to_owned(), AMQPValue::Double(2.5)),
            ("float".to_owned(), AMQPValue::Float(0.5)),
            ("int".to_owned(), AMQPValue::LongInt(-7)),
            ("long".to_owned(), AMQPValue::LongLongInt(-5_000_000_000)),
            ("null".to_owned(), AMQPValue::Void),
            ("short".to_owned(), AMQPValue::ShortInt(-3)),
            ("string".to_owned(), longstr("text")),
            ("timestamp".to_owned(), AMQPValue::Timestamp(1_700_000_000)),
            ("ubyte".to_owned(), AMQPValue::ShortShortUInt(1)),
            ("uint".to_owned(), AMQPValue::LongUInt(7)),
            ("ulong".to_owned(), AMQPValue::LongLongInt(42)),
            ("ushort".to_owned(), AMQPValue::ShortUInt(3)),
        ],
        "headers (lapin sorts them by name)"
    );
    Ok(())
}

async fn ids_10_to_091(ctx: Ctx) -> CaseResult {
    let (_c, ch, q) = queue(&ctx).await?;
    let uuid = [0x12u8, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef];
    let msgs = [
        Msg::new().prop(prop::MESSAGE_ID, Value::Ulong(42)).prop(prop::CORRELATION_ID, Value::Ulong(43)).data(b"ulong"),
        Msg::new().prop(prop::MESSAGE_ID, Value::Uuid(Uuid::from(uuid))).data(b"uuid"),
        Msg::new()
            .prop(prop::MESSAGE_ID, Value::Binary(b"\x01\x02".to_vec().into()))
            .prop(prop::CORRELATION_ID, Value::Binary(b"\x03".to_vec().into()))
            .data(b"binary"),
    ];
    send10(&ctx, &q, &msgs).await?;
    let text = |v: &Option<ShortString>| v.as_ref().map(|s| s.as_str().to_owned());
    let m = get091(&ch, &q).await?;
    let p = &m.delivery.properties;
    check_eq!(
        (text(p.message_id()), text(p.correlation_id())),
        (Some("42".to_owned()), Some("43".to_owned())),
        "ulong ids"
    );
    let m = get091(&ch, &q).await?;
    check_eq!(
        text(m.delivery.properties.message_id()),
        Some("urn:uuid:12345678-9abc-def0-0123-456789abcdef".to_owned()),
        "uuid message-id"
    );
    let m = get091(&ch, &q).await?;
    let p = &m.delivery.properties;
    check_eq!((text(p.message_id()), text(p.correlation_id())), (None, None), "binary ids leave the properties");
    let headers = p.headers().clone().unwrap_or_default();
    let entries: Vec<(String, AMQPValue)> =
        headers.inner().iter().map(|(k, v)| (k.as_str().to_owned(), v.clone())).collect();
    check_eq!(
        entries,
        vec![
            ("x-correlation-id".to_owned(), AMQPValue::ByteArray(vec![3u8].into())),
            ("x-message-id".to_owned(), AMQPValue::ByteArray(vec![1u8, 2].into())),
        ],
        "binary ids as headers"
    );
    Ok(())
}

async fn annotations_10_to_091(ctx: Ctx) -> CaseResult {
    let (_c, ch, q) = queue(&ctx).await?;
    let m = Msg::new()
        .ann("x-opt-tenant", s("acme"))
        .ann("x-priority-hint", Value::Long(3))
        .ann("x-exchange", s("forged"))
        .ann("x-routing-key", s("forged"))
        .data(b"a");
    send10(&ctx, &q, &[m]).await?;
    let got = get091(&ch, &q).await?;
    let headers = got.delivery.properties.headers().clone().unwrap_or_default();
    let entries: Vec<(String, AMQPValue)> =
        headers.inner().iter().map(|(k, v)| (k.as_str().to_owned(), v.clone())).collect();
    check_eq!(
        entries,
        vec![("x-opt-tenant".to_owned(), longstr("acme")), ("x-priority-hint".to_owned(), AMQPValue::LongLongInt(3)),],
        "headers from annotations"
    );
    check_eq!(got.delivery.exchange.as_str(), "", "delivery exchange");
    check_eq!(got.delivery.routing_key.as_str(), q.as_str(), "delivery routing key");
    Ok(())
}

async fn value_body_10_to_091(ctx: Ctx) -> CaseResult {
    let (_c, ch, q) = queue(&ctx).await?;
    send10(&ctx, &q, &[Msg::new().value(s("hi"))]).await?;
    let got = get091(&ch, &q).await?;
    let kind = got.delivery.properties.kind().as_ref().map(|k| k.as_str().to_owned());
    check_eq!(kind, Some("amqp-1.0".to_owned()), "type");
    // described(0x77) utf8 "hi": 0x00 0x53 0x77 0xa1 0x02 'h' 'i'
    check_eq!(got.delivery.data, b"\x00\x53\x77\xa1\x02hi".to_vec(), "body bytes");
    Ok(())
}

async fn bare_unchanged(ctx: Ctx) -> CaseResult {
    let (_c, _ch, q) = queue(&ctx).await?;
    let m = Msg::new()
        .header(hdr::DURABLE, Value::Bool(true))
        .ann("x-opt-note", s("kept"))
        .prop(prop::MESSAGE_ID, Value::Ulong(7))
        .prop(prop::SUBJECT, s("subject survives over 1.0"))
        .prop(prop::GROUP_SEQUENCE, Value::Uint(9))
        .app("k", Value::Char('λ'))
        .app("u", Value::Uuid(Uuid::from([7u8; 16])))
        .sequence(vec![s("a"), Value::Long(1), Value::List(vec![Value::Null])])
        .sequence(vec![Value::Bool(true)]);
    let sent = Received::parse(&m.encode()?)?;
    send10(&ctx, &q, &[m]).await?;
    let got = recv10(&ctx, &q, 1).await?.remove(0);
    check_eq!(got.bare(), sent.bare(), "bare message bytes");
    check_eq!(got.ann("x-opt-note"), Some(s("kept")), "publisher's annotation");
    Ok(())
}
