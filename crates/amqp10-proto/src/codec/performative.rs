//! Performatives in and out.

use bytes::Bytes;
use fe2o3_amqp_types::performatives::Performative;
use fe2o3_amqp_types::sasl::{SaslInit, SaslResponse};
use serde::Serialize;

use super::{DecodeError, decode_exact, encoded_len};

/// Splits a frame body into its performative and the payload behind it (a transfer's message
/// bytes, zero-copy).
///
/// # Errors
/// [`DecodeError`] when the body does not start with a decodable performative.
pub fn decode_performative(body: &Bytes) -> Result<(Performative, Bytes), DecodeError> {
    if let Some((performative, len)) = super::hot::decode_hot(body) {
        return Ok((performative, body.slice(len..)));
    }
    let len = encoded_len(body)?;
    let performative = decode_exact::<Performative>(body.get(..len).ok_or(DecodeError::Truncated)?)?;
    Ok((performative, body.slice(len..)))
}

/// A SASL frame the server accepts from a client.
#[derive(Debug)]
pub enum SaslFrame {
    /// `sasl-init`.
    Init(SaslInit),
    /// `sasl-response`.
    Response(SaslResponse),
}

/// Decodes a SASL frame body.
///
/// # Errors
/// [`DecodeError`] for anything but `sasl-init` / `sasl-response`.
pub fn decode_sasl(body: &Bytes) -> Result<SaslFrame, DecodeError> {
    let len = encoded_len(body)?;
    let bytes = body.get(..len).ok_or(DecodeError::Truncated)?;
    // Descriptor 0x41 is sasl-init, 0x43 sasl-response (smallulong encoding).
    match bytes.get(..3) {
        Some([0x00, 0x53, 0x41]) => decode_exact::<SaslInit>(bytes).map(SaslFrame::Init),
        Some([0x00, 0x53, 0x43]) => decode_exact::<SaslResponse>(bytes).map(SaslFrame::Response),
        _ => match decode_exact::<SaslInit>(bytes) {
            Ok(init) => Ok(SaslFrame::Init(init)),
            Err(_) => decode_exact::<SaslResponse>(bytes).map(SaslFrame::Response),
        },
    }
}

/// Encodes any AMQP value (performative, section) to bytes.
#[must_use]
pub fn encode_value<T: Serialize>(value: &T) -> Vec<u8> {
    match serde_amqp::to_vec(value) {
        Ok(bytes) => bytes,
        Err(error) => {
            tracing::error!(%error, "failed to encode an AMQP value");
            Vec::new()
        }
    }
}
