//! Conversion fidelity, AMQP 0.9.1 publisher → AMQP 1.0 consumer: one case per mapping row.
//!
//! The message is published with lapin (confirmed) and read with the raw 1.0 peer, so every
//! section and field is checked with its exact AMQP 1.0 type.

use super::amqp10_attach::session;
use crate::{
    Case, CaseError, CaseResult, Ctx, Variant, case_v, check_eq,
    fe2o3_kit::queue_addr,
    lapin_kit as lk,
    raw10::{
        Received, WAIT,
        message::{code, hdr, prop},
    },
};
use fe2o3_amqp_types::primitives::Value;
use lapin::{
    BasicProperties,
    types::{AMQPValue, ByteArray, DecimalValue, FieldArray, FieldTable},
};
use serde_amqp::primitives::{OrderedMap, Symbol, Timestamp, Uuid};

macro_rules! to10 {
    ($name:expr, $desc:expr, $f:path) => {
        case_v!($name, $desc, &[Variant::TO10], ["amqp10", "fidelity"], $f)
    };
}

pub(crate) fn cases() -> Vec<Case> {
    vec![
        to10!("fidelity.to10.content_type", "content_type → properties.content-type (symbol)", content_type),
        to10!(
            "fidelity.to10.content_encoding",
            "content_encoding → properties.content-encoding (symbol)",
            content_encoding
        ),
        to10!("fidelity.to10.delivery_mode_persistent", "delivery_mode 2 → header.durable true", persistent),
        to10!("fidelity.to10.delivery_mode_transient", "delivery_mode 1 → header.durable false", transient),
        to10!("fidelity.to10.priority", "priority → header.priority (ubyte)", priority),
        to10!("fidelity.to10.expiration", "expiration \"60000\" → header.ttl 60000 (uint)", expiration),
        to10!(
            "fidelity.to10.message_id_string",
            "message_id / correlation_id → string message-id / correlation-id",
            ids_string
        ),
        to10!("fidelity.to10.message_id_urn_uuid", "a urn:uuid: message_id / correlation_id → uuid", ids_uuid),
        to10!("fidelity.to10.reply_to", "reply_to → properties.reply-to (string)", reply_to),
        to10!("fidelity.to10.timestamp", "timestamp (seconds) → properties.creation-time (ms)", timestamp),
        to10!("fidelity.to10.type", "type → message annotation x-basic-type (string)", kind),
        to10!("fidelity.to10.user_id", "user_id → properties.user-id (binary)", user_id),
        to10!("fidelity.to10.app_id", "app_id → properties.group-id", app_id),
        to10!(
            "fidelity.to10.headers_strings",
            "longstr headers → string, non-UTF-8 longstr → binary, x (bytes) → binary",
            headers_strings
        ),
        to10!(
            "fidelity.to10.headers_integers",
            "b/B/s/u/I/i/l headers → byte/ubyte/short/ushort/int/uint/long",
            headers_integers
        ),
        to10!(
            "fidelity.to10.headers_other_simple",
            "t/f/d/T/V headers → boolean/float/double/timestamp(ms)/null",
            headers_other
        ),
        to10!(
            "fidelity.to10.headers_table_array_dropped",
            "table and array headers (not x-) are dropped",
            headers_dropped
        ),
        to10!(
            "fidelity.to10.x_headers_annotations",
            "x- headers → message annotations; tables → maps with symbol keys, arrays → lists",
            x_headers
        ),
        to10!("fidelity.to10.cc_header", "the CC header → annotation x-cc (list of strings)", cc),
        to10!(
            "fidelity.to10.routing_annotations",
            "the delivery carries x-exchange and x-routing-key annotations",
            routing_annotations
        ),
        to10!("fidelity.to10.body_one_data_section", "the body → exactly one data section with the same bytes", body),
        to10!(
            "fidelity.to10.no_properties",
            "a message without properties → header durable false, no properties section",
            no_props
        ),
        to10!(
            "fidelity.to10.decimal_header",
            "a decimal header: Charon delivers the message (RabbitMQ 4.0.5 crashes)",
            decimal
        )
        .deliberate("RabbitMQ 4.0.5 has no 1.0 mapping for a 0.9.1 decimal header and crashes the consuming session"),
    ]
}

