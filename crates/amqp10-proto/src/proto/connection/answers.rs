//! The broker's answers to the connection's [`Event`]s: accepting and
//! detaching links, granting credit, sending messages and dispositions, ending sessions.
//! Each finds the session, lets it keep its books, and writes what it returns.

use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::definitions::{Error, Handle, Role};
use fe2o3_amqp_types::messaging::DeliveryState;
use fe2o3_amqp_types::performatives::{Attach, Detach, Disposition, End, Transfer};
use serde_bytes::ByteBuf;

use super::{Connection, write_flow};
use crate::codec::{FRAME_TYPE_AMQP, encode_value, hot, write_frame};
use crate::proto::Event;
use crate::proto::link::MAX_LINK_CREDIT;

impl Connection {
    /// Accepts an attach with our reply; for a publisher link also grants credit.
    pub fn attach(&mut self, channel: u16, reply: Attach) {
        let Some(session) = self.sessions.get_mut(&channel) else {
            return;
        };
        session.attach(&reply);
        self.send_performative(channel, &reply);
    }

    /// Grants the initial credit of a publisher link whose sender's delivery-count is known
    /// (none while publishing is paused: it comes when the pause ends).
    pub fn grant_initial_credit(&mut self, channel: u16, handle: u32, sender_delivery_count: u32) {
        let credit = if self.publishing_paused { 0 } else { MAX_LINK_CREDIT };
        if let Some(session) = self.sessions.get_mut(&channel) {
            let flow = session.grant_credit(handle, sender_delivery_count, credit);
            write_flow(&mut self.out, channel, &flow);
        }
    }

    /// Whether publisher links are held without new credit.
    #[must_use]
    pub fn publishing_paused(&self) -> bool {
        self.publishing_paused
    }

    /// Stops or resumes granting credit to publisher links; resuming tops up every publisher
    /// link that is down to half its credit or less.
    pub fn set_publishing_paused(&mut self, paused: bool) {
        self.publishing_paused = paused;
        if paused {
            return;
        }
        for (&channel, session) in &mut self.sessions {
            for flow in session.top_up_publishers() {
                write_flow(&mut self.out, channel, &flow);
            }
        }
    }

    /// Detaches a link from our side (closed), with an optional error.
    pub fn detach(&mut self, channel: u16, handle: u32, err: Option<Error>) {
        let Some(session) = self.sessions.get_mut(&channel) else {
            return;
        };
        session.detach(handle);
        self.send_performative(channel, &Detach { handle: Handle(handle), closed: true, error: err });
    }

    /// Ends a session with an error; frames for it are ignored until the client's `end`.
    pub fn end_session(&mut self, channel: u16, err: Error) {
        if self.sessions.get_mut(&channel).is_some_and(|session| session.end()) {
            self.send_performative(channel, &End { error: Some(err) });
            self.events.push_back(Event::SessionEnded(channel));
        }
    }

    /// Settles a delivery the client sent us (role receiver, settled).
    pub fn settle_incoming(&mut self, channel: u16, delivery_id: u32, state: DeliveryState) {
        self.settle_incoming_range(channel, delivery_id, delivery_id, state);
    }

    /// Settles the deliveries `first..=last` the client sent us with one disposition, as
    /// RabbitMQ settles consecutive delivery ids with the same outcome (`last` left out when
    /// it is `first`).
    pub fn settle_incoming_range(&mut self, channel: u16, first: u32, last: u32, state: DeliveryState) {
        if !self.sessions.contains_key(&channel) {
            return;
        }
        let disposition = Disposition {
            role: Role::Receiver,
            first,
            last: (last != first).then_some(last),
            settled: true,
            state: Some(state),
            batchable: false,
        };
        self.send_disposition(channel, &disposition);
    }

