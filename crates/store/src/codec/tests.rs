#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use bytes::{Bytes, BytesMut};
use charon_model::{
    Body, BrokerAnnotations, Death, DeathEvent, DeathHistory, DeathReason, Encoded, Message, MessageId, Origin,
    Properties, Routing, Table, Value,
};

use super::*;

fn every_value() -> Vec<Value> {
    let leaf = vec![
        Value::Null,
        Value::Bool(true),
        Value::Bool(false),
        Value::U8(255),
        Value::I8(-128),
        Value::U16(65535),
        Value::I16(-32768),
        Value::U32(u32::MAX),
        Value::I32(i32::MIN),
        Value::U64(u64::MAX),
        Value::I64(i64::MIN),
        Value::F32(-1.5),
        Value::F64(f64::MAX),
        Value::Decimal { scale: 2, value: 12345 },
        Value::Decimal32([1, 2, 3, 4]),
        Value::Decimal64([1, 2, 3, 4, 5, 6, 7, 8]),
        Value::Decimal128([9; 16]),
        Value::Char('é'),
        Value::Timestamp(-1_000),
        Value::Uuid([7; 16]),
        Value::Binary(Bytes::from_static(b"\x00\xff")),
        Value::LongStr(Bytes::from_static(b"not \xff utf-8")),
        Value::String("text".into()),
        Value::Symbol("sym".into()),
    ];
    let mut all = leaf.clone();
    all.push(Value::List(leaf.clone()));
    all.push(Value::Array(vec![Value::I64(1), Value::I64(2)]));
    all.push(Value::Map(vec![(Value::Symbol("k".into()), Value::List(leaf)), (Value::U8(1), Value::Null)]));
    all.push(Value::Table(Table(vec![("inner".into(), Value::Table(Table(vec![("x".into(), Value::I32(1))])))])));
    all.push(Value::Described(Box::new((Value::U64(0x70), Value::String("described".into())))));
    all
}

fn full_message() -> Message {
    let mut m = Message::new(
        Routing {
            exchange: "dlx".into(),
            routing_key: "key".into(),
            cc: vec!["c1".into(), "c2".into()],
            bcc: vec!["b".into()],
        },
        Body::Amqp10Sections(Bytes::from_static(b"\x00\x53\x77\xa1\x03abc")),
    );
    m.set_properties(Properties {
        content_type: Some("text/plain".into()),
        content_encoding: Some("gzip".into()),
        delivery_mode: Some(2),
        durable: Some(true),
        priority: Some(9),
        correlation_id: Some(MessageId::Uuid([3; 16])),
        reply_to: Some("reply".into()),
        ttl: Some(60_000),
        message_id: Some(MessageId::Binary(Bytes::from_static(b"id"))),
        timestamp: Some(1_700_000_000_000),
        message_type: Some("type".into()),
        user_id: Some(Bytes::from_static(b"guest")),
        app_id: Some("app".into()),
        cluster_id: Some("cluster".into()),
        to: Some("/queues/q".into()),
        subject: Some("subject".into()),
        absolute_expiry_time: Some(-5),
        group_id: Some("group".into()),
        group_sequence: Some(u32::MAX),
        reply_to_group_id: Some("rgroup".into()),
    });
    m.headers = Table(every_value().into_iter().enumerate().map(|(i, v)| (format!("h{i}"), v)).collect());
    m.annotations = Table(vec![("x-opt-thing".into(), Value::Symbol("s".into()))]);
    let death = |queue: &str, reason, ttl| Death {
        queue: queue.into(),
        reason,
        count: 3,
        first_time: 1,
        last_time: 2,
        exchange: "ex".into(),
        routing_keys: vec!["key".into(), "c1".into()],
        original_ttl: ttl,
    };
    let event = |queue: &str, reason| DeathEvent { queue: queue.into(), reason, exchange: "ex".into() };
    m.broker = BrokerAnnotations {
        deaths: Some(Box::new(DeathHistory {
            entries: vec![
                death("q1", DeathReason::Expired, Some(500)),
                death("q2", DeathReason::Maxlen, None),
                death("q3", DeathReason::DeliveryLimit, None),
                death("q4", DeathReason::Rejected, None),
            ],
            first: event("q4", DeathReason::Rejected),
            last: event("q1", DeathReason::Expired),
        })),
        delivery_count: 4,
        acquired_count: 7,
    };
    m.encoded = Encoded::Amqp10Bare(Bytes::from_static(b"\x00\x53\x70\x45"));
    m.origin = Origin::Amqp10;
    m
}

