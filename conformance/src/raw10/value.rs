//! A complete AMQP 1.0 value decoder (§1.6 of the type system), written for the suite because
//! serde_amqp 0.18 panics on arrays of maps — exactly what RabbitMQ's `x-opt-deaths`
//! annotation is. Values come back as [`serde_amqp::Value`] so cases compare them as usual.

use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor;
use serde_amqp::primitives::{Array, Dec32, Dec64, Dec128, OrderedMap, Symbol, Timestamp, Uuid};
use serde_amqp::{Value, primitives::Binary};

use crate::error::CaseError;

fn short(b: &[u8]) -> CaseError {
    CaseError::new(format!("truncated AMQP value near {:02x?}", b.get(..8)))
}

fn take(b: &[u8], at: usize, n: usize) -> Result<&[u8], CaseError> {
    b.get(at..at + n).ok_or_else(|| short(b))
}

fn array<const N: usize>(b: &[u8], at: usize) -> Result<[u8; N], CaseError> {
    take(b, at, N)?.try_into().map_err(|_| short(b))
}

fn size(b: &[u8], at: usize, wide: bool) -> Result<usize, CaseError> {
    Ok(if wide {
        usize::try_from(u32::from_be_bytes(array(b, at)?)).unwrap_or(usize::MAX)
    } else {
        usize::from(*b.get(at).ok_or_else(|| short(b))?)
    })
}

/// Decodes the value at the start of `b`, returning it and its encoded length.
pub fn decode(b: &[u8]) -> Result<(Value, usize), CaseError> {
    let code = *b.first().ok_or_else(|| short(b))?;
    if code == 0x00 {
        let (descriptor, d) = decode(b.get(1..).ok_or_else(|| short(b))?)?;
        let (value, v) = decode(b.get(1 + d..).ok_or_else(|| short(b))?)?;
        return Ok((described(descriptor, value)?, 1 + d + v));
    }
    let (value, n) = body(code, b.get(1..).ok_or_else(|| short(b))?)?;
    Ok((value, 1 + n))
}

fn described(descriptor: Value, value: Value) -> Result<Value, CaseError> {
    let descriptor = match descriptor {
        Value::Ulong(code) => Descriptor::Code(code),
        Value::Symbol(name) => Descriptor::Name(name),
        other => return Err(CaseError::new(format!("bad descriptor {other:?}"))),
    };
    Ok(Value::Described(Box::new(Described { descriptor, value })))
}

