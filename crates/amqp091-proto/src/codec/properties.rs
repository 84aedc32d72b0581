//! `basic` class content-header properties, decoded into the model and encoded from it.
//!
//! Our own codec rather than amq-protocol's: that one stores headers in a sorted map, which
//! loses header order and duplicate keys, and RabbitMQ preserves both.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use charon_model::{MessageId, Properties, Table};

use super::CodecError;
use super::table::{decode_table, encode_table, put_short_str, short_str};

const CONTENT_TYPE: u16 = 1 << 15;
const CONTENT_ENCODING: u16 = 1 << 14;
const HEADERS: u16 = 1 << 13;
const DELIVERY_MODE: u16 = 1 << 12;
const PRIORITY: u16 = 1 << 11;
const CORRELATION_ID: u16 = 1 << 10;
const REPLY_TO: u16 = 1 << 9;
const EXPIRATION: u16 = 1 << 8;
const MESSAGE_ID: u16 = 1 << 7;
const TIMESTAMP: u16 = 1 << 6;
const TYPE: u16 = 1 << 5;
const USER_ID: u16 = 1 << 4;
const APP_ID: u16 = 1 << 3;
const CLUSTER_ID: u16 = 1 << 2;
const CONTINUATION: u16 = 1;
/// The flags of the properties that go into the model's [`Properties`] (all but `headers` and
/// `expiration`).
const MODEL_FIELDS: u16 = CONTENT_TYPE
    | CONTENT_ENCODING
    | DELIVERY_MODE
    | PRIORITY
    | CORRELATION_ID
    | REPLY_TO
    | MESSAGE_ID
    | TIMESTAMP
    | TYPE
    | USER_ID
    | APP_ID
    | CLUSTER_ID;

/// Properties of a published message as the wire carried them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DecodedProperties {
    /// The model's properties (expiration not yet validated: see `expiration`); `None` when
    /// the list sets none of them. Boxed because they are 300 bytes that every publish would
    /// otherwise copy from the decoder to the model message several times over.
    pub properties: Option<Box<Properties>>,
    /// The `headers` table, in wire order.
    pub headers: Table,
    /// The raw `expiration` string, validated by the channel (RabbitMQ refuses bad values with
    /// a channel error, not a frame error).
    pub expiration: Option<String>,
}

fn octet(input: &mut Bytes) -> Result<u8, CodecError> {
    if input.has_remaining() { Ok(input.get_u8()) } else { Err(CodecError::Truncated) }
}

/// Decodes a property list (flags onward).
///
/// # Errors
/// Truncated input or an unknown field-table type.
pub fn decode_properties(raw: &Bytes) -> Result<DecodedProperties, CodecError> {
    let mut input = raw.clone();
    if input.remaining() < 2 {
        return Err(CodecError::Truncated);
    }
    let flags = input.get_u16();
    // Further flag words (continuation) carry no defined properties; skip them.
    let mut more = flags & CONTINUATION != 0;
    while more {
        if input.remaining() < 2 {
            return Err(CodecError::Truncated);
        }
        more = input.get_u16() & CONTINUATION != 0;
    }
    let mut out = DecodedProperties::default();
    let mut properties = Box::<Properties>::default();
    let p = &mut *properties;
    let has = |bit: u16| flags & bit != 0;
    if has(CONTENT_TYPE) {
        p.content_type = Some(short_str(&mut input)?);
    }
    if has(CONTENT_ENCODING) {
        p.content_encoding = Some(short_str(&mut input)?);
    }
    if has(HEADERS) {
        out.headers = decode_table(&mut input)?;
    }
    if has(DELIVERY_MODE) {
        p.delivery_mode = Some(octet(&mut input)?);
    }
    if has(PRIORITY) {
        p.priority = Some(octet(&mut input)?);
    }
    if has(CORRELATION_ID) {
        p.correlation_id = Some(MessageId::String(short_str(&mut input)?));
    }
    if has(REPLY_TO) {
        p.reply_to = Some(short_str(&mut input)?);
    }
    if has(EXPIRATION) {
        out.expiration = Some(short_str(&mut input)?);
    }
    if has(MESSAGE_ID) {
        p.message_id = Some(MessageId::String(short_str(&mut input)?));
    }
    if has(TIMESTAMP) {
        if input.remaining() < 8 {
            return Err(CodecError::Truncated);
        }
        let seconds = i64::try_from(input.get_u64()).unwrap_or(i64::MAX);
        p.timestamp = Some(seconds.saturating_mul(1000));
    }
    if has(TYPE) {
        p.message_type = Some(short_str(&mut input)?);
    }
    if has(USER_ID) {
        p.user_id = Some(Bytes::from(short_str(&mut input)?));
    }
    if has(APP_ID) {
        p.app_id = Some(short_str(&mut input)?);
    }
    if has(CLUSTER_ID) {
        p.cluster_id = Some(short_str(&mut input)?);
    }
    if flags & MODEL_FIELDS != 0 {
        out.properties = Some(properties);
    }
    Ok(out)
}

