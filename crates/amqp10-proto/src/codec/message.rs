//! Splitting a transfer payload into message sections (§3.2) and decoding only the sections
//! routing needs. The bare message bytes are kept exactly as received.

use bytes::Bytes;
use fe2o3_amqp_types::messaging::{MessageId, Properties};
use fe2o3_amqp_types::primitives::{Binary, Symbol};
use serde_amqp::Value as Amqp;

use super::value::from_amqp;
use super::{DecodeError, decode_exact, decode_whole, encoded_len};

const HEADER: u64 = 0x70;
const DELIVERY_ANNOTATIONS: u64 = 0x71;
const MESSAGE_ANNOTATIONS: u64 = 0x72;
const PROPERTIES: u64 = 0x73;
const APPLICATION_PROPERTIES: u64 = 0x74;
const DATA: u64 = 0x75;
const AMQP_SEQUENCE: u64 = 0x76;
const AMQP_VALUE: u64 = 0x77;
const FOOTER: u64 = 0x78;

/// What the body sections are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BodyKind {
    /// Exactly one `data` section; its content.
    SingleData(Bytes),
    /// Several `data` sections; their contents concatenated (what a 0.9.1 consumer gets in
    /// RabbitMQ 4.0.5).
    MultipleData(Bytes),
    /// One `amqp-value`.
    AmqpValue,
    /// One or more `amqp-sequence` sections.
    AmqpSequence,
    /// No body section at all (invalid per spec, tolerated).
    Empty,
}

/// The `header` section's fields, with "absent" kept distinct from "false": RabbitMQ stores a
/// message without `durable` as durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeaderFields {
    /// `durable`.
    pub durable: Option<bool>,
    /// `priority`.
    pub priority: Option<u8>,
    /// `ttl` in milliseconds.
    pub ttl: Option<u32>,
    /// `first-acquirer`.
    pub first_acquirer: Option<bool>,
    /// `delivery-count`.
    pub delivery_count: Option<u32>,
}

fn header_fields(section: &[u8]) -> Result<HeaderFields, DecodeError> {
    match super::hot::header(section) {
        Some(fields) => Ok(fields),
        None => header_from_tree(section),
    }
}

/// The fields of a section that is a described list (`null` for no fields), through the
/// general value tree.
fn list_fields(section: &[u8]) -> Result<Vec<Amqp>, DecodeError> {
    let Amqp::Described(described) = decode_whole(section)? else {
        return Err(DecodeError::Invalid("a list section must be described"));
    };
    match described.value {
        Amqp::List(fields) => Ok(fields),
        Amqp::Null => Ok(Vec::new()),
        _ => Err(DecodeError::Invalid("a list section must be a list")),
    }
}

/// The header through the general value tree: any encoding the spec allows.
pub(super) fn header_from_tree(section: &[u8]) -> Result<HeaderFields, DecodeError> {
    let fields = list_fields(section)?;
    // RabbitMQ takes a field of another type and acts as if it were absent (a `durable` of
    // `int 1` leaves the message durable by default, a `ttl` of `long` sets no TTL).
    let field = |i: usize| fields.get(i);
    Ok(HeaderFields {
        durable: field(0).and_then(|v| if let Amqp::Bool(b) = v { Some(*b) } else { None }),
        priority: field(1).and_then(|v| if let Amqp::Ubyte(p) = v { Some(*p) } else { None }),
        ttl: field(2).and_then(|v| if let Amqp::Uint(t) = v { Some(*t) } else { None }),
        first_acquirer: field(3).and_then(|v| if let Amqp::Bool(b) = v { Some(*b) } else { None }),
        delivery_count: field(4).and_then(|v| if let Amqp::Uint(c) = v { Some(*c) } else { None }),
    })
}

/// The `properties` section. RabbitMQ takes a field of any type and passes the bare message
/// on verbatim; real clients rely on it (go-amqp sends a Go `int` message-id as `long`). The
/// typed decode takes a section whose fields all have their spec types; any other is read
/// from the value tree field by field ([`lenient_properties`]).
fn properties(section: &[u8]) -> Result<Properties, DecodeError> {
    decode_exact::<Properties>(section).or_else(|_| lenient_properties(section))
}

