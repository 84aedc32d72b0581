//! Encodes untyped AMQP 1.0 values byte for byte as RabbitMQ's `amqp10_binary_generator` does,
//! for the sections the broker writes itself (message annotations).
//!
//! Two choices matter on the wire. Small forms follow RabbitMQ's rules (e.g. `smalluint` for
//! values under 256). And array elements of variable or compound types always use the 32-bit
//! constructors (`str32`, `map32`, ...): RabbitMQ's parser accepts nothing else inside an
//! array, and serde_amqp writes `map8` there — so a `x-opt-deaths` annotation encoded by
//! serde_amqp could not be republished to RabbitMQ.

use serde_amqp::Value;
use serde_amqp::descriptor::Descriptor;

/// The largest payload of a 1-byte-size variable-width value.
const VAR_1_LIMIT: usize = 0xff;

/// Appends the encoding of `value`.
pub fn generate(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Described(d) => {
            descriptor(out, &d.descriptor);
            generate(out, &d.value);
        }
        Value::Null => out.push(0x40),
        Value::Bool(true) => out.push(0x41),
        Value::Bool(false) => out.push(0x42),
        Value::Uint(0) => out.push(0x43),
        Value::Uint(v) if *v < 256 => out.extend([0x52, *v as u8]),
        Value::Ulong(0) => out.push(0x44),
        Value::Ulong(v) if *v < 256 => out.extend([0x53, *v as u8]),
        Value::Int(v) if (-128..128).contains(v) => out.extend([0x54, *v as u8]),
        Value::Long(v) if (-128..128).contains(v) => out.extend([0x55, *v as u8]),
        Value::String(s) => variable(out, 0xa1, s.as_bytes()),
        Value::Symbol(s) => variable(out, 0xa3, s.as_str().as_bytes()),
        Value::Binary(b) => variable(out, 0xa0, b.as_ref()),
        Value::List(items) if items.is_empty() => out.push(0x45),
        Value::List(items) => {
            let mut body = Vec::new();
            for item in items {
                generate(&mut body, item);
            }
            compound(out, 0xc0, items.len(), &body);
        }
        Value::Map(map) => {
            let mut body = Vec::new();
            for (key, value) in map.iter() {
                generate(&mut body, key);
                generate(&mut body, value);
            }
            compound(out, 0xc1, map.len() * 2, &body);
        }
        Value::Array(items) => {
            let items: &[Value] = items.as_ref();
            let mut body = Vec::new();
            if let Some(first) = items.first() {
                element_constructor(&mut body, first);
            }
            for item in items {
                element(&mut body, item);
            }
            compound(out, 0xe0, items.len(), &body);
        }
        fixed => {
            out.push(fixed_code(fixed));
            element(out, fixed);
        }
    }
}

fn variable(out: &mut Vec<u8>, small_code: u8, bytes: &[u8]) {
    match u8::try_from(bytes.len()) {
        Ok(len) if bytes.len() <= VAR_1_LIMIT => out.extend([small_code, len]),
        _ => {
            out.push(small_code | 0x10);
            out.extend(u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
        }
    }
    out.extend_from_slice(bytes);
}

/// A list, map or array: the short form when under 255 items and 256 bytes, as RabbitMQ picks.
fn compound(out: &mut Vec<u8>, small_code: u8, count: usize, body: &[u8]) {
    match (u8::try_from(count), u8::try_from(body.len() + 1)) {
        (Ok(count), Ok(size)) if count < 0xff => {
            out.extend([small_code, size, count]);
        }
        _ => {
            out.push(small_code | 0x10);
            out.extend(u32::try_from(body.len() + 4).unwrap_or(u32::MAX).to_be_bytes());
            out.extend(u32::try_from(count).unwrap_or(u32::MAX).to_be_bytes());
        }
    }
    out.extend_from_slice(body);
}

/// The described-type marker and its descriptor.
fn descriptor(out: &mut Vec<u8>, descriptor: &Descriptor) {
    out.push(0x00);
    match descriptor {
        Descriptor::Code(code) => generate(out, &Value::Ulong(*code)),
        Descriptor::Name(name) => generate(out, &Value::Symbol(name.clone())),
    }
}

/// The single constructor of an array's elements (`constructor/1`).
fn element_constructor(out: &mut Vec<u8>, first: &Value) {
    match first {
        Value::Described(d) => {
            descriptor(out, &d.descriptor);
            element_constructor(out, &d.value);
        }
        Value::String(_) => out.push(0xb1),
        Value::Symbol(_) => out.push(0xb3),
        Value::Binary(_) => out.push(0xb0),
        Value::List(_) => out.push(0xd0),
        Value::Map(_) => out.push(0xd1),
        Value::Array(_) => out.push(0xf0),
        Value::Bool(_) => out.push(0x56),
        other => out.push(fixed_code(other)),
    }
}

/// An array element's bytes after the shared constructor (`generate2/2`).
fn element(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Described(d) => element(out, &d.value),
        Value::Null => out.push(0x40),
        Value::Bool(b) => out.push(u8::from(*b)),
        Value::Ubyte(v) => out.push(*v),
        Value::Byte(v) => out.extend(v.to_be_bytes()),
        Value::Ushort(v) => out.extend(v.to_be_bytes()),
        Value::Short(v) => out.extend(v.to_be_bytes()),
        Value::Uint(v) => out.extend(v.to_be_bytes()),
        Value::Int(v) => out.extend(v.to_be_bytes()),
        Value::Ulong(v) => out.extend(v.to_be_bytes()),
        Value::Long(v) => out.extend(v.to_be_bytes()),
        Value::Float(v) => out.extend(v.into_inner().to_be_bytes()),
        Value::Double(v) => out.extend(v.into_inner().to_be_bytes()),
        Value::Char(c) => out.extend(u32::from(*c).to_be_bytes()),
        Value::Timestamp(t) => out.extend(t.milliseconds().to_be_bytes()),
        Value::Uuid(u) => out.extend_from_slice(u.as_inner()),
        Value::Decimal32(d) => out.extend_from_slice(d.as_inner()),
        Value::Decimal64(d) => out.extend_from_slice(d.as_inner()),
        Value::Decimal128(d) => out.extend_from_slice(d.as_inner()),
        Value::String(s) => large(out, s.as_bytes()),
        Value::Symbol(s) => large(out, s.as_str().as_bytes()),
        Value::Binary(b) => large(out, b.as_ref()),
        Value::List(_) | Value::Map(_) | Value::Array(_) => {
            // The compound's 32-bit form without its constructor byte.
            let mut whole = Vec::new();
            match value {
                Value::List(items) => {
                    let mut body = Vec::new();
                    for item in items {
                        generate(&mut body, item);
                    }
                    large_compound(&mut whole, items.len(), &body);
                }
                Value::Map(map) => {
                    let mut body = Vec::new();
                    for (k, v) in map.iter() {
                        generate(&mut body, k);
                        generate(&mut body, v);
                    }
                    large_compound(&mut whole, map.len() * 2, &body);
                }
                Value::Array(items) => {
                    let items: &[Value] = items.as_ref();
                    let mut body = Vec::new();
                    if let Some(first) = items.first() {
                        element_constructor(&mut body, first);
                    }
                    for item in items {
                        element(&mut body, item);
                    }
                    large_compound(&mut whole, items.len(), &body);
                }
                _ => {}
            }
            out.extend(whole);
        }
    }
}

