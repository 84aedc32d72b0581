//! The fuzz targets' properties under proptest, inside `cargo test`: every seed of the recorded
//! corpus (`fuzz/corpus/`, real client traffic), random mutations of those seeds, random bytes,
//! and generated value trees up to and one past the nesting limit.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::PathBuf;

use bytes::{Bytes, BytesMut};
use charon_fuzz_props as props;
use charon_model::{MAX_DEPTH, Properties, Table, Value};
use proptest::prelude::*;

/// A property over one input.
type Property = fn(&[u8]);

/// Each fuzz target's name and its property.
const TARGETS: &[(&str, Property)] = &[
    ("amqp091_connection", |data| {
        let _ = props::amqp091_connection(data);
    }),
    ("amqp10_connection", |data| {
        let _ = props::amqp10_connection(data);
    }),
    ("amqp091_properties", props::amqp091_properties),
    ("amqp10_message", props::amqp10_message),
    ("store_message", props::store_message),
    ("http_json", props::http_json),
];

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| std::fs::read(entry.unwrap().path()).unwrap())
        .collect();
    seeds.sort();
    seeds
}

/// The store's own seeds: the encodings of every message the 0.9.1 property seeds make.
fn store_seeds() -> Vec<Vec<u8>> {
    corpus("amqp091_properties")
        .iter()
        .filter_map(|raw| charon_amqp091::codec::decode_properties(&Bytes::copy_from_slice(raw)).ok())
        .map(|decoded| {
            let mut message = charon_model::Message::new(Default::default(), charon_model::Body::Data(Bytes::new()));
            message.set_boxed_properties(decoded.properties);
            message.headers = decoded.headers;
            let mut out = BytesMut::new();
            charon_store::codec::encode_message(&message, &mut out);
            out.to_vec()
        })
        .collect()
}

fn seeds(target: &str) -> Vec<Vec<u8>> {
    if target == "store_message" { store_seeds() } else { corpus(target) }
}

/// The recorded client sessions get through the handshake to publishing: the connection
/// targets reach the code that matters, not only the handshake's error paths.
#[test]
fn recorded_sessions_publish_through_the_engines() {
    let published: usize = corpus("amqp091_connection").iter().map(|s| props::amqp091_connection(s)).sum();
    assert!(published > 0, "no 0.9.1 seed published");
    let published: usize = corpus("amqp10_connection").iter().map(|s| props::amqp10_connection(s)).sum();
    assert!(published > 0, "no 1.0 seed published");
}

#[test]
fn every_target_has_seeds_and_each_seed_keeps_its_property() {
    for (target, property) in TARGETS {
        let seeds = seeds(target);
        assert!(!seeds.is_empty(), "{target} has no seeds");
        for seed in &seeds {
            property(seed);
        }
    }
}

/// One edit of a seed: overwrite, insert or delete a byte, or cut the rest.
#[derive(Clone, Debug)]
enum Edit {
    Set(usize, u8),
    Insert(usize, u8),
    Delete(usize),
    Truncate(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Edit::Set(at, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Edit::Insert(at, b)),
        any::<usize>().prop_map(Edit::Delete),
        any::<usize>().prop_map(Edit::Truncate),
    ]
}

fn mutate(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for edit in edits {
        let len = bytes.len().max(1);
        match *edit {
            Edit::Set(at, b) if !bytes.is_empty() => bytes[at % len] = b,
            Edit::Insert(at, b) => bytes.insert(at % (bytes.len() + 1), b),
            Edit::Delete(at) if !bytes.is_empty() => {
                bytes.remove(at % len);
            }
            Edit::Truncate(at) => bytes.truncate(at % (bytes.len() + 1)),
            _ => {}
        }
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_seeds_keep_every_property(target in 0..TARGETS.len(), pick in any::<usize>(),
                                         edits in proptest::collection::vec(edit(), 1..8)) {
        let (name, property) = TARGETS[target];
        let seeds = seeds(name);
        property(&mutate(seeds[pick % seeds.len()].clone(), &edits));
    }

    #[test]
    fn random_bytes_keep_every_property(target in 0..TARGETS.len(),
                                        bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        TARGETS[target].1(&bytes);
    }

    /// Headers of any shape within the limit: 0.9.1 encoding → decoding → store round trip.
    #[test]
    fn headers_of_any_shape_read_back(headers in table(4)) {
        let mut raw = BytesMut::new();
        charon_amqp091::codec::encode_properties(&mut raw, &Properties::default(), &headers, None);
        let decoded = charon_amqp091::codec::decode_properties(&raw.clone().freeze()).unwrap();
        prop_assert_eq!(decoded.headers.0.len(), headers.0.len());
        props::amqp091_properties(&raw);
    }
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i8>().prop_map(Value::I8),
        any::<i32>().prop_map(Value::I32),
        any::<i64>().prop_map(Value::I64),
        any::<f64>().prop_map(Value::F64),
        ".{0,12}".prop_map(|s| Value::long_str(&s)),
        proptest::collection::vec(any::<u8>(), 0..12).prop_map(|b| Value::Binary(Bytes::from(b))),
    ]
}

fn table(depth: u32) -> impl Strategy<Value = Table> {
    let value = leaf().prop_recursive(depth, 64, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::List),
            proptest::collection::vec(("[a-z]{1,6}", inner), 0..4).prop_map(|e| Value::Table(Table(e))),
        ]
    });
    proptest::collection::vec(("[a-z]{1,8}", value), 0..6).prop_map(Table)
}

/// `{"a": [[...[1]...]]}` with the int `levels` levels below the headers table.
fn chain(levels: usize) -> Table {
    let inner = (1..levels).fold(Value::I32(1), |v, _| Value::List(vec![v]));
    Table(vec![("a".to_owned(), inner)])
}

#[test]
fn headers_at_the_limit_read_back_and_one_level_more_is_refused() {
    for (levels, accepted) in [(MAX_DEPTH, true), (MAX_DEPTH + 1, false)] {
        let mut raw = BytesMut::new();
        charon_amqp091::codec::encode_properties(&mut raw, &Properties::default(), &chain(levels), None);
        let decoded = charon_amqp091::codec::decode_properties(&raw.clone().freeze());
        assert_eq!(decoded.is_ok(), accepted, "{levels} levels");
        props::amqp091_properties(&raw);
    }
}
