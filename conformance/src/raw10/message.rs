//! Building message sections byte-exactly, and reading them back with their AMQP types.

use super::codec::{self, described};
use crate::error::CaseError;
use serde_amqp::{
    Value,
    primitives::{OrderedMap, Symbol},
};

/// Section descriptor codes (AMQP 1.0 §3.2).
pub mod code {
    /// header
    pub const HEADER: u64 = 0x70;
    /// delivery-annotations
    pub const DELIVERY_ANNOTATIONS: u64 = 0x71;
    /// message-annotations
    pub const MESSAGE_ANNOTATIONS: u64 = 0x72;
    /// properties
    pub const PROPERTIES: u64 = 0x73;
    /// application-properties
    pub const APPLICATION_PROPERTIES: u64 = 0x74;
    /// data
    pub const DATA: u64 = 0x75;
    /// amqp-sequence
    pub const AMQP_SEQUENCE: u64 = 0x76;
    /// amqp-value
    pub const AMQP_VALUE: u64 = 0x77;
    /// footer
    pub const FOOTER: u64 = 0x78;
}

/// Field positions in the properties list.
pub mod prop {
    /// message-id
    pub const MESSAGE_ID: usize = 0;
    /// user-id
    pub const USER_ID: usize = 1;
    /// to
    pub const TO: usize = 2;
    /// subject
    pub const SUBJECT: usize = 3;
    /// reply-to
    pub const REPLY_TO: usize = 4;
    /// correlation-id
    pub const CORRELATION_ID: usize = 5;
    /// content-type
    pub const CONTENT_TYPE: usize = 6;
    /// content-encoding
    pub const CONTENT_ENCODING: usize = 7;
    /// absolute-expiry-time
    pub const ABSOLUTE_EXPIRY_TIME: usize = 8;
    /// creation-time
    pub const CREATION_TIME: usize = 9;
    /// group-id
    pub const GROUP_ID: usize = 10;
    /// group-sequence
    pub const GROUP_SEQUENCE: usize = 11;
    /// reply-to-group-id
    pub const REPLY_TO_GROUP_ID: usize = 12;
}

/// Field positions in the header list.
pub mod hdr {
    /// durable
    pub const DURABLE: usize = 0;
    /// priority
    pub const PRIORITY: usize = 1;
    /// ttl
    pub const TTL: usize = 2;
    /// first-acquirer
    pub const FIRST_ACQUIRER: usize = 3;
    /// delivery-count
    pub const DELIVERY_COUNT: usize = 4;
}

/// A message to encode: every section optional, fields given with their exact AMQP types.
#[derive(Debug, Clone, Default)]
pub struct Msg {
    header: Option<Vec<Value>>,
    annotations: Vec<(Value, Value)>,
    properties: Option<Vec<Value>>,
    app: Vec<(Value, Value)>,
    body: Vec<Value>,
}

fn set(list: &mut Option<Vec<Value>>, i: usize, v: Value) {
    let l = list.get_or_insert_with(Vec::new);
    while l.len() <= i {
        l.push(Value::Null);
    }
    if let Some(slot) = l.get_mut(i) {
        *slot = v;
    }
}

impl Msg {
    /// An empty message (no sections).
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets header field `i` (see [`hdr`]).
    pub fn header(mut self, i: usize, v: Value) -> Self {
        set(&mut self.header, i, v);
        self
    }
    /// Sets properties field `i` (see [`prop`]).
    pub fn prop(mut self, i: usize, v: Value) -> Self {
        set(&mut self.properties, i, v);
        self
    }
    /// Adds an application property.
    pub fn app(mut self, key: &str, v: Value) -> Self {
        self.app.push((Value::String(key.to_owned()), v));
        self
    }
    /// Adds an application property with a key of any type (the spec's is a string).
    pub fn app_keyed(mut self, key: Value, v: Value) -> Self {
        self.app.push((key, v));
        self
    }
    /// Adds a message annotation with a key of any type (the spec's is a symbol or a ulong).
    pub fn ann_keyed(mut self, key: Value, v: Value) -> Self {
        self.annotations.push((key, v));
        self
    }
    /// Adds a message annotation (symbol key).
    pub fn ann(mut self, key: &str, v: Value) -> Self {
        self.annotations.push((Value::Symbol(Symbol::from(key)), v));
        self
    }
    /// Appends a data section.
    pub fn data(mut self, bytes: &[u8]) -> Self {
        self.body.push(described(code::DATA, Value::Binary(bytes.to_vec().into())));
        self
    }
    /// Sets an amqp-value body.
    pub fn value(mut self, v: Value) -> Self {
        self.body.push(described(code::AMQP_VALUE, v));
        self
    }
    /// Appends an amqp-sequence section.
    pub fn sequence(mut self, items: Vec<Value>) -> Self {
        self.body.push(described(code::AMQP_SEQUENCE, Value::List(items)));
        self
    }
    /// A plain text message: one data section.
    pub fn text(body: &str) -> Self {
        Self::new().data(body.as_bytes())
    }