    /// Answers a disposition for deliveries we sent (settling our side): the client's
    /// disposition echoed as settled, with its `last` as given (`None` when it left it out).
    pub fn settle_outgoing(&mut self, channel: u16, first: u32, last: Option<u32>, state: Option<DeliveryState>) {
        if !self.sessions.contains_key(&channel) {
            return;
        }
        let disposition = Disposition { role: Role::Sender, first, last, settled: true, state, batchable: false };
        self.send_disposition(channel, &disposition);
    }

    /// Sends the flow state of a consumer link: after a drain, or as an echo.
    pub fn consumer_flow(
        &mut self,
        channel: u16,
        handle: u32,
        delivery_count: u32,
        credit: u32,
        drain: bool,
        available: u32,
    ) {
        let flow = self
            .sessions
            .get_mut(&channel)
            .and_then(|session| session.consumer_flow(handle, delivery_count, credit, drain, available));
        if let Some(flow) = flow {
            write_flow(&mut self.out, channel, &flow);
        }
    }

    /// Sends a message on a consumer link, split into frames that fit the client's
    /// max-frame-size. Returns the delivery id.
    ///
    /// Runs for every message delivered: the common case, one frame with a short tag, is
    /// encoded by hand straight into the output (or, when the client's window is shut, into
    /// the one buffer that waits for it).
    pub fn send_transfer(
        &mut self,
        channel: u16,
        handle: u32,
        tag: &[u8],
        settled: bool,
        message: &[u8],
    ) -> Option<u32> {
        let max_frame = self.remote_max_frame_size;
        let session = self.sessions.get_mut(&channel)?;
        let delivery_id = session.start_delivery(handle)?;
        if let Some(len) = hot::transfer_len(handle, delivery_id, tag, false)
            && message.len() + len + 8 <= max_frame
        {
            session.send_transfer_with(&mut self.out, 8 + len + message.len(), |out| {
                let head = hot::TransferHead { handle, delivery_id, tag, settled, more: false };
                hot::put_transfer(out, channel, head, message);
            });
            return Some(delivery_id);
        }
        for frame in transfer_frames(channel, handle, delivery_id, tag, settled, message, max_frame) {
            session.send_transfer_frame(&mut self.out, frame);
        }
        Some(delivery_id)
    }

    /// Transfers waiting for the client's session window, summed over sessions.
    #[must_use]
    pub fn blocked_transfers(&self) -> usize {
        self.sessions.values().map(|s| s.blocked_len()).sum()
    }
}

/// The transfer frames of a message the hand encoder cannot write in one frame (a long tag, or
/// a message larger than a frame), encoded with serde_amqp: every frame but the last says
/// `more`, and each one fits `max_frame`.
fn transfer_frames(
    channel: u16,
    handle: u32,
    delivery_id: u32,
    tag: &[u8],
    settled: bool,
    message: &[u8],
    max_frame: usize,
) -> Vec<Bytes> {
    let first = Transfer {
        handle: Handle(handle),
        delivery_id: Some(delivery_id),
        delivery_tag: Some(ByteBuf::from(tag.to_vec())),
        message_format: Some(0),
        settled: Some(settled),
        more: false,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: false,
    };
    let whole = encode_value(&first);
    let mut frames: Vec<Bytes> = Vec::new();
    if message.len() + whole.len() + 8 <= max_frame {
        frames.push(frame_bytes(channel, &whole, message));
    } else {
        let mut more = first;
        more.more = true;
        let head = encode_value(&more);
        // Every frame (the last one carries `whole`, the others `head`) must fit.
        let room = max_frame.saturating_sub(8 + head.len().max(whole.len())).max(1);
        let mut chunks = message.chunks(room).peekable();
        while let Some(chunk) = chunks.next() {
            let performative = if chunks.peek().is_some() { &head } else { &whole };
            frames.push(frame_bytes(channel, performative, chunk));
        }
    }
    frames
}

fn frame_bytes(channel: u16, performative: &[u8], payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(8 + performative.len() + payload.len());
    write_frame(&mut out, FRAME_TYPE_AMQP, channel, performative, payload);
    out.freeze()
}
