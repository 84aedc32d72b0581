//! Frame splitting: `size:u32 doff:u8 type:u8 channel:u16 [extended header] body`.

use bytes::{BufMut, Bytes, BytesMut};

/// AMQP frame type.
pub const FRAME_TYPE_AMQP: u8 = 0;
/// SASL frame type.
pub const FRAME_TYPE_SASL: u8 = 1;

/// One frame whose body shares the read buffer's memory. An empty body is a heartbeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawFrame {
    /// 0 (AMQP) or 1 (SASL).
    pub kind: u8,
    /// Channel.
    pub channel: u16,
    /// Performative and payload, extended header skipped.
    pub body: Bytes,
}

/// The stream cannot be split into frames: `amqp:connection:framing-error`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Larger than the negotiated max-frame-size.
    #[error("frame size ({size} bytes) > maximum frame size ({max} bytes)")]
    TooLarge {
        /// Declared size.
        size: u32,
        /// Our limit.
        max: u32,
    },
    /// Size below 8 or data offset below 2 or past the end.
    #[error("malformed frame header")]
    BadHeader,
}

/// Splits one frame off `buf`, or `Ok(None)` when more bytes are needed.
///
/// # Errors
/// [`FrameError`] for a corrupt stream.
pub fn parse_frame(buf: &mut BytesMut, max_frame_size: u32) -> Result<Option<RawFrame>, FrameError> {
    let Some(header) = buf.get(..8) else {
        return Ok(None);
    };
    let size_bytes: [u8; 4] = header.get(..4).and_then(|s| s.try_into().ok()).unwrap_or_default();
    let size = u32::from_be_bytes(size_bytes);
    let doff = header.get(4).copied().unwrap_or_default();
    let kind = header.get(5).copied().unwrap_or_default();
    let channel = u16::from_be_bytes([header.get(6).copied().unwrap_or(0), header.get(7).copied().unwrap_or(0)]);
    // RabbitMQ's order: the data offset first, then a bare 8-byte header is a heartbeat
    // (whatever its offset), then the size limit, and only then the rest of the header.
    if doff < 2 {
        return Err(FrameError::BadHeader);
    }
    if size == 8 {
        let _header = buf.split_to(8);
        return Ok(Some(RawFrame { kind, channel, body: Bytes::new() }));
    }
    if size > max_frame_size {
        return Err(FrameError::TooLarge { size, max: max_frame_size });
    }
    if size < 8 || u32::from(doff) * 4 > size {
        return Err(FrameError::BadHeader);
    }
    let total = usize::try_from(size).map_err(|_| FrameError::BadHeader)?;
    if buf.len() < total {
        buf.reserve(total - buf.len());
        return Ok(None);
    }
    let mut frame = buf.split_to(total);
    let _header = frame.split_to(usize::from(doff) * 4);
    Ok(Some(RawFrame { kind, channel, body: frame.freeze() }))
}

/// Appends a frame with the given body parts.
pub fn write_frame(out: &mut BytesMut, kind: u8, channel: u16, performative: &[u8], payload: &[u8]) {
    let size = 8 + performative.len() + payload.len();
    out.reserve(size);
    out.put_u32(u32::try_from(size).unwrap_or(u32::MAX));
    out.put_u8(2);
    out.put_u8(kind);
    out.put_u16(channel);
    out.put_slice(performative);
    out.put_slice(payload);
}

/// Appends an empty frame, which keeps an idle connection alive.
pub fn write_heartbeat(out: &mut BytesMut) {
    out.put_slice(&[0, 0, 0, 8, 2, 0, 0, 0]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_and_skips_extended_headers() {
        let mut buf = BytesMut::from(&[0u8, 0, 0, 14, 3, 0, 0, 5, 9, 9, 9, 9, 0xaa, 0xbb][..]);
        let f = parse_frame(&mut buf, 1024).unwrap().unwrap();
        assert_eq!((f.kind, f.channel, &f.body[..]), (0, 5, &[0xaa, 0xbb][..]));
        let mut partial = BytesMut::from(&[0u8, 0, 0, 20, 2, 0, 0, 0][..]);
        assert_eq!(parse_frame(&mut partial, 1024), Ok(None));
    }

    #[test]
    fn rejects_bad_headers_and_oversized_frames() {
        let mut small = BytesMut::from(&[0u8, 0, 0, 4, 2, 0, 0, 0][..]);
        assert_eq!(parse_frame(&mut small, 1024), Err(FrameError::BadHeader));
        let mut doff = BytesMut::from(&[0u8, 0, 0, 8, 1, 0, 0, 0][..]);
        assert_eq!(parse_frame(&mut doff, 1024), Err(FrameError::BadHeader));
        let mut big = BytesMut::from(&[0u8, 0, 8, 0, 2, 0, 0, 0][..]);
        assert_eq!(parse_frame(&mut big, 1024), Err(FrameError::TooLarge { size: 2048, max: 1024 }));
    }
}