/// Publishes over 0.9.1 to a fresh queue and reads the message over 1.0.
async fn via10(ctx: &Ctx, props: BasicProperties, body: &[u8]) -> Result<Received, CaseError> {
    let (_c, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    lk::publish_props(&ch, "", &q, body, props).await?;
    let mut c = session(ctx).await?;
    c.attach_receiver(0, 0, &queue_addr(&q)).await?;
    c.credit(0, 0, 1, false).await?;
    let d = c.recv(0, WAIT).await?;
    c.close().await?;
    Received::parse(&d.payload)
}

fn headers(entries: Vec<(&str, AMQPValue)>) -> BasicProperties {
    let mut t = FieldTable::default();
    for (k, v) in entries {
        t.insert(k.into(), v);
    }
    BasicProperties::default().with_headers(t)
}

fn s(v: &str) -> Value {
    Value::String(v.to_owned())
}

fn sym(v: &str) -> Value {
    Value::Symbol(Symbol::from(v))
}

fn ls(v: &str) -> AMQPValue {
    AMQPValue::LongString(v.into())
}

async fn content_type(ctx: Ctx) -> CaseResult {
    let m = via10(&ctx, BasicProperties::default().with_content_type("text/plain".into()), b"x").await?;
    check_eq!(m.prop(prop::CONTENT_TYPE), Some(sym("text/plain")), "content-type");
    Ok(())
}

async fn content_encoding(ctx: Ctx) -> CaseResult {
    let m = via10(&ctx, BasicProperties::default().with_content_encoding("gzip".into()), b"x").await?;
    check_eq!(m.prop(prop::CONTENT_ENCODING), Some(sym("gzip")), "content-encoding");
    Ok(())
}

async fn persistent(ctx: Ctx) -> CaseResult {
    let m = via10(&ctx, BasicProperties::default().with_delivery_mode(2), b"x").await?;
    check_eq!(m.header(hdr::DURABLE), Some(Value::Bool(true)), "durable");
    Ok(())
}

async fn transient(ctx: Ctx) -> CaseResult {
    let m = via10(&ctx, BasicProperties::default().with_delivery_mode(1), b"x").await?;
    check_eq!(m.header(hdr::DURABLE), Some(Value::Bool(false)), "durable");
    Ok(())
}

async fn priority(ctx: Ctx) -> CaseResult {
    let m = via10(&ctx, BasicProperties::default().with_priority(7), b"x").await?;
    check_eq!(m.header(hdr::PRIORITY), Some(Value::Ubyte(7)), "priority");
    Ok(())
}

async fn expiration(ctx: Ctx) -> CaseResult {
    let m = via10(&ctx, BasicProperties::default().with_expiration("60000".into()), b"x").await?;
    check_eq!(m.header(hdr::TTL), Some(Value::Uint(60_000)), "ttl");
    Ok(())
}

async fn ids_string(ctx: Ctx) -> CaseResult {
    let p = BasicProperties::default().with_message_id("m-1".into()).with_correlation_id("c-1".into());
    let m = via10(&ctx, p, b"x").await?;
    check_eq!(m.prop(prop::MESSAGE_ID), Some(s("m-1")), "message-id");
    check_eq!(m.prop(prop::CORRELATION_ID), Some(s("c-1")), "correlation-id");
    Ok(())
}

async fn ids_uuid(ctx: Ctx) -> CaseResult {
    let urn = "urn:uuid:0102030a-0b0c-0d0e-0f10-111213141516";
    let p = BasicProperties::default().with_message_id(urn.into()).with_correlation_id(urn.into());
    let m = via10(&ctx, p, b"x").await?;
    let uuid = Value::Uuid(Uuid::from([1, 2, 3, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22]));
    check_eq!(m.prop(prop::MESSAGE_ID), Some(uuid.clone()), "message-id");
    check_eq!(m.prop(prop::CORRELATION_ID), Some(uuid), "correlation-id");
    Ok(())
}

async fn reply_to(ctx: Ctx) -> CaseResult {
    let m = via10(&ctx, BasicProperties::default().with_reply_to("replies".into()), b"x").await?;
    check_eq!(m.prop(prop::REPLY_TO), Some(s("replies")), "reply-to");
    Ok(())
}

async fn timestamp(ctx: Ctx) -> CaseResult {
    let m = via10(&ctx, BasicProperties::default().with_timestamp(1_700_000_000), b"x").await?;
    check_eq!(
        m.prop(prop::CREATION_TIME),
        Some(Value::Timestamp(Timestamp::from_milliseconds(1_700_000_000_000))),
        "creation-time"
    );
    Ok(())
}

async fn kind(ctx: Ctx) -> CaseResult {
    let m = via10(&ctx, BasicProperties::default().with_type("order.created".into()), b"x").await?;
    check_eq!(m.ann("x-basic-type"), Some(s("order.created")), "x-basic-type annotation");
    Ok(())
}

async fn user_id(ctx: Ctx) -> CaseResult {
    let m = via10(&ctx, BasicProperties::default().with_user_id("guest".into()), b"x").await?;
    check_eq!(m.prop(prop::USER_ID), Some(Value::Binary(b"guest".to_vec().into())), "user-id");
    Ok(())
}

async fn app_id(ctx: Ctx) -> CaseResult {
    let m = via10(&ctx, BasicProperties::default().with_app_id("billing".into()), b"x").await?;
    check_eq!(m.prop(prop::GROUP_ID), Some(s("billing")), "group-id");
    Ok(())
}

async fn headers_strings(ctx: Ctx) -> CaseResult {
    let p = headers(vec![
        ("text", ls("héllo")),
        ("nul", AMQPValue::LongString(b"a\0b".to_vec().into())),
        ("latin1", AMQPValue::LongString(vec![0xffu8, 0xfe].into())),
        ("bytes", AMQPValue::ByteArray(ByteArray::from(vec![1u8, 2, 3]))),
    ]);
    let m = via10(&ctx, p, b"x").await?;
    check_eq!(m.app("text"), Some(s("héllo")), "longstr");
    check_eq!(m.app("nul"), Some(Value::Binary(b"a\0b".to_vec().into())), "longstr with NUL");
    check_eq!(m.app("latin1"), Some(Value::Binary(vec![0xffu8, 0xfe].into())), "non-UTF-8 longstr");
    check_eq!(m.app("bytes"), Some(Value::Binary(vec![1u8, 2, 3].into())), "byte array");
    Ok(())
}

async fn headers_integers(ctx: Ctx) -> CaseResult {
    let p = headers(vec![
        ("b", AMQPValue::ShortShortInt(-1)),
        ("B", AMQPValue::ShortShortUInt(200)),
        ("s", AMQPValue::ShortInt(-300)),
        ("u", AMQPValue::ShortUInt(60_000)),
        ("I", AMQPValue::LongInt(-70_000)),
        ("i", AMQPValue::LongUInt(4_000_000_000)),
        ("l", AMQPValue::LongLongInt(-5_000_000_000)),
    ]);
    let m = via10(&ctx, p, b"x").await?;
    let got: Vec<(String, Value)> = m.app_props();
    let expected = vec![
        ("b".to_owned(), Value::Byte(-1)),
        ("B".to_owned(), Value::Ubyte(200)),
        ("s".to_owned(), Value::Short(-300)),
        ("u".to_owned(), Value::Ushort(60_000)),
        ("I".to_owned(), Value::Int(-70_000)),
        ("i".to_owned(), Value::Uint(4_000_000_000)),
        ("l".to_owned(), Value::Long(-5_000_000_000)),
    ];
    let mut got_sorted = got;
    got_sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut exp_sorted = expected;
    exp_sorted.sort_by(|a, b| a.0.cmp(&b.0));
    check_eq!(got_sorted, exp_sorted, "application properties");
    Ok(())
}

async fn headers_other(ctx: Ctx) -> CaseResult {
    let p = headers(vec![
        ("t", AMQPValue::Boolean(true)),
        ("f", AMQPValue::Float(1.5)),
        ("d", AMQPValue::Double(-2.25)),
        ("T", AMQPValue::Timestamp(1_700_000_000)),
        ("V", AMQPValue::Void),
    ]);
    let m = via10(&ctx, p, b"x").await?;
    check_eq!(m.app("t"), Some(Value::Bool(true)), "boolean");
    check_eq!(m.app("f"), Some(Value::Float(1.5.into())), "float");
    check_eq!(m.app("d"), Some(Value::Double((-2.25).into())), "double");
    check_eq!(m.app("T"), Some(Value::Timestamp(Timestamp::from_milliseconds(1_700_000_000_000))), "timestamp (ms)");
    check_eq!(m.app("V"), Some(Value::Null), "void");
    Ok(())
}

fn table(entries: Vec<(&str, AMQPValue)>) -> AMQPValue {
    let mut t = FieldTable::default();
    for (k, v) in entries {
        t.insert(k.into(), v);
    }
    AMQPValue::FieldTable(t)
}

fn array(values: Vec<AMQPValue>) -> AMQPValue {
    let mut a = FieldArray::default();
    for v in values {
        a.push(v);
    }
    AMQPValue::FieldArray(a)
}

async fn headers_dropped(ctx: Ctx) -> CaseResult {
    let p = headers(vec![("tbl", table(vec![("k", ls("v"))])), ("arr", array(vec![ls("a")])), ("keep", ls("me"))]);
    let m = via10(&ctx, p, b"x").await?;
    check_eq!(m.app_props(), vec![("keep".to_owned(), s("me"))], "application properties");
    Ok(())
}

async fn x_headers(ctx: Ctx) -> CaseResult {
    let p = headers(vec![
        ("x-str", ls("v")),
        ("x-num", AMQPValue::LongLongInt(5)),
        ("x-tbl", table(vec![("k", ls("v"))])),
        ("x-arr", array(vec![ls("a"), AMQPValue::LongInt(1)])),
    ]);
    let m = via10(&ctx, p, b"x").await?;
    check_eq!(m.ann("x-str"), Some(s("v")), "x-str");
    check_eq!(m.ann("x-num"), Some(Value::Long(5)), "x-num");
    let mut map = OrderedMap::new();
    map.insert(sym("k"), s("v"));
    check_eq!(m.ann("x-tbl"), Some(Value::Map(map)), "x-tbl");
    check_eq!(m.ann("x-arr"), Some(Value::List(vec![s("a"), Value::Int(1)])), "x-arr");
    check_eq!(m.app_props(), Vec::<(String, Value)>::new(), "application properties");
    Ok(())
}

async fn cc(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    let p = headers(vec![("CC", array(vec![ls("other")]))]);
    lk::publish_props(&ch, "", &q, b"x", p).await?;
    let mut c = session(&ctx).await?;
    c.attach_receiver(0, 0, &queue_addr(&q)).await?;
    c.credit(0, 0, 1, false).await?;
    let m = Received::parse(&c.recv(0, WAIT).await?.payload)?;
    check_eq!(m.ann("x-cc"), Some(Value::List(vec![s("other")])), "x-cc");
    check_eq!(m.app("CC"), None, "CC application property");
    c.close().await
}

async fn routing_annotations(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::queue_bound(&ch, &q, "amq.direct", &q).await?;
    lk::publish(&ch, "amq.direct", &q, b"x").await?;
    let mut c = session(&ctx).await?;
    c.attach_receiver(0, 0, &queue_addr(&q)).await?;
    c.credit(0, 0, 1, false).await?;
    let m = Received::parse(&c.recv(0, WAIT).await?.payload)?;
    check_eq!(m.ann("x-exchange"), Some(s("amq.direct")), "x-exchange");
    check_eq!(m.ann("x-routing-key"), Some(s(&q)), "x-routing-key");
    check_eq!(m.prop(prop::SUBJECT), None, "subject");
    check_eq!(m.prop(prop::TO), None, "to");
    c.close().await
}

async fn body(ctx: Ctx) -> CaseResult {
    let data: Vec<u8> = (0..=255u8).collect();
    let m = via10(&ctx, BasicProperties::default(), &data).await?;
    let kinds: Vec<u64> = m.body().into_iter().map(|(c, _)| c).collect();
    check_eq!(kinds, vec![code::DATA], "body sections");
    check_eq!(m.data(), Some(data), "body bytes");
    Ok(())
}

async fn no_props(ctx: Ctx) -> CaseResult {
    let m = via10(&ctx, BasicProperties::default(), b"x").await?;
    check_eq!(m.header(hdr::DURABLE), Some(Value::Bool(false)), "durable");
    check_eq!(m.codes(), vec![code::HEADER, code::MESSAGE_ANNOTATIONS, code::DATA], "sections");
    Ok(())
}

async fn decimal(ctx: Ctx) -> CaseResult {
    let p =
        headers(vec![("dec", AMQPValue::DecimalValue(DecimalValue { scale: 2, value: 12345 })), ("keep", ls("me"))]);
    let m = via10(&ctx, p, b"x").await?;
    check_eq!(m.app("keep"), Some(s("me")), "other headers");
    check_eq!(m.data(), Some(b"x".to_vec()), "body");
    Ok(())
}
