#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use charon_model::{
    Body, BrokerAnnotations, Death, DeathCause, DeathEvent, DeathHistory, DeathReason, Encoded, Message, MessageId,
    Origin, Properties, Routing, Table, Value,
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
        cause: None,
    };
    let event = |queue: &str, reason| DeathEvent { queue: queue.into(), reason, exchange: "ex".into() };
    m.broker = BrokerAnnotations {
        deaths: Some(Box::new(DeathHistory {
            entries: vec![
                death("q1", DeathReason::Expired, Some(500)),
                death("q2", DeathReason::Maxlen, None),
                death("q3", DeathReason::DeliveryLimit, None),
                Death { cause: Some(full_cause()), ..death("q4", DeathReason::Rejected, Some(7)) },
                Death { cause: annotations_only(), ..death("q5", DeathReason::Rejected, None) },
            ],
            first: event("q4", DeathReason::Rejected),
            last: event("q1", DeathReason::Expired),
        })),
        delivery_count: 4,
        acquired_count: 7,
        refusal: None,
        redrive_count: 3,
        not_before: Some(1_790_000_000_123),
    };
    m.encoded = Encoded::Amqp10Bare(Bytes::from_static(b"\x00\x53\x70\x45"));
    m.origin = Origin::Amqp10;
    m
}

/// A cause with every part, its info holding every value type.
fn full_cause() -> Arc<DeathCause> {
    let info = Table(every_value().into_iter().enumerate().map(|(i, v)| (format!("i{i}"), v)).collect());
    let annotations = Table(vec![("x-opt-why".into(), Value::String("schema".into()))]);
    let cause = DeathCause::new(
        Some("app:bad-payload".into()),
        Some("schema v2 expected".into()),
        Some(info),
        Some(annotations),
    );
    Arc::new(cause.unwrap())
}

