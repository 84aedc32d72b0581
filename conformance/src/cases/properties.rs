//! Basic properties and header field types survive a trip through a queue unchanged.
//!
//! Publishing and consuming go through amqprs (a codec independent of the broker's) and, for
//! the header table, through lapin too, so a codec bug shared with Charon cannot hide.

use crate::{
    Case, CaseError, CaseResult, Ctx,
    amqprs_kit::{self as ak, s, table},
    case, check, check_eq,
    lapin_kit::{self as lk, confirm, publish_props},
};
use amqprs::{
    BasicProperties, ByteArray, DecimalValue, FieldArray, FieldTable, FieldValue,
    channel::{BasicConsumeArguments, QueueDeclareArguments},
};
use lapin::types::{
    AMQPValue, ByteArray as LByteArray, DecimalValue as LDecimal, FieldArray as LFieldArray, FieldTable as LFieldTable,
};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "props.roundtrip.all_basic_properties",
            "every basic property arrives exactly as published",
            ["amqprs"],
            all_props
        ),
        case!(
            "props.roundtrip.no_properties",
            "a message published with no properties arrives with none",
            ["amqprs"],
            no_props
        ),
        case!(
            "props.headers.all_field_types_amqprs",
            "header values of every field type keep type and value (amqprs codec)",
            ["amqprs"],
            headers_amqprs
        ),
        case!(
            "props.headers.all_field_types_lapin",
            "header values of every field type keep type and value (lapin codec)",
            headers_lapin
        ),
        case!(
            "props.user_id.matching_accepted",
            "user_id equal to the authenticated user is accepted and delivered",
            ["amqprs"],
            user_id_ok
        ),
        case!(
            "props.user_id.mismatch_406",
            "user_id different from the authenticated user closes the channel with 406",
            ["amqprs"],
            user_id_mismatch
        ),
    ]
}

/// Publishes `props`/`body` to a fresh queue over amqprs and returns what a consumer sees.
async fn roundtrip(ctx: &Ctx, props: BasicProperties, body: Vec<u8>) -> Result<(BasicProperties, Vec<u8>), CaseError> {
    let conn = ctx.amqprs().await?;
    let (ch, _ev) = ak::channel(&conn).await?;
    let q = ctx.queue("q");
    ch.queue_declare(QueueDeclareArguments::new(&q)).await?;
    let (_tag, mut rx) = ch.basic_consume_rx(BasicConsumeArguments::new(&q, "").manual_ack(false).finish()).await?;
    ak::publish(&ch, "", &q, props, body).await?;
    let m = ak::recv(&mut rx, lk::ARRIVE).await?;
    let p = m.basic_properties.ok_or_else(|| CaseError::new("delivery without content header"))?;
    Ok((p, m.content.unwrap_or_default()))
}

async fn all_props(ctx: Ctx) -> CaseResult {
    let user = ctx.broker().user.clone();
    let headers = table(vec![("h", s("v"))]);
    let props = BasicProperties::default()
        .with_content_type("application/json")
        .with_content_encoding("gzip")
        .with_headers(headers.clone())
        .with_delivery_mode(2)
        .with_priority(7)
        .with_correlation_id("corr-1")
        .with_reply_to("reply.queue")
        .with_expiration("60000")
        .with_message_id("msg-1")
        .with_timestamp(1_700_000_000)
        .with_message_type("order.created")
        .with_user_id(&user)
        .with_app_id("conformance")
        .finish();
    let (p, body) = roundtrip(&ctx, props, b"{}".to_vec()).await?;
    check_eq!(body, b"{}".to_vec(), "body");
    check_eq!(p.content_type().map(String::as_str), Some("application/json"), "content_type");
    check_eq!(p.content_encoding().map(String::as_str), Some("gzip"), "content_encoding");
    check_eq!(p.headers(), Some(&headers), "headers");
    check_eq!(p.delivery_mode(), Some(2), "delivery_mode");
    check_eq!(p.priority(), Some(7), "priority");
    check_eq!(p.correlation_id().map(String::as_str), Some("corr-1"), "correlation_id");
    check_eq!(p.reply_to().map(String::as_str), Some("reply.queue"), "reply_to");
    check_eq!(p.expiration().map(String::as_str), Some("60000"), "expiration");
    check_eq!(p.message_id().map(String::as_str), Some("msg-1"), "message_id");
    check_eq!(p.timestamp(), Some(1_700_000_000), "timestamp");
    check_eq!(p.message_type().map(String::as_str), Some("order.created"), "type");
    check_eq!(p.user_id().map(String::as_str), Some(user.as_str()), "user_id");
    check_eq!(p.app_id().map(String::as_str), Some("conformance"), "app_id");
    check_eq!(p.cluster_id(), None, "cluster_id");
    Ok(())
}

async fn no_props(ctx: Ctx) -> CaseResult {
    let (p, body) = roundtrip(&ctx, BasicProperties::default(), b"bare".to_vec()).await?;
    check_eq!(body, b"bare".to_vec(), "body");
    check!(
        p.content_type().is_none()
            && p.headers().is_none()
            && p.delivery_mode().is_none()
            && p.priority().is_none()
            && p.message_id().is_none()
            && p.timestamp().is_none()
            && p.user_id().is_none()
            && p.expiration().is_none(),
        "expected no properties, got {p:?}"
    );
    Ok(())
}

