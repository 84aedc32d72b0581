//! AMQP 0.9.1 field tables and arrays, in RabbitMQ's dialect (`rabbit_binary_parser`), decoded
//! into the model's ordered [`Table`] so header order and types survive a round trip.
//!
//! Type letters: `t` bool, `b`/`B` i8/u8, `s`/`u` i16/u16, `I`/`i` i32/u32, `l` (and `L`, read
//! as signed) i64, `f`/`d` floats, `D` decimal, `S` long string, `x` byte array, `T` timestamp
//! (seconds), `F` table, `A` array, `V` void.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use charon_model::{MAX_DEPTH, Table, Value};

use super::CodecError;

fn take(input: &mut Bytes, n: usize) -> Result<Bytes, CodecError> {
    if input.remaining() < n {
        return Err(CodecError::Truncated);
    }
    Ok(input.split_to(n))
}

fn u8_(input: &mut Bytes) -> Result<u8, CodecError> {
    if input.remaining() < 1 { Err(CodecError::Truncated) } else { Ok(input.get_u8()) }
}

fn u16_(input: &mut Bytes) -> Result<u16, CodecError> {
    if input.remaining() < 2 { Err(CodecError::Truncated) } else { Ok(input.get_u16()) }
}

fn u32_(input: &mut Bytes) -> Result<u32, CodecError> {
    if input.remaining() < 4 { Err(CodecError::Truncated) } else { Ok(input.get_u32()) }
}

fn u64_(input: &mut Bytes) -> Result<u64, CodecError> {
    if input.remaining() < 8 { Err(CodecError::Truncated) } else { Ok(input.get_u64()) }
}

fn len32(input: &mut Bytes) -> Result<usize, CodecError> {
    usize::try_from(u32_(input)?).map_err(|_| CodecError::Truncated)
}

/// Reads a short string (1-byte length).
pub(crate) fn short_str(input: &mut Bytes) -> Result<String, CodecError> {
    let len = usize::from(u8_(input)?);
    let raw = take(input, len)?;
    Ok(String::from_utf8_lossy(&raw).into_owned())
}

/// Reads a long string (4-byte length) as raw bytes.
pub(crate) fn long_bytes(input: &mut Bytes) -> Result<Bytes, CodecError> {
    let len = len32(input)?;
    take(input, len)
}

/// Decodes a table whose 4-byte length prefix comes first.
///
/// # Errors
/// Truncated input, an unknown type letter, or tables and arrays nested deeper than the
/// model's [`MAX_DEPTH`] (refused before recursing further, whatever the input).
pub fn decode_table(input: &mut Bytes) -> Result<Table, CodecError> {
    decode_table_at(input, 0)
}

/// A table that is itself a value `depth` levels down; its values are one level further.
fn decode_table_at(input: &mut Bytes, depth: usize) -> Result<Table, CodecError> {
    let len = len32(input)?;
    let mut body = take(input, len)?;
    let mut table = Table::new();
    while body.has_remaining() {
        let key = short_str(&mut body)?;
        let value = decode_value(&mut body, depth + 1)?;
        table.0.push((key, value));
    }
    Ok(table)
}

fn decode_array(input: &mut Bytes, depth: usize) -> Result<Vec<Value>, CodecError> {
    let len = len32(input)?;
    let mut body = take(input, len)?;
    let mut items = Vec::new();
    while body.has_remaining() {
        items.push(decode_value(&mut body, depth + 1)?);
    }
    Ok(items)
}

fn decode_value(input: &mut Bytes, depth: usize) -> Result<Value, CodecError> {
    if depth > MAX_DEPTH {
        return Err(CodecError::TooDeep);
    }
    let tag = u8_(input)?;
    Ok(match tag {
        b't' => Value::Bool(u8_(input)? != 0),
        b'b' => Value::I8(i8::from_be_bytes([u8_(input)?])),
        b'B' => Value::U8(u8_(input)?),
        b's' => Value::I16(i16::from_be_bytes(u16_(input)?.to_be_bytes())),
        b'u' => Value::U16(u16_(input)?),
        b'I' => Value::I32(i32::from_be_bytes(u32_(input)?.to_be_bytes())),
        b'i' => Value::U32(u32_(input)?),
        b'l' | b'L' => Value::I64(i64::from_be_bytes(u64_(input)?.to_be_bytes())),
        b'f' => Value::F32(f32::from_bits(u32_(input)?)),
        b'd' => Value::F64(f64::from_bits(u64_(input)?)),
        b'D' => {
            let scale = u8_(input)?;
            Value::Decimal { scale, value: u32_(input)? }
        }
        b'S' => Value::LongStr(long_bytes(input)?),
        b'x' => Value::Binary(long_bytes(input)?),
        b'T' => {
            let seconds = i64::try_from(u64_(input)?).unwrap_or(i64::MAX);
            Value::Timestamp(seconds.saturating_mul(1000))
        }
        b'F' => Value::Table(decode_table_at(input, depth)?),
        b'A' => Value::List(decode_array(input, depth)?),
        b'V' => Value::Null,
        other => return Err(CodecError::UnknownFieldType(other)),
    })
}

