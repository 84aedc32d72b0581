//! AMQP 1.0 framing and the few encoding primitives the raw peer needs.
//!
//! Frames are laid out by hand (size, doff, type, channel, body). Performatives and message
//! sections are serialized with `serde_amqp` (the type codec of the fe2o3 client, not Charon's),
//! and [`value_len`] walks encoded values by their constructor so payloads can be split into
//! sections byte-exactly without trusting any decoder.

use crate::error::CaseError;
use serde::Serialize;
use serde_amqp::{Value, described::Described, descriptor::Descriptor};

/// The AMQP 1.0 protocol header (protocol id 0).
pub const AMQP_HEADER: &[u8; 8] = b"AMQP\x00\x01\x00\x00";
/// The SASL security-layer header (protocol id 3).
pub const SASL_HEADER: &[u8; 8] = b"AMQP\x03\x01\x00\x00";
/// Frame type of AMQP frames.
pub const TYPE_AMQP: u8 = 0;
/// Frame type of SASL frames.
pub const TYPE_SASL: u8 = 1;

/// A frame with `body` (performative + payload) on `channel`, doff 2.
pub fn frame(kind: u8, channel: u16, body: &[u8]) -> Vec<u8> {
    let size = u32::try_from(body.len() + 8).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(body.len() + 8);
    out.extend_from_slice(&size.to_be_bytes());
    out.push(2);
    out.push(kind);
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// Serializes any AMQP-typed value (a performative, a section, a described value).
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CaseError> {
    serde_amqp::to_vec(value).map_err(|e| CaseError::new(format!("encode: {e}")))
}

/// An AMQP frame carrying `performative` and `payload` on `channel`.
pub fn perf<T: Serialize>(channel: u16, performative: &T, payload: &[u8]) -> Result<Vec<u8>, CaseError> {
    let mut body = encode(performative)?;
    body.extend_from_slice(payload);
    Ok(frame(TYPE_AMQP, channel, &body))
}

/// A described value with a numeric descriptor (`0x70` header, `0x73` properties, ...).
pub fn described(code: u64, value: Value) -> Value {
    Value::Described(Box::new(Described { descriptor: Descriptor::Code(code), value }))
}

/// Encoded length of the single AMQP value at the start of `b` (constructor included).
pub fn value_len(b: &[u8]) -> Result<usize, CaseError> {
    let bad = || CaseError::new(format!("undecodable AMQP value starting {:02x?}", b.get(..8)));
    let code = *b.first().ok_or_else(bad)?;
    let width = |n: usize| -> Result<usize, CaseError> {
        let s = b.get(1..1 + n).ok_or_else(bad)?;
        let size = s.iter().fold(0usize, |acc, x| (acc << 8) | usize::from(*x));
        Ok(1 + n + size)
    };
    let len = match code {
        0x00 => {
            let d = value_len(b.get(1..).ok_or_else(bad)?)?;
            let v = value_len(b.get(1 + d..).ok_or_else(bad)?)?;
            1 + d + v
        }
        0x40..=0x4f => 1,
        0x50..=0x5f => 2,
        0x60..=0x6f => 3,
        0x70..=0x7f => 5,
        0x80..=0x8f => 9,
        0x90..=0x9f => 17,
        0xa0..=0xaf | 0xc0..=0xcf | 0xe0..=0xef => width(1)?,
        0xb0..=0xbf | 0xd0..=0xdf | 0xf0..=0xff => width(4)?,
        _ => return Err(bad()),
    };
    if len > b.len() {
        return Err(bad());
    }
    Ok(len)
}

/// Splits an encoded message into its sections: `(descriptor code, encoded bytes)`.
pub fn sections(payload: &[u8]) -> Result<Vec<(u64, Vec<u8>)>, CaseError> {
    let mut out = Vec::new();
    let mut rest = payload;
    while !rest.is_empty() {
        let n = value_len(rest)?;
        let (section, tail) = rest.split_at(n);
        let code = match super::value::decode(section).map(|(v, _)| v) {
            Ok(Value::Described(d)) => match d.descriptor {
                Descriptor::Code(c) => c,
                Descriptor::Name(n) => {
                    return Err(CaseError::new(format!("section with symbolic descriptor {n:?}")));
                }
            },
            Ok(other) => return Err(CaseError::new(format!("non-described section {other:?}"))),
            Err(e) => return Err(CaseError::new(format!("section decode: {e}"))),
        };
        out.push((code, section.to_vec()));
        rest = tail;
    }
    Ok(out)
}

/// Decodes one encoded value (with the suite's own decoder: serde_amqp panics on some valid
/// values, see [`super::value`]).
pub fn decode_value(b: &[u8]) -> Result<Value, CaseError> {
    super::value::decode(b).map(|(v, _)| v)
}

/// The value inside a described value (its descriptor dropped).
pub fn undescribe(v: Value) -> Value {
    match v {
        Value::Described(d) => d.value,
        other => other,
    }
}

/// The symbol of an error condition as it went on the wire (`amqp:not-found`).
pub fn condition_symbol<T: Serialize>(condition: &T) -> String {
    match encode(condition).ok().and_then(|b| decode_value(&b).ok()) {
        Some(Value::Symbol(s)) => s.0,
        Some(other) => format!("{other:?}"),
        None => "<unencodable condition>".to_owned(),
    }
}