fn encode(m: &Message) -> Bytes {
    let mut out = BytesMut::new();
    encode_message(m, &mut out);
    out.freeze()
}

#[test]
fn every_field_and_every_value_type_round_trips() {
    let m = full_message();
    assert_eq!(decode_message(encode(&m)).unwrap(), m);
    let mut plain = Message::new(Routing::default(), Body::Data(Bytes::from_static(b"16 bytes of body")));
    plain.origin = Origin::Amqp091;
    plain.encoded = Encoded::Amqp091Properties(Bytes::from_static(&[0x10, 0x00, 0x02]));
    assert_eq!(decode_message(encode(&plain)).unwrap(), plain);
    // A small message stays small: the body plus a handful of bytes.
    assert!(encode(&plain).len() <= 16 + 3 + 20, "{} bytes", encode(&plain).len());
}

#[test]
fn nan_keeps_its_bits() {
    let mut m = Message::default();
    let nan = f64::from_bits(0x7ff8_0000_dead_beef);
    m.headers = Table(vec![("n".into(), Value::F64(nan))]);
    let back = decode_message(encode(&m)).unwrap();
    let Some(Value::F64(got)) = back.headers.get("n") else { panic!("{back:?}") };
    assert_eq!(got.to_bits(), nan.to_bits());
}

#[test]
fn the_body_is_a_slice_of_the_record() {
    let mut m = Message::default();
    m.body = Body::Data(Bytes::from(vec![42u8; 4096]));
    let bytes = encode(&m);
    let range = bytes.as_ptr() as usize..bytes.as_ptr() as usize + bytes.len();
    let back = decode_message(bytes.clone()).unwrap();
    assert!(range.contains(&(back.body.bytes().as_ptr() as usize)), "the body was copied");
}

#[test]
fn truncated_or_flipped_input_is_an_error_never_a_panic() {
    let bytes = encode(&full_message());
    for len in 0..bytes.len() {
        assert!(decode_message(bytes.slice(..len)).is_err(), "a {len}-byte prefix decoded");
    }
    for i in 0..bytes.len() {
        let mut flipped = bytes.to_vec();
        flipped[i] ^= 0xa5;
        let _ = decode_message(Bytes::from(flipped));
    }
}

#[test]
fn an_unknown_version_and_deep_nesting_are_refused() {
    let mut bytes = encode(&Message::default()).to_vec();
    bytes[0] = 9;
    assert!(matches!(decode_message(Bytes::from(bytes)), Err(CodecError::UnknownVersion(9))));
    let mut deep = Value::Null;
    for _ in 0..100 {
        deep = Value::List(vec![deep]);
    }
    let mut m = Message::default();
    m.headers = Table(vec![("deep".into(), deep)]);
    assert!(matches!(decode_message(encode(&m)), Err(CodecError::Malformed { what: "value nested too deeply", .. })));
}

#[test]
fn tables_decode_from_the_front_and_leave_the_rest() {
    let table =
        Table(vec![("x-max-length".into(), Value::I64(10)), ("x-queue-type".into(), Value::long_str("quorum"))]);
    let mut out = BytesMut::new();
    encode_table(&table, &mut out);
    out.extend_from_slice(b"rest");
    let mut bytes = out.freeze();
    assert_eq!(decode_table(&mut bytes).unwrap(), table);
    assert_eq!(&bytes[..], b"rest");
}