    /// The encoded message.
    pub fn encode(&self) -> Result<Vec<u8>, CaseError> {
        let mut out = Vec::new();
        if let Some(h) = &self.header {
            out.extend(codec::encode(&described(code::HEADER, Value::List(h.clone())))?);
        }
        if !self.annotations.is_empty() {
            out.extend(codec::encode(&described(code::MESSAGE_ANNOTATIONS, map(&self.annotations)))?);
        }
        if let Some(p) = &self.properties {
            out.extend(codec::encode(&described(code::PROPERTIES, Value::List(p.clone())))?);
        }
        if !self.app.is_empty() {
            out.extend(codec::encode(&described(code::APPLICATION_PROPERTIES, map(&self.app)))?);
        }
        for b in &self.body {
            out.extend(codec::encode(b)?);
        }
        Ok(out)
    }
}

fn map(entries: &[(Value, Value)]) -> Value {
    Value::Map(entries.iter().cloned().collect::<OrderedMap<Value, Value>>())
}

/// A received message, split into its sections.
#[derive(Debug, Clone)]
pub struct Received {
    /// `(descriptor code, encoded section)` in wire order.
    pub sections: Vec<(u64, Vec<u8>)>,
}

impl Received {
    /// Splits `payload` into sections.
    pub fn parse(payload: &[u8]) -> Result<Self, CaseError> {
        Ok(Self { sections: codec::sections(payload)? })
    }

    /// The (undescribed) value of the first section with `code`.
    pub fn section(&self, c: u64) -> Option<Value> {
        let (_, b) = self.sections.iter().find(|(k, _)| *k == c)?;
        codec::decode_value(b).ok().map(codec::undescribe)
    }

    /// The descriptor codes in wire order.
    pub fn codes(&self) -> Vec<u64> {
        self.sections.iter().map(|(c, _)| *c).collect()
    }

    fn list_field(&self, c: u64, i: usize) -> Option<Value> {
        match self.section(c)? {
            Value::List(l) => l.get(i).cloned().filter(|v| *v != Value::Null),
            _ => None,
        }
    }

    /// Header field `i`, `None` when absent or null.
    pub fn header(&self, i: usize) -> Option<Value> {
        self.list_field(code::HEADER, i)
    }

    /// Properties field `i`, `None` when absent or null.
    pub fn prop(&self, i: usize) -> Option<Value> {
        self.list_field(code::PROPERTIES, i)
    }

    fn map_entries(&self, c: u64) -> Vec<(Value, Value)> {
        match self.section(c) {
            Some(Value::Map(m)) => m.into_iter().collect(),
            _ => Vec::new(),
        }
    }

    /// Application properties as `(key, value)`.
    pub fn app_props(&self) -> Vec<(String, Value)> {
        self.map_entries(code::APPLICATION_PROPERTIES)
            .into_iter()
            .map(|(k, v)| match k {
                Value::String(s) => (s, v),
                other => (format!("{other:?}"), v),
            })
            .collect()
    }

    /// One application property.
    pub fn app(&self, key: &str) -> Option<Value> {
        self.app_props().into_iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Message annotations as `(symbol key, value)`.
    pub fn annotations(&self) -> Vec<(String, Value)> {
        self.map_entries(code::MESSAGE_ANNOTATIONS)
            .into_iter()
            .map(|(k, v)| match k {
                Value::Symbol(s) => (s.0, v),
                other => (format!("{other:?}"), v),
            })
            .collect()
    }

    /// One message annotation.
    pub fn ann(&self, key: &str) -> Option<Value> {
        self.annotations().into_iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The body sections `(code, value)`.
    pub fn body(&self) -> Vec<(u64, Value)> {
        self.sections
            .iter()
            .filter(|(c, _)| matches!(*c, code::DATA | code::AMQP_SEQUENCE | code::AMQP_VALUE))
            .filter_map(|(c, b)| codec::decode_value(b).ok().map(|v| (*c, codec::undescribe(v))))
            .collect()
    }

    /// The concatenated bytes of the data sections (`None` if the body has another kind).
    pub fn data(&self) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        for (c, v) in self.body() {
            match (c, v) {
                (code::DATA, Value::Binary(b)) => out.extend_from_slice(&b),
                _ => return None,
            }
        }
        Some(out)
    }

    /// The data body as text (lossy), or a description of the body when it is not data.
    pub fn text(&self) -> String {
        match self.data() {
            Some(d) => String::from_utf8_lossy(&d).into_owned(),
            None => format!("{:?}", self.body()),
        }
    }

    /// The bare message bytes: properties, application-properties and body, as sent.
    pub fn bare(&self) -> Vec<u8> {
        self.sections
            .iter()
            .filter(|(c, _)| {
                !matches!(*c, code::HEADER | code::DELIVERY_ANNOTATIONS | code::MESSAGE_ANNOTATIONS | code::FOOTER)
            })
            .flat_map(|(_, b)| b.iter().copied())
            .collect()
    }
}