/// Each field of a `properties` list kept when Charon can map its type and left out
/// otherwise (1.0 consumers still get it, in the verbatim bare message):
/// - `message-id` and `correlation-id` take any integer (a signed one as its decimal text, as
///   a 0.9.1 consumer gets a `ulong` id) and a symbol (as a string);
/// - `content-type` and `content-encoding` take a string as a symbol (RabbitMQ gives a 0.9.1
///   consumer both);
/// - a `user-id` that is not binary is refused: it is checked against the connection's user,
///   and one that cannot be checked must not pass as checked.
fn lenient_properties(section: &[u8]) -> Result<Properties, DecodeError> {
    let fields = list_fields(section)?;
    let field = |i: usize| fields.get(i).filter(|v| !matches!(v, Amqp::Null));
    let string = |i: usize| field(i).and_then(|v| if let Amqp::String(s) = v { Some(s.clone()) } else { None });
    let symbol = |i: usize| match field(i) {
        Some(Amqp::Symbol(s)) => Some(s.clone()),
        Some(Amqp::String(s)) => Some(Symbol::from(s.as_str())),
        _ => None,
    };
    let timestamp = |i: usize| field(i).and_then(|v| if let Amqp::Timestamp(t) = v { Some(t.clone()) } else { None });
    let user_id = match field(1) {
        None => None,
        Some(Amqp::Binary(b)) => Some(b.clone()),
        Some(_) => return Err(DecodeError::Invalid("user-id must be binary")),
    };
    Ok(Properties {
        message_id: field(0).and_then(lenient_id),
        user_id: user_id.map(|b| Binary::from(b.into_vec())),
        to: string(2),
        subject: string(3),
        reply_to: string(4),
        correlation_id: field(5).and_then(lenient_id),
        content_type: symbol(6),
        content_encoding: symbol(7),
        absolute_expiry_time: timestamp(8),
        creation_time: timestamp(9),
        group_id: string(10),
        group_sequence: field(11).and_then(|v| if let Amqp::Uint(n) = v { Some(*n) } else { None }),
        reply_to_group_id: string(12),
    })
}

/// A `message-id` or `correlation-id` of any type, as one of the four the spec lists, or
/// `None` for a type no protocol Charon speaks can carry as an id.
fn lenient_id(value: &Amqp) -> Option<MessageId> {
    let decimal = |n: i64| Some(MessageId::String(n.to_string()));
    match value {
        Amqp::Ulong(n) => Some(MessageId::Ulong(*n)),
        Amqp::Uuid(u) => Some(MessageId::Uuid(u.clone())),
        Amqp::Binary(b) => Some(MessageId::Binary(b.clone())),
        Amqp::String(s) => Some(MessageId::String(s.clone())),
        Amqp::Symbol(s) => Some(MessageId::String(s.as_str().to_owned())),
        Amqp::Ubyte(n) => Some(MessageId::Ulong(u64::from(*n))),
        Amqp::Ushort(n) => Some(MessageId::Ulong(u64::from(*n))),
        Amqp::Uint(n) => Some(MessageId::Ulong(u64::from(*n))),
        Amqp::Byte(n) => decimal(i64::from(*n)),
        Amqp::Short(n) => decimal(i64::from(*n)),
        Amqp::Int(n) => decimal(i64::from(*n)),
        Amqp::Long(n) => decimal(*n),
        _ => None,
    }
}

