//! Conversion fidelity, AMQP 1.0 publisher → AMQP 0.9.1 consumer: one case per mapping row.
//!
//! The message is encoded section by section with exact 1.0 types, published with the raw 1.0
//! peer (outcome accepted) and fetched with lapin `basic.get`, so every property and header is
//! checked with its 0.9.1 field type.

use super::amqp10_attach::session;
use crate::{
    Case, CaseError, CaseResult, Ctx, Variant, case_v, check, check_eq,
    fe2o3_kit::queue_addr,
    lapin_kit as lk,
    raw10::{
        Msg, codec,
        link::outcome,
        message::{hdr, prop},
    },
};
use fe2o3_amqp_types::primitives::Value;
use lapin::{
    BasicProperties,
    types::{AMQPValue, ByteArray, FieldArray},
};
use serde_amqp::primitives::{Symbol, Timestamp, Uuid};

macro_rules! to091 {
    ($name:expr, $desc:expr, $f:path) => {
        case_v!($name, $desc, &[Variant::TO091], ["amqp10", "fidelity"], $f)
    };
}

pub(crate) fn cases() -> Vec<Case> {
    vec![
        to091!("fidelity.to091.content_type", "properties.content-type (symbol) → content_type", content_type),
        to091!(
            "fidelity.to091.content_encoding",
            "properties.content-encoding (symbol) → content_encoding",
            content_encoding
        ),
        to091!("fidelity.to091.durable_true", "header.durable true → delivery_mode 2", durable_true),
        to091!("fidelity.to091.durable_false", "header.durable false → no delivery_mode", durable_false),
        to091!("fidelity.to091.no_header_durable", "no header section → delivery_mode 2 (stored durable)", no_header),
        to091!("fidelity.to091.priority", "header.priority → priority", priority),
        to091!("fidelity.to091.ttl", "header.ttl 60000 → expiration \"60000\"", ttl),
        to091!(
            "fidelity.to091.message_id_string",
            "string message-id / correlation-id → message_id / correlation_id",
            ids_string
        ),
        to091!("fidelity.to091.message_id_ulong", "ulong message-id / correlation-id → decimal text", ids_ulong),
        to091!("fidelity.to091.message_id_uuid", "uuid message-id / correlation-id → urn:uuid: text", ids_uuid),
        to091!(
            "fidelity.to091.message_id_binary",
            "binary message-id / correlation-id → headers x-message-id / x-correlation-id (byte array)",
            ids_binary
        ),
        to091!(
            "fidelity.to091.message_id_long_string",
            "a string message-id over 255 bytes → header x-message-id (longstr)",
            ids_long
        ),
        to091!("fidelity.to091.reply_to", "properties.reply-to → reply_to", reply_to),
        to091!(
            "fidelity.to091.creation_time",
            "properties.creation-time (ms) → timestamp (seconds, cut)",
            creation_time
        ),
        to091!("fidelity.to091.group_id", "properties.group-id → app_id", group_id),
        to091!("fidelity.to091.user_id", "properties.user-id (binary) → user_id", user_id),
        to091!(
            "fidelity.to091.dropped_properties",
            "to, subject, absolute-expiry-time, group-sequence, reply-to-group-id are not carried",
            dropped
        ),
        to091!(
            "fidelity.to091.app_props_strings",
            "string, symbol, binary application properties → longstr",
            app_strings
        ),
        to091!(
            "fidelity.to091.app_props_integers",
            "byte/ubyte/short/ushort/int/uint/long/ulong → b/B/s/u/I/i/l/l",
            app_integers
        ),
        to091!(
            "fidelity.to091.app_props_other_simple",
            "boolean/float/double/timestamp/null → t/f/d/T(seconds)/V",
            app_other
        ),
        to091!(
            "fidelity.to091.annotations_x_headers",
            "x- message annotations → headers; x-basic-type → type",
            annotations
        ),
        to091!("fidelity.to091.x_cc_annotation", "annotation x-cc (list) → CC header (array)", cc),
        to091!("fidelity.to091.body_data", "one data section → the body bytes, no type", body_data),
        to091!(
            "fidelity.to091.body_multiple_data",
            "several data sections → their bytes concatenated, no type",
            body_multi
        ),
        to091!(
            "fidelity.to091.body_amqp_value",
            "an amqp-value body → the raw 1.0 encoding of the section, type amqp-1.0",
            body_value
        ),
        to091!(
            "fidelity.to091.body_amqp_sequence",
            "amqp-sequence sections → their raw 1.0 encoding, type amqp-1.0",
            body_sequence
        ),
        to091!(
            "fidelity.to091.fields_of_other_types",
            "a string content-type → content_type; an application property with a symbol key is left out; \
             list and map values → array and table; a subject of another type is left out",
            other_types
        ),
        to091!(
            "fidelity.to091.message_id_of_other_types",
            "a long, int, uint or symbol message-id / correlation-id → its text (RabbitMQ crashes the consumer)",
            ids_other_types
        )
        .deliberate(
            "RabbitMQ has no 0.9.1 mapping for an id of a type the spec does not list and closes the consuming \
             connection with 541 INTERNAL_ERROR, so the message can never be consumed over 0.9.1",
        ),
        to091!(
            "fidelity.to091.app_prop_char",
            "a char application property: Charon delivers it as longstr (RabbitMQ 4.0.5 crashes)",
            char_prop
        )
        .deliberate("RabbitMQ 4.0.5 has no 0.9.1 mapping for a 1.0 char and crashes the consuming channel"),
        to091!(
            "fidelity.to091.app_prop_uuid",
            "a uuid application property: Charon delivers urn:uuid: text (RabbitMQ 4.0.5 crashes)",
            uuid_prop
        )
        .deliberate("RabbitMQ 4.0.5 has no 0.9.1 mapping for a 1.0 uuid and crashes the consuming channel"),
        to091!(
            "fidelity.to091.app_prop_decimal",
            "a decimal64 application property: Charon delivers the encoding as a byte array (RabbitMQ 4.0.5 crashes)",
            decimal_prop
        )
        .deliberate("RabbitMQ 4.0.5 has no 0.9.1 mapping for a 1.0 decimal and crashes the consuming channel"),
    ]
}

