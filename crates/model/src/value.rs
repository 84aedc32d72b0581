//! A typed value tree shared by both protocols.
//!
//! AMQP 0.9.1 field tables and AMQP 1.0 application properties / annotations have different
//! type systems. Rather than pick one and lose information, [`Value`] is their union: each
//! variant says which wire types it comes from, so an adapter can render a value back exactly
//! in its own protocol and convert it sensibly into the other one.

use bytes::Bytes;

/// How deeply values may nest, shared by every decoder that builds a [`Value`] (AMQP 0.9.1
/// field tables and arrays, AMQP 1.0 compound and described values) and by the store's codec.
///
/// A value directly in a message section or a method's table is at depth 0 and each container
/// puts its items one level further down; a decoder refuses any value deeper than this. One
/// number everywhere is what makes "accepted" imply "readable back": the store reads exactly
/// what the protocol decoders let in. It also bounds every recursion over a value (decoding,
/// encoding, conversion, dropping) far inside a 2 MiB worker stack. RabbitMQ 4.0.5 has no such
/// bound (it accepts tables nested 2,000 deep); no application nests anywhere near 64.
pub const MAX_DEPTH: usize = 64;

/// An ordered table of named values.
///
/// A `Vec` rather than a map: AMQP 0.9.1 field tables and AMQP 1.0 maps are ordered on the
/// wire, RabbitMQ preserves that order, and some consumers (and RabbitMQ's own tests of
/// `x-death`) depend on it. Tables are small, so linear lookup is cheaper than hashing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table(pub Vec<(String, Value)>);

impl Table {
    /// An empty table.
    #[must_use]
    pub fn new() -> Self {
        Self(Vec::new())
    }

