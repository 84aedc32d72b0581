//! Between `serde_amqp`'s AMQP 1.0 values and the model's protocol-neutral values.

use bytes::Bytes;
use charon_model::Value;
use serde_amqp::Value as Amqp;
use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor;
use serde_amqp::primitives::{Array, OrderedMap, Symbol, Timestamp};

/// An AMQP 1.0 value as a model value (exact: every 1.0 type has a model variant).
#[must_use]
pub fn from_amqp(value: &Amqp) -> Value {
    match value {
        Amqp::Null => Value::Null,
        Amqp::Bool(b) => Value::Bool(*b),
        Amqp::Ubyte(v) => Value::U8(*v),
        Amqp::Ushort(v) => Value::U16(*v),
        Amqp::Uint(v) => Value::U32(*v),
        Amqp::Ulong(v) => Value::U64(*v),
        Amqp::Byte(v) => Value::I8(*v),
        Amqp::Short(v) => Value::I16(*v),
        Amqp::Int(v) => Value::I32(*v),
        Amqp::Long(v) => Value::I64(*v),
        Amqp::Float(v) => Value::F32(v.into_inner()),
        Amqp::Double(v) => Value::F64(v.into_inner()),
        Amqp::Decimal32(d) => Value::Decimal32(d.clone().into_inner()),
        Amqp::Decimal64(d) => Value::Decimal64(d.clone().into_inner()),
        Amqp::Decimal128(d) => Value::Decimal128(d.clone().into_inner()),
        Amqp::Char(c) => Value::Char(*c),
        Amqp::Timestamp(t) => Value::Timestamp(t.milliseconds()),
        Amqp::Uuid(u) => Value::Uuid(*u.as_inner()),
        Amqp::Binary(b) => Value::Binary(Bytes::copy_from_slice(b.as_ref())),
        Amqp::String(s) => Value::String(s.clone()),
        Amqp::Symbol(s) => Value::Symbol(s.as_str().to_owned()),
        Amqp::List(items) => Value::List(items.iter().map(from_amqp).collect()),
        Amqp::Array(items) => Value::Array(items.0.iter().map(from_amqp).collect()),
        Amqp::Map(map) => Value::Map(map.iter().map(|(k, v)| (from_amqp(k), from_amqp(v))).collect()),
        Amqp::Described(d) => {
            let descriptor = match &d.descriptor {
                Descriptor::Name(name) => Value::Symbol(name.as_str().to_owned()),
                Descriptor::Code(code) => Value::U64(*code),
            };
            Value::Described(Box::new((descriptor, from_amqp(&d.value))))
        }
    }
}

/// A model value as an AMQP 1.0 value. 0.9.1-only variants map as RabbitMQ's `mc_amqpl`
/// `from_091/2` does: long strings become `string` (or `binary` when not UTF-8), tables become
/// maps with symbol keys, field arrays lists, 0.9.1 decimals are kept as their bytes.
#[must_use]
pub fn to_amqp(value: &Value) -> Amqp {
    match value {
        Value::Null => Amqp::Null,
        Value::Bool(b) => Amqp::Bool(*b),
        Value::U8(v) => Amqp::Ubyte(*v),
        Value::I8(v) => Amqp::Byte(*v),
        Value::U16(v) => Amqp::Ushort(*v),
        Value::I16(v) => Amqp::Short(*v),
        Value::U32(v) => Amqp::Uint(*v),
        Value::I32(v) => Amqp::Int(*v),
        Value::U64(v) => Amqp::Ulong(*v),
        Value::I64(v) => Amqp::Long(*v),
        Value::F32(v) => Amqp::Float((*v).into()),
        Value::F64(v) => Amqp::Double((*v).into()),
        Value::Decimal { scale, value } => {
            let mut bytes = vec![*scale];
            bytes.extend_from_slice(&value.to_be_bytes());
            Amqp::Binary(bytes.into())
        }
        Value::Decimal32(b) => Amqp::Decimal32((*b).into()),
        Value::Decimal64(b) => Amqp::Decimal64((*b).into()),
        Value::Decimal128(b) => Amqp::Decimal128((*b).into()),
        Value::Char(c) => Amqp::Char(*c),
        Value::Timestamp(ms) => Amqp::Timestamp(Timestamp::from_milliseconds(*ms)),
        Value::Uuid(u) => Amqp::Uuid((*u).into()),
        Value::Binary(b) => Amqp::Binary(b.to_vec().into()),
        Value::LongStr(b) => match std::str::from_utf8(b) {
            Ok(text) if !text.contains('\0') => Amqp::String(text.to_owned()),
            _ => Amqp::Binary(b.to_vec().into()),
        },
        Value::String(s) => Amqp::String(s.clone()),
        Value::Symbol(s) => Amqp::Symbol(Symbol::from(s.as_str())),
        Value::List(items) => Amqp::List(items.iter().map(to_amqp).collect()),
        Value::Array(items) => Amqp::Array(Array::from(items.iter().map(to_amqp).collect::<Vec<_>>())),
        Value::Map(entries) => {
            let mut map = OrderedMap::new();
            for (k, v) in entries {
                map.insert(to_amqp(k), to_amqp(v));
            }
            Amqp::Map(map)
        }
        Value::Table(table) => {
            let mut map = OrderedMap::new();
            for (k, v) in table.iter() {
                map.insert(Amqp::Symbol(Symbol::from(k)), to_amqp(v));
            }
            Amqp::Map(map)
        }
        Value::Described(pair) => {
            let descriptor = match &pair.0 {
                Value::U64(code) => Descriptor::Code(*code),
                other => Descriptor::Name(Symbol::from(other.as_str().unwrap_or_default())),
            };
            Amqp::Described(Box::new(Described { descriptor, value: to_amqp(&pair.1) }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_point_oh_values_round_trip() {
        let values = [
            Value::Null,
            Value::Bool(true),
            Value::U8(1),
            Value::I64(-5),
            Value::U64(u64::MAX),
            Value::Char('x'),
            Value::Timestamp(1_700_000_000_123),
            Value::Uuid([7; 16]),
            Value::Binary(Bytes::from_static(b"\x00\x01")),
            Value::String("s".into()),
            Value::Symbol("sym".into()),
            Value::List(vec![Value::I32(1), Value::String("a".into())]),
            Value::Map(vec![(Value::Symbol("k".into()), Value::U32(3))]),
        ];
        for value in values {
            assert_eq!(from_amqp(&to_amqp(&value)), value);
        }
    }

    #[test]
    fn long_strings_become_strings_or_binary() {
        assert_eq!(to_amqp(&Value::long_str("abc")), Amqp::String("abc".into()));
        assert!(matches!(to_amqp(&Value::LongStr(Bytes::from_static(&[0xff, 0xfe]))), Amqp::Binary(_)));
    }
}
