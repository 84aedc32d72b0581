//! One session: its transfer numbering and windows (2.5.6), its delivery ids, the transfer
//! frames waiting for the client's window, and the links attached in it.
//!
//! The session never writes to the connection: its methods return the performatives and
//! events the connection must emit, and the failures it must act on. Only transfer frames,
//! which the session may hold as bytes until the client's window opens, go straight into the
//! output buffer the connection lends it, so that sending a message allocates nothing.

use std::collections::{HashSet, VecDeque};

use foldhash::{HashMap, HashMapExt};

use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::definitions::Handle;
use fe2o3_amqp_types::performatives::{Attach, Begin, Detach, Flow, Transfer};

use super::errors::error;
use super::link::{Link, LinkRole, MAX_LINK_CREDIT, Refusal};
use super::{Event, Failure};
use crate::codec::hot;

/// RabbitMQ's `?INITIAL_OUTGOING_TRANSFER_ID` (close to wrap-around on purpose).
const INITIAL_OUTGOING_ID: u32 = u32::MAX - 3;
/// Transfers a client may send before we widen the window (RabbitMQ's default).
const MAX_INCOMING_WINDOW: u32 = 400;
/// Highest link handle (RabbitMQ's `link_max_per_session` 256, minus one).
const HANDLE_MAX: u32 = 255;

/// A message a transfer completed: the event for the broker, and the flow to send with it
/// (new link credit, or a wider session window), if any.
pub(super) type Received = (Event, Option<Flow>);

/// A begun session.
#[derive(Debug)]
pub(super) struct Session {
    channel: u16,
    /// By handle (at most `handle-max`, so foldhash: looked up for every transfer).
    links: HashMap<u32, Link>,
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
    next_delivery_id: u32,
    /// Transfer frames waiting for the client to open its incoming window.
    blocked: VecDeque<Bytes>,
    /// We ended the session with an error and wait for the client's end.
    ending: bool,
}

