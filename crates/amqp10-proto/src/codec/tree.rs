//! A complete decoder for untyped AMQP 1.0 values (the type system of §1.6), for sections
//! whose contents are arbitrary: message annotations, application properties, management
//! bodies.
//!
//! serde_amqp 0.18 decodes typed performatives well but panics on some valid untyped values —
//! an array of maps, which is exactly how RabbitMQ (and Charon) send `x-opt-deaths`. A client
//! republishing a dead letter as it received it must not lose its session over that.

use charon_model::MAX_DEPTH;
use serde_amqp::Value;
use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor;
use serde_amqp::primitives::{Array, Binary, Dec32, Dec64, Dec128, OrderedMap, Symbol, Timestamp, Uuid};

use super::DecodeError;

/// Decodes the value at the start of `bytes`; returns it and its encoded length.
///
/// # Errors
/// [`DecodeError`] for truncated input, unknown format codes, invalid UTF-8 or characters, and
/// nesting deeper than the model's [`MAX_DEPTH`] (which bounds the recursion whatever a peer
/// sends), and element counts their bytes cannot hold.
pub(super) fn decode(bytes: &[u8]) -> Result<(Value, usize), DecodeError> {
    decode_at(bytes, 0)
}

fn decode_at(bytes: &[u8], depth: usize) -> Result<(Value, usize), DecodeError> {
    if depth > MAX_DEPTH {
        return Err(DecodeError::TooDeep);
    }
    let code = *bytes.first().ok_or(DecodeError::Truncated)?;
    let rest = bytes.get(1..).ok_or(DecodeError::Truncated)?;
    if code == 0x00 {
        let (descriptor, d) = decode_at(rest, depth + 1)?;
        let (value, v) = decode_at(rest.get(d..).ok_or(DecodeError::Truncated)?, depth + 1)?;
        return Ok((described(descriptor, value)?, 1 + d + v));
    }
    let (value, n) = body(code, rest, depth)?;
    Ok((value, 1 + n))
}

fn described(descriptor: Value, value: Value) -> Result<Value, DecodeError> {
    let descriptor = match descriptor {
        Value::Ulong(code) => Descriptor::Code(code),
        Value::Symbol(name) => Descriptor::Name(name),
        _ => return Err(DecodeError::Invalid("descriptor must be a ulong or a symbol")),
    };
    Ok(Value::Described(Box::new(Described { descriptor, value })))
}

fn fixed<const N: usize>(bytes: &[u8]) -> Result<[u8; N], DecodeError> {
    bytes.get(..N).and_then(|b| b.try_into().ok()).ok_or(DecodeError::Truncated)
}

fn text(bytes: &[u8]) -> Result<String, DecodeError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::Invalid("string is not UTF-8"))
}

/// A size field of 1 or 4 bytes.
fn size(bytes: &[u8], wide: bool) -> Result<usize, DecodeError> {
    if wide {
        usize::try_from(u32::from_be_bytes(fixed(bytes)?)).map_err(|_| DecodeError::Invalid("size too large"))
    } else {
        Ok(usize::from(fixed::<1>(bytes)?[0]))
    }
}

/// The value of format `code` whose bytes (after the constructor) start `bytes`, and how many
/// bytes it used.
fn body(code: u8, bytes: &[u8], depth: usize) -> Result<(Value, usize), DecodeError> {
    Ok(match code {
        0x40 => (Value::Null, 0),
        0x41 => (Value::Bool(true), 0),
        0x42 => (Value::Bool(false), 0),
        0x43 => (Value::Uint(0), 0),
        0x44 => (Value::Ulong(0), 0),
        0x45 => (Value::List(Vec::new()), 0),
        0x50 => (Value::Ubyte(fixed::<1>(bytes)?[0]), 1),
        0x51 => (Value::Byte(i8::from_be_bytes(fixed(bytes)?)), 1),
        0x52 => (Value::Uint(u32::from(fixed::<1>(bytes)?[0])), 1),
        0x53 => (Value::Ulong(u64::from(fixed::<1>(bytes)?[0])), 1),
        0x54 => (Value::Int(i32::from(i8::from_be_bytes(fixed(bytes)?))), 1),
        0x55 => (Value::Long(i64::from(i8::from_be_bytes(fixed(bytes)?))), 1),
        0x56 => (Value::Bool(fixed::<1>(bytes)?[0] != 0), 1),
        0x60 => (Value::Ushort(u16::from_be_bytes(fixed(bytes)?)), 2),
        0x61 => (Value::Short(i16::from_be_bytes(fixed(bytes)?)), 2),
        0x70 => (Value::Uint(u32::from_be_bytes(fixed(bytes)?)), 4),
        0x71 => (Value::Int(i32::from_be_bytes(fixed(bytes)?)), 4),
        0x72 => (Value::Float(f32::from_be_bytes(fixed(bytes)?).into()), 4),
        0x73 => {
            let c = char::from_u32(u32::from_be_bytes(fixed(bytes)?)).ok_or(DecodeError::Invalid("invalid char"))?;
            (Value::Char(c), 4)
        }
        0x74 => (Value::Decimal32(Dec32::from(fixed::<4>(bytes)?)), 4),
        0x80 => (Value::Ulong(u64::from_be_bytes(fixed(bytes)?)), 8),
        0x81 => (Value::Long(i64::from_be_bytes(fixed(bytes)?)), 8),
        0x82 => (Value::Double(f64::from_be_bytes(fixed(bytes)?).into()), 8),
        0x83 => (Value::Timestamp(Timestamp::from_milliseconds(i64::from_be_bytes(fixed(bytes)?))), 8),
        0x84 => (Value::Decimal64(Dec64::from(fixed::<8>(bytes)?)), 8),
        0x94 => (Value::Decimal128(Dec128::from(fixed::<16>(bytes)?)), 16),
        0x98 => (Value::Uuid(Uuid::from(fixed::<16>(bytes)?)), 16),
        0xa0 | 0xa1 | 0xa3 | 0xb0 | 0xb1 | 0xb3 => {
            let wide = code >> 4 == 0xb;
            let at = if wide { 4 } else { 1 };
            let n = size(bytes, wide)?;
            let content = bytes.get(at..at + n).ok_or(DecodeError::Truncated)?;
            let value = match code & 0x0f {
                0x0 => Value::Binary(Binary::from(content.to_vec())),
                0x1 => Value::String(text(content)?),
                _ => Value::Symbol(Symbol::from(text(content)?)),
            };
            (value, at + n)
        }
        0xc0 | 0xc1 | 0xd0 | 0xd1 => {
            let wide = code >> 4 == 0xd;
            let at = if wide { 4 } else { 1 };
            let n = size(bytes, wide)?;
            let content = bytes.get(at..at + n).ok_or(DecodeError::Truncated)?;
            let count = size(content, wide)?;
            let mut rest = content.get(at..).ok_or(DecodeError::Truncated)?;
            let mut items = Vec::with_capacity(count.min(rest.len()));
            for _ in 0..count {
                let (item, used) = decode_at(rest, depth + 1)?;
                items.push(item);
                rest = rest.get(used..).ok_or(DecodeError::Truncated)?;
            }
            let value = if code & 0x0f == 0 { Value::List(items) } else { Value::Map(pairs(items)?) };
            (value, at + n)
        }
        0xe0 | 0xf0 => {
            let wide = code == 0xf0;
            let at = if wide { 4 } else { 1 };
            let n = size(bytes, wide)?;
            let content = bytes.get(at..at + n).ok_or(DecodeError::Truncated)?;
            let count = size(content, wide)?;
            if count > content.len() {
                return Err(DecodeError::Invalid("element count larger than its bytes"));
            }
            let items = array_items(content.get(at..).ok_or(DecodeError::Truncated)?, count, depth)?;
            (Value::Array(Array::from(items)), at + n)
        }
        _ => return Err(DecodeError::Invalid("unknown format code")),
    })
}