/// The value of type `code` whose bytes (after the constructor) start `b`, and their length.
fn body(code: u8, b: &[u8]) -> Result<(Value, usize), CaseError> {
    let text = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).map_err(|_| CaseError::new("non-UTF-8 string"));
    Ok(match code {
        0x40 => (Value::Null, 0),
        0x41 => (Value::Bool(true), 0),
        0x42 => (Value::Bool(false), 0),
        0x43 => (Value::Uint(0), 0),
        0x44 => (Value::Ulong(0), 0),
        0x45 => (Value::List(Vec::new()), 0),
        0x50 => (Value::Ubyte(array::<1>(b, 0)?[0]), 1),
        0x51 => (Value::Byte(i8::from_be_bytes(array(b, 0)?)), 1),
        0x52 => (Value::Uint(u32::from(array::<1>(b, 0)?[0])), 1),
        0x53 => (Value::Ulong(u64::from(array::<1>(b, 0)?[0])), 1),
        0x54 => (Value::Int(i32::from(i8::from_be_bytes(array(b, 0)?))), 1),
        0x55 => (Value::Long(i64::from(i8::from_be_bytes(array(b, 0)?))), 1),
        0x56 => (Value::Bool(array::<1>(b, 0)?[0] != 0), 1),
        0x60 => (Value::Ushort(u16::from_be_bytes(array(b, 0)?)), 2),
        0x61 => (Value::Short(i16::from_be_bytes(array(b, 0)?)), 2),
        0x70 => (Value::Uint(u32::from_be_bytes(array(b, 0)?)), 4),
        0x71 => (Value::Int(i32::from_be_bytes(array(b, 0)?)), 4),
        0x72 => (Value::Float(f32::from_be_bytes(array(b, 0)?).into()), 4),
        0x73 => {
            let c = char::from_u32(u32::from_be_bytes(array(b, 0)?)).ok_or_else(|| CaseError::new("bad char"))?;
            (Value::Char(c), 4)
        }
        0x74 => (Value::Decimal32(Dec32::from(array::<4>(b, 0)?)), 4),
        0x80 => (Value::Ulong(u64::from_be_bytes(array(b, 0)?)), 8),
        0x81 => (Value::Long(i64::from_be_bytes(array(b, 0)?)), 8),
        0x82 => (Value::Double(f64::from_be_bytes(array(b, 0)?).into()), 8),
        0x83 => (Value::Timestamp(Timestamp::from_milliseconds(i64::from_be_bytes(array(b, 0)?))), 8),
        0x84 => (Value::Decimal64(Dec64::from(array::<8>(b, 0)?)), 8),
        0x94 => (Value::Decimal128(Dec128::from(array::<16>(b, 0)?)), 16),
        0x98 => (Value::Uuid(Uuid::from(array::<16>(b, 0)?)), 16),
        0xa0 | 0xb0 | 0xa1 | 0xb1 | 0xa3 | 0xb3 => {
            let wide = code & 0xf0 == 0xb0;
            let at = if wide { 4 } else { 1 };
            let n = size(b, 0, wide)?;
            let bytes = take(b, at, n)?;
            let value = match code & 0x0f {
                0x00 => Value::Binary(Binary::from(bytes.to_vec())),
                0x01 => Value::String(text(bytes)?),
                _ => Value::Symbol(Symbol::from(text(bytes)?)),
            };
            (value, at + n)
        }
        0xc0 | 0xd0 | 0xc1 | 0xd1 => {
            let wide = code & 0xf0 == 0xd0;
            let at = if wide { 4 } else { 1 };
            let n = size(b, 0, wide)?;
            let count = size(b, at, wide)?;
            let mut items = Vec::new();
            let mut rest = take(b, at, n)?.get(at..).ok_or_else(|| short(b))?;
            for _ in 0..count {
                let (item, used) = decode(rest)?;
                items.push(item);
                rest = rest.get(used..).ok_or_else(|| short(b))?;
            }
            let value = if code & 0x0f == 0 {
                Value::List(items)
            } else {
                let mut map = OrderedMap::new();
                let mut pairs = items.into_iter();
                while let (Some(k), Some(v)) = (pairs.next(), pairs.next()) {
                    map.insert(k, v);
                }
                Value::Map(map)
            };
            (value, at + n)
        }
        0xe0 | 0xf0 => {
            let wide = code == 0xf0;
            let at = if wide { 4 } else { 1 };
            let n = size(b, 0, wide)?;
            let count = size(b, at, wide)?;
            let inner = take(b, at, n)?.get(at..).ok_or_else(|| short(b))?;
            (Value::Array(Array::from(array_items(inner, count)?)), at + n)
        }
        other => return Err(CaseError::new(format!("unknown AMQP type code 0x{other:02x}"))),
    })
}

/// The elements of an array: one constructor (possibly described), then `count` bodies.
fn array_items(b: &[u8], count: usize) -> Result<Vec<Value>, CaseError> {
    let (descriptor, mut at) = if b.first() == Some(&0x00) {
        let (d, used) = decode(b.get(1..).ok_or_else(|| short(b))?)?;
        (Some(d), 1 + used)
    } else {
        (None, 0)
    };
    let code = *b.get(at).ok_or_else(|| short(b))?;
    at += 1;
    let mut items = Vec::with_capacity(count);
    for _ in 0..count {
        let (value, used) = body(code, b.get(at..).ok_or_else(|| short(b))?)?;
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
    fn decodes_an_array_of_maps_like_x_opt_deaths() {
        // What serde_amqp encodes (and cannot decode): an array8 of two map8s.
        let mut m = OrderedMap::new();
        m.insert(Value::Symbol(Symbol::from("queue")), Value::String("q".into()));
        m.insert(Value::Symbol(Symbol::from("count")), Value::Ulong(2));
        m.insert(
            Value::Symbol(Symbol::from("routing-keys")),
            Value::Array(Array::from(vec![Value::String("k".into())])),
        );
        let v = Value::Array(Array::from(vec![Value::Map(m.clone()), Value::Map(m)]));
        let bytes = serde_amqp::to_vec(&v).unwrap();
        assert_eq!(decode(&bytes).unwrap(), (v, bytes.len()));
    }

    #[test]
    fn decodes_described_lists_and_scalars() {
        let v = Value::Described(Box::new(Described {
            descriptor: Descriptor::Code(0x70),
            value: Value::List(vec![Value::Bool(true), Value::Ubyte(4), Value::Uint(1000), Value::Null]),
        }));
        let bytes = serde_amqp::to_vec(&v).unwrap();
        assert_eq!(decode(&bytes).unwrap().0, v);
    }
}