fn message_id_text(id: &MessageId) -> Vec<u8> {
    match id {
        MessageId::String(s) => s.as_bytes().to_vec(),
        MessageId::Ulong(n) => n.to_string().into_bytes(),
        MessageId::Uuid(u) => u.to_vec(),
        MessageId::Binary(b) => b.to_vec(),
    }
}

/// Encodes a property list from the model. `expiration` is the string to send (usually the
/// model's TTL formatted, or nothing for a dead-lettered copy).
pub fn encode_properties(out: &mut BytesMut, p: &Properties, headers: &Table, expiration: Option<&str>) {
    let flags_at = out.len();
    out.put_u16(0);
    let mut flags = 0u16;
    let short = |out: &mut BytesMut, flags: &mut u16, bit: u16, value: Option<&[u8]>| {
        if let Some(v) = value {
            *flags |= bit;
            put_short_str(out, v);
        }
    };
    short(out, &mut flags, CONTENT_TYPE, p.content_type.as_deref().map(str::as_bytes));
    short(out, &mut flags, CONTENT_ENCODING, p.content_encoding.as_deref().map(str::as_bytes));
    if !headers.is_empty() {
        flags |= HEADERS;
        encode_table(out, headers);
    }
    let delivery_mode = p.delivery_mode.or(match p.durable {
        Some(true) => Some(2),
        _ => None,
    });
    if let Some(mode) = delivery_mode {
        flags |= DELIVERY_MODE;
        out.put_u8(mode);
    }
    if let Some(priority) = p.priority {
        flags |= PRIORITY;
        out.put_u8(priority);
    }
    let correlation = p.correlation_id.as_ref().map(message_id_text);
    short(out, &mut flags, CORRELATION_ID, correlation.as_deref());
    short(out, &mut flags, REPLY_TO, p.reply_to.as_deref().map(str::as_bytes));
    short(out, &mut flags, EXPIRATION, expiration.map(str::as_bytes));
    let message_id = p.message_id.as_ref().map(message_id_text);
    short(out, &mut flags, MESSAGE_ID, message_id.as_deref());
    if let Some(ms) = p.timestamp {
        flags |= TIMESTAMP;
        out.put_u64(u64::try_from(ms.div_euclid(1000)).unwrap_or(0));
    }
    short(out, &mut flags, TYPE, p.message_type.as_deref().map(str::as_bytes));
    short(out, &mut flags, USER_ID, p.user_id.as_deref());
    short(out, &mut flags, APP_ID, p.app_id.as_deref().map(str::as_bytes));
    short(out, &mut flags, CLUSTER_ID, p.cluster_id.as_deref().map(str::as_bytes));
    if let Some(slot) = out.get_mut(flags_at..flags_at + 2) {
        slot.copy_from_slice(&flags.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use charon_model::Value;

    use super::*;

    #[test]
    fn all_properties_round_trip() {
        let p = Properties {
            content_type: Some("text/plain".into()),
            content_encoding: Some("gzip".into()),
            delivery_mode: Some(2),
            priority: Some(7),
            correlation_id: Some(MessageId::String("c".into())),
            reply_to: Some("r".into()),
            message_id: Some(MessageId::String("m".into())),
            timestamp: Some(1_700_000_000_000),
            message_type: Some("t".into()),
            user_id: Some(Bytes::from_static(b"guest")),
            app_id: Some("a".into()),
            cluster_id: Some("cl".into()),
            ..Properties::default()
        };
        let headers: Table =
            vec![("b".to_owned(), Value::I32(1)), ("a".to_owned(), Value::long_str("x"))].into_iter().collect();
        let mut out = BytesMut::new();
        encode_properties(&mut out, &p, &headers, Some("60000"));
        let decoded = decode_properties(&out.freeze()).unwrap();
        assert_eq!(decoded.properties.as_deref(), Some(&p));
        assert_eq!(decoded.headers, headers);
        assert_eq!(decoded.expiration.as_deref(), Some("60000"));
    }

    #[test]
    fn empty_property_list_is_two_zero_bytes() {
        let mut out = BytesMut::new();
        encode_properties(&mut out, &Properties::default(), &Table::new(), None);
        assert_eq!(&out[..], &[0, 0]);
        assert_eq!(decode_properties(&out.freeze()).unwrap(), DecodedProperties::default());
    }

    #[test]
    fn headers_and_expiration_alone_leave_the_model_properties_unboxed() {
        let headers: Table = vec![("a".to_owned(), Value::I32(1))].into_iter().collect();
        let mut out = BytesMut::new();
        encode_properties(&mut out, &Properties::default(), &headers, Some("5"));
        let decoded = decode_properties(&out.freeze()).unwrap();
        assert_eq!((decoded.properties, decoded.headers, decoded.expiration.as_deref()), (None, headers, Some("5")));
        let persistent = decode_properties(&Bytes::from_static(&[0x10, 0x00, 2])).unwrap();
        assert_eq!(persistent.properties.map(|p| p.delivery_mode), Some(Some(2)));
    }

    #[test]
    fn truncated_property_list_is_an_error() {
        let raw = Bytes::from_static(&[0x80, 0x00, 5, b'a']);
        assert_eq!(decode_properties(&raw), Err(CodecError::Truncated));
    }
}
