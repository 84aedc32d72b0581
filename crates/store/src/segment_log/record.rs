//! One log record on disk: `[u32 LE payload length][u32 LE CRC-32 of the payload][payload]`,
//! the payload a kind byte and the fields of that kind (fixed-width little-endian), an enqueue's
//! message bytes last. Segment files start with [`SEGMENT_MAGIC`] and their number.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// One log record.
#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    /// A message entered durable queue `queue` as its `seq`-th message; `payload` is the
    /// encoded message ([`crate::codec`]).
    Enqueue {
        /// Queue id.
        queue: u64,
        /// The queue's sequence number for the message.
        seq: u64,
        /// Its TTL deadline, ms since the epoch.
        expires_at: Option<i64>,
        /// Its size as length limits count it (so a restart need not read the message).
        size: u32,
        /// Its priority (0 when it has none), so that a restart can put it back in its
        /// priority queue's level without reading the message.
        priority: u8,
        /// Its "not before" time, ms since the epoch (the message's
        /// `BrokerAnnotations::not_before`), so that a restart can keep it delayed without
        /// reading every message.
        not_before: Option<i64>,
        /// The message this one replaces, as `(queue, seq)`: a message moved between queues
        /// (Zaqar's claim-count dead-letter queue) enters its target and leaves its source in
        /// this one record, so a crash leaves it in exactly one of them. Replay removes it from
        /// the source; a later `Remove` of it there finds nothing, and compaction drops the
        /// field (the source's enqueue lies in the same or an older segment, deleted first).
        replaces: Option<(u64, u64)>,
        /// The encoded message.
        payload: Bytes,
    },
    /// The message left the queue (acknowledged, dead-lettered, expired, dropped, purged).
    Remove {
        /// Queue id.
        queue: u64,
        /// Sequence number.
        seq: u64,
    },
    /// The message was handed to a consumer (quorum queues) or came back from one, with its
    /// counts: a restart brings it back redelivered.
    Delivered {
        /// Queue id.
        queue: u64,
        /// Sequence number.
        seq: u64,
        /// Times it came back (quorum queues).
        returned: u32,
        /// Failed deliveries (quorum queues).
        failed: u32,
    },
    /// The message died in an at-least-once queue and waits there for its dead letter's
    /// targets (RabbitMQ's quorum `at-least-once`): recovered as waiting, never as ready.
    DeadLettered {
        /// Queue id.
        queue: u64,
        /// Sequence number.
        seq: u64,
        /// Why it died (the engine's code for the reason).
        reason: u8,
    },
    /// The queue was deleted with all its messages.
    DropQueue {
        /// Queue id.
        queue: u64,
    },
    /// A transient message of a long queue, written so that it can leave memory: it is not
    /// synced for and never recovered.
    Spill {
        /// Queue id.
        queue: u64,
        /// The queue's sequence number for the message.
        seq: u64,
        /// The encoded message.
        payload: Bytes,
    },
    /// A spilled message left its queue. Never written (nothing recovers a spill): it only
    /// tells the writer that the bytes are garbage.
    Released {
        /// Queue id.
        queue: u64,
        /// Sequence number.
        seq: u64,
    },
}

impl Record {
    /// Whether a crash may not lose this record once its batch completed: an enqueue (its
    /// publisher is confirmed), a queue's deletion, and delivery counts that bound a quorum
    /// queue's redeliveries. Removals, plain delivery marks and spills may be lost: the
    /// message comes back, none is lost.
    #[must_use]
    pub fn needs_sync(&self) -> bool {
        match self {
            Self::Enqueue { .. } | Self::DropQueue { .. } | Self::DeadLettered { .. } => true,
            Self::Delivered { returned, failed, .. } => *returned > 0 || *failed > 0,
            Self::Remove { .. } | Self::Spill { .. } | Self::Released { .. } => false,
        }
    }
}

/// The message bytes (enqueue and spill payloads) of `records`: what the backlog counts.
pub(super) fn payload_bytes(records: &[Record]) -> u64 {
    records
        .iter()
        .map(|r| match r {
            Record::Enqueue { payload, .. } | Record::Spill { payload, .. } => payload.len() as u64,
            _ => 0,
        })
        .sum()
}

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

