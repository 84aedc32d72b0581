//! AMQP 1.0 → AMQP 1.0: message-id types, body kinds and the immutable bare message.

use super::amqp10_attach::{queue, session};
use crate::{
    Case, CaseError, CaseResult, Ctx, case10, check_eq,
    fe2o3_kit::queue_addr,
    raw10::{Msg, Received, WAIT, link::outcome, message::prop},
};
use fe2o3_amqp_types::primitives::Value;
use serde_amqp::primitives::{OrderedMap, Symbol, Timestamp, Uuid};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case10!("amqp10.message.id_string", "a string message-id and correlation-id arrive as strings", id_string),
        case10!("amqp10.message.id_ulong", "a ulong message-id and correlation-id arrive as ulong", id_ulong),
        case10!("amqp10.message.id_uuid", "a uuid message-id and correlation-id arrive as uuid", id_uuid),
        case10!("amqp10.message.id_binary", "a binary message-id and correlation-id arrive as binary", id_binary),
        case10!(
            "amqp10.message.body_data_bare_identical",
            "a data body: the bare message arrives byte-identical",
            body_data
        ),
        case10!(
            "amqp10.message.body_multiple_data_sections",
            "three data sections stay three sections, byte-identical",
            body_multi_data
        ),
        case10!("amqp10.message.body_amqp_value", "an amqp-value body (a map) arrives byte-identical", body_value),
        case10!("amqp10.message.body_amqp_sequence", "two amqp-sequence sections arrive byte-identical", body_sequence),
        case10!(
            "amqp10.message.all_properties_bare_identical",
            "every properties field and application properties of every type arrive byte-identical",
            all_props
        ),
        case10!(
            "amqp10.message.annotations_kept",
            "client message-annotations (x-opt-*) are delivered unchanged",
            annotations
        ),
        case10!(
            "amqp10.message.header_durable_priority_ttl",
            "header durable/priority/ttl arrive as sent; delivery-count 0, first-acquirer true",
            header_fields
        ),
        case10!(
            "amqp10.message.annotation_without_x_prefix",
            "a message annotation key without x- ends the publishing session with amqp:internal-error",
            annotation_not_x
        ),
        case10!(
            "amqp10.message.empty_body_data",
            "a message with one empty data section arrives with one empty data section",
            empty_body
        ),
    ]
}

/// Publishes `msg` to a fresh queue over raw 1.0 and receives it back.
async fn roundtrip(ctx: &Ctx, msg: &Msg) -> Result<(Vec<u8>, Received), CaseError> {
    let q = queue(ctx).await?;
    let mut c = session(ctx).await?;
    c.attach_sender(0, 0, Some(&queue_addr(&q))).await?;
    let sent = msg.encode()?;
    let state = c.publish(0, 0, 0, &sent).await?;
    check_eq!(outcome(&state), "accepted", "publish outcome");
    c.attach_receiver(0, 1, &queue_addr(&q)).await?;
    c.credit(0, 1, 1, false).await?;
    let d = c.recv(0, WAIT).await?;
    c.close().await?;
    Ok((sent, Received::parse(&d.payload)?))
}

/// Round-trips and checks the bare message is byte-identical to what was sent.
async fn bare_identical(ctx: &Ctx, msg: Msg) -> Result<Received, CaseError> {
    let (sent, got) = roundtrip(ctx, &msg).await?;
    let sent_bare = Received::parse(&sent)?.bare();
    check_eq!(got.bare(), sent_bare, "bare message bytes");
    Ok(got)
}

async fn ids(ctx: &Ctx, id: Value) -> CaseResult {
    let msg = Msg::new().prop(prop::MESSAGE_ID, id.clone()).prop(prop::CORRELATION_ID, id.clone()).data(b"x");
    let got = bare_identical(ctx, msg).await?;
    check_eq!(got.prop(prop::MESSAGE_ID), Some(id.clone()), "message-id");
    check_eq!(got.prop(prop::CORRELATION_ID), Some(id), "correlation-id");
    Ok(())
}

async fn id_string(ctx: Ctx) -> CaseResult {
    ids(&ctx, Value::String("id-1".into())).await
}

async fn id_ulong(ctx: Ctx) -> CaseResult {
    ids(&ctx, Value::Ulong(u64::MAX - 1)).await
}

async fn id_uuid(ctx: Ctx) -> CaseResult {
    ids(&ctx, Value::Uuid(Uuid::from([7u8; 16]))).await
}

async fn id_binary(ctx: Ctx) -> CaseResult {
    ids(&ctx, Value::Binary(vec![0u8, 1, 2, 255].into())).await
}

async fn body_data(ctx: Ctx) -> CaseResult {
    let got = bare_identical(&ctx, Msg::text("hello")).await?;
    check_eq!(got.data(), Some(b"hello".to_vec()), "body");
    Ok(())
}

async fn body_multi_data(ctx: Ctx) -> CaseResult {
    let got = bare_identical(&ctx, Msg::new().data(b"one").data(b"").data(b"three")).await?;
    check_eq!(got.body().len(), 3, "number of data sections");
    Ok(())
}

async fn body_value(ctx: Ctx) -> CaseResult {
    let mut m = OrderedMap::new();
    m.insert(Value::String("k".into()), Value::Int(-5));
    m.insert(Value::Symbol(Symbol::from("s")), Value::List(vec![Value::Bool(true), Value::Null]));
    bare_identical(&ctx, Msg::new().value(Value::Map(m))).await?;
    Ok(())
}