    /// The value of the first entry named `key`.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Whether an entry named `key` exists.
    #[must_use]
    pub fn contains(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key` to `value`, replacing the first existing entry in place or appending.
    pub fn insert(&mut self, key: impl Into<String>, value: Value) {
        let key = key.into();
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key, value)),
        }
    }

    /// Removes every entry named `key` and returns the first removed value.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let mut removed = None;
        self.0.retain_mut(|(k, v)| {
            if k == key {
                if removed.is_none() {
                    removed = Some(std::mem::replace(v, Value::Null));
                }
                false
            } else {
                true
            }
        });
        removed
    }

    /// Number of entries.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the table has no entries.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Iterates over the entries in wire order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }
}

impl FromIterator<(String, Value)> for Table {
    fn from_iter<T: IntoIterator<Item = (String, Value)>>(iter: T) -> Self {
        Self(iter.into_iter().collect())
    }
}

/// One typed value.
///
/// Integer widths and signedness are kept because both protocols distinguish them and
/// RabbitMQ compares declare arguments "by class" but renders them exactly.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// 0.9.1 void (`V`), 1.0 `null`.
    Null,
    /// 0.9.1 `t`, 1.0 `boolean`.
    Bool(bool),
    /// 0.9.1 `B`, 1.0 `ubyte`.
    U8(u8),
    /// 0.9.1 `b`, 1.0 `byte`.
    I8(i8),
    /// 0.9.1 `u`, 1.0 `ushort`.
    U16(u16),
    /// 0.9.1 `s` (RabbitMQ's short int), 1.0 `short`.
    I16(i16),
    /// 0.9.1 `i`, 1.0 `uint`.
    U32(u32),
    /// 0.9.1 `I`, 1.0 `int`.
    I32(i32),
    /// 1.0 `ulong` (0.9.1 has no unsigned 64-bit type in RabbitMQ's dialect).
    U64(u64),
    /// 0.9.1 `l`, 1.0 `long`.
    I64(i64),
    /// 0.9.1 `f`, 1.0 `float`.
    F32(f32),
    /// 0.9.1 `d`, 1.0 `double`.
    F64(f64),
    /// 0.9.1 `D`: a decimal with `scale` digits after the point.
    Decimal {
        /// Number of decimal digits.
        scale: u8,
        /// Unscaled value.
        value: u32,
    },
    /// 1.0 `decimal32`, kept in its IEEE 754 encoding.
    Decimal32([u8; 4]),
    /// 1.0 `decimal64`, kept in its IEEE 754 encoding.
    Decimal64([u8; 8]),
    /// 1.0 `decimal128`, kept in its IEEE 754 encoding.
    Decimal128([u8; 16]),
    /// 1.0 `char`.
    Char(char),
    /// A point in time in milliseconds since the Unix epoch: 1.0 `timestamp`, or a 0.9.1 `T`
    /// (seconds) multiplied by 1000, which renders back to the same seconds.
    Timestamp(i64),
    /// 1.0 `uuid`.
    Uuid([u8; 16]),
    /// 1.0 `binary`, 0.9.1 byte array (`x`).
    Binary(Bytes),
    /// 0.9.1 long string (`S`): bytes, usually but not necessarily UTF-8.
    LongStr(Bytes),
    /// 1.0 `string` (UTF-8).
    String(String),
    /// 1.0 `symbol` (ASCII).
    Symbol(String),
    /// 1.0 `list`, 0.9.1 field array (`A`): heterogeneous, ordered.
    List(Vec<Value>),
    /// 1.0 `array`: homogeneous, ordered.
    Array(Vec<Value>),
    /// 1.0 `map` with arbitrary keys, in wire order.
    Map(Vec<(Value, Value)>),
    /// 0.9.1 field table (`F`): string keys, in wire order.
    Table(Table),
    /// 1.0 described value: `(descriptor, value)`.
    Described(Box<(Value, Value)>),
}

impl Value {
    /// A 0.9.1-style long string from UTF-8 text.
    #[must_use]
    pub fn long_str(text: &str) -> Self {
        Self::LongStr(Bytes::copy_from_slice(text.as_bytes()))
    }

    /// The value as text, if it is any of the string-like variants holding valid UTF-8.
    #[must_use]
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) | Self::Symbol(s) => Some(s),
            Self::LongStr(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The value as a signed integer, if it is any integer variant that fits in `i64`.
    #[must_use]
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Self::U8(v) => Some(i64::from(v)),
            Self::I8(v) => Some(i64::from(v)),
            Self::U16(v) => Some(i64::from(v)),
            Self::I16(v) => Some(i64::from(v)),
            Self::U32(v) => Some(i64::from(v)),
            Self::I32(v) => Some(i64::from(v)),
            Self::U64(v) => i64::try_from(v).ok(),
            Self::I64(v) => Some(v),
            _ => None,
        }
    }

    /// The value as a boolean, if it is one.
    #[must_use]
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Self::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The name RabbitMQ uses for this value's type in error texts (`rabbit_misc` type atoms:
    /// `longstr`, `signedint`, `long`, `bool`, ...). Used so argument-validation errors read
    /// exactly like RabbitMQ's.
    #[must_use]
    pub fn rabbit_type_name(&self) -> &'static str {
        match self {
            Self::Null => "void",
            Self::Bool(_) => "bool",
            Self::U8(_) => "unsignedbyte",
            Self::I8(_) => "byte",
            Self::U16(_) => "unsignedshort",
            Self::I16(_) => "short",
            Self::U32(_) => "unsignedint",
            Self::I32(_) => "signedint",
            Self::U64(_) => "unsignedlong",
            Self::I64(_) => "long",
            Self::F32(_) => "float",
            Self::F64(_) => "double",
            Self::Decimal { .. } | Self::Decimal32(_) | Self::Decimal64(_) | Self::Decimal128(_) => "decimal",
            Self::Char(_) => "char",
            Self::Timestamp(_) => "timestamp",
            Self::Uuid(_) => "uuid",
            Self::Binary(_) => "binary",
            Self::LongStr(_) | Self::String(_) => "longstr",
            Self::Symbol(_) => "symbol",
            Self::List(_) | Self::Array(_) => "array",
            Self::Map(_) | Self::Table(_) => "table",
            Self::Described(_) => "described",
        }
    }

    /// Whether two values are equal "by class" the way RabbitMQ compares declare arguments
    /// (`rabbit_misc:assert_args_equivalence`): integers of any width compare by value, and the
    /// string-like variants compare by their bytes.
    #[must_use]
    pub fn equivalent(&self, other: &Self) -> bool {
        if let (Some(a), Some(b)) = (self.as_i64(), other.as_i64()) {
            return a == b;
        }
        match (self.string_bytes(), other.string_bytes()) {
            (Some(a), Some(b)) => a == b,
            _ => self == other,
        }
    }

    fn string_bytes(&self) -> Option<&[u8]> {
        match self {
            Self::String(s) | Self::Symbol(s) => Some(s.as_bytes()),
            Self::LongStr(b) => Some(b),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_keeps_wire_order_and_replaces_in_place() {
        let mut t = Table::new();
        t.insert("b", Value::I32(1));
        t.insert("a", Value::I32(2));
        t.insert("b", Value::I32(3));
        let keys: Vec<_> = t.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["b", "a"]);
        assert_eq!(t.get("b"), Some(&Value::I32(3)));
        assert_eq!(t.remove("b"), Some(Value::I32(3)));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn equivalence_compares_integers_by_class() {
        assert!(Value::I16(5).equivalent(&Value::I64(5)));
        assert!(!Value::I16(5).equivalent(&Value::I64(6)));
        assert!(Value::long_str("x").equivalent(&Value::String("x".into())));
        assert!(!Value::long_str("x").equivalent(&Value::I32(1)));
    }

    #[test]
    fn rabbit_type_names_match_error_texts() {
        assert_eq!(Value::I32(1).rabbit_type_name(), "signedint");
        assert_eq!(Value::long_str("a").rabbit_type_name(), "longstr");
    }
}
