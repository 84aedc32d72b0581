//! Method frames through amq-protocol, plus hand-written encoders for the methods sent once
//! per message (`basic.deliver`, `basic.ack`, `basic.nack`), which are hot.

use amq_protocol::frame::{AMQPFrame, WriteContext, gen_frame};
use amq_protocol::protocol::{AMQPClass, parse_class};
use bytes::{BufMut, Bytes, BytesMut};
use nom::Parser;
use nom::combinator::all_consuming;

use super::frame::{FRAME_END, FRAME_METHOD};
use super::table::put_short_str;

/// Every (class, method) pair AMQP 0.9.1 defines, in either direction.
const KNOWN: &[(u16, &[u16])] = &[
    (10, &[10, 11, 20, 21, 30, 31, 40, 41, 50, 51, 60, 61, 70, 71]),
    (20, &[10, 11, 20, 21, 40, 41]),
    (30, &[10, 11]),
    (40, &[10, 11, 20, 21, 30, 31, 40, 51]),
    (50, &[10, 11, 20, 21, 30, 31, 40, 41, 50, 51]),
    (60, &[10, 11, 20, 21, 30, 31, 40, 50, 60, 70, 71, 72, 80, 90, 100, 110, 111, 120]),
    (85, &[10, 11]),
    (90, &[10, 11, 20, 21, 30, 31]),
];

/// A method frame's payload could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MethodError {
    /// The class/method pair is not part of AMQP 0.9.1.
    #[error("unknown method {class}.{method}")]
    Unknown {
        /// Class id.
        class: u16,
        /// Method id.
        method: u16,
    },
    /// A known method whose fields do not decode.
    #[error("cannot decode method {class}.{method}")]
    Malformed {
        /// Class id.
        class: u16,
        /// Method id.
        method: u16,
    },
}

/// The class and method ids at the start of a method payload.
#[must_use]
pub fn method_ids(payload: &[u8]) -> Option<(u16, u16)> {
    let b = payload.get(..4)?;
    Some((u16::from_be_bytes([*b.first()?, *b.get(1)?]), u16::from_be_bytes([*b.get(2)?, *b.get(3)?])))
}

/// Decodes a method frame's payload.
///
/// # Errors
/// [`MethodError::Unknown`] for ids outside the spec, [`MethodError::Malformed`] otherwise.
pub fn decode_method(payload: &Bytes) -> Result<AMQPClass, MethodError> {
    let Some((class, method)) = method_ids(payload) else {
        return Err(MethodError::Malformed { class: 0, method: 0 });
    };
    let known = KNOWN.iter().any(|(c, methods)| *c == class && methods.contains(&method));
    if !known {
        return Err(MethodError::Unknown { class, method });
    }
    if super::method_tables::check_tables(class, method, &payload.slice(4..)).is_err() {
        return Err(MethodError::Malformed { class, method });
    }
    all_consuming(parse_class).parse(&payload[..]).map(|(_, m)| m).map_err(|_| MethodError::Malformed { class, method })
}

/// Appends a complete method frame.
pub fn encode_method(out: &mut BytesMut, channel: u16, method: &AMQPClass) {
    let frame = AMQPFrame::Method(channel, method.clone());
    let buf: Vec<u8> = Vec::with_capacity(64);
    match gen_frame(&frame)(WriteContext::from(buf)) {
        Ok(ctx) => out.extend_from_slice(&ctx.into_inner().0),
        Err(e) => tracing::error!(?e, "failed to encode a method frame"),
    }
}

/// Writes a method frame whose payload `fill` appends after the class and method ids.
fn put_method(out: &mut BytesMut, channel: u16, class: u16, method: u16, fill: impl FnOnce(&mut BytesMut)) {
    out.put_u8(FRAME_METHOD);
    out.put_u16(channel);
    let size_at = out.len();
    out.put_u32(0);
    out.put_u16(class);
    out.put_u16(method);
    fill(out);
    let size = u32::try_from(out.len() - size_at - 4).unwrap_or(u32::MAX);
    if let Some(slot) = out.get_mut(size_at..size_at + 4) {
        slot.copy_from_slice(&size.to_be_bytes());
    }
    out.put_u8(FRAME_END);
}

/// `basic.deliver`.
pub fn put_deliver(
    out: &mut BytesMut,
    channel: u16,
    consumer_tag: &str,
    delivery_tag: u64,
    redelivered: bool,
    exchange: &str,
    routing_key: &str,
) {
    put_method(out, channel, 60, 60, |out| {
        put_short_str(out, consumer_tag.as_bytes());
        out.put_u64(delivery_tag);
        out.put_u8(u8::from(redelivered));
        put_short_str(out, exchange.as_bytes());
        put_short_str(out, routing_key.as_bytes());
    });
}

/// `basic.ack` (publisher confirm).
pub fn put_ack(out: &mut BytesMut, channel: u16, delivery_tag: u64, multiple: bool) {
    put_method(out, channel, 60, 80, |out| {
        out.put_u64(delivery_tag);
        out.put_u8(u8::from(multiple));
    });
}

/// `basic.nack` (publisher confirm, refused).
pub fn put_nack(out: &mut BytesMut, channel: u16, delivery_tag: u64, multiple: bool) {
    put_method(out, channel, 60, 120, |out| {
        out.put_u64(delivery_tag);
        out.put_u8(u8::from(multiple));
    });
}

#[cfg(test)]
mod tests {
    use amq_protocol::protocol::basic;

    use super::*;
    use crate::codec::frame::parse_frame;

    fn decode_frame(bytes: BytesMut) -> AMQPClass {
        let mut buf = bytes;
        let frame = parse_frame(&mut buf, 0).unwrap().unwrap();
        decode_method(&frame.payload).unwrap()
    }

    #[test]
    fn hand_written_deliver_matches_amq_protocol() {
        let mut out = BytesMut::new();
        put_deliver(&mut out, 3, "ctag", 42, true, "ex", "rk");
        let expected = AMQPClass::Basic(basic::AMQPMethod::Deliver(basic::Deliver {
            consumer_tag: "ctag".into(),
            delivery_tag: 42,
            redelivered: true,
            exchange: "ex".into(),
            routing_key: "rk".into(),
        }));
        assert_eq!(decode_frame(out.clone()), expected);
        let mut generated = BytesMut::new();
        encode_method(&mut generated, 3, &expected);
        assert_eq!(out, generated);
    }

    #[test]
    fn unknown_and_malformed_methods_are_told_apart() {
        assert_eq!(
            decode_method(&Bytes::from_static(&[0, 60, 0, 99])),
            Err(MethodError::Unknown { class: 60, method: 99 })
        );
        assert_eq!(
            decode_method(&Bytes::from_static(&[0, 60, 0, 80, 0, 0])),
            Err(MethodError::Malformed { class: 60, method: 80 })
        );
        let mut extra = BytesMut::new();
        put_ack(&mut extra, 1, 1, false);
        let mut buf = extra;
        let frame = parse_frame(&mut buf, 0).unwrap().unwrap();
        let mut payload = BytesMut::from(&frame.payload[..]);
        payload.put_u8(0);
        assert!(decode_method(&payload.freeze()).is_err());
    }
}
