//! The performatives of the message path — transfer, disposition, flow — encoded and decoded
//! by hand, and a message's `header` section read by hand.
//!
//! serde_amqp builds each performative through a generic serializer into a fresh `Vec` and
//! decodes it through a generic visitor; at one transfer, one flow share and one disposition
//! per message that was most of the AMQP 1.0 path's CPU. These functions write straight into
//! the output buffer, byte for byte what serde_amqp writes (absent and default fields as
//! `null` between set ones, trailing ones left out, the smallest `uint` and `list` forms; the
//! tests compare both), and read the plain encodings clients send. Anything else — other
//! descriptors or constructors, a delivery state on a transfer, flow properties — returns
//! `None` and goes the serde_amqp way, so what is accepted or refused does not change.

use bytes::{BufMut, BytesMut};
use fe2o3_amqp_types::definitions::{Handle, Role};
use fe2o3_amqp_types::messaging::{Accepted, DeliveryState, Released};
use fe2o3_amqp_types::performatives::{Disposition, Flow, Performative, Transfer};
use serde_bytes::ByteBuf;

use super::FRAME_TYPE_AMQP;
use super::message::HeaderFields;

const HEADER: u8 = 0x70;
const FLOW: u8 = 0x13;
const TRANSFER: u8 = 0x14;
const DISPOSITION: u8 = 0x15;
const ACCEPTED: u8 = 0x24;
const RELEASED: u8 = 0x26;
/// The longest delivery tag written by hand (the spec's limit is 32 bytes); longer ones take
/// the serde_amqp path, whose `list32` form this module does not write.
const MAX_TAG: usize = 32;

/// Appends list fields the way serde_amqp's derive does: a missing field is remembered and
/// written as `null` only when a later field is present.
struct Fields<'a> {
    out: &'a mut BytesMut,
    count: u8,
    nulls: u8,
}

impl Fields<'_> {
    fn absent(&mut self) {
        self.nulls += 1;
    }

    fn present(&mut self) {
        for _ in 0..self.nulls {
            self.out.put_u8(0x40);
        }
        self.count += self.nulls + 1;
        self.nulls = 0;
    }

    fn uint(&mut self, value: u32) {
        self.present();
        match value {
            0 => self.out.put_u8(0x43),
            1..=255 => self.out.put_slice(&[0x52, value as u8]),
            _ => {
                self.out.put_u8(0x70);
                self.out.put_u32(value);
            }
        }
    }

    fn opt_uint(&mut self, value: Option<u32>) {
        match value {
            Some(v) => self.uint(v),
            None => self.absent(),
        }
    }

    fn boolean(&mut self, value: bool) {
        self.present();
        self.out.put_u8(if value { 0x41 } else { 0x42 });
    }

    /// A boolean with default false: left out (or `null`) when false.
    fn flag(&mut self, value: bool) {
        if value { self.boolean(true) } else { self.absent() }
    }

    fn binary(&mut self, value: &[u8]) {
        self.present();
        self.out.put_u8(0xa0);
        self.out.put_u8(value.len() as u8);
        self.out.put_slice(value);
    }

    /// An outcome without fields (`accepted`, `released`).
    fn outcome(&mut self, code: u8) {
        self.present();
        self.out.put_slice(&[0x00, 0x53, code, 0x45]);
    }
}

/// Writes a frame whose performative is a described list, filled by `fields`, followed by
/// `payload`. The caller keeps the list under 255 bytes (it writes no `list32`).
fn frame(out: &mut BytesMut, channel: u16, code: u8, payload: &[u8], fields: impl FnOnce(&mut Fields<'_>)) {
    let start = out.len();
    out.put_slice(&[0, 0, 0, 0, 2, FRAME_TYPE_AMQP]);
    out.put_u16(channel);
    out.put_slice(&[0x00, 0x53, code, 0xc0, 0, 0]);
    let list = out.len();
    let mut writer = Fields { out, count: 0, nulls: 0 };
    fields(&mut writer);
    let count = writer.count;
    let size = out.len() - list;
    if count == 0 {
        // serde_amqp's `list0`.
        out.truncate(list - 3);
        out.put_u8(0x45);
    } else if let Some(header) = out.get_mut(list - 2..list) {
        header.copy_from_slice(&[(size + 1) as u8, count]);
    }
    out.put_slice(payload);
    let total = u32::try_from(out.len() - start).unwrap_or(u32::MAX);
    if let Some(header) = out.get_mut(start..start + 4) {
        header.copy_from_slice(&total.to_be_bytes());
    }
}

/// The fields of a transfer [`put_transfer`] writes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TransferHead<'a> {
    /// Link handle.
    pub(crate) handle: u32,
    /// Delivery id.
    pub(crate) delivery_id: u32,
    /// Delivery tag (at most 32 bytes here).
    pub(crate) tag: &'a [u8],
    /// Sent settled.
    pub(crate) settled: bool,
    /// More frames of this delivery follow.
    pub(crate) more: bool,
}