fn large(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend(u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn large_compound(out: &mut Vec<u8>, count: usize, body: &[u8]) {
    out.extend(u32::try_from(body.len() + 4).unwrap_or(u32::MAX).to_be_bytes());
    out.extend(u32::try_from(count).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(body);
}

/// The full-width format code of a fixed-width value.
fn fixed_code(value: &Value) -> u8 {
    match value {
        Value::Ubyte(_) => 0x50,
        Value::Byte(_) => 0x51,
        Value::Ushort(_) => 0x60,
        Value::Short(_) => 0x61,
        Value::Uint(_) => 0x70,
        Value::Int(_) => 0x71,
        Value::Float(_) => 0x72,
        Value::Char(_) => 0x73,
        Value::Decimal32(_) => 0x74,
        Value::Ulong(_) => 0x80,
        Value::Long(_) => 0x81,
        Value::Double(_) => 0x82,
        Value::Timestamp(_) => 0x83,
        Value::Decimal64(_) => 0x84,
        Value::Decimal128(_) => 0x94,
        Value::Uuid(_) => 0x98,
        _ => 0x40,
    }
}

#[cfg(test)]
mod tests {
    use serde_amqp::primitives::{Array, OrderedMap, Symbol, Timestamp};

    use super::*;

    #[test]
    fn arrays_of_maps_use_map32_elements_and_round_trip() {
        let mut entry = OrderedMap::new();
        entry.insert(Value::Symbol(Symbol::from("queue")), Value::String("q".into()));
        entry.insert(Value::Symbol(Symbol::from("count")), Value::Ulong(1));
        entry.insert(Value::Symbol(Symbol::from("first-time")), Value::Timestamp(Timestamp::from_milliseconds(5)));
        entry.insert(Value::Symbol(Symbol::from("routing-keys")), Value::Array(Array::from(vec![Value::from("k")])));
        let value = Value::Array(Array::from(vec![Value::Map(entry)]));
        let mut out = Vec::new();
        generate(&mut out, &value);
        assert_eq!(out.get(..4), Some(&[0xe0, out[1], 0x01, 0xd1][..]));
        // The routing keys inside: an array8 of one str32.
        let keys = out.windows(4).position(|w| w == [0xe0, 0x07, 0x01, 0xb1]);
        assert!(keys.is_some(), "{out:02x?}");
        assert_eq!(super::super::tree::decode(&out).unwrap(), (value, out.len()));
    }

    #[test]
    fn small_forms_follow_rabbitmq() {
        let mut out = Vec::new();
        for v in [Value::Uint(0), Value::Uint(7), Value::Uint(300), Value::Ulong(9), Value::Long(-3), Value::Bool(true)]
        {
            generate(&mut out, &v);
        }
        assert_eq!(out, [0x43, 0x52, 7, 0x70, 0, 0, 1, 44, 0x53, 9, 0x55, 0xfd, 0x41]);
    }
}