async fn body_sequence(ctx: Ctx) -> CaseResult {
    let msg =
        Msg::new().sequence(vec![Value::Int(1), Value::String("two".into())]).sequence(vec![Value::Double(3.5.into())]);
    let got = bare_identical(&ctx, msg).await?;
    check_eq!(got.body().len(), 2, "number of amqp-sequence sections");
    Ok(())
}

async fn all_props(ctx: Ctx) -> CaseResult {
    let msg = Msg::new()
        .prop(prop::MESSAGE_ID, Value::String("mid".into()))
        .prop(prop::USER_ID, Value::Binary(b"guest".to_vec().into()))
        .prop(prop::TO, Value::String("/queues/elsewhere".into()))
        .prop(prop::SUBJECT, Value::String("subj".into()))
        .prop(prop::REPLY_TO, Value::String("/queues/reply".into()))
        .prop(prop::CORRELATION_ID, Value::Ulong(42))
        .prop(prop::CONTENT_TYPE, Value::Symbol(Symbol::from("text/plain")))
        .prop(prop::CONTENT_ENCODING, Value::Symbol(Symbol::from("gzip")))
        .prop(prop::ABSOLUTE_EXPIRY_TIME, Value::Timestamp(Timestamp::from_milliseconds(4_102_444_800_000)))
        .prop(prop::CREATION_TIME, Value::Timestamp(Timestamp::from_milliseconds(1_700_000_000_123)))
        .prop(prop::GROUP_ID, Value::String("g".into()))
        .prop(prop::GROUP_SEQUENCE, Value::Uint(7))
        .prop(prop::REPLY_TO_GROUP_ID, Value::String("rg".into()))
        .app("bool", Value::Bool(true))
        .app("ubyte", Value::Ubyte(1))
        .app("ushort", Value::Ushort(2))
        .app("uint", Value::Uint(3))
        .app("ulong", Value::Ulong(4))
        .app("byte", Value::Byte(-1))
        .app("short", Value::Short(-2))
        .app("int", Value::Int(-3))
        .app("long", Value::Long(-4))
        .app("float", Value::Float(1.5.into()))
        .app("double", Value::Double(2.5.into()))
        .app("char", Value::Char('é'))
        .app("timestamp", Value::Timestamp(Timestamp::from_milliseconds(1_700_000_000_123)))
        .app("uuid", Value::Uuid(Uuid::from([9u8; 16])))
        .app("binary", Value::Binary(vec![1u8, 2].into()))
        .app("string", Value::String("s".into()))
        .app("symbol", Value::Symbol(Symbol::from("sym")))
        .app("null", Value::Null)
        .data(b"body");
    bare_identical(&ctx, msg).await?;
    Ok(())
}

async fn annotations(ctx: Ctx) -> CaseResult {
    let msg = Msg::new().ann("x-opt-color", Value::String("blue".into())).ann("x-opt-n", Value::Long(5)).data(b"a");
    let (_, got) = roundtrip(&ctx, &msg).await?;
    check_eq!(got.ann("x-opt-color"), Some(Value::String("blue".into())), "x-opt-color");
    check_eq!(got.ann("x-opt-n"), Some(Value::Long(5)), "x-opt-n");
    Ok(())
}

async fn header_fields(ctx: Ctx) -> CaseResult {
    use crate::raw10::message::hdr;
    let msg = Msg::new()
        .header(hdr::DURABLE, Value::Bool(false))
        .header(hdr::PRIORITY, Value::Ubyte(7))
        .header(hdr::TTL, Value::Uint(60_000))
        .data(b"h");
    let (_, got) = roundtrip(&ctx, &msg).await?;
    check_eq!(got.header(hdr::DURABLE), Some(Value::Bool(false)), "durable");
    check_eq!(got.header(hdr::PRIORITY), Some(Value::Ubyte(7)), "priority");
    check_eq!(got.header(hdr::TTL), Some(Value::Uint(60_000)), "ttl");
    check_eq!(got.header(hdr::FIRST_ACQUIRER), Some(Value::Bool(true)), "first-acquirer");
    check_eq!(got.header(hdr::DELIVERY_COUNT), Some(Value::Uint(0)), "delivery-count (sent explicitly)");
    Ok(())
}

async fn empty_body(ctx: Ctx) -> CaseResult {
    let got = bare_identical(&ctx, Msg::new().data(b"")).await?;
    check_eq!(got.data(), Some(Vec::new()), "body");
    Ok(())
}

async fn annotation_not_x(ctx: Ctx) -> CaseResult {
    let q = queue(&ctx).await?;
    let healthy = crate::lapin_kit::Healthy::open(&ctx).await?;
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, Some(&queue_addr(&q))).await?;
    let m = Msg::new().ann("not-x", Value::String("v".into())).data(b"a");
    c.transfer(0, 0, 0, false, &m.encode()?).await?;
    let r = c.expect_refusal(0, 0).await?;
    let head = "{reserved_annotation_key,{symbol,<<\"not-x\">>}}\n[";
    match &r {
        crate::raw10::Refusal::End(cond, Some(desc)) if cond == "amqp:internal-error" && desc.starts_with(head) => {}
        other => return Err(CaseError::new(format!("expected end amqp:internal-error {head:?}..., got {other:?}"))),
    }
    c.begin(1).await?;
    c.close().await?;
    healthy.check().await
}