/// Writes a short string, truncating to 255 bytes (callers validate lengths that matter).
pub(crate) fn put_short_str(out: &mut BytesMut, s: &[u8]) {
    let s = s.get(..255).unwrap_or(s);
    out.put_u8(u8::try_from(s.len()).unwrap_or(u8::MAX));
    out.put_slice(s);
}

fn put_long_bytes(out: &mut BytesMut, b: &[u8]) {
    out.put_u32(u32::try_from(b.len()).unwrap_or(u32::MAX));
    out.put_slice(b);
}

/// Writes a table with its length prefix.
pub fn encode_table(out: &mut BytesMut, table: &Table) {
    let at = out.len();
    out.put_u32(0);
    for (key, value) in table.iter() {
        put_short_str(out, key.as_bytes());
        encode_value(out, value);
    }
    patch_len(out, at);
}

fn patch_len(out: &mut BytesMut, at: usize) {
    let len = u32::try_from(out.len() - at - 4).unwrap_or(u32::MAX);
    if let Some(slot) = out.get_mut(at..at + 4) {
        slot.copy_from_slice(&len.to_be_bytes());
    }
}

fn encode_list(out: &mut BytesMut, items: &[Value]) {
    let at = out.len();
    out.put_u32(0);
    for item in items {
        encode_value(out, item);
    }
    patch_len(out, at);
}

