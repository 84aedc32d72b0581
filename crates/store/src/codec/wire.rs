//! The primitives of the record encoding: LEB128 varints, length-prefixed bytes and strings,
//! and a reader that never panics on short or corrupt input.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::CodecError;

/// Appends `value` as an unsigned LEB128 varint (1 byte below 128).
pub(super) fn put_varint(out: &mut BytesMut, mut value: u64) {
    while value >= 0x80 {
        out.put_u8((value as u8) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

/// Appends a signed value zig-zag encoded, so small negatives stay short.
pub(super) fn put_zigzag(out: &mut BytesMut, value: i64) {
    put_varint(out, ((value << 1) ^ (value >> 63)) as u64);
}

/// Appends a length and the bytes.
pub(super) fn put_bytes(out: &mut BytesMut, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.put_slice(bytes);
}

/// Appends a length and the UTF-8 bytes.
pub(super) fn put_str(out: &mut BytesMut, text: &str) {
    put_bytes(out, text.as_bytes());
}

/// A cursor over encoded bytes; `Bytes` slices of it share its buffer (bodies are not copied).
pub(super) struct Reader {
    bytes: Bytes,
    start_len: usize,
}

impl Reader {
    pub(super) fn new(bytes: Bytes) -> Self {
        let start_len = bytes.len();
        Self { bytes, start_len }
    }

    /// What is left (for nested readers such as tables inside metadata records).
    pub(super) fn into_rest(self) -> Bytes {
        self.bytes
    }

    fn offset(&self) -> usize {
        self.start_len - self.bytes.len()
    }

    pub(super) fn error(&self, what: &'static str) -> CodecError {
        CodecError::Malformed { what, offset: self.offset() }
    }

    pub(super) fn u8(&mut self, what: &'static str) -> Result<u8, CodecError> {
        if self.bytes.is_empty() {
            return Err(self.error(what));
        }
        Ok(self.bytes.get_u8())
    }

    pub(super) fn fixed<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], CodecError> {
        if self.bytes.len() < N {
            return Err(self.error(what));
        }
        let mut out = [0; N];
        self.bytes.copy_to_slice(&mut out);
        Ok(out)
    }

    pub(super) fn varint(&mut self, what: &'static str) -> Result<u64, CodecError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.u8(what)?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.error(what))
    }

    pub(super) fn zigzag(&mut self, what: &'static str) -> Result<i64, CodecError> {
        let raw = self.varint(what)?;
        Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
    }

    pub(super) fn u32(&mut self, what: &'static str) -> Result<u32, CodecError> {
        u32::try_from(self.varint(what)?).map_err(|_| self.error(what))
    }

    pub(super) fn bytes(&mut self, what: &'static str) -> Result<Bytes, CodecError> {
        let len = usize::try_from(self.varint(what)?).map_err(|_| self.error(what))?;
        if self.bytes.len() < len {
            return Err(self.error(what));
        }
        Ok(self.bytes.split_to(len))
    }

    pub(super) fn string(&mut self, what: &'static str) -> Result<String, CodecError> {
        let raw = self.bytes(what)?;
        String::from_utf8(raw.to_vec()).map_err(|_| self.error(what))
    }

    pub(super) fn bool(&mut self, what: &'static str) -> Result<bool, CodecError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(self.error(what)),
        }
    }

    /// A count of items to follow, bounded by what is left (each item takes a byte at least),
    /// so a corrupt count cannot make us allocate without limit.
    pub(super) fn count(&mut self, what: &'static str) -> Result<usize, CodecError> {
        let n = usize::try_from(self.varint(what)?).map_err(|_| self.error(what))?;
        if n > self.bytes.len() {
            return Err(self.error(what));
        }
        Ok(n)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn varints_and_zigzag_round_trip_at_the_edges() {
        let mut out = BytesMut::new();
        let unsigned = [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX];
        let signed = [0, -1, 1, i64::MIN, i64::MAX, -300];
        for v in unsigned {
            put_varint(&mut out, v);
        }
        for v in signed {
            put_zigzag(&mut out, v);
        }
        let mut r = Reader::new(out.freeze());
        for v in unsigned {
            assert_eq!(r.varint("u").unwrap(), v);
        }
        for v in signed {
            assert_eq!(r.zigzag("i").unwrap(), v);
        }
        assert!(r.is_empty());
        assert!(Reader::new(Bytes::from_static(&[0xff; 11])).varint("long").is_err());
    }
}
