//! The encoded length of one AMQP 1.0 value, from its constructor alone.
//!
//! Every AMQP type's width follows from the high nibble of its format code (§1.2: fixed widths
//! 0/1/2/4/8/16 bytes, variable and compound types with a 1- or 4-byte size). That lets us
//! split a frame body into performative and payload, and a payload into message sections,
//! without decoding anything we do not need, and without trusting a decoder with bytes that
//! might be truncated.

use super::DecodeError;

fn size_at(bytes: &[u8], at: usize, width: usize) -> Result<usize, DecodeError> {
    let raw = bytes.get(at..at + width).ok_or(DecodeError::Truncated)?;
    let mut n = 0usize;
    for b in raw {
        n = (n << 8) | usize::from(*b);
    }
    Ok(n)
}

/// The number of bytes the value at the start of `bytes` occupies, constructor included.
///
/// # Errors
/// [`DecodeError::Truncated`] when the value runs past the end, [`DecodeError::Invalid`] for a
/// reserved format code.
pub fn encoded_len(bytes: &[u8]) -> Result<usize, DecodeError> {
    encoded_len_depth(bytes, 0)
}

fn encoded_len_depth(bytes: &[u8], depth: u8) -> Result<usize, DecodeError> {
    if depth > 16 {
        return Err(DecodeError::Invalid("descriptors nested too deeply"));
    }
    let code = *bytes.first().ok_or(DecodeError::Truncated)?;
    let len = if code == 0x00 {
        let rest = bytes.get(1..).ok_or(DecodeError::Truncated)?;
        let descriptor = encoded_len_depth(rest, depth + 1)?;
        let value = encoded_len_depth(rest.get(descriptor..).ok_or(DecodeError::Truncated)?, depth + 1)?;
        1 + descriptor + value
    } else {
        match code >> 4 {
            0x4 => 1,
            0x5 => 2,
            0x6 => 3,
            0x7 => 5,
            0x8 => 9,
            0x9 => 17,
            0xA | 0xC | 0xE => 2 + size_at(bytes, 1, 1)?,
            0xB | 0xD | 0xF => 5 + size_at(bytes, 1, 4)?,
            _ => return Err(DecodeError::Invalid("reserved format code")),
        }
    };
    if len > bytes.len() {
        return Err(DecodeError::Truncated);
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_follow_the_format_code() {
        assert_eq!(encoded_len(&[0x40]), Ok(1));
        assert_eq!(encoded_len(&[0x52, 7]), Ok(2));
        assert_eq!(encoded_len(&[0xa1, 2, b'h', b'i', 0xff]), Ok(4));
        assert_eq!(encoded_len(&[0xb0, 0, 0, 0, 1, 9]), Ok(6));
        // described list: 0x00 0x53 0x10 (smallulong 0x10) then list8 size 1 count 0
        assert_eq!(encoded_len(&[0x00, 0x53, 0x10, 0xc0, 0x01, 0x00, 0xaa]), Ok(6));
    }

    #[test]
    fn truncation_and_reserved_codes_are_errors() {
        assert_eq!(encoded_len(&[]), Err(DecodeError::Truncated));
        assert_eq!(encoded_len(&[0xa1, 5, b'h']), Err(DecodeError::Truncated));
        assert_eq!(encoded_len(&[0xb0, 0xff, 0xff, 0xff, 0xff]), Err(DecodeError::Truncated));
        assert!(matches!(encoded_len(&[0x30]), Err(DecodeError::Invalid(_))));
        let deep = vec![0u8; 64];
        assert!(encoded_len(&deep).is_err());
    }
}