/// Appends a transfer frame carrying `payload`, or returns false (nothing written) when its
/// fields need the serde_amqp encoder (a tag over 32 bytes).
pub(crate) fn put_transfer(out: &mut BytesMut, channel: u16, head: TransferHead<'_>, payload: &[u8]) -> bool {
    let TransferHead { handle, delivery_id, tag, settled, more } = head;
    if tag.len() > MAX_TAG {
        return false;
    }
    frame(out, channel, TRANSFER, payload, |f| {
        f.uint(handle);
        f.uint(delivery_id);
        f.binary(tag);
        f.uint(0);
        f.boolean(settled);
        f.flag(more);
    });
    true
}

/// The encoded length of the transfer performative [`put_transfer`] writes, `None` when the
/// tag is too long for it.
pub(crate) fn transfer_len(handle: u32, delivery_id: u32, tag: &[u8], more: bool) -> Option<usize> {
    if tag.len() > MAX_TAG {
        return None;
    }
    // Descriptor, list8 header, the fields (format 0 and `settled` take one byte each).
    Some(3 + 3 + uint_len(handle) + uint_len(delivery_id) + 2 + tag.len() + 1 + 1 + usize::from(more))
}

fn uint_len(value: u32) -> usize {
    match value {
        0 => 1,
        1..=255 => 2,
        _ => 5,
    }
}

/// Appends a disposition frame, or returns false (nothing written) for a state other than
/// none, `accepted` or `released` (those take the serde_amqp encoder).
pub(crate) fn put_disposition(out: &mut BytesMut, channel: u16, disposition: &Disposition) -> bool {
    let state = match &disposition.state {
        None => None,
        Some(DeliveryState::Accepted(_)) => Some(ACCEPTED),
        Some(DeliveryState::Released(_)) => Some(RELEASED),
        Some(_) => return false,
    };
    frame(out, channel, DISPOSITION, &[], |f| {
        f.boolean(disposition.role == Role::Receiver);
        f.uint(disposition.first);
        f.opt_uint(disposition.last);
        f.flag(disposition.settled);
        match state {
            Some(code) => f.outcome(code),
            None => f.absent(),
        }
        f.flag(disposition.batchable);
    });
    true
}

/// Appends a flow frame, or returns false (nothing written) when it has properties.
pub(crate) fn put_flow(out: &mut BytesMut, channel: u16, flow: &Flow) -> bool {
    if flow.properties.is_some() {
        return false;
    }
    frame(out, channel, FLOW, &[], |f| {
        f.opt_uint(flow.next_incoming_id);
        f.uint(flow.incoming_window);
        f.uint(flow.next_outgoing_id);
        f.uint(flow.outgoing_window);
        f.opt_uint(flow.handle.as_ref().map(|h| h.0));
        f.opt_uint(flow.delivery_count);
        f.opt_uint(flow.link_credit);
        f.opt_uint(flow.available);
        f.flag(flow.drain);
        f.flag(flow.echo);
    });
    true
}

/// A flow with every field absent or zero, for the session and its links to fill in.
pub(crate) fn empty_flow() -> Flow {
    Flow {
        next_incoming_id: None,
        incoming_window: 0,
        next_outgoing_id: 0,
        outgoing_window: 0,
        handle: None,
        delivery_count: None,
        link_credit: None,
        available: None,
        drain: false,
        echo: false,
        properties: None,
    }
}

