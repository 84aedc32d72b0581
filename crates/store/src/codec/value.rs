//! [`Value`] trees and [`Table`]s: one tag byte per value, then its payload. Every variant of
//! the model has its own tag, so integer widths, string kinds and compound kinds come back
//! exactly as stored.

use bytes::{BufMut, BytesMut};
use charon_model::{MAX_DEPTH, Table, Value};

use super::CodecError;
use super::wire::{Reader, put_bytes, put_str, put_varint, put_zigzag};

mod tag {
    pub(super) const NULL: u8 = 0;
    pub(super) const FALSE: u8 = 1;
    pub(super) const TRUE: u8 = 2;
    pub(super) const U8: u8 = 3;
    pub(super) const I8: u8 = 4;
    pub(super) const U16: u8 = 5;
    pub(super) const I16: u8 = 6;
    pub(super) const U32: u8 = 7;
    pub(super) const I32: u8 = 8;
    pub(super) const U64: u8 = 9;
    pub(super) const I64: u8 = 10;
    pub(super) const F32: u8 = 11;
    pub(super) const F64: u8 = 12;
    pub(super) const DECIMAL: u8 = 13;
    pub(super) const DECIMAL32: u8 = 14;
    pub(super) const DECIMAL64: u8 = 15;
    pub(super) const DECIMAL128: u8 = 16;
    pub(super) const CHAR: u8 = 17;
    pub(super) const TIMESTAMP: u8 = 18;
    pub(super) const UUID: u8 = 19;
    pub(super) const BINARY: u8 = 20;
    pub(super) const LONG_STR: u8 = 21;
    pub(super) const STRING: u8 = 22;
    pub(super) const SYMBOL: u8 = 23;
    pub(super) const LIST: u8 = 24;
    pub(super) const ARRAY: u8 = 25;
    pub(super) const MAP: u8 = 26;
    pub(super) const TABLE: u8 = 27;
    pub(super) const DESCRIBED: u8 = 28;
}

/// Appends a table: its entry count, then each key and value.
pub(crate) fn put_table(out: &mut BytesMut, table: &Table) {
    put_varint(out, table.0.len() as u64);
    for (key, value) in &table.0 {
        put_str(out, key);
        put_value(out, value);
    }
}

fn put_values(out: &mut BytesMut, values: &[Value]) {
    put_varint(out, values.len() as u64);
    for value in values {
        put_value(out, value);
    }
}

/// Appends one value.
pub(crate) fn put_value(out: &mut BytesMut, value: &Value) {
    match value {
        Value::Null => out.put_u8(tag::NULL),
        Value::Bool(b) => out.put_u8(if *b { tag::TRUE } else { tag::FALSE }),
        Value::U8(v) => {
            out.put_u8(tag::U8);
            out.put_u8(*v);
        }
        Value::I8(v) => {
            out.put_u8(tag::I8);
            out.put_i8(*v);
        }
        Value::U16(v) => tagged_varint(out, tag::U16, u64::from(*v)),
        Value::I16(v) => tagged_zigzag(out, tag::I16, i64::from(*v)),
        Value::U32(v) => tagged_varint(out, tag::U32, u64::from(*v)),
        Value::I32(v) => tagged_zigzag(out, tag::I32, i64::from(*v)),
        Value::U64(v) => tagged_varint(out, tag::U64, *v),
        Value::I64(v) => tagged_zigzag(out, tag::I64, *v),
        Value::F32(v) => {
            out.put_u8(tag::F32);
            out.put_u32_le(v.to_bits());
        }
        Value::F64(v) => {
            out.put_u8(tag::F64);
            out.put_u64_le(v.to_bits());
        }
        Value::Decimal { scale, value } => {
            out.put_u8(tag::DECIMAL);
            out.put_u8(*scale);
            out.put_u32_le(*value);
        }
        Value::Decimal32(raw) => tagged_raw(out, tag::DECIMAL32, raw),
        Value::Decimal64(raw) => tagged_raw(out, tag::DECIMAL64, raw),
        Value::Decimal128(raw) => tagged_raw(out, tag::DECIMAL128, raw),
        Value::Char(c) => tagged_varint(out, tag::CHAR, u64::from(u32::from(*c))),
        Value::Timestamp(ms) => tagged_zigzag(out, tag::TIMESTAMP, *ms),
        Value::Uuid(raw) => tagged_raw(out, tag::UUID, raw),
        Value::Binary(b) => {
            out.put_u8(tag::BINARY);
            put_bytes(out, b);
        }
        Value::LongStr(b) => {
            out.put_u8(tag::LONG_STR);
            put_bytes(out, b);
        }
        Value::String(s) => {
            out.put_u8(tag::STRING);
            put_str(out, s);
        }
        Value::Symbol(s) => {
            out.put_u8(tag::SYMBOL);
            put_str(out, s);
        }
        Value::List(items) => {
            out.put_u8(tag::LIST);
            put_values(out, items);
        }
        Value::Array(items) => {
            out.put_u8(tag::ARRAY);
            put_values(out, items);
        }
        Value::Map(pairs) => {
            out.put_u8(tag::MAP);
            put_varint(out, pairs.len() as u64);
            for (key, value) in pairs {
                put_value(out, key);
                put_value(out, value);
            }
        }
        Value::Table(table) => {
            out.put_u8(tag::TABLE);
            put_table(out, table);
        }
        Value::Described(pair) => {
            out.put_u8(tag::DESCRIBED);
            put_value(out, &pair.0);
            put_value(out, &pair.1);
        }
    }
}