fn pairs(items: Vec<Value>) -> Result<OrderedMap<Value, Value>, DecodeError> {
    if !items.len().is_multiple_of(2) {
        return Err(DecodeError::Invalid("map with an odd number of items"));
    }
    let mut map = OrderedMap::new();
    let mut items = items.into_iter();
    while let (Some(key), Some(value)) = (items.next(), items.next()) {
        map.insert(key, value);
    }
    Ok(map)
}

/// An array's elements: one constructor (possibly described), then `count` bodies.
fn array_items(bytes: &[u8], count: usize, depth: usize) -> Result<Vec<Value>, DecodeError> {
    let (descriptor, mut at) = if bytes.first() == Some(&0x00) {
        let (d, used) = decode_at(bytes.get(1..).ok_or(DecodeError::Truncated)?, depth + 1)?;
        (Some(d), 1 + used)
    } else {
        (None, 0)
    };
    let code = *bytes.get(at).ok_or(DecodeError::Truncated)?;
    at += 1;
    let mut items = Vec::with_capacity(count.min(bytes.len()));
    for _ in 0..count {
        let (value, used) = body(code, bytes.get(at..).ok_or(DecodeError::Truncated)?, depth + 1)?;
        at += used;
        items.push(match &descriptor {
            Some(d) => described(d.clone(), value)?,
            None => value,
        });
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_array_of_maps_decodes() {
        let mut entry = OrderedMap::new();
        entry.insert(Value::Symbol(Symbol::from("queue")), Value::String("q".into()));
        entry.insert(Value::Symbol(Symbol::from("count")), Value::Ulong(3));
        entry.insert(Value::Symbol(Symbol::from("routing-keys")), Value::Array(Array::from(vec![Value::from("k")])));
        let value = Value::Array(Array::from(vec![Value::Map(entry.clone()), Value::Map(entry)]));
        let bytes = serde_amqp::to_vec(&value).unwrap();
        assert_eq!(decode(&bytes).unwrap(), (value, bytes.len()));
    }

    #[test]
    fn rabbitmqs_32_bit_array_elements_decode() {
        // array8 of one map32 with one symbol → str32 entry, as RabbitMQ's generator writes it.
        let bytes = [
            0xe0, 0x13, 0x01, 0xd1, 0x00, 0x00, 0x00, 0x0d, 0x00, 0x00, 0x00, 0x02, 0xa3, 0x01, b'k', 0xb1, 0x00, 0x00,
            0x00, 0x01, b'v',
        ];
        let mut map = OrderedMap::new();
        map.insert(Value::Symbol(Symbol::from("k")), Value::String("v".into()));
        assert_eq!(decode(&bytes).unwrap(), (Value::Array(Array::from(vec![Value::Map(map)])), bytes.len()));
    }

    #[test]
    fn hostile_input_is_an_error_not_a_panic() {
        let deep: Vec<u8> = std::iter::repeat_n([0x00, 0x53, 0x01], 100).flatten().chain([0x40]).collect();
        assert!(decode(&deep).is_err());
        // An array claiming 2^32-1 zero-width nulls.
        assert!(decode(&[0xf0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0x40]).is_err());
        for bytes in [
            &[0xb1, 0xff, 0xff, 0xff, 0xff][..],
            &[0xc1, 0x03, 0x01, 0x40],
            &[0xe0, 0x02, 0x05, 0x71],
            &[0x73, 0xff, 0xff, 0xff, 0xff],
        ] {
            assert!(decode(bytes).is_err(), "{bytes:02x?}");
        }
    }
}
