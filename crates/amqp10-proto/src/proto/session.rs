//! Sessions: begin/end, transfer numbering and windows, and the link frames inside them.

use std::collections::{HashMap, HashSet, VecDeque};

use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::definitions::{Handle, Role};
use fe2o3_amqp_types::performatives::{Attach, Begin, Detach, Disposition, End, Flow, Transfer};
use serde_bytes::ByteBuf;

use super::connection::Connection;
use super::erlang::{NO_TRACE, unexpected_frame};
use super::errors::error;
use super::link::{Link, LinkRole, Partial};
use super::{Event, Failure};
use crate::codec::hot;

/// RabbitMQ's `?INITIAL_OUTGOING_TRANSFER_ID` (close to wrap-around on purpose).
const INITIAL_OUTGOING_ID: u32 = u32::MAX - 3;
/// RabbitMQ's `?INITIAL_DELIVERY_COUNT`.
pub(super) const INITIAL_DELIVERY_COUNT: u32 = u32::MAX - 4;
/// Transfers a client may send before we widen the window (RabbitMQ's default).
const MAX_INCOMING_WINDOW: u32 = 400;
/// Credit granted to a publisher link (RabbitMQ's `max_link_credit`).
pub(super) const MAX_LINK_CREDIT: u32 = 170;
/// Highest link handle (RabbitMQ's `link_max_per_session` 256, minus one).
const HANDLE_MAX: u32 = 255;

#[derive(Debug)]
pub(super) struct Session {
    pub(super) links: HashMap<u32, Link>,
    /// Handles we detached whose client has not answered with its own detach yet. Until it
    /// does, the handle stays in use (2.6.4): a flow or transfer the client sent before our
    /// detach reached it still names the handle, and is dropped rather than taken for a frame
    /// on an unattached handle, which would end the whole session. (A queue deleted by another
    /// connection right after the client granted credit made exactly that race.)
    detaching: HashSet<u32>,
    next_incoming_id: u32,
    incoming_window: u32,
    next_outgoing_id: u32,
    remote_incoming_window: u32,
    handle_max: u32,
    pub(super) next_delivery_id: u32,
    /// Transfer frames waiting for the client to open its incoming window.
    blocked: VecDeque<Bytes>,
    /// We ended the session with an error and wait for the client's end.
    pub(super) ending: bool,
}

fn transfer_bytes(transfer: &Transfer) -> Vec<u8> {
    crate::codec::encode_value(transfer)
}

impl Session {
    fn new(begin: &Begin) -> Self {
        Self {
            links: HashMap::new(),
            detaching: HashSet::new(),
            next_incoming_id: begin.next_outgoing_id,
            incoming_window: MAX_INCOMING_WINDOW,
            next_outgoing_id: INITIAL_OUTGOING_ID,
            remote_incoming_window: begin.incoming_window,
            handle_max: begin.handle_max.0.min(HANDLE_MAX),
            next_delivery_id: 0,
            blocked: VecDeque::new(),
            ending: false,
        }
    }

    fn session_flow(&self, mut flow: Flow) -> Flow {
        flow.next_incoming_id = Some(self.next_incoming_id);
        flow.incoming_window = self.incoming_window;
        flow.next_outgoing_id = self.next_outgoing_id;
        flow.outgoing_window = u32::MAX;
        flow
    }
}

