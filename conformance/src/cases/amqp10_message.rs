//! AMQP 1.0 → AMQP 1.0: message-id types, body kinds and the immutable bare message.

use super::amqp10_attach::{queue, session};
use crate::{
    Case, CaseError, CaseResult, Ctx, case10, check_eq,
    fe2o3_kit::queue_addr,
    raw10::{
        Msg, Received, WAIT,
        link::outcome,
        message::{hdr, prop},
    },
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
            "a message annotation key that is not an x- symbol (a symbol without x-, a string, a ulong) \
             detaches the link with amqp:decode-error, as RabbitMQ 4.3 does",
            annotation_not_x
        )
        .deliberate(
            "RabbitMQ 4.0.5 ends the whole session with amqp:internal-error and a stack trace; Charon follows 4.3",
        ),
        case10!(
            "amqp10.message.id_of_any_type",
            "a message-id and correlation-id of a type the spec does not list (long, int, uint, ubyte, symbol, \
             boolean, double, list) are accepted and arrive byte-identical (go-amqp sends an int id as long)",
            id_any_type
        ),
        case10!(
            "amqp10.message.properties_of_other_types",
            "to, subject, reply-to, content-type, group-id, creation-time, group-sequence of other types are \
             accepted and arrive byte-identical",
            properties_other_types
        ),
        case10!(
            "amqp10.message.header_of_other_types",
            "header durable, priority, ttl and delivery-count of other types are accepted",
            header_other_types
        ),
        case10!(
            "amqp10.message.application_properties_of_other_types",
            "application properties with a symbol key, a list and a map value are accepted and arrive byte-identical",
            app_other_types
        ),
        case10!(
            "amqp10.message.user_id_not_binary",
            "a string user-id ends the publishing session; the connection goes on",
            user_id_string
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
    let keys = [
        (Value::Symbol(Symbol::from("not-x")), "{symbol,<<\"not-x\">>}"),
        (Value::String("x-string".into()), "{utf8,<<\"x-string\">>}"),
        (Value::Ulong(7), "{ulong,7}"),
    ];
    let mut c = session(&ctx).await?;
    for (handle, (key, term)) in (0u32..).zip(keys) {
        c.attach_sender(0, handle, Some(&queue_addr(&q))).await?;
        let m = Msg::new().ann_keyed(key, Value::String("v".into())).data(b"a");
        c.transfer(0, handle, handle, false, &m.encode()?).await?;
        let r = c.expect_refusal(0, handle).await?;
        let text = format!("failed to parse message: {{reserved_annotation_key,{term}}}");
        match &r {
            crate::raw10::Refusal::Detach(true, cond, Some(desc)) if cond == "amqp:decode-error" && *desc == text => {}
            other => return Err(CaseError::new(format!("expected detach amqp:decode-error {text:?}, got {other:?}"))),
        }
    }
    // The session goes on: a proper message on a new link is accepted.
    c.attach_sender(0, 9, Some(&queue_addr(&q))).await?;
    let state = c.publish(0, 9, 3, &Msg::new().ann("x-fine", Value::Int(1)).data(b"b").encode()?).await?;
    check_eq!(outcome(&state), "accepted", "a later publish on the session");
    c.close().await?;
    healthy.check().await
}

async fn id_any_type(ctx: Ctx) -> CaseResult {
    let ids = [
        Value::Long(-5),
        Value::Int(7),
        Value::Uint(9),
        Value::Ubyte(5),
        Value::Symbol(Symbol::from("sym")),
        Value::Bool(true),
        Value::Double(1.5.into()),
        Value::List(vec![Value::Int(1)]),
    ];
    for id in ids {
        let m = Msg::new().prop(prop::MESSAGE_ID, id.clone()).prop(prop::CORRELATION_ID, id.clone()).data(b"x");
        let got = bare_identical(&ctx, m).await.map_err(|e| e.context(&format!("id {id:?}")))?;
        check_eq!(got.prop(prop::MESSAGE_ID), Some(id.clone()), "message-id");
        check_eq!(got.prop(prop::CORRELATION_ID), Some(id), "correlation-id");
    }
    Ok(())
}

async fn properties_other_types(ctx: Ctx) -> CaseResult {
    let sym = |s: &str| Value::Symbol(Symbol::from(s));
    let m = Msg::new()
        .prop(prop::TO, sym("/queues/x"))
        .prop(prop::SUBJECT, Value::Int(4))
        .prop(prop::REPLY_TO, sym("/queues/r"))
        .prop(prop::CONTENT_TYPE, Value::String("text/plain".into()))
        .prop(prop::CREATION_TIME, Value::Long(1000))
        .prop(prop::GROUP_ID, sym("g"))
        .prop(prop::GROUP_SEQUENCE, Value::Int(3))
        .data(b"x");
    let got = bare_identical(&ctx, m).await?;
    check_eq!(got.prop(prop::SUBJECT), Some(Value::Int(4)), "subject");
    Ok(())
}

async fn header_other_types(ctx: Ctx) -> CaseResult {
    let m = Msg::new()
        .header(hdr::DURABLE, Value::Int(1))
        .header(hdr::PRIORITY, Value::Int(3))
        .header(hdr::TTL, Value::Long(60_000))
        .header(hdr::DELIVERY_COUNT, Value::Int(2))
        .data(b"x");
    let got = bare_identical(&ctx, m).await?;
    check_eq!(got.data(), Some(b"x".to_vec()), "body");
    Ok(())
}

async fn app_other_types(ctx: Ctx) -> CaseResult {
    let m = Msg::new()
        .app_keyed(Value::Symbol(Symbol::from("k")), Value::Int(1))
        .app("l", Value::List(vec![Value::Int(1)]))
        .app("m", Value::Map(OrderedMap::new()))
        .data(b"x");
    let got = bare_identical(&ctx, m).await?;
    check_eq!(got.app("l"), Some(Value::List(vec![Value::Int(1)])), "list value");
    Ok(())
}

async fn user_id_string(ctx: Ctx) -> CaseResult {
    let q = queue(&ctx).await?;
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, Some(&queue_addr(&q))).await?;
    let m = Msg::new().prop(prop::USER_ID, Value::String("guest".into())).data(b"x");
    c.transfer(0, 0, 0, false, &m.encode()?).await?;
    match c.expect_refusal(0, 0).await? {
        crate::raw10::Refusal::End(..) => {}
        other => return Err(CaseError::new(format!("expected the session to end, got {other:?}"))),
    }
    c.begin(1).await?;
    c.attach_sender(1, 0, Some(&queue_addr(&q))).await?;
    let state = c.publish(1, 0, 0, &Msg::new().data(b"y").encode()?).await?;
    check_eq!(outcome(&state), "accepted", "a publish on a new session");
    c.close().await
}
