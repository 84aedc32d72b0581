//! The nesting depth and element counts of an encoded AMQP 1.0 value, checked before
//! serde_amqp decodes it.
//!
//! serde_amqp decodes compound values by recursion without a bound: an `attach` whose
//! properties nested a list 4,000 deep overflowed a worker's stack and took the whole broker
//! down, and an array claiming 2^32−1 zero-width elements would be built element by element.
//! This walk reads only sizes and constructors (no allocation), refuses nesting beyond the
//! model's [`MAX_DEPTH`] (counted as [`super::tree`] counts it: items of a list, map or array,
//! and a described value's descriptor and value, are one level down), and element counts that
//! their bytes cannot hold.

use charon_model::MAX_DEPTH;

use super::DecodeError;

/// Checks the value at the start of `bytes`.
///
/// # Errors
/// [`DecodeError`] for nesting deeper than [`MAX_DEPTH`], a count larger than its bytes, a
/// reserved format code or a value that runs past the end.
pub(super) fn check(bytes: &[u8]) -> Result<(), DecodeError> {
    value_len(bytes, 0).map(drop)
}

fn value_len(bytes: &[u8], depth: usize) -> Result<usize, DecodeError> {
    if depth > MAX_DEPTH {
        return Err(DecodeError::TooDeep);
    }
    let code = *bytes.first().ok_or(DecodeError::Truncated)?;
    let rest = bytes.get(1..).ok_or(DecodeError::Truncated)?;
    if code == 0x00 {
        let descriptor = value_len(rest, depth + 1)?;
        let value = value_len(rest.get(descriptor..).ok_or(DecodeError::Truncated)?, depth + 1)?;
        return Ok(1 + descriptor + value);
    }
    Ok(1 + body_len(code, rest, depth)?)
}

/// A 1- or 4-byte size or count at the start of `bytes`.
fn size(bytes: &[u8], wide: bool) -> Result<usize, DecodeError> {
    let raw = bytes.get(..if wide { 4 } else { 1 }).ok_or(DecodeError::Truncated)?;
    Ok(raw.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b)))
}

/// The length of the body of a value of format `code` at the start of `bytes`.
fn body_len(code: u8, bytes: &[u8], depth: usize) -> Result<usize, DecodeError> {
    let fixed = |n: usize| if n <= bytes.len() { Ok(n) } else { Err(DecodeError::Truncated) };
    match code {
        0xc0 | 0xc1 | 0xd0 | 0xd1 | 0xe0 | 0xf0 => {
            let wide = matches!(code, 0xd0 | 0xd1 | 0xf0);
            let at = if wide { 4 } else { 1 };
            let n = size(bytes, wide)?;
            let content = bytes.get(at..at + n).ok_or(DecodeError::Truncated)?;
            let count = size(content, wide)?;
            if count > content.len() {
                return Err(DecodeError::Invalid("element count larger than its bytes"));
            }
            // A map's count is of keys and values (§1.6.23); an odd one made serde_amqp's
            // count of remaining pairs underflow (a panic where overflow is checked).
            if matches!(code, 0xc1 | 0xd1) && count % 2 != 0 {
                return Err(DecodeError::Invalid("map with an odd number of items"));
            }
            let items = content.get(at..).ok_or(DecodeError::Truncated)?;
            if code >= 0xe0 {
                array_items(items, count, depth)?
            } else {
                list_items(items, count, depth)?
            }
            Ok(at + n)
        }
        _ => match code >> 4 {
            0x4 => Ok(0),
            0x5 => fixed(1),
            0x6 => fixed(2),
            0x7 => fixed(4),
            0x8 => fixed(8),
            0x9 => fixed(16),
            0xa => fixed(1 + size(bytes, false)?),
            0xb => fixed(4 + size(bytes, true)?),
            _ => Err(DecodeError::Invalid("reserved format code")),
        },
    }
}

fn list_items(mut items: &[u8], count: usize, depth: usize) -> Result<(), DecodeError> {
    for _ in 0..count {
        let used = value_len(items, depth + 1)?;
        items = items.get(used..).ok_or(DecodeError::Truncated)?;
    }
    Ok(())
}

/// An array's items: one constructor (possibly described), then `count` bodies.
fn array_items(items: &[u8], count: usize, depth: usize) -> Result<(), DecodeError> {
    let mut at = 0;
    if items.first() == Some(&0x00) {
        at = 1 + value_len(items.get(1..).ok_or(DecodeError::Truncated)?, depth + 1)?;
    }
    let code = *items.get(at).ok_or(DecodeError::Truncated)?;
    at += 1;
    for _ in 0..count {
        at += body_len(code, items.get(at..).ok_or(DecodeError::Truncated)?, depth + 1)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list holding a list ... `lists` deep around a null, as bytes.
    fn nested_lists(lists: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..lists {
            let inner = u32::try_from(9 * (lists - i - 1) + 1).unwrap();
            out.push(0xd0);
            out.extend_from_slice(&(inner + 4).to_be_bytes());
            out.extend_from_slice(&1u32.to_be_bytes());
        }
        out.push(0x40);
        out
    }

    #[test]
    fn nesting_is_checked_against_the_shared_limit() {
        // The null inside `n` lists is `n` levels down.
        assert_eq!(check(&nested_lists(MAX_DEPTH)), Ok(()));
        assert!(check(&nested_lists(MAX_DEPTH + 1)).is_err());
        assert!(check(&nested_lists(10_000)).is_err());
    }

    #[test]
    fn counts_their_bytes_cannot_hold_are_refused() {
        // array32 claiming 2^32-1 nulls in 5 bytes.
        assert!(check(&[0xf0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0x40]).is_err());
        // list8 claiming 3 items in one byte.
        assert!(check(&[0xc0, 0x02, 0x03, 0x40]).is_err());
        assert_eq!(check(&[0xc0, 0x03, 0x02, 0x40, 0x41]), Ok(()));
        // map8 with one item: a key without a value (found by cargo fuzz, amqp10_connection).
        assert!(check(&[0xc1, 0x03, 0x01, 0xa3, 0x00]).is_err());
        assert_eq!(check(&[0xc1, 0x04, 0x02, 0xa3, 0x00, 0x40]), Ok(()));
    }
}
