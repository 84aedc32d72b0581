//! Frame splitting: `type:u8 channel:u16 size:u32 payload frame-end(0xCE)`.

use bytes::{Buf, Bytes, BytesMut};

/// Method frame.
pub const FRAME_METHOD: u8 = 1;
/// Content header frame.
pub const FRAME_HEADER: u8 = 2;
/// Content body frame.
pub const FRAME_BODY: u8 = 3;
/// Heartbeat frame.
pub const FRAME_HEARTBEAT: u8 = 8;
/// The byte that ends every frame.
pub const FRAME_END: u8 = 0xCE;

const HEADER_LEN: usize = 7;

/// One frame, its payload sharing the read buffer's memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawFrame {
    /// Frame type.
    pub kind: u8,
    /// Channel number.
    pub channel: u16,
    /// Payload.
    pub payload: Bytes,
}

/// The byte stream cannot be split into frames any more; the connection must close with 501.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The declared payload exceeds the negotiated frame size.
    #[error("frame too large: {size} > {max}")]
    TooLarge {
        /// Frame type.
        kind: u8,
        /// Channel.
        channel: u16,
        /// Declared payload size.
        size: u32,
        /// Largest payload allowed.
        max: u32,
    },
    /// The frame did not end with 0xCE.
    #[error("invalid frame end marker {marker}")]
    BadEnd {
        /// Frame type.
        kind: u8,
        /// Channel.
        channel: u16,
        /// The byte found.
        marker: u8,
        /// The payload read.
        payload: Bytes,
    },
}

/// Splits one frame off the front of `buf`, or returns `Ok(None)` when more bytes are needed.
/// `frame_max` is the negotiated maximum frame size (0 = unlimited); like RabbitMQ, a payload
/// up to `frame_max` bytes is tolerated (clients commonly forget the 8 bytes of framing).
///
/// # Errors
/// [`FrameError`] when the stream is corrupt.
pub fn parse_frame(buf: &mut BytesMut, frame_max: u32) -> Result<Option<RawFrame>, FrameError> {
    let Some(header) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let kind = header.first().copied().unwrap_or_default();
    let channel =
        u16::from_be_bytes([header.get(1).copied().unwrap_or_default(), header.get(2).copied().unwrap_or_default()]);
    let size_bytes: [u8; 4] = header.get(3..7).and_then(|s| s.try_into().ok()).unwrap_or_default();
    let size = u32::from_be_bytes(size_bytes);
    if frame_max != 0 && size > frame_max {
        return Err(FrameError::TooLarge { kind, channel, size, max: frame_max.saturating_sub(8) });
    }
    let payload_len = usize::try_from(size).unwrap_or(usize::MAX);
    let total = HEADER_LEN.saturating_add(payload_len).saturating_add(1);
    if buf.len() < total {
        buf.reserve(total - buf.len());
        return Ok(None);
    }
    let mut frame = buf.split_to(total);
    frame.advance(HEADER_LEN);
    let marker = frame.get(payload_len).copied().unwrap_or_default();
    frame.truncate(payload_len);
    let payload = frame.freeze();
    if marker != FRAME_END {
        return Err(FrameError::BadEnd { kind, channel, marker, payload });
    }
    Ok(Some(RawFrame { kind, channel, payload }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_frames_and_waits_for_more() {
        let mut buf = BytesMut::from(&[8u8, 0, 0, 0, 0, 0, 0, 0xCE, 3, 0, 1, 0, 0, 0, 2, b'h'][..]);
        let hb = parse_frame(&mut buf, 4096).unwrap().unwrap();
        assert_eq!((hb.kind, hb.channel, hb.payload.len()), (FRAME_HEARTBEAT, 0, 0));
        assert_eq!(parse_frame(&mut buf, 4096).unwrap(), None);
        buf.extend_from_slice(&[b'i', 0xCE]);
        let body = parse_frame(&mut buf, 4096).unwrap().unwrap();
        assert_eq!((body.kind, body.channel, &body.payload[..]), (FRAME_BODY, 1, &b"hi"[..]));
        assert!(buf.is_empty());
    }

    #[test]
    fn refuses_bad_end_and_oversized_frames() {
        let mut buf = BytesMut::from(&[8u8, 0, 0, 0, 0, 0, 0, 0x00][..]);
        assert!(matches!(parse_frame(&mut buf, 4096), Err(FrameError::BadEnd { marker: 0, .. })));
        let mut big = BytesMut::from(&[1u8, 0, 0, 0, 0, 0x10, 0x01][..]);
        assert!(matches!(parse_frame(&mut big, 4096), Err(FrameError::TooLarge { size: 4097, max: 4088, .. })));
    }
}
