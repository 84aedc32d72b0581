//! The frames a client sends on a session (begin, end, attach, detach, flow, transfer,
//! disposition): each goes to its [`Session`], and what the session returns is written out or
//! queued for the broker.

use foldhash::HashMap;

use bytes::Bytes;
use fe2o3_amqp_types::definitions::Role;
use fe2o3_amqp_types::performatives::{Attach, Begin, Detach, Disposition, End, Flow, Transfer};

use super::Connection;
use crate::proto::erlang::unexpected_frame;
use crate::proto::errors::error;
use crate::proto::session::Session;
use crate::proto::{Event, Failure};

impl Connection {
    /// A begin. On a channel whose session runs, that session cannot handle it and ends; a
    /// session we ended already is gone for RabbitMQ, so the begin starts a new one.
    pub(super) fn on_begin(&mut self, channel: u16, begin: &Begin, body: &[u8]) -> Result<(), Failure> {
        if self.sessions.get(&channel).is_some_and(|s| !s.is_ending()) {
            return Err(Failure::Session(channel, error("amqp:internal-error", unexpected_frame(body))));
        }
        let session = Session::new(channel, begin);
        let reply = session.begin_reply();
        self.sessions.insert(channel, session);
        self.send_performative(channel, &reply);
        self.events.push_back(Event::SessionBegun(channel));
        Ok(())
    }

    pub(super) fn on_end(&mut self, channel: u16) {
        if let Some(session) = self.sessions.remove(&channel) {
            if !session.is_ending() {
                self.send_performative(channel, &End { error: None });
            }
            self.events.push_back(Event::SessionEnded(channel));
        }
    }

    pub(super) fn on_attach(&mut self, channel: u16, attach: Attach) -> Result<(), Failure> {
        let handle = attach.handle.0;
        if session(&mut self.sessions, channel)?.on_attach(handle)? {
            self.events.push_back(Event::Detached { channel, handle });
        }
        if attach.unsettled.as_ref().is_some_and(|u| !u.is_empty()) || attach.incomplete_unsettled {
            return Err(Failure::Session(channel, error("amqp:not-implemented", "Link recovery not supported")));
        }
        self.events.push_back(Event::Attach { channel, attach: Box::new(attach) });
        Ok(())
    }

    pub(super) fn on_detach(&mut self, channel: u16, detach: &Detach) -> Result<(), Failure> {
        if let Some(reply) = session(&mut self.sessions, channel)?.on_detach(detach) {
            self.send_performative(channel, &reply);
            self.events.push_back(Event::Detached { channel, handle: detach.handle.0 });
        }
        Ok(())
    }

    pub(super) fn on_flow(&mut self, channel: u16, flow: &Flow) -> Result<(), Failure> {
        let session = session(&mut self.sessions, channel)?;
        if let Some(credit) = session.on_flow(flow)? {
            self.events.push_back(credit);
        }
        session.release_blocked(&mut self.out);
        Ok(())
    }

    /// A transfer; runs for every message a client publishes, and allocates nothing for a
    /// message that comes in one frame.
    pub(super) fn on_transfer(&mut self, channel: u16, transfer: Transfer, payload: Bytes) -> Result<(), Failure> {
        let session = session(&mut self.sessions, channel)?;
        let received = session.on_transfer(transfer, payload, self.config.max_message_size, self.publishing_paused)?;
        if let Some((event, flow)) = received {
            self.events.push_back(event);
            if let Some(flow) = flow {
                self.send_flow(channel, &flow);
            }
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
        session(&mut self.sessions, channel)?;
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
}

/// The session on `channel`, borrowed from the map alone so that the connection's output and
/// events stay free for what the session returns.
fn session(sessions: &mut HashMap<u16, Session>, channel: u16) -> Result<&mut Session, Failure> {
    sessions
        .get_mut(&channel)
        .ok_or_else(|| Failure::Connection(error("amqp:internal-error", "no session on this channel")))
}
