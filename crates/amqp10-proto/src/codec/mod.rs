//! AMQP 1.0 wire format: frames, performatives, message sections, values.
//!
//! Types come from `fe2o3-amqp-types` and are (de)serialized with `serde_amqp`; framing and
//! the splitting of bodies and messages are ours, so payloads stay zero-copy `Bytes` and no
//! decoder ever sees more (or less) than the one value it should decode.

mod frame;
mod generate;
pub(crate) mod hot;
mod length;
mod message;
mod nesting;
mod performative;
mod tree;
pub mod value;

pub use frame::{FRAME_TYPE_AMQP, FRAME_TYPE_SASL, FrameError, RawFrame, parse_frame, write_frame, write_heartbeat};
pub use generate::generate;
pub use length::encoded_len;
pub use message::{BodyKind, HeaderFields, ParsedMessage, parse_message};
pub use performative::{SaslFrame, decode_performative, decode_sasl, encode_value};

/// Bytes that do not decode as what they claim to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The value runs past the end of its frame or section.
    #[error("truncated value")]
    Truncated,
    /// Something that cannot be decoded.
    #[error("invalid encoding: {0}")]
    Invalid(&'static str),
    /// Compound or described values nested deeper than the model's [`charon_model::MAX_DEPTH`].
    #[error("values nested deeper than {} levels", charon_model::MAX_DEPTH)]
    TooDeep,
}

/// Decodes the single untyped AMQP value at the start of `bytes` with Charon's own complete
/// decoder ([`tree`]).
///
/// # Errors
/// [`DecodeError`] when it does not decode.
pub fn decode_value(bytes: &[u8]) -> Result<serde_amqp::Value, DecodeError> {
    tree::decode(bytes).map(|(value, _)| value)
}

/// Decodes exactly one untyped value filling all of `bytes` (a message section).
fn decode_whole(bytes: &[u8]) -> Result<serde_amqp::Value, DecodeError> {
    match tree::decode(bytes)? {
        (value, used) if used == bytes.len() => Ok(value),
        _ => Err(DecodeError::Invalid("bytes after the value")),
    }
}

/// Decodes one value of type `T` from exactly `bytes`, refusing to let a decoder bug take the
/// broker down: nesting and counts are checked first ([`nesting`]: serde_amqp recurses without
/// a bound, and a stack overflow is no panic to catch), and a panic inside the third-party
/// decoder becomes a decode error.
pub fn decode_exact<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    nesting::check(bytes)?;
    let result = std::panic::catch_unwind(|| serde_amqp::from_slice::<T>(bytes));
    match result {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(_)) => Err(DecodeError::Invalid("does not decode")),
        Err(_) => Err(DecodeError::Invalid("decoder panicked")),
    }
}
