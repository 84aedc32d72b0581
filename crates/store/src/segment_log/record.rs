//! One log record on disk: `[u32 LE payload length][u32 LE CRC-32 of the payload][payload]`,
//! the payload a kind byte and the fields of that kind (fixed-width little-endian), an enqueue's
//! message bytes last. Segment files start with [`SEGMENT_MAGIC`] and their number.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::Record;

/// First bytes of every segment file.
pub(super) const SEGMENT_MAGIC: &[u8; 8] = b"CHRNSEG1";
/// Magic plus the segment number.
pub(super) const HEADER_LEN: usize = 16;
/// Length and CRC.
const FRAME_LEN: usize = 8;

const ENQUEUE: u8 = 1;
const REMOVE: u8 = 2;
const DELIVERED: u8 = 3;
const DROP_QUEUE: u8 = 4;
const SPILL: u8 = 5;
const DEAD_LETTERED: u8 = 6;

/// Appends one framed record and returns its framed length (0 for [`Record::Released`],
/// which is never written).
pub(super) fn put_record(out: &mut BytesMut, record: &Record) -> usize {
    if let Record::Released { .. } = record {
        return 0;
    }
    let start = out.len();
    out.put_u64_le(0); // length and CRC, filled in below
    match record {
        Record::Released { .. } => {}
        Record::Spill { queue, seq, payload } => {
            out.put_u8(SPILL);
            out.put_u64_le(*queue);
            out.put_u64_le(*seq);
            out.put_slice(payload);
        }
        Record::Enqueue { queue, seq, expires_at, size, payload } => {
            out.put_u8(ENQUEUE);
            out.put_u64_le(*queue);
            out.put_u64_le(*seq);
            out.put_u32_le(*size);
            match expires_at {
                Some(at) => {
                    out.put_u8(1);
                    out.put_i64_le(*at);
                }
                None => out.put_u8(0),
            }
            out.put_slice(payload);
        }
        Record::Remove { queue, seq } => {
            out.put_u8(REMOVE);
            out.put_u64_le(*queue);
            out.put_u64_le(*seq);
        }
        Record::Delivered { queue, seq, returned, failed } => {
            out.put_u8(DELIVERED);
            out.put_u64_le(*queue);
            out.put_u64_le(*seq);
            out.put_u32_le(*returned);
            out.put_u32_le(*failed);
        }
        Record::DropQueue { queue } => {
            out.put_u8(DROP_QUEUE);
            out.put_u64_le(*queue);
        }
        Record::DeadLettered { queue, seq, reason } => {
            out.put_u8(DEAD_LETTERED);
            out.put_u64_le(*queue);
            out.put_u64_le(*seq);
            out.put_u8(*reason);
        }
    }
    let payload_len = out.len() - start - FRAME_LEN;
    let crc = crc32fast::hash(out.get(start + FRAME_LEN..).unwrap_or_default());
    let mut frame = [0u8; FRAME_LEN];
    let (len_bytes, crc_bytes) = frame.split_at_mut(4);
    len_bytes.copy_from_slice(&u32::try_from(payload_len).unwrap_or(u32::MAX).to_le_bytes());
    crc_bytes.copy_from_slice(&crc.to_le_bytes());
    if let Some(slot) = out.get_mut(start..start + FRAME_LEN) {
        slot.copy_from_slice(&frame);
    }
    out.len() - start
}

/// What reading the next record found.
pub(super) enum Next {
    /// A whole record whose CRC matches.
    Record(Record, usize),
    /// No bytes left.
    End,
    /// A record cut short or failing its CRC: a torn write at the tail of the last segment,
    /// corruption anywhere else.
    Torn(&'static str),
    /// A record whose CRC matches but whose content does not decode: corruption.
    Invalid(&'static str),
}

/// Reads the record at the front of `bytes` (a slice of the segment, so payloads are not
/// copied); returns it with its framed length.
pub(super) fn next_record(bytes: &Bytes) -> Next {
    if bytes.is_empty() {
        return Next::End;
    }
    let Some(frame) = bytes.get(..FRAME_LEN) else {
        return Next::Torn("a record header cut short");
    };
    let mut frame = frame;
    let len = frame.get_u32_le() as usize;
    let crc = frame.get_u32_le();
    let Some(payload) = bytes.get(FRAME_LEN..FRAME_LEN + len) else {
        return Next::Torn("a record cut short");
    };
    if crc32fast::hash(payload) != crc {
        return Next::Torn("a record failing its CRC");
    }
    match decode(bytes.slice(FRAME_LEN..FRAME_LEN + len)) {
        Some(record) => Next::Record(record, FRAME_LEN + len),
        None => Next::Invalid("a record that does not decode"),
    }
}

fn decode(mut p: Bytes) -> Option<Record> {
    let need = |p: &Bytes, n: usize| (p.remaining() >= n).then_some(());
    need(&p, 1)?;
    let record = match p.get_u8() {
        ENQUEUE => {
            need(&p, 21)?;
            let (queue, seq, size) = (p.get_u64_le(), p.get_u64_le(), p.get_u32_le());
            let expires_at = match p.get_u8() {
                0 => None,
                1 => {
                    need(&p, 8)?;
                    Some(p.get_i64_le())
                }
                _ => return None,
            };
            Record::Enqueue { queue, seq, expires_at, size, payload: p }
        }
        REMOVE => {
            need(&p, 16)?;
            Record::Remove { queue: p.get_u64_le(), seq: p.get_u64_le() }
        }
        DELIVERED => {
            need(&p, 24)?;
            Record::Delivered {
                queue: p.get_u64_le(),
                seq: p.get_u64_le(),
                returned: p.get_u32_le(),
                failed: p.get_u32_le(),
            }
        }
        DROP_QUEUE => {
            need(&p, 8)?;
            Record::DropQueue { queue: p.get_u64_le() }
        }
        DEAD_LETTERED => {
            need(&p, 17)?;
            Record::DeadLettered { queue: p.get_u64_le(), seq: p.get_u64_le(), reason: p.get_u8() }
        }
        SPILL => {
            need(&p, 16)?;
            Record::Spill { queue: p.get_u64_le(), seq: p.get_u64_le(), payload: p }
        }
        _ => return None,
    };
    Some(record)
}

/// A segment file's header.
pub(super) fn header(segment: u64) -> [u8; HEADER_LEN] {
    let mut out = [0; HEADER_LEN];
    out[..8].copy_from_slice(SEGMENT_MAGIC);
    out[8..].copy_from_slice(&segment.to_le_bytes());
    out
}