/// Publishes `msg` over raw 1.0 to a fresh queue and fetches it with `basic.get`.
async fn via091(ctx: &Ctx, msg: Msg) -> Result<(BasicProperties, Vec<u8>), CaseError> {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    let mut c = session(ctx).await?;
    c.attach_sender(0, 0, Some(&queue_addr(&q))).await?;
    check_eq!(outcome(&c.publish(0, 0, 0, &msg.encode()?).await?), "accepted", "publish outcome");
    c.close().await?;
    let got = lk::get(&ch, &q).await?.ok_or_else(|| CaseError::new("basic.get found no message"))?;
    Ok((got.delivery.properties.clone(), got.delivery.data.clone()))
}

fn s(v: &str) -> Value {
    Value::String(v.to_owned())
}

fn sym(v: &str) -> Value {
    Value::Symbol(Symbol::from(v))
}

fn short(v: Option<&lapin::types::ShortString>) -> Option<String> {
    v.map(|x| x.as_str().to_owned())
}

fn header(p: &BasicProperties, key: &str) -> Option<AMQPValue> {
    p.headers().as_ref().and_then(|h| h.inner().get(key).cloned())
}

fn ls(v: &str) -> AMQPValue {
    AMQPValue::LongString(v.into())
}

fn text(m: Msg) -> Msg {
    m.data(b"x")
}

async fn content_type(ctx: Ctx) -> CaseResult {
    let (p, _) = via091(&ctx, text(Msg::new().prop(prop::CONTENT_TYPE, sym("text/plain")))).await?;
    check_eq!(short(p.content_type().as_ref()), Some("text/plain".to_owned()), "content_type");
    Ok(())
}

