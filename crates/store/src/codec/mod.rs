//! A message of the model as the payload of an enqueue record, and back.
//!
//! What is stored is what the broker needs to deliver the message again exactly: the original
//! protocol bytes ([`charon_model::Encoded`]: a 0.9.1 property list or a 1.0 bare message, byte for byte), the
//! decoded properties, headers and annotations, the body, the routing facts and the broker's own
//! annotations (death history, delivery counts). The layout starts with [`FORMAT_VERSION`], so
//! a later layout can still read this one. Decoding never panics: a record that passed its CRC
//! but does not decode is reported, not trusted.

mod error;
mod message;
mod value;
mod wire;

pub use error::CodecError;

use bytes::{Bytes, BytesMut};
use charon_model::{Message, Table};

use self::wire::Reader;

/// The layout version written first in every encoded message. Version 2 added the redrive
/// count after the acquired count; version 3 the "not before" time after it (a presence byte,
/// then the time). Versions 1 and 2 (without them) are still read.
pub const FORMAT_VERSION: u8 = 3;

/// Appends the encoding of `message` to `out`.
pub fn encode_message(message: &Message, out: &mut BytesMut) {
    bytes::BufMut::put_u8(out, FORMAT_VERSION);
    message::put_message(out, message);
}

/// Decodes a message; its body, binary values and original protocol bytes are slices of
/// `bytes` (no copies).
///
/// # Errors
/// An unknown version, or bytes that do not decode to a whole message.
pub fn decode_message(bytes: Bytes) -> Result<Message, CodecError> {
    let mut r = Reader::new(bytes);
    let version = r.u8("format version")?;
    if !(1..=FORMAT_VERSION).contains(&version) {
        return Err(CodecError::UnknownVersion(version));
    }
    let message = message::read_message(&mut r, version)?;
    if !r.is_empty() {
        return Err(r.error("trailing bytes"));
    }
    Ok(message)
}

/// Appends a table (declare arguments, policy definitions) to `out`.
pub fn encode_table(table: &Table, out: &mut BytesMut) {
    value::put_table(out, table);
}

/// Decodes a table from the front of `bytes`, leaving the rest there.
///
/// # Errors
/// Bytes that do not decode to a table.
pub fn decode_table(bytes: &mut Bytes) -> Result<Table, CodecError> {
    let mut r = Reader::new(std::mem::take(bytes));
    let table = value::read_table(&mut r)?;
    *bytes = r.into_rest();
    Ok(table)
}

#[cfg(test)]
mod tests;