/// Reads the fields of a described list one by one.
struct Reader<'a> {
    bytes: &'a [u8],
    left: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (first, rest) = self.bytes.split_first()?;
        self.bytes = rest;
        Some(*first)
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.bytes.get(..n)?, self.bytes.get(n..)?);
        self.bytes = rest;
        Some(head)
    }

    /// The next field's constructor, `None` past the last field.
    fn next(&mut self) -> Option<Option<u8>> {
        if self.left == 0 {
            return Some(None);
        }
        self.left -= 1;
        self.byte().map(Some)
    }

    /// `Some(None)` for an absent field, `None` for anything but a plain uint.
    fn opt_uint(&mut self) -> Option<Option<u32>> {
        match self.next()? {
            None | Some(0x40) => Some(None),
            Some(0x43) => Some(Some(0)),
            Some(0x52) => self.byte().map(|b| Some(u32::from(b))),
            Some(0x70) => {
                let raw: [u8; 4] = self.take(4)?.try_into().ok()?;
                Some(Some(u32::from_be_bytes(raw)))
            }
            Some(_) => None,
        }
    }

    fn uint(&mut self) -> Option<u32> {
        self.opt_uint()?
    }

    /// A boolean field: `Some(None)` when absent (serde_amqp's derive reads an optional or
    /// defaulted field as `Option`, so `null` is absent too).
    fn opt_bool(&mut self) -> Option<Option<bool>> {
        match self.next()? {
            None | Some(0x40) => Some(None),
            Some(0x41) => Some(Some(true)),
            Some(0x42) => Some(Some(false)),
            Some(_) => None,
        }
    }

    fn flag(&mut self) -> Option<bool> {
        self.opt_bool().map(|b| b.unwrap_or(false))
    }

    fn opt_binary(&mut self) -> Option<Option<&'a [u8]>> {
        match self.next()? {
            None | Some(0x40) => Some(None),
            Some(0xa0) => {
                let len = usize::from(self.byte()?);
                self.take(len).map(Some)
            }
            Some(_) => None,
        }
    }

    /// An outcome without fields, as the state of a disposition.
    fn opt_state(&mut self) -> Option<Option<DeliveryState>> {
        match self.next()? {
            None | Some(0x40) => Some(None),
            Some(0x00) => match self.take(3)? {
                [0x53, ACCEPTED, 0x45] => Some(Some(DeliveryState::Accepted(Accepted {}))),
                [0x53, RELEASED, 0x45] => Some(Some(DeliveryState::Released(Released {}))),
                _ => None,
            },
            Some(_) => None,
        }
    }

    fn opt_ubyte(&mut self) -> Option<Option<u8>> {
        match self.next()? {
            None | Some(0x40) => Some(None),
            Some(0x50) => self.byte().map(Some),
            Some(_) => None,
        }
    }

    /// Only absent fields remain.
    fn done(&self) -> bool {
        self.left == 0 && self.bytes.is_empty()
    }
}

/// Decodes a transfer, disposition or flow in its plain encoding: `(performative, length)`,
/// or `None` for anything the serde_amqp decoder must see.
pub(crate) fn decode_hot(body: &[u8]) -> Option<(Performative, usize)> {
    let (code, mut r, len) = described_list(body)?;
    let performative = match code {
        TRANSFER => Performative::Transfer(transfer(&mut r)?),
        DISPOSITION => Performative::Disposition(disposition(&mut r)?),
        FLOW => Performative::Flow(flow(&mut r)?),
        _ => return None,
    };
    r.done().then_some((performative, len))
}

/// A list described by a small ulong at the front of `bytes`, in the `list0` or `list8` form:
/// its descriptor code, a reader of its fields and its encoded length.
fn described_list(bytes: &[u8]) -> Option<(u8, Reader<'_>, usize)> {
    let [0x00, 0x53, code, constructor, rest @ ..] = bytes else {
        return None;
    };
    let (content, count, header) = match *constructor {
        0x45 => (&[][..], 0, 0),
        0xc0 => {
            let [size, count, ..] = rest else { return None };
            let size = usize::from(*size);
            (rest.get(2..1 + size)?, usize::from(*count), 2)
        }
        _ => return None,
    };
    Some((*code, Reader { bytes: content, left: count }, 4 + header + content.len()))
}