/// A transfer payload, split.
#[derive(Clone, Debug, Default)]
pub struct ParsedMessage {
    /// The `header` section (None when absent).
    pub header: Option<HeaderFields>,
    /// `message-annotations` entries, in wire order.
    pub annotations: Vec<(charon_model::Value, charon_model::Value)>,
    /// The `properties` section.
    pub properties: Option<Properties>,
    /// `application-properties` entries (string keys), in wire order.
    pub application_properties: Vec<(String, charon_model::Value)>,
    /// The bare message and footer as received: from the first bare section to the end.
    pub bare: Bytes,
    /// The body sections as received (bare message minus properties, application-properties
    /// and footer).
    pub body_sections: Bytes,
    /// The kind of body.
    pub body: Option<BodyKind>,
}

fn descriptor_code(section: &[u8]) -> Result<u64, DecodeError> {
    match section {
        [0x00, 0x53, code, ..] => Ok(u64::from(*code)),
        [0x00, 0x80, rest @ ..] => {
            let raw: [u8; 8] = rest.get(..8).and_then(|b| b.try_into().ok()).ok_or(DecodeError::Truncated)?;
            Ok(u64::from_be_bytes(raw))
        }
        [0x00, 0xa3, len, rest @ ..] => {
            let name = rest.get(..usize::from(*len)).ok_or(DecodeError::Truncated)?;
            Ok(match name {
                b"amqp:header:list" => HEADER,
                b"amqp:delivery-annotations:map" => DELIVERY_ANNOTATIONS,
                b"amqp:message-annotations:map" => MESSAGE_ANNOTATIONS,
                b"amqp:properties:list" => PROPERTIES,
                b"amqp:application-properties:map" => APPLICATION_PROPERTIES,
                b"amqp:data:binary" => DATA,
                b"amqp:amqp-sequence:list" => AMQP_SEQUENCE,
                b"amqp:amqp-value:*" => AMQP_VALUE,
                b"amqp:footer:map" => FOOTER,
                _ => return Err(DecodeError::Invalid("unknown section")),
            })
        }
        _ => Err(DecodeError::Invalid("a message section must be a described type")),
    }
}

fn map_entries(section: &[u8]) -> Result<Vec<(charon_model::Value, charon_model::Value)>, DecodeError> {
    match decode_whole(section)? {
        Amqp::Described(described) => match described.value {
            Amqp::Map(map) => Ok(map.iter().map(|(k, v)| (from_amqp(k), from_amqp(v))).collect()),
            Amqp::Null => Ok(Vec::new()),
            _ => Err(DecodeError::Invalid("annotations must be a map")),
        },
        _ => Err(DecodeError::Invalid("annotations must be described")),
    }
}

/// The content of a `data` section (described binary), zero-copy.
fn data_content(payload: &Bytes, at: usize, section: &[u8]) -> Result<Bytes, DecodeError> {
    let prefix = match section.get(3) {
        Some(0xa0) => 5,
        Some(0xb0) => 8,
        _ => return Err(DecodeError::Invalid("data section must hold binary")),
    };
    Ok(payload.slice(at + prefix..at + section.len()))
}