async fn content_encoding(ctx: Ctx) -> CaseResult {
    let (p, _) = via091(&ctx, text(Msg::new().prop(prop::CONTENT_ENCODING, sym("gzip")))).await?;
    check_eq!(short(p.content_encoding().as_ref()), Some("gzip".to_owned()), "content_encoding");
    Ok(())
}

async fn durable_true(ctx: Ctx) -> CaseResult {
    let (p, _) = via091(&ctx, text(Msg::new().header(hdr::DURABLE, Value::Bool(true)))).await?;
    check_eq!(*p.delivery_mode(), Some(2), "delivery_mode");
    Ok(())
}

async fn durable_false(ctx: Ctx) -> CaseResult {
    let (p, _) = via091(&ctx, text(Msg::new().header(hdr::DURABLE, Value::Bool(false)))).await?;
    check_eq!(*p.delivery_mode(), None, "delivery_mode");
    Ok(())
}

async fn no_header(ctx: Ctx) -> CaseResult {
    let (p, _) = via091(&ctx, Msg::text("x")).await?;
    check_eq!(*p.delivery_mode(), Some(2), "delivery_mode");
    Ok(())
}

async fn priority(ctx: Ctx) -> CaseResult {
    let (p, _) = via091(&ctx, text(Msg::new().header(hdr::PRIORITY, Value::Ubyte(7)))).await?;
    check_eq!(*p.priority(), Some(7), "priority");
    Ok(())
}

async fn ttl(ctx: Ctx) -> CaseResult {
    let (p, _) = via091(&ctx, text(Msg::new().header(hdr::TTL, Value::Uint(60_000)))).await?;
    check_eq!(short(p.expiration().as_ref()), Some("60000".to_owned()), "expiration");
    Ok(())
}

async fn ids(ctx: &Ctx, id: Value) -> Result<BasicProperties, CaseError> {
    let m = Msg::new().prop(prop::MESSAGE_ID, id.clone()).prop(prop::CORRELATION_ID, id);
    Ok(via091(ctx, text(m)).await?.0)
}

async fn ids_string(ctx: Ctx) -> CaseResult {
    let p = ids(&ctx, s("id-1")).await?;
    check_eq!(short(p.message_id().as_ref()), Some("id-1".to_owned()), "message_id");
    check_eq!(short(p.correlation_id().as_ref()), Some("id-1".to_owned()), "correlation_id");
    Ok(())
}

async fn ids_ulong(ctx: Ctx) -> CaseResult {
    let p = ids(&ctx, Value::Ulong(18_446_744_073_709_551_615)).await?;
    check_eq!(short(p.message_id().as_ref()), Some("18446744073709551615".to_owned()), "message_id");
    check_eq!(short(p.correlation_id().as_ref()), Some("18446744073709551615".to_owned()), "correlation_id");
    Ok(())
}

async fn ids_uuid(ctx: Ctx) -> CaseResult {
    let p = ids(&ctx, Value::Uuid(Uuid::from([1, 2, 3, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22]))).await?;
    let urn = "urn:uuid:0102030a-0b0c-0d0e-0f10-111213141516".to_owned();
    check_eq!(short(p.message_id().as_ref()), Some(urn.clone()), "message_id");
    check_eq!(short(p.correlation_id().as_ref()), Some(urn), "correlation_id");
    Ok(())
}

async fn ids_binary(ctx: Ctx) -> CaseResult {
    let p = ids(&ctx, Value::Binary(vec![0u8, 1, 255].into())).await?;
    check_eq!(short(p.message_id().as_ref()), None, "message_id");
    check_eq!(short(p.correlation_id().as_ref()), None, "correlation_id");
    let bytes = AMQPValue::ByteArray(ByteArray::from(vec![0u8, 1, 255]));
    check_eq!(header(&p, "x-message-id"), Some(bytes.clone()), "x-message-id header");
    check_eq!(header(&p, "x-correlation-id"), Some(bytes), "x-correlation-id header");
    Ok(())
}