fn tagged_varint(out: &mut BytesMut, tag: u8, value: u64) {
    out.put_u8(tag);
    put_varint(out, value);
}

fn tagged_zigzag(out: &mut BytesMut, tag: u8, value: i64) {
    out.put_u8(tag);
    put_zigzag(out, value);
}

fn tagged_raw(out: &mut BytesMut, tag: u8, raw: &[u8]) {
    out.put_u8(tag);
    out.put_slice(raw);
}

/// Reads a table.
pub(crate) fn read_table(r: &mut Reader) -> Result<Table, CodecError> {
    read_table_at(r, 0)
}

fn read_table_at(r: &mut Reader, depth: usize) -> Result<Table, CodecError> {
    let n = r.count("table size")?;
    let mut entries = Vec::with_capacity(n);
    for _ in 0..n {
        let key = r.string("table key")?;
        entries.push((key, read_value(r, depth + 1)?));
    }
    Ok(Table(entries))
}

fn read_values(r: &mut Reader, depth: usize) -> Result<Vec<Value>, CodecError> {
    let n = r.count("list size")?;
    let mut items = Vec::with_capacity(n);
    for _ in 0..n {
        items.push(read_value(r, depth + 1)?);
    }
    Ok(items)
}

/// Reads one value `depth` levels down. Nesting is bounded by the model's [`MAX_DEPTH`], the
/// bound every protocol decoder applies, so whatever the broker accepted reads back, and a
/// corrupt record cannot exhaust the stack.
pub(crate) fn read_value(r: &mut Reader, depth: usize) -> Result<Value, CodecError> {
    if depth > MAX_DEPTH {
        return Err(r.error("value nested too deeply"));
    }
    let narrow = |r: &Reader, what| r.error(what);
    Ok(match r.u8("value tag")? {
        tag::NULL => Value::Null,
        tag::FALSE => Value::Bool(false),
        tag::TRUE => Value::Bool(true),
        tag::U8 => Value::U8(r.u8("ubyte")?),
        tag::I8 => Value::I8(i8::from_le_bytes(r.fixed::<1>("byte")?)),
        tag::U16 => Value::U16(u16::try_from(r.varint("ushort")?).map_err(|_| narrow(r, "ushort"))?),
        tag::I16 => Value::I16(i16::try_from(r.zigzag("short")?).map_err(|_| narrow(r, "short"))?),
        tag::U32 => Value::U32(r.u32("uint")?),
        tag::I32 => Value::I32(i32::try_from(r.zigzag("int")?).map_err(|_| narrow(r, "int"))?),
        tag::U64 => Value::U64(r.varint("ulong")?),
        tag::I64 => Value::I64(r.zigzag("long")?),
        tag::F32 => Value::F32(f32::from_bits(u32::from_le_bytes(r.fixed("float")?))),
        tag::F64 => Value::F64(f64::from_bits(u64::from_le_bytes(r.fixed("double")?))),
        tag::DECIMAL => {
            let scale = r.u8("decimal scale")?;
            Value::Decimal { scale, value: u32::from_le_bytes(r.fixed("decimal")?) }
        }
        tag::DECIMAL32 => Value::Decimal32(r.fixed("decimal32")?),
        tag::DECIMAL64 => Value::Decimal64(r.fixed("decimal64")?),
        tag::DECIMAL128 => Value::Decimal128(r.fixed("decimal128")?),
        tag::CHAR => Value::Char(char::from_u32(r.u32("char")?).ok_or_else(|| narrow(r, "char"))?),
        tag::TIMESTAMP => Value::Timestamp(r.zigzag("timestamp")?),
        tag::UUID => Value::Uuid(r.fixed("uuid")?),
        tag::BINARY => Value::Binary(r.bytes("binary")?),
        tag::LONG_STR => Value::LongStr(r.bytes("long string")?),
        tag::STRING => Value::String(r.string("string")?),
        tag::SYMBOL => Value::Symbol(r.string("symbol")?),
        tag::LIST => Value::List(read_values(r, depth)?),
        tag::ARRAY => Value::Array(read_values(r, depth)?),
        tag::MAP => {
            let n = r.count("map size")?;
            let mut pairs = Vec::with_capacity(n);
            for _ in 0..n {
                let key = read_value(r, depth + 1)?;
                pairs.push((key, read_value(r, depth + 1)?));
            }
            Value::Map(pairs)
        }
        tag::TABLE => Value::Table(read_table_at(r, depth)?),
        tag::DESCRIBED => {
            let descriptor = read_value(r, depth + 1)?;
            Value::Described(Box::new((descriptor, read_value(r, depth + 1)?)))
        }
        _ => return Err(r.error("unknown value tag")),
    })
}