impl Session {
    /// The session the client's `begin` on `channel` starts.
    pub(super) fn new(channel: u16, begin: &Begin) -> Self {
        Self {
            channel,
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

    /// Our answering `begin`.
    pub(super) fn begin_reply(&self) -> Begin {
        Begin {
            remote_channel: Some(self.channel),
            next_outgoing_id: self.next_outgoing_id,
            incoming_window: self.incoming_window,
            outgoing_window: u32::MAX,
            handle_max: Handle(self.handle_max),
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        }
    }

    /// Whether we ended the session and only wait for the client's `end`.
    pub(super) fn is_ending(&self) -> bool {
        self.ending
    }

    /// Ends the session from our side: its links are gone. Returns false when it was ending
    /// already (nothing to send).
    pub(super) fn end(&mut self) -> bool {
        if self.ending {
            return false;
        }
        self.ending = true;
        self.links.clear();
        true
    }

    /// The client attaches `handle`. Returns whether a link on that handle was replaced
    /// (RabbitMQ 4.0.5 does not check for a handle in use: the new link replaces the old).
    ///
    /// # Errors
    /// A handle above handle-max ends the session: RabbitMQ's session process checks it, so
    /// the connection survives.
    pub(super) fn on_attach(&mut self, handle: u32) -> Result<bool, Failure> {
        if handle > self.handle_max {
            let text = format!("link handle value ({handle}) exceeds maximum link handle value ({})", self.handle_max);
            return Err(Failure::Session(self.channel, error("amqp:connection:framing-error", text)));
        }
        self.detaching.remove(&handle);
        Ok(self.links.remove(&handle).is_some())
    }

    /// The client detaches. Returns the detach to answer with when the link was attached;
    /// `None` when this is the client's answer to our detach (the handle is free now).
    pub(super) fn on_detach(&mut self, detach: &Detach) -> Option<Detach> {
        let handle = detach.handle.0;
        if self.links.remove(&handle).is_some() {
            return Some(Detach { handle: detach.handle.clone(), closed: detach.closed, error: None });
        }
        self.detaching.remove(&handle);
        None
    }

    /// A flow from the client: takes the window it grants us (blocked transfers may go once
    /// the connection calls [`Self::release_blocked`]), and returns the credit event for a
    /// consumer link.
    ///
    /// # Errors
    /// A flow for a handle never attached (or detached by the client) ends the session.
    pub(super) fn on_flow(&mut self, flow: &Flow) -> Result<Option<Event>, Failure> {
        // 2.5.6: the window the client grants us counts from its next-incoming-id, in
        // serial-number arithmetic (transfer ids wrap at 2^32); none when that is negative.
        let base = flow.next_incoming_id.unwrap_or(INITIAL_OUTGOING_ID);
        self.remote_incoming_window = charon_model::link_credit_snd(base, flow.incoming_window, self.next_outgoing_id);
        let Some(handle) = flow.handle.as_ref().map(|h| h.0) else {
            return Ok(None);
        };
        match self.links.get(&handle).map(Link::role) {
            Some(LinkRole::Outgoing) => Ok(Some(Event::Credit {
                channel: self.channel,
                handle,
                delivery_count: flow.delivery_count,
                link_credit: flow.link_credit.unwrap_or(0),
                drain: flow.drain,
                echo: flow.echo,
            })),
            Some(LinkRole::Incoming) => Ok(None),
            None if self.detaching.contains(&handle) => Ok(None),
            None => Err(Failure::Session(
                self.channel,
                error("amqp:session:unattached-handle", format!("Unattached link handle: {handle}")),
            )),
        }
    }

    /// A transfer frame from the client. Every frame uses up one transfer of our incoming
    /// window, which is widened back to [`MAX_INCOMING_WINDOW`] once half of it is used; the
    /// wider window is announced with the next completed message unless a link flow (which
    /// carries the session's fields too) goes out with it. Returns the completed message,
    /// `None` while more frames follow or when the handle is being detached.
    ///
    /// # Errors
    /// What the link refuses (see [`Link::on_transfer`]), and a transfer on a handle that is
    /// not an attached publisher link, which ends the session.
    pub(super) fn on_transfer(
        &mut self,
        transfer: Transfer,
        payload: Bytes,
        max_message_size: usize,
        paused: bool,
    ) -> Result<Option<Received>, Failure> {
        self.next_incoming_id = self.next_incoming_id.wrapping_add(1);
        self.incoming_window = self.incoming_window.saturating_sub(1);
        let widen = self.incoming_window <= MAX_INCOMING_WINDOW / 2;
        if widen {
            self.incoming_window = MAX_INCOMING_WINDOW;
        }
        let channel = self.channel;
        let handle = transfer.handle.0;
        let Some(link) = self.links.get_mut(&handle).filter(|l| l.role() == LinkRole::Incoming) else {
            // Looked up only for a handle that is not attached, not for every transfer.
            if self.detaching.contains(&handle) {
                return Ok(None);
            }
            return Err(Failure::Session(
                channel,
                error("amqp:session:unattached-handle", format!("Unknown link handle: {handle}")),
            ));
        };
        let arrival = match link.on_transfer(transfer, payload, max_message_size, paused) {
            Ok(Some(arrival)) => arrival,
            Ok(None) => return Ok(None),
            Err(Refusal::Link(err)) => return Err(Failure::Link(channel, handle, err)),
            Err(Refusal::Session(err)) => return Err(Failure::Session(channel, err)),
        };
        let flow = match arrival.regranted {
            Some(delivery_count) => Some(self.link_flow(handle, delivery_count, MAX_LINK_CREDIT, false, None)),
            None => widen.then(|| self.flow()),
        };
        let event = Event::Transfer {
            channel,
            handle,
            delivery_id: arrival.delivery_id,
            delivery_tag: arrival.delivery_tag,
            settled: arrival.settled,
            payload: arrival.payload,
        };
        Ok(Some((event, flow)))
    }

    /// The broker accepted an attach with `reply`: the link exists from now on.
    pub(super) fn attach(&mut self, reply: &Attach) {
        self.links.insert(reply.handle.0, Link::attached(reply));
    }

    /// We detach `handle`: the handle stays in use until the client answers.
    pub(super) fn detach(&mut self, handle: u32) {
        if self.links.remove(&handle).is_some() {
            self.detaching.insert(handle);
        }
    }

    /// Grants `credit` to the publisher link on `handle` whose sender counts from
    /// `sender_delivery_count`; returns the flow announcing it.
    pub(super) fn grant_credit(&mut self, handle: u32, sender_delivery_count: u32, credit: u32) -> Flow {
        if let Some(link) = self.links.get_mut(&handle) {
            link.grant(sender_delivery_count, credit);
        }
        self.link_flow(handle, sender_delivery_count, credit, false, None)
    }

    /// Publishing resumed: tops up every publisher link down to half its credit or less, and
    /// returns the flows announcing the new credit.
    pub(super) fn top_up_publishers(&mut self) -> Vec<Flow> {
        let session = self.flow();
        self.links
            .iter_mut()
            .filter_map(|(&handle, link)| {
                let delivery_count = link.top_up()?;
                Some(with_link(session.clone(), handle, delivery_count, MAX_LINK_CREDIT, false, None))
            })
            .collect()
    }

    /// The state of the consumer link on `handle`, as the broker tracks it, for a flow after
    /// a drain or as an echo. `None` when the link is not attached.
    pub(super) fn consumer_flow(
        &mut self,
        handle: u32,
        delivery_count: u32,
        credit: u32,
        drain: bool,
        available: u32,
    ) -> Option<Flow> {
        self.links.get_mut(&handle)?.set_delivery_count(delivery_count);
        Some(self.link_flow(handle, delivery_count, credit, drain, Some(available)))
    }

    /// Starts a delivery on the consumer link on `handle`: counts it on the link and returns
    /// its delivery id (`None` when the link is not attached).
    pub(super) fn start_delivery(&mut self, handle: u32) -> Option<u32> {
        self.links.get_mut(&handle)?.count_sent();
        let delivery_id = self.next_delivery_id;
        self.next_delivery_id = self.next_delivery_id.wrapping_add(1);
        Some(delivery_id)
    }

    /// Sends one transfer frame of at most `len` bytes, which `write` appends to the buffer it
    /// is given: straight into `out` when the client's window allows it, otherwise into a
    /// frame of its own that waits for the window.
    pub(super) fn send_transfer_with(&mut self, out: &mut BytesMut, len: usize, write: impl FnOnce(&mut BytesMut)) {
        if self.take_window() {
            write(out);
        } else {
            let mut frame = BytesMut::with_capacity(len);
            write(&mut frame);
            self.blocked.push_back(frame.freeze());
        }
    }

    /// Sends an encoded transfer frame into `out`, or keeps it until the window opens.
    pub(super) fn send_transfer_frame(&mut self, out: &mut BytesMut, frame: Bytes) {
        if self.take_window() {
            out.extend_from_slice(&frame);
        } else {
            self.blocked.push_back(frame);
        }
    }

    /// Writes into `out` the blocked transfer frames the client's window now allows.
    pub(super) fn release_blocked(&mut self, out: &mut BytesMut) {
        while self.remote_incoming_window > 0 {
            let Some(frame) = self.blocked.pop_front() else {
                break;
            };
            self.remote_incoming_window -= 1;
            self.next_outgoing_id = self.next_outgoing_id.wrapping_add(1);
            out.extend_from_slice(&frame);
        }
    }

    /// Transfer frames waiting for the client's window.
    pub(super) fn blocked_len(&self) -> usize {
        self.blocked.len()
    }

    /// Takes one transfer of the client's window for a frame that goes out now; false when
    /// the window is shut or earlier frames wait (frames keep their order).
    fn take_window(&mut self) -> bool {
        if self.remote_incoming_window == 0 || !self.blocked.is_empty() {
            return false;
        }
        self.remote_incoming_window -= 1;
        self.next_outgoing_id = self.next_outgoing_id.wrapping_add(1);
        true
    }

    /// A flow with the session's fields only (a wider incoming window).
    fn flow(&self) -> Flow {
        let mut flow = hot::empty_flow();
        flow.next_incoming_id = Some(self.next_incoming_id);
        flow.incoming_window = self.incoming_window;
        flow.next_outgoing_id = self.next_outgoing_id;
        flow.outgoing_window = u32::MAX;
        flow
    }

    /// A flow for a link (credit for a publisher, or the state of a consumer link), with the
    /// session's fields.
    fn link_flow(&self, handle: u32, delivery_count: u32, credit: u32, drain: bool, available: Option<u32>) -> Flow {
        with_link(self.flow(), handle, delivery_count, credit, drain, available)
    }
}

/// A session flow ([`Session::flow`]) with a link's fields filled in.
fn with_link(
    mut flow: Flow,
    handle: u32,
    delivery_count: u32,
    credit: u32,
    drain: bool,
    available: Option<u32>,
) -> Flow {
    flow.handle = Some(Handle(handle));
    flow.delivery_count = Some(delivery_count);
    flow.link_credit = Some(credit);
    flow.drain = drain;
    flow.available = available;
    flow
}

#[cfg(test)]
mod tests;