fn all_types() -> Result<FieldTable, CaseError> {
    let nested = table(vec![("inner", s("x")), ("n", FieldValue::I(-5))]);
    let array = FieldArray::try_from(vec![
        s("a"),
        FieldValue::I(1),
        FieldValue::t(false),
        FieldValue::F(table(vec![("k", s("v"))])),
    ])
    .map_err(|e| CaseError::new(format!("build array: {e}")))?;
    let bytes = ByteArray::try_from(vec![0u8, 1, 2, 255]).map_err(|e| CaseError::new(format!("build bytes: {e}")))?;
    Ok(table(vec![
        ("bool", FieldValue::t(true)),
        ("i8", FieldValue::b(-8)),
        ("u8", FieldValue::B(200)),
        ("i16", FieldValue::s(-16_000)),
        ("u16", FieldValue::u(60_000)),
        ("i32", FieldValue::I(-2_000_000_000)),
        ("u32", FieldValue::i(4_000_000_000)),
        ("i64", FieldValue::l(-9_000_000_000_000)),
        ("f32", FieldValue::f(1.5)),
        ("f64", FieldValue::d(-2.25e100)),
        ("decimal", FieldValue::D(DecimalValue::new(2, 12_345))),
        ("longstr", s("hello ünïcode")),
        ("timestamp", FieldValue::T(1_700_000_000)),
        ("table", FieldValue::F(nested)),
        ("array", FieldValue::A(array)),
        ("void", FieldValue::V),
        ("bytes", FieldValue::x(bytes)),
    ]))
}

async fn headers_amqprs(ctx: Ctx) -> CaseResult {
    let sent = all_types()?;
    let props = BasicProperties::default().with_headers(sent.clone()).finish();
    let (p, _) = roundtrip(&ctx, props, b"h".to_vec()).await?;
    let got = p.headers().cloned().unwrap_or_default();
    for (k, v) in sent.as_ref() {
        check_eq!(got.get(k), Some(v), "header {k}");
    }
    check_eq!(got.as_ref().len(), sent.as_ref().len(), "number of headers");
    Ok(())
}

async fn headers_lapin(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    let mut nested = LFieldTable::default();
    nested.insert("inner".into(), AMQPValue::LongString("x".into()));
    let mut arr = LFieldArray::default();
    arr.push(AMQPValue::LongString("a".into()));
    arr.push(AMQPValue::LongInt(1));
    arr.push(AMQPValue::Boolean(false));
    let mut sent = LFieldTable::default();
    for (k, v) in [
        ("bool", AMQPValue::Boolean(true)),
        ("i8", AMQPValue::ShortShortInt(-8)),
        ("u8", AMQPValue::ShortShortUInt(200)),
        ("i16", AMQPValue::ShortInt(-16_000)),
        ("u16", AMQPValue::ShortUInt(60_000)),
        ("i32", AMQPValue::LongInt(-2_000_000_000)),
        ("u32", AMQPValue::LongUInt(4_000_000_000)),
        ("i64", AMQPValue::LongLongInt(-9_000_000_000_000)),
        ("f32", AMQPValue::Float(1.5)),
        ("f64", AMQPValue::Double(-2.25e100)),
        ("decimal", AMQPValue::DecimalValue(LDecimal { scale: 2, value: 12_345 })),
        ("longstr", AMQPValue::LongString("hello".into())),
        ("timestamp", AMQPValue::Timestamp(1_700_000_000)),
        ("table", AMQPValue::FieldTable(nested)),
        ("array", AMQPValue::FieldArray(arr)),
        ("void", AMQPValue::Void),
        ("bytes", AMQPValue::ByteArray(LByteArray::from(vec![0u8, 1, 2, 255]))),
    ] {
        sent.insert(k.into(), v);
    }
    publish_props(&ch, "", &q, b"h", lapin::BasicProperties::default().with_headers(sent.clone())).await?;
    let m = lk::get(&ch, &q).await?.ok_or_else(|| CaseError::new("message missing"))?;
    let got = m.delivery.properties.headers().clone().unwrap_or_default();
    for (k, v) in sent.inner() {
        check_eq!(got.inner().get(k), Some(v), "header {k}");
    }
    check_eq!(got.inner().len(), sent.inner().len(), "number of headers");
    Ok(())
}

async fn user_id_ok(ctx: Ctx) -> CaseResult {
    let user = ctx.broker().user.clone();
    let (p, _) = roundtrip(&ctx, BasicProperties::default().with_user_id(&user).finish(), b"u".to_vec()).await?;
    check_eq!(p.user_id().map(String::as_str), Some(user.as_str()), "user_id");
    Ok(())
}

async fn user_id_mismatch(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let q = ctx.queue("q");
    ch.queue_declare(QueueDeclareArguments::new(&q)).await?;
    ak::publish(&ch, "", &q, BasicProperties::default().with_user_id("someone-else").finish(), b"u".to_vec()).await?;
    let user = &ctx.broker().user;
    ev.expect_close().await?.expect(
        406,
        &format!("PRECONDITION_FAILED - user_id property set to 'someone-else' but authenticated user was '{user}'"),
        60,
        40,
    )
}