async fn ids_long(ctx: Ctx) -> CaseResult {
    let long = "m".repeat(300);
    let p = ids(&ctx, s(&long)).await?;
    check_eq!(short(p.message_id().as_ref()), None, "message_id");
    check_eq!(header(&p, "x-message-id"), Some(ls(&long)), "x-message-id header");
    check_eq!(header(&p, "x-correlation-id"), Some(ls(&long)), "x-correlation-id header");
    Ok(())
}

async fn reply_to(ctx: Ctx) -> CaseResult {
    let (p, _) = via091(&ctx, text(Msg::new().prop(prop::REPLY_TO, s("/queues/replies")))).await?;
    check_eq!(short(p.reply_to().as_ref()), Some("/queues/replies".to_owned()), "reply_to");
    Ok(())
}

async fn creation_time(ctx: Ctx) -> CaseResult {
    let ts = Value::Timestamp(Timestamp::from_milliseconds(1_700_000_000_999));
    let (p, _) = via091(&ctx, text(Msg::new().prop(prop::CREATION_TIME, ts))).await?;
    check_eq!(*p.timestamp(), Some(1_700_000_000), "timestamp");
    Ok(())
}

async fn group_id(ctx: Ctx) -> CaseResult {
    let (p, _) = via091(&ctx, text(Msg::new().prop(prop::GROUP_ID, s("billing")))).await?;
    check_eq!(short(p.app_id().as_ref()), Some("billing".to_owned()), "app_id");
    Ok(())
}

async fn user_id(ctx: Ctx) -> CaseResult {
    let (p, _) = via091(&ctx, text(Msg::new().prop(prop::USER_ID, Value::Binary(b"guest".to_vec().into())))).await?;
    check_eq!(short(p.user_id().as_ref()), Some("guest".to_owned()), "user_id");
    Ok(())
}

async fn dropped(ctx: Ctx) -> CaseResult {
    let m = Msg::new()
        .prop(prop::TO, s("/queues/elsewhere"))
        .prop(prop::SUBJECT, s("subj"))
        .prop(prop::ABSOLUTE_EXPIRY_TIME, Value::Timestamp(Timestamp::from_milliseconds(4_102_444_800_000)))
        .prop(prop::GROUP_SEQUENCE, Value::Uint(3))
        .prop(prop::REPLY_TO_GROUP_ID, s("rg"));
    let (p, _) = via091(&ctx, text(m)).await?;
    check_eq!(p.headers().clone(), None, "headers");
    check_eq!(short(p.expiration().as_ref()), None, "expiration");
    check_eq!(short(p.kind().as_ref()), None, "type");
    Ok(())
}

async fn app_strings(ctx: Ctx) -> CaseResult {
    let m =
        Msg::new().app("str", s("héllo")).app("sym", sym("a-symbol")).app("bin", Value::Binary(vec![0u8, 255].into()));
    let (p, _) = via091(&ctx, text(m)).await?;
    check_eq!(header(&p, "str"), Some(ls("héllo")), "string");
    check_eq!(header(&p, "sym"), Some(ls("a-symbol")), "symbol");
    check_eq!(header(&p, "bin"), Some(AMQPValue::LongString(vec![0u8, 255].into())), "binary");
    Ok(())
}