/// A message's `header` section (exactly `section`) in its plain encoding, or `None` for
/// anything the general decoder must see (other forms, more fields than the five it has).
/// Every message of a durable publisher carries one: read through the value tree it cost two
/// allocations per message.
pub(crate) fn header(section: &[u8]) -> Option<HeaderFields> {
    let (HEADER, mut r, len) = described_list(section)? else {
        return None;
    };
    let fields = HeaderFields {
        durable: r.opt_bool()?,
        priority: r.opt_ubyte()?,
        ttl: r.opt_uint()?,
        first_acquirer: r.opt_bool()?,
        delivery_count: r.opt_uint()?,
    };
    (r.done() && len == section.len()).then_some(fields)
}

fn transfer(r: &mut Reader<'_>) -> Option<Transfer> {
    let handle = Handle(r.uint()?);
    let delivery_id = r.opt_uint()?;
    let delivery_tag = r.opt_binary()?.map(|tag| ByteBuf::from(tag.to_vec()));
    let message_format = r.opt_uint()?;
    let settled = r.opt_bool()?;
    let more = r.flag()?;
    // rcv-settle-mode and state: only when absent.
    for _ in 0..2 {
        if !matches!(r.next()?, None | Some(0x40)) {
            return None;
        }
    }
    Some(Transfer {
        handle,
        delivery_id,
        delivery_tag,
        message_format,
        settled,
        more,
        rcv_settle_mode: None,
        state: None,
        resume: r.flag()?,
        aborted: r.flag()?,
        batchable: r.flag()?,
    })
}

fn disposition(r: &mut Reader<'_>) -> Option<Disposition> {
    let role = match r.opt_bool()?? {
        true => Role::Receiver,
        false => Role::Sender,
    };
    Some(Disposition {
        role,
        first: r.uint()?,
        last: r.opt_uint()?,
        settled: r.flag()?,
        state: r.opt_state()?,
        batchable: r.flag()?,
    })
}