impl Connection {
    /// A begin. On a channel whose session runs, that session cannot handle it and ends; a
    /// session we ended already is gone for RabbitMQ, so the begin starts a new one.
    pub(super) fn on_begin(&mut self, channel: u16, begin: &Begin, body: &[u8]) -> Result<(), Failure> {
        if self.sessions.get(&channel).is_some_and(|s| !s.ending) {
            return Err(Failure::Session(channel, error("amqp:internal-error", unexpected_frame(body))));
        }
        let session = Session::new(begin);
        let reply = Begin {
            remote_channel: Some(channel),
            next_outgoing_id: session.next_outgoing_id,
            incoming_window: session.incoming_window,
            outgoing_window: u32::MAX,
            handle_max: Handle(session.handle_max),
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        self.sessions.insert(channel, session);
        self.send_performative(channel, &reply);
        self.events.push_back(Event::SessionBegun(channel));
        Ok(())
    }

    pub(super) fn on_end(&mut self, channel: u16) {
        if let Some(session) = self.sessions.remove(&channel) {
            if !session.ending {
                self.send_performative(channel, &End { error: None });
            }
            self.events.push_back(Event::SessionEnded(channel));
        }
    }

    pub(super) fn on_attach(&mut self, channel: u16, attach: Attach) -> Result<(), Failure> {
        let session = self.session(channel)?;
        let handle = attach.handle.0;
        if handle > session.handle_max {
            // Checked by RabbitMQ's session process, so it ends the session, not the connection.
            let text =
                format!("link handle value ({handle}) exceeds maximum link handle value ({})", session.handle_max);
            return Err(Failure::Session(channel, error("amqp:connection:framing-error", text)));
        }
        session.detaching.remove(&handle);
        if session.links.remove(&handle).is_some() {
            // RabbitMQ 4.0.5 does not check for a handle in use: the new link replaces the old.
            self.events.push_back(Event::Detached { channel, handle });
        }
        if attach.unsettled.as_ref().is_some_and(|u| !u.is_empty()) || attach.incomplete_unsettled {
            return Err(Failure::Session(channel, error("amqp:not-implemented", "Link recovery not supported")));
        }
        self.events.push_back(Event::Attach { channel, attach: Box::new(attach) });
        Ok(())
    }

    pub(super) fn on_detach(&mut self, channel: u16, detach: &Detach) -> Result<(), Failure> {
        let session = self.session(channel)?;
        let handle = detach.handle.0;
        if session.links.remove(&handle).is_some() {
            let reply = Detach { handle: detach.handle.clone(), closed: detach.closed, error: None };
            self.send_performative(channel, &reply);
            self.events.push_back(Event::Detached { channel, handle });
        } else {
            // The client's answer to our detach: the handle is free now.
            session.detaching.remove(&handle);
        }
        Ok(())
    }

    pub(super) fn on_flow(&mut self, channel: u16, flow: &Flow) -> Result<(), Failure> {
        let session = self.session(channel)?;
        // 2.5.6: the window the client grants us counts from its next-incoming-id.
        let base = flow.next_incoming_id.unwrap_or(INITIAL_OUTGOING_ID);
        let window = base.wrapping_add(flow.incoming_window).wrapping_sub(session.next_outgoing_id);
        session.remote_incoming_window = if window > flow.incoming_window { 0 } else { window };
        let Some(handle) = flow.handle.as_ref().map(|h| h.0) else {
            self.flush_blocked(channel);
            return Ok(());
        };
        let role = self.session(channel)?.links.get(&handle).map(|l| l.role);
        match role {
            Some(LinkRole::Outgoing) => self.events.push_back(Event::Credit {
                channel,
                handle,
                delivery_count: flow.delivery_count,
                link_credit: flow.link_credit.unwrap_or(0),
                drain: flow.drain,
                echo: flow.echo,
            }),
            Some(LinkRole::Incoming) => {}
            None if self.session(channel)?.detaching.contains(&handle) => {}
            None => {
                return Err(Failure::Session(
                    channel,
                    error("amqp:session:unattached-handle", format!("Unattached link handle: {handle}")),
                ));
            }
        }
        self.flush_blocked(channel);
        Ok(())
    }

    pub(super) fn on_transfer(&mut self, channel: u16, transfer: Transfer, payload: Bytes) -> Result<(), Failure> {
        let max_message_size = self.config.max_message_size;
        let paused = self.publishing_paused;
        let session = self.session(channel)?;
        session.next_incoming_id = session.next_incoming_id.wrapping_add(1);
        session.incoming_window = session.incoming_window.saturating_sub(1);
        let widen = session.incoming_window <= MAX_INCOMING_WINDOW / 2;
        if widen {
            session.incoming_window = MAX_INCOMING_WINDOW;
        }
        let handle = transfer.handle.0;
        let Some(link) = session.links.get_mut(&handle).filter(|l| l.role == LinkRole::Incoming) else {
            // Looked up only for a handle that is not attached, not for every transfer.
            if session.detaching.contains(&handle) {
                return Ok(());
            }
            return Err(Failure::Session(
                channel,
                error("amqp:session:unattached-handle", format!("Unknown link handle: {handle}")),
            ));
        };
        if link.partial.is_none() {
            if link.credit == 0 {
                return Err(Failure::Link(channel, handle, error("amqp:link:transfer-limit-exceeded", "")));
            }
            let Some(delivery_id) = transfer.delivery_id else {
                // RabbitMQ's session process crashes matching the missing id.
                let text = format!("{{badmatch,undefined}}{NO_TRACE}");
                return Err(Failure::Session(channel, error("amqp:internal-error", text)));
            };
            link.partial = Some(Partial {
                delivery_id,
                delivery_tag: Bytes::from(transfer.delivery_tag.map(ByteBuf::into_vec).unwrap_or_default()),
                settled: transfer.settled.unwrap_or(false),
                first: None,
                rest: BytesMut::new(),
                size: 0,
            });
        } else if let (Some(id), Some(partial)) = (transfer.delivery_id, link.partial.as_ref())
            && id != partial.delivery_id
        {
            // RabbitMQ prints the field as its Erlang term and checks it in the session.
            let text = format!(
                "delivery-id of continuation transfer ({{uint,{id}}}) differs from delivery-id on first transfer ({})",
                partial.delivery_id
            );
            return Err(Failure::Session(channel, error("amqp:connection:framing-error", text)));
        }
        let Some(partial) = link.partial.as_mut() else {
            return Ok(());
        };
        partial.push(payload);
        partial.settled |= transfer.settled.unwrap_or(false);
        if partial.size > max_message_size {
            let text =
                format!("message size ({} bytes) > maximum message size ({max_message_size} bytes)", partial.size);
            return Err(Failure::Link(channel, handle, error("amqp:link:message-size-exceeded", text)));
        }
        if transfer.more {
            return Ok(());
        }
        let Some(mut partial) = link.partial.take() else {
            return Ok(());
        };
        link.credit = link.credit.saturating_sub(1);
        link.delivery_count = link.delivery_count.wrapping_add(1);
        let regrant = link.credit <= MAX_LINK_CREDIT / 2 && !paused;
        if regrant {
            link.credit = MAX_LINK_CREDIT;
        }
        let delivery_count = link.delivery_count;
        let payload = partial.take();
        self.events.push_back(Event::Transfer {
            channel,
            handle,
            delivery_id: partial.delivery_id,
            delivery_tag: partial.delivery_tag,
            settled: partial.settled,
            payload,
        });
        if regrant {
            self.link_flow(channel, handle, delivery_count, MAX_LINK_CREDIT, false, None);
        } else if widen {
            self.session_only_flow(channel);
        }
        Ok(())
    }

    /// A disposition. RabbitMQ's session only handles the receiver's; one from a sender (the
    /// client never sends to it unsettled) ends the session.
    pub(super) fn on_disposition(
        &mut self,
        channel: u16,
        disposition: Disposition,
        body: &[u8],
    ) -> Result<(), Failure> {
        self.session(channel)?;
        if disposition.role != Role::Receiver {
            return Err(Failure::Session(channel, error("amqp:internal-error", unexpected_frame(body))));
        }
        self.events.push_back(Event::Disposition {
            channel,
            first: disposition.first,
            last: disposition.last.unwrap_or(disposition.first),
            last_given: disposition.last.is_some(),
            settled: disposition.settled,
            state: disposition.state,
        });
        Ok(())
    }

    pub(super) fn session(&mut self, channel: u16) -> Result<&mut Session, Failure> {
        self.sessions
            .get_mut(&channel)
            .ok_or_else(|| Failure::Connection(error("amqp:internal-error", "no session on this channel")))
    }

    fn session_only_flow(&mut self, channel: u16) {
        if let Some(session) = self.sessions.get(&channel) {
            let flow = session.session_flow(crate::codec::hot::empty_flow());
            self.send_flow(channel, &flow);
        }
    }

    /// Sends a link flow (credit for a publisher, or the state of a consumer link).
    pub(super) fn link_flow(
        &mut self,
        channel: u16,
        handle: u32,
        delivery_count: u32,
        link_credit: u32,
        drain: bool,
        available: Option<u32>,
    ) {
        let Some(session) = self.sessions.get(&channel) else {
            return;
        };
        let mut flow = crate::codec::hot::empty_flow();
        flow.handle = Some(Handle(handle));
        flow.delivery_count = Some(delivery_count);
        flow.link_credit = Some(link_credit);
        flow.drain = drain;
        flow.available = available;
        let flow = session.session_flow(flow);
        self.send_flow(channel, &flow);
    }

    /// Accepts an attach with our reply; for a publisher link also grants credit.
    pub fn attach(&mut self, channel: u16, reply: Attach) {
        let Some(session) = self.sessions.get_mut(&channel) else {
            return;
        };
        let handle = reply.handle.0;
        let role = if reply.role == Role::Receiver { LinkRole::Incoming } else { LinkRole::Outgoing };
        let delivery_count = match role {
            LinkRole::Incoming => INITIAL_DELIVERY_COUNT,
            LinkRole::Outgoing => reply.initial_delivery_count.unwrap_or(INITIAL_DELIVERY_COUNT),
        };
        session.links.insert(handle, Link { role, credit: 0, delivery_count, partial: None });
        self.send_performative(channel, &reply);
        if role == LinkRole::Incoming
            && let Some(link) = self.sessions.get_mut(&channel).and_then(|s| s.links.get_mut(&handle))
        {
            link.credit = MAX_LINK_CREDIT;
        }
    }

    /// Grants the initial credit of a publisher link whose sender's delivery-count is known
    /// (none while publishing is paused: it comes when the pause ends).
    pub fn grant_initial_credit(&mut self, channel: u16, handle: u32, sender_delivery_count: u32) {
        let credit = if self.publishing_paused { 0 } else { MAX_LINK_CREDIT };
        if let Some(link) = self.sessions.get_mut(&channel).and_then(|s| s.links.get_mut(&handle)) {
            link.delivery_count = sender_delivery_count;
            link.credit = credit;
        }
        self.link_flow(channel, handle, sender_delivery_count, credit, false, None);
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
        let mut regrants = Vec::new();
        for (&channel, session) in &mut self.sessions {
            for (&handle, link) in &mut session.links {
                if link.role == LinkRole::Incoming && link.credit <= MAX_LINK_CREDIT / 2 {
                    link.credit = MAX_LINK_CREDIT;
                    regrants.push((channel, handle, link.delivery_count));
                }
            }
        }
        for (channel, handle, delivery_count) in regrants {
            self.link_flow(channel, handle, delivery_count, MAX_LINK_CREDIT, false, None);
        }
    }

    /// Detaches a link from our side (closed), with an optional error.
    pub fn detach(&mut self, channel: u16, handle: u32, err: Option<fe2o3_amqp_types::definitions::Error>) {
        let Some(session) = self.sessions.get_mut(&channel) else {
            return;
        };
        if session.links.remove(&handle).is_some() {
            session.detaching.insert(handle);
        }
        self.send_performative(channel, &Detach { handle: Handle(handle), closed: true, error: err });
    }

    /// Ends a session with an error; frames for it are ignored until the client's `end`.
    pub fn end_session(&mut self, channel: u16, err: fe2o3_amqp_types::definitions::Error) {
        let Some(session) = self.sessions.get_mut(&channel) else {
            return;
        };
        if session.ending {
            return;
        }
        session.ending = true;
        session.links.clear();
        self.send_performative(channel, &End { error: Some(err) });
        self.events.push_back(Event::SessionEnded(channel));
    }

    /// Settles a delivery the client sent us (role receiver, settled).
    pub fn settle_incoming(
        &mut self,
        channel: u16,
        delivery_id: u32,
        state: fe2o3_amqp_types::messaging::DeliveryState,
    ) {
        self.settle_incoming_range(channel, delivery_id, delivery_id, state);
    }

    /// Settles the deliveries `first..=last` the client sent us with one disposition, as
    /// RabbitMQ settles consecutive delivery ids with the same outcome (`last` left out when
    /// it is `first`).
    pub fn settle_incoming_range(
        &mut self,
        channel: u16,
        first: u32,
        last: u32,
        state: fe2o3_amqp_types::messaging::DeliveryState,
    ) {
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
    pub fn settle_outgoing(
        &mut self,
        channel: u16,
        first: u32,
        last: Option<u32>,
        state: Option<fe2o3_amqp_types::messaging::DeliveryState>,
    ) {
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
        if let Some(link) = self.sessions.get_mut(&channel).and_then(|s| s.links.get_mut(&handle)) {
            link.delivery_count = delivery_count;
        } else {
            return;
        }
        self.link_flow(channel, handle, delivery_count, credit, drain, Some(available));
    }

    /// Sends a message on a consumer link, split into frames that fit the client's
    /// max-frame-size. Returns the delivery id.
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
        let link = session.links.get_mut(&handle)?;
        link.delivery_count = link.delivery_count.wrapping_add(1);
        let delivery_id = session.next_delivery_id;
        session.next_delivery_id = session.next_delivery_id.wrapping_add(1);
        // The common case, one frame with a short tag, is written straight into the output.
        if let Some(len) = hot::transfer_len(handle, delivery_id, tag, false)
            && message.len() + len + 8 <= max_frame
        {
            let direct = session.remote_incoming_window > 0 && session.blocked.is_empty();
            if direct {
                session.remote_incoming_window -= 1;
                session.next_outgoing_id = session.next_outgoing_id.wrapping_add(1);
                hot::put_transfer(&mut self.out, channel, handle, delivery_id, tag, settled, false, message);
            } else {
                let mut frame = BytesMut::with_capacity(8 + len + message.len());
                hot::put_transfer(&mut frame, channel, handle, delivery_id, tag, settled, false, message);
                session.blocked.push_back(frame.freeze());
            }
            return Some(delivery_id);
        }
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
        let whole = transfer_bytes(&first);
        let mut frames: Vec<Bytes> = Vec::new();
        if message.len() + whole.len() + 8 <= max_frame {
            frames.push(frame_bytes(channel, &whole, message));
        } else {
            let mut more = first;
            more.more = true;
            let head = transfer_bytes(&more);
            // Every frame (the last one carries `whole`, the others `head`) must fit.
            let room = max_frame.saturating_sub(8 + head.len().max(whole.len())).max(1);
            let mut chunks = message.chunks(room).peekable();
            while let Some(chunk) = chunks.next() {
                let performative = if chunks.peek().is_some() { &head } else { &whole };
                frames.push(frame_bytes(channel, performative, chunk));
            }
        }
        for frame in frames {
            self.push_transfer_frame(channel, frame);
        }
        Some(delivery_id)
    }

    fn push_transfer_frame(&mut self, channel: u16, frame: Bytes) {
        let Some(session) = self.sessions.get_mut(&channel) else {
            return;
        };
        if session.remote_incoming_window == 0 || !session.blocked.is_empty() {
            session.blocked.push_back(frame);
            return;
        }
        session.remote_incoming_window -= 1;
        session.next_outgoing_id = session.next_outgoing_id.wrapping_add(1);
        self.out.extend_from_slice(&frame);
    }

    fn flush_blocked(&mut self, channel: u16) {
        let Some(session) = self.sessions.get_mut(&channel) else {
            return;
        };
        while session.remote_incoming_window > 0 {
            let Some(frame) = session.blocked.pop_front() else {
                break;
            };
            session.remote_incoming_window -= 1;
            session.next_outgoing_id = session.next_outgoing_id.wrapping_add(1);
            self.out.extend_from_slice(&frame);
        }
    }

    /// Transfers waiting for the client's session window, summed over sessions.
    #[must_use]
    pub fn blocked_transfers(&self) -> usize {
        self.sessions.values().map(|s| s.blocked.len()).sum()
    }
}

fn frame_bytes(channel: u16, performative: &[u8], payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(8 + performative.len() + payload.len());
    crate::codec::write_frame(&mut out, crate::codec::FRAME_TYPE_AMQP, channel, performative, payload);
    out.freeze()
}