async fn app_integers(ctx: Ctx) -> CaseResult {
    let m = Msg::new()
        .app("byte", Value::Byte(-1))
        .app("ubyte", Value::Ubyte(200))
        .app("short", Value::Short(-300))
        .app("ushort", Value::Ushort(60_000))
        .app("int", Value::Int(-70_000))
        .app("uint", Value::Uint(4_000_000_000))
        .app("long", Value::Long(-5_000_000_000))
        .app("ulong", Value::Ulong(5_000_000_000));
    let (p, _) = via091(&ctx, text(m)).await?;
    check_eq!(header(&p, "byte"), Some(AMQPValue::ShortShortInt(-1)), "byte");
    check_eq!(header(&p, "ubyte"), Some(AMQPValue::ShortShortUInt(200)), "ubyte");
    check_eq!(header(&p, "short"), Some(AMQPValue::ShortInt(-300)), "short");
    check_eq!(header(&p, "ushort"), Some(AMQPValue::ShortUInt(60_000)), "ushort");
    check_eq!(header(&p, "int"), Some(AMQPValue::LongInt(-70_000)), "int");
    check_eq!(header(&p, "uint"), Some(AMQPValue::LongUInt(4_000_000_000)), "uint");
    check_eq!(header(&p, "long"), Some(AMQPValue::LongLongInt(-5_000_000_000)), "long");
    check_eq!(header(&p, "ulong"), Some(AMQPValue::LongLongInt(5_000_000_000)), "ulong");
    Ok(())
}

async fn app_other(ctx: Ctx) -> CaseResult {
    let m = Msg::new()
        .app("bool", Value::Bool(true))
        .app("float", Value::Float(1.5.into()))
        .app("double", Value::Double((-2.25).into()))
        .app("ts", Value::Timestamp(Timestamp::from_milliseconds(1_700_000_000_999)))
        .app("null", Value::Null);
    let (p, _) = via091(&ctx, text(m)).await?;
    check_eq!(header(&p, "bool"), Some(AMQPValue::Boolean(true)), "boolean");
    check_eq!(header(&p, "float"), Some(AMQPValue::Float(1.5)), "float");
    check_eq!(header(&p, "double"), Some(AMQPValue::Double(-2.25)), "double");
    check_eq!(header(&p, "ts"), Some(AMQPValue::Timestamp(1_700_000_000)), "timestamp (seconds)");
    check_eq!(header(&p, "null"), Some(AMQPValue::Void), "null");
    Ok(())
}

async fn other_types(ctx: Ctx) -> CaseResult {
    let m = Msg::new()
        .prop(prop::SUBJECT, Value::Int(4))
        .prop(prop::CONTENT_TYPE, s("text/plain"))
        .app_keyed(sym("k"), Value::Int(1))
        .app("l", Value::List(vec![Value::Int(1)]))
        .app("m", Value::Map(serde_amqp::primitives::OrderedMap::new()));
    let (p, _) = via091(&ctx, text(m)).await?;
    check_eq!(short(p.content_type().as_ref()), Some("text/plain".to_owned()), "content_type");
    check_eq!(header(&p, "k"), None, "the symbol-keyed property");
    check_eq!(header(&p, "l"), Some(AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::LongInt(1)]))), "list");
    check_eq!(header(&p, "m"), Some(AMQPValue::FieldTable(Default::default())), "map");
    let names: Vec<String> =
        p.headers().as_ref().map(|h| h.inner().keys().map(|k| k.to_string()).collect()).unwrap_or_default();
    check_eq!(names.len(), 2, "headers {names:?}");
    Ok(())
}

async fn ids_other_types(ctx: Ctx) -> CaseResult {
    for (id, text) in [(Value::Long(-5), "-5"), (Value::Int(7), "7"), (Value::Uint(9), "9"), (sym("sym"), "sym")] {
        let p = ids(&ctx, id).await?;
        check_eq!(short(p.message_id().as_ref()), Some(text.to_owned()), "message_id");
        check_eq!(short(p.correlation_id().as_ref()), Some(text.to_owned()), "correlation_id");
    }
    Ok(())
}

async fn annotations(ctx: Ctx) -> CaseResult {
    let m =
        Msg::new().ann("x-opt-color", s("blue")).ann("x-num", Value::Long(5)).ann("x-basic-type", s("order.created"));
    let (p, _) = via091(&ctx, text(m)).await?;
    check_eq!(header(&p, "x-opt-color"), Some(ls("blue")), "x-opt-color");
    check_eq!(header(&p, "x-num"), Some(AMQPValue::LongLongInt(5)), "x-num");
    check_eq!(header(&p, "x-basic-type"), None, "x-basic-type header");
    check_eq!(short(p.kind().as_ref()), Some("order.created".to_owned()), "type");
    Ok(())
}