/// Splits a transfer payload into sections.
///
/// # Errors
/// [`DecodeError`] for undecodable sections or sections out of order.
pub fn parse_message(payload: &Bytes) -> Result<ParsedMessage, DecodeError> {
    let mut parsed = ParsedMessage::default();
    let mut at = 0usize;
    let mut bare_start = None;
    let mut body_start = None;
    let mut body_end = None;
    // The first data section, then any others: most messages have one, which needs no Vec.
    let mut first_data = None;
    let mut more_data = Vec::new();
    let mut last_code = 0u64;
    while at < payload.len() {
        let rest = payload.get(at..).ok_or(DecodeError::Truncated)?;
        let len = encoded_len(rest)?;
        let section = rest.get(..len).ok_or(DecodeError::Truncated)?;
        let code = descriptor_code(section)?;
        if code < last_code && !(code == last_code && matches!(code, DATA | AMQP_SEQUENCE)) {
            return Err(DecodeError::Invalid("message sections out of order"));
        }
        last_code = code;
        match code {
            HEADER => parsed.header = Some(header_fields(section)?),
            DELIVERY_ANNOTATIONS => {}
            MESSAGE_ANNOTATIONS => parsed.annotations = map_entries(section)?,
            PROPERTIES => {
                bare_start.get_or_insert(at);
                parsed.properties = Some(properties(section)?);
            }
            APPLICATION_PROPERTIES => {
                bare_start.get_or_insert(at);
                parsed.application_properties = map_entries(section)?
                    .into_iter()
                    .filter_map(|(k, v)| match k {
                        charon_model::Value::String(key) => Some((key, v)),
                        _ => None,
                    })
                    .collect();
            }
            DATA | AMQP_SEQUENCE | AMQP_VALUE => {
                bare_start.get_or_insert(at);
                body_start.get_or_insert(at);
                body_end = Some(at + len);
                if code == DATA {
                    let content = data_content(payload, at, section)?;
                    if first_data.is_none() {
                        first_data = Some(content);
                    } else {
                        more_data.push(content);
                    }
                }
                parsed.body = Some(match (code, parsed.body.take()) {
                    (DATA, None) => BodyKind::SingleData(Bytes::new()),
                    (DATA, Some(_)) => BodyKind::MultipleData(Bytes::new()),
                    (AMQP_VALUE, _) => BodyKind::AmqpValue,
                    _ => BodyKind::AmqpSequence,
                });
            }
            FOOTER => {
                bare_start.get_or_insert(at);
            }
            _ => return Err(DecodeError::Invalid("unknown section")),
        }
        at += len;
    }
    match (&parsed.body, first_data) {
        (Some(BodyKind::SingleData(_)), Some(only)) if more_data.is_empty() => {
            parsed.body = Some(BodyKind::SingleData(only));
        }
        (Some(BodyKind::MultipleData(_)), first) => {
            let sections: Vec<Bytes> = first.into_iter().chain(more_data).collect();
            parsed.body = Some(BodyKind::MultipleData(sections.concat().into()));
        }
        _ => {}
    }
    let start = bare_start.unwrap_or(payload.len());
    parsed.bare = payload.slice(start..);
    parsed.body_sections = match (body_start, body_end) {
        (Some(s), Some(e)) => payload.slice(s..e),
        _ => Bytes::new(),
    };
    if parsed.body.is_none() {
        parsed.body = Some(BodyKind::Empty);
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp_types::messaging::{ApplicationProperties, Data, Header, MessageId};
    use serde_amqp::primitives::Binary;

    use super::*;
    use crate::codec::encode_value;

    #[test]
    fn splits_sections_and_keeps_the_bare_message() {
        let header = Header { durable: true, ..Header::default() };
        let props = Properties { message_id: Some(MessageId::String("m1".into())), ..Properties::default() };
        let app = ApplicationProperties::builder().insert("k", 5i32).build();
        let data = Data(Binary::from(b"hello".to_vec()));
        let mut payload = encode_value(&header);
        let bare_at = payload.len();
        payload.extend(encode_value(&props));
        payload.extend(encode_value(&app));
        payload.extend(encode_value(&data));
        let payload = Bytes::from(payload);
        let parsed = parse_message(&payload).unwrap();
        assert_eq!(parsed.header.and_then(|h| h.durable), Some(true));
        assert_eq!(parsed.properties.and_then(|p| p.message_id), Some(MessageId::String("m1".into())));
        assert_eq!(parsed.application_properties, vec![("k".to_owned(), charon_model::Value::I32(5))]);
        assert_eq!(parsed.body, Some(BodyKind::SingleData(Bytes::from_static(b"hello"))));
        assert_eq!(parsed.bare, payload.slice(bare_at..));
    }

    #[test]
    fn several_data_sections_are_concatenated() {
        let mut payload = encode_value(&Data(Binary::from(b"one".to_vec())));
        payload.extend(encode_value(&Data(Binary::from(b"two".to_vec()))));
        let parsed = parse_message(&Bytes::from(payload)).unwrap();
        assert_eq!(parsed.body, Some(BodyKind::MultipleData(Bytes::from_static(b"onetwo"))));
    }

    /// A `properties` or `header` section built field by field with any types, and a body.
    fn with_section(code: u64, fields: Vec<Amqp>) -> Bytes {
        let section = Amqp::Described(Box::new(serde_amqp::described::Described {
            descriptor: serde_amqp::descriptor::Descriptor::Code(code),
            value: Amqp::List(fields),
        }));
        let mut payload = encode_value(&section);
        payload.extend(encode_value(&Data(Binary::from(b"x".to_vec()))));
        Bytes::from(payload)
    }

    fn lenient_properties_of(fields: Vec<Amqp>) -> Properties {
        parse_message(&with_section(PROPERTIES, fields)).unwrap().properties.unwrap()
    }

    #[test]
    fn ids_of_any_integer_type_or_a_symbol_are_taken_and_others_left_out() {
        let id = |v: Amqp| lenient_properties_of(vec![v.clone(), Amqp::Null, Amqp::Null, Amqp::Null, Amqp::Null, v]);
        let p = id(Amqp::Long(-5));
        assert_eq!(p.message_id, Some(MessageId::String("-5".into())));
        assert_eq!(p.correlation_id, Some(MessageId::String("-5".into())));
        assert_eq!(id(Amqp::Int(7)).message_id, Some(MessageId::String("7".into())));
        assert_eq!(id(Amqp::Uint(9)).message_id, Some(MessageId::Ulong(9)));
        assert_eq!(id(Amqp::Ubyte(5)).correlation_id, Some(MessageId::Ulong(5)));
        assert_eq!(id(Amqp::Symbol("sym".into())).message_id, Some(MessageId::String("sym".into())));
        let odd = id(Amqp::Double(1.5.into()));
        assert_eq!((odd.message_id, odd.correlation_id), (None, None));
    }

    #[test]
    fn other_fields_of_another_type_are_left_out_and_strings_serve_as_symbols() {
        let p = lenient_properties_of(vec![
            Amqp::Null,
            Amqp::Null,
            Amqp::Symbol("/queues/x".into()),
            Amqp::Int(4),
            Amqp::Symbol("/queues/r".into()),
            Amqp::Null,
            Amqp::String("text/plain".into()),
            Amqp::String("gzip".into()),
            Amqp::Long(1),
            Amqp::Long(1000),
            Amqp::Symbol("g".into()),
            Amqp::Int(3),
            Amqp::String("rg".into()),
        ]);
        assert_eq!((p.to, p.subject, p.reply_to), (None, None, None));
        assert_eq!(p.content_type.as_ref().map(Symbol::as_str), Some("text/plain"));
        assert_eq!(p.content_encoding.as_ref().map(Symbol::as_str), Some("gzip"));
        assert_eq!((p.absolute_expiry_time, p.creation_time, p.group_id, p.group_sequence), (None, None, None, None));
        assert_eq!(p.reply_to_group_id.as_deref(), Some("rg"));
    }

    #[test]
    fn a_user_id_that_is_not_binary_is_refused() {
        let section = with_section(PROPERTIES, vec![Amqp::Null, Amqp::String("guest".into())]);
        assert_eq!(parse_message(&section).err(), Some(DecodeError::Invalid("user-id must be binary")));
    }

    #[test]
    fn header_fields_of_another_type_count_as_absent() {
        let fields = vec![Amqp::Int(1), Amqp::Int(3), Amqp::Long(60_000), Amqp::Int(0), Amqp::Int(2)];
        let parsed = parse_message(&with_section(HEADER, fields)).unwrap();
        assert_eq!(parsed.header, Some(HeaderFields::default()));
    }

    #[test]
    fn garbage_is_a_decode_error_not_a_panic() {
        for bytes in [&[0x00, 0x53][..], &[0x00, 0x53, 0x75, 0xa0, 0x05, 1], &[0x00, 0x53, 0x70, 0x45, 0xff], &[0x42]] {
            assert!(parse_message(&Bytes::copy_from_slice(bytes)).is_err());
        }
    }
}