/// An enqueue's flags byte: a TTL deadline follows.
const HAS_EXPIRY: u8 = 1;
/// An enqueue's flags byte: a priority byte follows (after the deadline). Records written
/// before priorities existed have only [`HAS_EXPIRY`] or nothing, and read as priority 0.
const HAS_PRIORITY: u8 = 2;
/// An enqueue's flags byte: the message's "not before" time follows (after the priority), so
/// that a restart finds delayed messages without reading every message.
const HAS_NOT_BEFORE: u8 = 4;
/// An enqueue's flags byte: the queue and seq of the message it replaces follow (after the
/// "not before" time): it left that queue in this same record.
const HAS_REPLACES: u8 = 8;

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
        Record::Enqueue { queue, seq, expires_at, size, priority, not_before, replaces, payload } => {
            out.put_u8(ENQUEUE);
            out.put_u64_le(*queue);
            out.put_u64_le(*seq);
            out.put_u32_le(*size);
            let flags = (u8::from(expires_at.is_some()) * HAS_EXPIRY)
                | (u8::from(*priority != 0) * HAS_PRIORITY)
                | (u8::from(not_before.is_some()) * HAS_NOT_BEFORE)
                | (u8::from(replaces.is_some()) * HAS_REPLACES);
            out.put_u8(flags);
            if let Some(at) = expires_at {
                out.put_i64_le(*at);
            }
            if *priority != 0 {
                out.put_u8(*priority);
            }
            if let Some(at) = not_before {
                out.put_i64_le(*at);
            }
            if let Some((queue, seq)) = replaces {
                out.put_u64_le(*queue);
                out.put_u64_le(*seq);
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
    /// Nothing but zeros left: the part of the segment the writer allocated ahead of its
    /// records (see `Writer::preallocate`). No record is ever all zeros, since every record has
    /// a kind byte and a zero-length frame would not hold it.
    Padding,
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
    if len == 0 {
        // The CRC of nothing is 0, so a zeroed frame would pass it: check the rest instead.
        if bytes.iter().all(|b| *b == 0) {
            return Next::Padding;
        }
        return Next::Torn("a zero-length record");
    }
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
            let flags = p.get_u8();
            if flags & !(HAS_EXPIRY | HAS_PRIORITY | HAS_NOT_BEFORE | HAS_REPLACES) != 0 {
                return None;
            }
            let expires_at = if flags & HAS_EXPIRY == 0 {
                None
            } else {
                need(&p, 8)?;
                Some(p.get_i64_le())
            };
            let priority = if flags & HAS_PRIORITY == 0 {
                0
            } else {
                need(&p, 1)?;
                p.get_u8()
            };
            let not_before = if flags & HAS_NOT_BEFORE == 0 {
                None
            } else {
                need(&p, 8)?;
                Some(p.get_i64_le())
            };
            let replaces = if flags & HAS_REPLACES == 0 {
                None
            } else {
                need(&p, 16)?;
                Some((p.get_u64_le(), p.get_u64_le()))
            };
            Record::Enqueue { queue, seq, expires_at, size, priority, not_before, replaces, payload: p }
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

/// Records framed one after the other, as a segment holds them (each with its length and
/// CRC): how a replicated queue's journal travels in its Raft entries and snapshots.
#[must_use]
pub fn encode_batch(records: &[Record]) -> Bytes {
    let mut out = BytesMut::with_capacity(records.len() * 32 + usize::try_from(payload_bytes(records)).unwrap_or(0));
    for record in records {
        put_record(&mut out, record);
    }
    out.freeze()
}

/// The records of an [`encode_batch`]; payloads are slices of `bytes`, not copies. A batch
/// comes from a peer: every frame is checked (length within the batch, CRC, content), and the
/// first that fails refuses the whole batch with what was wrong.
///
/// # Errors
/// A frame is cut short, fails its CRC or does not decode.
pub fn decode_batch(bytes: &Bytes) -> Result<Vec<Record>, &'static str> {
    let mut records = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match next_record(&bytes.slice(at..)) {
            Next::Record(record, framed) => {
                records.push(record);
                at += framed;
            }
            Next::End => break,
            Next::Padding => return Err("padding in a batch"),
            Next::Torn(why) | Next::Invalid(why) => return Err(why),
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enqueue(expires_at: Option<i64>, priority: u8) -> Record {
        Record::Enqueue {
            queue: 3,
            seq: 4,
            expires_at,
            size: 2,
            priority,
            not_before: None,
            replaces: None,
            payload: Bytes::from_static(b"ab"),
        }
    }

    fn round_trip(record: &Record) -> Option<Record> {
        let mut out = BytesMut::new();
        let len = put_record(&mut out, record);
        match next_record(&out.freeze()) {
            Next::Record(read, read_len) if read_len == len => Some(read),
            _ => None,
        }
    }

    #[test]
    fn an_enqueue_keeps_its_deadline_and_priority_in_any_combination() {
        for (expires_at, priority) in [(None, 0), (Some(-7), 0), (None, 255), (Some(1 << 40), 9)] {
            let record = enqueue(expires_at, priority);
            assert_eq!(round_trip(&record), Some(record));
            for (not_before, replaces) in [(Some(1 << 41), None), (Some(-1), Some((7, u64::MAX))), (None, Some((0, 1)))]
            {
                let delayed = match enqueue(expires_at, priority) {
                    Record::Enqueue { queue, seq, expires_at, size, priority, payload, .. } => {
                        Record::Enqueue { queue, seq, expires_at, size, priority, not_before, replaces, payload }
                    }
                    other => other,
                };
                assert_eq!(round_trip(&delayed), Some(delayed));
            }
        }
    }

    #[test]
    fn an_enqueue_written_before_priorities_reads_as_priority_zero_and_unknown_flags_are_corruption() {
        let mut old = BytesMut::new();
        put_record(&mut old, &enqueue(Some(5), 0));
        assert_eq!(old.get(FRAME_LEN + 21).copied(), Some(HAS_EXPIRY), "the flags byte of the old format");
        assert_eq!(round_trip(&enqueue(Some(5), 0)), Some(enqueue(Some(5), 0)));
        let mut payload = BytesMut::new();
        payload.put_u8(ENQUEUE);
        payload.put_u64_le(3);
        payload.put_u64_le(4);
        payload.put_u32_le(2);
        payload.put_u8(16);
        assert!(decode(payload.freeze()).is_none(), "flag bit 4 means nothing yet");
    }
}