async fn cc(ctx: Ctx) -> CaseResult {
    let m = Msg::new().ann("x-cc", Value::List(vec![s("k1"), s("k2")]));
    let (p, _) = via091(&ctx, text(m)).await?;
    let mut a = FieldArray::default();
    a.push(ls("k1"));
    a.push(ls("k2"));
    check_eq!(header(&p, "CC"), Some(AMQPValue::FieldArray(a)), "CC header");
    Ok(())
}

async fn body_data(ctx: Ctx) -> CaseResult {
    let (p, body) = via091(&ctx, Msg::text("plain bytes")).await?;
    check_eq!(body, b"plain bytes".to_vec(), "body");
    check_eq!(short(p.kind().as_ref()), None, "type");
    Ok(())
}

async fn body_multi(ctx: Ctx) -> CaseResult {
    let (p, body) = via091(&ctx, Msg::new().data(b"one").data(b"two")).await?;
    check_eq!(String::from_utf8_lossy(&body).into_owned(), "onetwo", "body");
    check_eq!(short(p.kind().as_ref()), None, "type");
    Ok(())
}

/// Fetches a non-data body over 0.9.1 and checks it is the encoding of `sections`.
async fn raw_body(ctx: &Ctx, msg: Msg) -> CaseResult {
    let sent = msg.encode()?;
    let (p, body) = via091(ctx, msg).await?;
    check_eq!(short(p.kind().as_ref()), Some("amqp-1.0".to_owned()), "type");
    let sections = codec::sections(&sent)?;
    let expected: Vec<u8> = sections.into_iter().flat_map(|(_, b)| b).collect();
    check_eq!(body, expected, "body = the 1.0 body sections as encoded by the publisher");
    Ok(())
}

async fn body_value(ctx: Ctx) -> CaseResult {
    raw_body(&ctx, Msg::new().value(Value::List(vec![s("a"), Value::Int(1)]))).await
}

async fn body_sequence(ctx: Ctx) -> CaseResult {
    raw_body(&ctx, Msg::new().sequence(vec![s("a")]).sequence(vec![Value::Long(2)])).await
}

/// Publishes one application property of a type 0.9.1 lacks, with a plain one next to it.
async fn exotic(ctx: &Ctx, v: Value) -> Result<BasicProperties, CaseError> {
    let (p, body) = via091(ctx, text(Msg::new().app("odd", v).app("keep", s("me")))).await?;
    check_eq!(body, b"x".to_vec(), "body");
    check_eq!(header(&p, "keep"), Some(ls("me")), "the plain property");
    Ok(p)
}

async fn char_prop(ctx: Ctx) -> CaseResult {
    let p = exotic(&ctx, Value::Char('é')).await?;
    check_eq!(header(&p, "odd"), Some(ls("é")), "char as longstr");
    Ok(())
}

async fn uuid_prop(ctx: Ctx) -> CaseResult {
    let p =
        exotic(&ctx, Value::Uuid(Uuid::from([1, 2, 3, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22]))).await?;
    check_eq!(header(&p, "odd"), Some(ls("urn:uuid:0102030a-0b0c-0d0e-0f10-111213141516")), "uuid as urn text");
    Ok(())
}

async fn decimal_prop(ctx: Ctx) -> CaseResult {
    let v = Value::Decimal64(serde_amqp::primitives::Dec64::from([0x22u8, 0x38, 0, 0, 0, 0, 0, 0x7b]));
    let encoded = codec::encode(&v)?;
    let p = exotic(&ctx, v).await?;
    let bytes = encoded.get(1..).map(<[u8]>::to_vec).unwrap_or_default();
    check!(bytes.len() == 8, "decimal64 encoding is 8 bytes");
    check_eq!(header(&p, "odd"), Some(AMQPValue::ByteArray(ByteArray::from(bytes))), "decimal as byte array");
    Ok(())
}