fn flow(r: &mut Reader<'_>) -> Option<Flow> {
    let flow = Flow {
        next_incoming_id: r.opt_uint()?,
        incoming_window: r.uint()?,
        next_outgoing_id: r.uint()?,
        outgoing_window: r.uint()?,
        handle: r.opt_uint()?.map(Handle),
        delivery_count: r.opt_uint()?,
        link_credit: r.opt_uint()?,
        available: r.opt_uint()?,
        drain: r.flag()?,
        echo: r.flag()?,
        properties: None,
    };
    // Properties: only when absent.
    matches!(r.next()?, None | Some(0x40)).then_some(flow)
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp_types::messaging::Rejected;

    use super::*;
    use crate::codec::{decode_performative, encode_value, write_frame};

    fn serde_frame<T: serde::Serialize>(channel: u16, value: &T, payload: &[u8]) -> Vec<u8> {
        let mut out = BytesMut::new();
        write_frame(&mut out, FRAME_TYPE_AMQP, channel, &encode_value(value), payload);
        out.to_vec()
    }

    fn transfer(handle: u32, id: u32, tag: &[u8], settled: bool, more: bool) -> Transfer {
        Transfer {
            handle: Handle(handle),
            delivery_id: Some(id),
            delivery_tag: Some(ByteBuf::from(tag.to_vec())),
            message_format: Some(0),
            settled: Some(settled),
            more,
            rcv_settle_mode: None,
            state: None,
            resume: false,
            aborted: false,
            batchable: false,
        }
    }

    const NUMBERS: [u32; 6] = [0, 1, 255, 256, 70_000, u32::MAX];

    #[test]
    fn transfers_are_written_as_serde_amqp_writes_them() {
        for n in NUMBERS {
            for (tag, settled, more) in
                [(&b""[..], true, false), (&[0, 0, 0, 7][..], false, true), (&[9; 32][..], false, false)]
            {
                let mut out = BytesMut::new();
                let head = TransferHead { handle: n, delivery_id: n.wrapping_add(1), tag, settled, more };
                assert!(put_transfer(&mut out, 3, head, b"payload"));
                let expected = serde_frame(3, &transfer(n, n.wrapping_add(1), tag, settled, more), b"payload");
                assert_eq!(out.to_vec(), expected, "handle {n} tag {tag:?} settled {settled} more {more}");
                let len = transfer_len(n, n.wrapping_add(1), tag, more).unwrap();
                assert_eq!(len, expected.len() - 8 - b"payload".len());
            }
        }
        let mut out = BytesMut::new();
        let head = TransferHead { handle: 0, delivery_id: 0, tag: &[1; 33], settled: false, more: false };
        assert!(!put_transfer(&mut out, 0, head, b""));
        assert!(out.is_empty());
    }

    #[test]
    fn dispositions_are_written_as_serde_amqp_writes_them() {
        let states = [None, Some(DeliveryState::Accepted(Accepted {})), Some(DeliveryState::Released(Released {}))];
        for n in NUMBERS {
            for state in &states {
                for (role, last, settled) in
                    [(Role::Receiver, None, true), (Role::Sender, Some(n.wrapping_add(9)), false)]
                {
                    let d = Disposition { role, first: n, last, settled, state: state.clone(), batchable: false };
                    let mut out = BytesMut::new();
                    assert!(put_disposition(&mut out, 1, &d));
                    assert_eq!(out.to_vec(), serde_frame(1, &d, &[]), "{d:?}");
                }
            }
        }
        let rejected = Disposition {
            role: Role::Receiver,
            first: 0,
            last: None,
            settled: true,
            state: Some(DeliveryState::Rejected(Rejected {
                error: Some(crate::proto::error("amqp:internal-error", "x")),
            })),
            batchable: false,
        };
        let mut out = BytesMut::new();
        assert!(!put_disposition(&mut out, 0, &rejected));
        assert!(out.is_empty());
    }

    #[test]
    fn flows_are_written_as_serde_amqp_writes_them() {
        let mut cases = vec![empty_flow()];
        for n in NUMBERS {
            let mut link = empty_flow();
            link.next_incoming_id = Some(n);
            link.incoming_window = 400;
            link.next_outgoing_id = n.wrapping_sub(3);
            link.outgoing_window = u32::MAX;
            cases.push(link.clone());
            link.handle = Some(Handle(n % 256));
            link.delivery_count = Some(n);
            link.link_credit = Some(170);
            cases.push(link.clone());
            link.drain = true;
            link.available = Some(n);
            cases.push(link.clone());
            link.drain = false;
            link.echo = true;
            link.available = None;
            cases.push(link);
        }
        for f in cases {
            let mut out = BytesMut::new();
            assert!(put_flow(&mut out, 2, &f));
            assert_eq!(out.to_vec(), serde_frame(2, &f, &[]), "{f:?}");
        }
    }

    /// Decoding by hand gives what serde_amqp gives, for what both encoders write.
    #[test]
    fn plain_encodings_decode_as_serde_amqp_decodes_them() {
        let mut bodies: Vec<Vec<u8>> = Vec::new();
        for n in NUMBERS {
            bodies.push(encode_value(&transfer(n, n, &n.to_be_bytes(), n % 2 == 0, n == 1)));
            // fe2o3's send_batchable: nulls up to `batchable`.
            let mut batchable = transfer(n, n, b"", false, false);
            batchable.batchable = true;
            bodies.push(encode_value(&batchable));
            let mut f = empty_flow();
            f.next_incoming_id = Some(n);
            f.handle = Some(Handle(n));
            f.link_credit = Some(n);
            f.echo = n == 0;
            bodies.push(encode_value(&f));
            let d = Disposition {
                role: Role::Receiver,
                first: n,
                last: Some(n),
                settled: true,
                state: Some(DeliveryState::Accepted(Accepted {})),
                batchable: false,
            };
            bodies.push(encode_value(&d));
        }
        // fe2o3's receiver settles with the state in the middle and nulls around it.
        bodies.push(vec![0x00, 0x53, 0x15, 0xc0, 0x09, 0x05, 0x41, 0x43, 0x40, 0x41, 0x00, 0x53, 0x24, 0x45]);
        for body in bodies {
            let (hot, len) = decode_hot(&body).unwrap_or_else(|| panic!("not decoded by hand: {body:02x?}"));
            let mut framed = body.clone();
            framed.extend_from_slice(b"tail");
            let (slow, tail) = decode_performative(&bytes::Bytes::from(framed)).unwrap();
            assert_eq!(format!("{hot:?}"), format!("{slow:?}"));
            assert_eq!(len, body.len());
            assert_eq!(&tail[..], b"tail");
        }
    }

    #[test]
    fn plain_headers_read_as_the_value_tree_reads_them_and_others_are_left_to_it() {
        use fe2o3_amqp_types::messaging::{Header, Priority};

        use crate::codec::encode_value;
        use crate::codec::message::header_from_tree;

        let mut read_by_hand = 0;
        for durable in [false, true] {
            for priority in [0u8, 4, 9] {
                for ttl in [None, Some(0u32), Some(200), Some(70_000)] {
                    for first_acquirer in [false, true] {
                        for delivery_count in [0u32, 1, 300] {
                            let value =
                                Header { durable, priority: Priority(priority), ttl, first_acquirer, delivery_count };
                            let bytes = encode_value(&value);
                            let by_tree = header_from_tree(&bytes).unwrap();
                            if let Some(by_hand) = header(&bytes) {
                                read_by_hand += 1;
                                assert_eq!(by_hand, by_tree, "{value:?}");
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(read_by_hand, 2 * 3 * 4 * 2 * 3, "serde_amqp's own encodings are all plain");

        let plain: [(&[u8], HeaderFields); 3] = [
            (&[0x00, 0x53, 0x70, 0x45], HeaderFields::default()),
            (
                &[0x00, 0x53, 0x70, 0xc0, 0x05, 0x03, 0x41, 0x40, 0x52, 0x07],
                HeaderFields { durable: Some(true), ttl: Some(7), ..HeaderFields::default() },
            ),
            (
                &[0x00, 0x53, 0x70, 0xc0, 0x0b, 0x05, 0x42, 0x50, 0x03, 0x43, 0x41, 0x70, 0, 0, 1, 0],
                HeaderFields {
                    durable: Some(false),
                    priority: Some(3),
                    ttl: Some(0),
                    first_acquirer: Some(true),
                    delivery_count: Some(256),
                },
            ),
        ];
        for (bytes, expected) in plain {
            assert_eq!(header(bytes), Some(expected), "{bytes:02x?}");
            assert_eq!(header_from_tree(bytes).unwrap(), expected, "{bytes:02x?}");
        }
        let others: [&[u8]; 5] = [
            // A boolean with its value in a byte.
            &[0x00, 0x53, 0x70, 0xc0, 0x03, 0x01, 0x56, 0x01],
            // A sixth field (the tree reads the first five).
            &[0x00, 0x53, 0x70, 0xc0, 0x07, 0x06, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40],
            // The descriptor as a ulong.
            &[0x00, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x70, 0x45],
            // list32.
            &[0x00, 0x53, 0x70, 0xd0, 0, 0, 0, 0x05, 0, 0, 0, 0x01, 0x41],
            // A priority that is no ubyte: refused by the tree too.
            &[0x00, 0x53, 0x70, 0xc0, 0x03, 0x02, 0x40, 0x43],
        ];
        for bytes in others {
            assert_eq!(header(bytes), None, "{bytes:02x?}");
        }
    }

    /// What the hand decoder does not know goes to serde_amqp.
    #[test]
    fn other_encodings_are_left_to_serde_amqp() {
        // A transfer with a state, a flow with properties, list32, a named descriptor, a
        // null for a required field, an attach.
        let mut with_state = transfer(1, 1, b"t", false, false);
        with_state.state = Some(DeliveryState::Accepted(Accepted {}));
        let mut with_properties = empty_flow();
        with_properties.properties = Some(Default::default());
        for body in [
            encode_value(&with_state),
            encode_value(&with_properties),
            vec![0x00, 0x53, 0x13, 0xd0, 0, 0, 0, 5, 0, 0, 0, 1, 0x43],
            vec![0x00, 0xa3, 0x04, b'f', b'l', b'o', b'w', 0x45],
            vec![0x00, 0x53, 0x15, 0xc0, 0x03, 0x02, 0x41, 0x40],
            vec![0x00, 0x53, 0x12, 0x45],
            vec![0x00, 0x53, 0x14, 0xc0, 0x09, 0x01],
        ] {
            assert!(decode_hot(&body).is_none(), "{body:02x?}");
        }
    }
}