/// A cause from `modified{undeliverable-here}`: annotations only.
fn annotations_only() -> Option<Arc<DeathCause>> {
    let annotations = Table(vec![("x-opt-why".into(), Value::Symbol("retry-budget".into()))]);
    DeathCause::new(None, None, None, Some(annotations)).map(Arc::new)
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
fn a_version_1_message_reads_without_a_redrive_count() {
    let mut m = Message::default();
    m.routing.routing_key = "k".into();
    let v3 = encode(&m).to_vec();
    // Version 1 ends with the acquired count, the death-history flag and the encoding kind:
    // the same bytes without the redrive count and the "not before" flag (the fourth and third
    // bytes from the end here).
    let mut v1 = v3.clone();
    v1[0] = 1;
    v1.drain(v1.len() - 4..v1.len() - 2);
    assert_eq!(decode_message(Bytes::from(v1)).unwrap(), m);
    m.broker.redrive_count = 300;
    assert_eq!(decode_message(encode(&m)).unwrap().broker.redrive_count, 300);
}

#[test]
fn a_version_2_message_reads_without_a_not_before_time() {
    let mut m = Message::default();
    m.broker.redrive_count = 2;
    let v3 = encode(&m).to_vec();
    // Version 2 is version 3 without the "not before" presence byte (third from the end).
    let mut v2 = v3.clone();
    v2[0] = 2;
    v2.remove(v2.len() - 3);
    assert_eq!(decode_message(Bytes::from(v2)).unwrap(), m);
    m.broker.not_before = Some(1_790_000_000_000);
    let with_time = encode(&m);
    assert_eq!(with_time.len(), v3.len() + 6, "a presence byte 1, then the zigzag varint of the time");
    assert_eq!(decode_message(with_time).unwrap().broker.not_before, Some(1_790_000_000_000));
    m.broker.not_before = Some(-5);
    assert_eq!(decode_message(encode(&m)).unwrap().broker.not_before, Some(-5));
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

#[test]
fn death_causes_round_trip_and_entries_without_one_stay_as_they_were() {
    let m = full_message();
    let back = decode_message(encode(&m)).unwrap();
    let deaths = back.broker.deaths.as_deref().unwrap();
    assert_eq!(deaths.entries[3].cause, Some(full_cause()));
    assert_eq!(deaths.entries[4].cause, annotations_only());
    assert_eq!(deaths.entries[..3].iter().filter(|d| d.cause.is_some()).count(), 0);
    // An entry without a cause costs nothing: the bytes are those of the layout before causes.
    let mut plain = full_message();
    plain.broker.deaths.as_deref_mut().unwrap().entries.truncate(3);
    let with_cause = {
        let mut m = plain.clone();
        m.broker.deaths.as_deref_mut().unwrap().entries[2].cause = annotations_only();
        m
    };
    let cause_bytes = 1 + 1 + 1 + "x-opt-why".len() + 1 + 1 + "retry-budget".len();
    assert_eq!(encode(&with_cause).len(), encode(&plain).len() + cause_bytes);
    // A message on its way to dead lettering keeps its refusal in memory only.
    let mut refused = plain.clone();
    refused.broker.refusal = Some(full_cause());
    assert_eq!(encode(&refused), encode(&plain));
}

/// A record written before death causes existed (the entry's TTL flag was a bool), byte by
/// byte: it still decodes, to entries without a cause.
#[test]
fn a_death_history_written_before_causes_still_decodes() {
    let mut old = vec![
        1, // format version
        1, // origin: 0.9.1
        0, // no properties
        0, // no headers
        0, // no annotations
        0, 2, b'h', b'i', // data body "hi"
        3, b'd', b'l', b'x', // exchange
        1, b'k', // routing key
        0, 0, // no CC, no BCC
        0, 0, // delivery count, acquired count
        1, // a death history
        2, // two entries
    ];
    // Entry 1: "q1", expired, count 2, first time 1000 (zigzag 2000), last 3000 (6000), exchange "x",
    // routing keys ["k"], original TTL 500.
    old.extend([2, b'q', b'1', 1, 2, 0xd0, 0x0f, 0xf0, 0x2e, 1, b'x', 1, 1, b'k', 1, 0xf4, 0x03]);
    // Entry 2: "q2", rejected, count 1, time 1000, exchange "", no routing keys, no TTL.
    old.extend([2, b'q', b'2', 0, 1, 0xd0, 0x0f, 0xd0, 0x0f, 0, 0, 0]);
    // First and last death: queue, reason, exchange.
    old.extend([2, b'q', b'2', 0, 1, b'x', 2, b'q', b'1', 1, 1, b'x']);
    old.push(0); // no original encoding
    let m = decode_message(Bytes::from(old.clone())).unwrap();
    let deaths = m.broker.deaths.as_deref().unwrap();
    let entries: Vec<_> = deaths
        .entries
        .iter()
        .map(|d| (d.queue.as_str(), d.reason, d.count, d.first_time, d.last_time, d.original_ttl, d.cause.is_some()))
        .collect();
    assert_eq!(
        entries,
        [
            ("q1", DeathReason::Expired, 2, 1000, 3000, Some(500), false),
            ("q2", DeathReason::Rejected, 1, 1000, 1000, None, false),
        ]
    );
    assert_eq!((deaths.first.queue.as_str(), deaths.last.queue.as_str()), ("q2", "q1"));
    // The current encoder writes such a history byte for byte as it was, in layout 3 (a zero
    // redrive count and no "not before" time after the acquired count).
    let mut current = old.clone();
    current[0] = 3;
    current.insert(19, 0);
    current.insert(20, 0);
    assert_eq!(encode(&m).to_vec(), current);
}

#[test]
fn a_corrupt_death_cause_is_an_error() {
    let mut m = Message::default();
    let keys = vec!["k".to_owned()];
    let cause = annotations_only().unwrap();
    let record = charon_model::DeathRecord {
        queue: "q",
        reason: DeathReason::Rejected,
        exchange: "x",
        routing_keys: &keys,
        ttl: None,
        now: 1,
        cause: Some(&cause),
    };
    m.broker.deaths = Some(Box::new(DeathHistory::new(&record)));
    let bytes = encode(&m).to_vec();
    // The entry's flags byte (2: a cause) is followed by the parts byte (8: annotations only).
    let at = bytes.windows(2).position(|w| w == [2, 8]).unwrap();
    for (offset, bad) in [(0, 4), (0, 0x82), (1, 0), (1, 0x18)] {
        let mut corrupt = bytes.clone();
        corrupt[at + offset] = bad;
        assert!(decode_message(Bytes::from(corrupt)).is_err(), "byte {offset} = {bad:#x} decoded");
    }
}

#[test]
fn properties_are_written_as_the_format_has_always_had_them() {
    // The bitmap (bits 0, 3, 7 and 19: 524,425 as a varint), then the present fields in bit
    // order: what logs written before the properties were encoded in place hold.
    let properties = Properties {
        content_type: Some("t".into()),
        durable: Some(true),
        ttl: Some(300),
        reply_to_group_id: Some("g".into()),
        ..Properties::default()
    };
    let mut out = BytesMut::new();
    message::put_properties(&mut out, &properties);
    assert_eq!(&out[..], [0x89, 0x81, 0x20, 1, b't', 1, 0xac, 0x02, 1, b'g']);
}