/// Writes one value with its type letter. Types 0.9.1 lacks are mapped as RabbitMQ's
/// `mc_amqpl` maps AMQP 1.0 values: ulong → `l`, string/symbol → `S`, uuid/binary → `x`,
/// char → `S`, 1.0 decimals → `x` (their encoding), maps → `F` where keys are strings.
pub(crate) fn encode_value(out: &mut BytesMut, value: &Value) {
    match value {
        Value::Null => out.put_u8(b'V'),
        Value::Bool(b) => {
            out.put_u8(b't');
            out.put_u8(u8::from(*b));
        }
        Value::I8(v) => {
            out.put_u8(b'b');
            out.put_i8(*v);
        }
        Value::U8(v) => {
            out.put_u8(b'B');
            out.put_u8(*v);
        }
        Value::I16(v) => {
            out.put_u8(b's');
            out.put_i16(*v);
        }
        Value::U16(v) => {
            out.put_u8(b'u');
            out.put_u16(*v);
        }
        Value::I32(v) => {
            out.put_u8(b'I');
            out.put_i32(*v);
        }
        Value::U32(v) => {
            out.put_u8(b'i');
            out.put_u32(*v);
        }
        Value::I64(v) => {
            out.put_u8(b'l');
            out.put_i64(*v);
        }
        Value::U64(v) => {
            out.put_u8(b'l');
            out.put_i64(i64::try_from(*v).unwrap_or(i64::MAX));
        }
        Value::F32(v) => {
            out.put_u8(b'f');
            out.put_f32(*v);
        }
        Value::F64(v) => {
            out.put_u8(b'd');
            out.put_f64(*v);
        }
        Value::Decimal { scale, value } => {
            out.put_u8(b'D');
            out.put_u8(*scale);
            out.put_u32(*value);
        }
        Value::Timestamp(ms) => {
            out.put_u8(b'T');
            out.put_u64(u64::try_from(ms.div_euclid(1000)).unwrap_or(0));
        }
        Value::LongStr(b) => {
            out.put_u8(b'S');
            put_long_bytes(out, b);
        }
        Value::String(s) | Value::Symbol(s) => {
            out.put_u8(b'S');
            put_long_bytes(out, s.as_bytes());
        }
        Value::Char(c) => {
            out.put_u8(b'S');
            put_long_bytes(out, c.to_string().as_bytes());
        }
        Value::Binary(b) => {
            out.put_u8(b'x');
            put_long_bytes(out, b);
        }
        Value::Uuid(u) => {
            out.put_u8(b'x');
            put_long_bytes(out, u);
        }
        Value::Decimal32(b) => {
            out.put_u8(b'x');
            put_long_bytes(out, b);
        }
        Value::Decimal64(b) => {
            out.put_u8(b'x');
            put_long_bytes(out, b);
        }
        Value::Decimal128(b) => {
            out.put_u8(b'x');
            put_long_bytes(out, b);
        }
        Value::Table(t) => {
            out.put_u8(b'F');
            encode_table(out, t);
        }
        Value::Map(entries) => {
            let table: Table =
                entries.iter().filter_map(|(k, v)| k.as_str().map(|k| (k.to_owned(), v.clone()))).collect();
            out.put_u8(b'F');
            encode_table(out, &table);
        }
        Value::List(items) | Value::Array(items) => {
            out.put_u8(b'A');
            encode_list(out, items);
        }
        Value::Described(pair) => encode_value(out, &pair.1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_0_9_1_type_round_trips_in_order() {
        let table: Table = vec![
            ("z".to_owned(), Value::Bool(true)),
            ("a".to_owned(), Value::I8(-1)),
            ("b".to_owned(), Value::U8(200)),
            ("c".to_owned(), Value::I16(-300)),
            ("d".to_owned(), Value::U16(60000)),
            ("e".to_owned(), Value::I32(-70000)),
            ("f".to_owned(), Value::U32(4_000_000_000)),
            ("g".to_owned(), Value::I64(-5_000_000_000)),
            ("h".to_owned(), Value::F32(1.5)),
            ("i".to_owned(), Value::F64(-2.25)),
            ("j".to_owned(), Value::Decimal { scale: 2, value: 12345 }),
            ("k".to_owned(), Value::long_str("text")),
            ("l".to_owned(), Value::Binary(Bytes::from_static(&[0, 1, 2]))),
            ("m".to_owned(), Value::Timestamp(1_700_000_000_000)),
            ("n".to_owned(), Value::Table(vec![("x".to_owned(), Value::I32(1))].into_iter().collect())),
            ("o".to_owned(), Value::List(vec![Value::long_str("a"), Value::I64(2)])),
            ("p".to_owned(), Value::Null),
        ]
        .into_iter()
        .collect();
        let mut out = BytesMut::new();
        encode_table(&mut out, &table);
        let mut input = out.freeze();
        assert_eq!(decode_table(&mut input).unwrap(), table);
        assert!(input.is_empty());
    }

    /// `{"a": {"a": ... {"a": 1}}}` with `tables` tables inside the outermost one.
    pub(crate) fn nested_table(tables: usize) -> Table {
        let mut value = Value::I32(1);
        for _ in 0..tables {
            value = Value::Table(vec![("a".to_owned(), value)].into_iter().collect());
        }
        vec![("a".to_owned(), value)].into_iter().collect()
    }

    #[test]
    fn nesting_up_to_the_shared_limit_decodes_and_one_more_level_is_refused() {
        let mut out = BytesMut::new();
        encode_table(&mut out, &nested_table(MAX_DEPTH - 1));
        let at_limit = decode_table(&mut out.freeze()).unwrap();
        assert_eq!(at_limit, nested_table(MAX_DEPTH - 1));
        let mut out = BytesMut::new();
        encode_table(&mut out, &nested_table(MAX_DEPTH));
        assert_eq!(decode_table(&mut out.freeze()), Err(CodecError::TooDeep));
    }

    #[test]
    fn ten_thousand_levels_are_refused_without_recursing_into_them() {
        // Built as bytes: a model value this deep would itself be too deep to drop on a test
        // thread's stack. Array `i` holds array `i + 1`; the innermost holds one int.
        let levels: u32 = 10_000;
        let mut table = Vec::new();
        table.extend_from_slice(&(2 + 5 * levels + 5).to_be_bytes());
        table.extend_from_slice(&[1, b'a']);
        for i in 0..levels {
            table.push(b'A');
            table.extend_from_slice(&(5 * (levels - i)).to_be_bytes());
        }
        table.extend_from_slice(&[b'I', 0, 0, 0, 1]);
        assert_eq!(decode_table(&mut Bytes::from(table)), Err(CodecError::TooDeep));
    }

    #[test]
    fn capital_l_reads_as_signed_long_and_unknown_types_fail() {
        let mut input =
            Bytes::from_static(&[0, 0, 0, 11, 1, b'k', b'L', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe]);
        assert_eq!(decode_table(&mut input).unwrap().get("k"), Some(&Value::I64(-2)));
        let mut bad = Bytes::from_static(&[0, 0, 0, 3, 1, b'k', b'?']);
        assert_eq!(decode_table(&mut bad), Err(CodecError::UnknownFieldType(b'?')));
        let mut short = Bytes::from_static(&[0, 0, 0, 9, 1, b'k', b'S', 0, 0, 0, 10]);
        assert_eq!(decode_table(&mut short), Err(CodecError::Truncated));
    }
}
