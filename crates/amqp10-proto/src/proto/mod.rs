//! The sans-IO AMQP 1.0 connection.
//!
//! [`Connection`] owns everything the protocol defines: the SASL exchange and protocol headers,
//! open/close, sessions (begin/end, transfer numbering and windows), link bookkeeping (handles,
//! delivery counts, credit granted to client senders, multi-frame transfers), heartbeats and
//! the connection and session errors. It emits [`Event`]s for what only the broker can decide —
//! whether an address exists, where a message goes, when a delivery is settled — and offers
//! methods to answer (attach, grant credit, send transfers and dispositions, detach, end).
//! Like the 0.9.1 engine it is driven with bytes and time and never touches a socket.

mod connection;
mod erlang;
mod errors;
mod link;
mod session;

use bytes::Bytes;
use fe2o3_amqp_types::definitions::Error;
use fe2o3_amqp_types::messaging::DeliveryState;
use fe2o3_amqp_types::performatives::Attach;

pub use connection::{Config, Connection, State};
pub use errors::error;
pub use link::LinkRole;

/// What the connection needs from the broker during SASL and open.
pub trait Host {
    /// Checks a PLAIN or AMQPLAIN login (`mechanism`).
    fn authenticate(&mut self, mechanism: &str, username: &str, password: &str) -> bool;
    /// Logs in with SASL EXTERNAL (offered only when [`Config::sasl_external`] is set): the
    /// user the verified client certificate names, or `None` when refused.
    fn authenticate_external(&mut self) -> Option<String> {
        None
    }
    /// Whether ANONYMOUS is accepted (and as which user).
    fn anonymous_user(&mut self) -> Option<String>;
    /// Opens a vhost for the user. On refusal returns the description for
    /// `amqp:unauthorized-access`.
    ///
    /// # Errors
    /// The refusal's description.
    fn open_vhost(&mut self, username: &str, vhost: &str) -> Result<(), String>;
}

/// Something the broker must act on.
#[derive(Debug)]
pub enum Event {
    /// SASL and open succeeded.
    Opened {
        /// Authenticated user.
        username: String,
        /// Virtual host.
        vhost: String,
        /// The client's container id (its `open`).
        container_id: String,
        /// The SASL mechanism it logged in with.
        mechanism: String,
    },
    /// A session began (begin already answered).
    SessionBegun(u16),
    /// A session ended (by the client, or by us with an error): forget its links.
    SessionEnded(u16),
    /// The client wants to attach a link. Answer with [`Connection::attach`] or refuse with
    /// [`Connection::end_session`] (or attach and then [`Connection::detach`] with an error).
    Attach {
        /// Session channel.
        channel: u16,
        /// The client's attach.
        attach: Box<Attach>,
    },
    /// The client detached a link (the reply detach was already sent).
    Detached {
        /// Session channel.
        channel: u16,
        /// Link handle.
        handle: u32,
    },
    /// Flow for a link on which we send (the client is the receiver): its new credit.
    Credit {
        /// Session channel.
        channel: u16,
        /// Link handle.
        handle: u32,
        /// The receiver's delivery-count (None: it does not know ours yet).
        delivery_count: Option<u32>,
        /// Credit the receiver grants relative to its delivery-count.
        link_credit: u32,
        /// Drain requested.
        drain: bool,
        /// Echo requested.
        echo: bool,
    },
    /// A complete message arrived on a link on which the client sends.
    Transfer {
        /// Session channel.
        channel: u16,
        /// Link handle.
        handle: u32,
        /// Delivery id (for the disposition).
        delivery_id: u32,
        /// Delivery tag.
        delivery_tag: Bytes,
        /// Already settled by the sender (pre-settled, at most once).
        settled: bool,
        /// The message bytes (sections), zero-copy when it arrived in one frame.
        payload: Bytes,
    },
    /// The client settled or updated deliveries we sent.
    Disposition {
        /// Session channel.
        channel: u16,
        /// First delivery id.
        first: u32,
        /// Last delivery id (inclusive).
        last: u32,
        /// Whether the client gave `last` (RabbitMQ echoes the disposition as it came).
        last_given: bool,
        /// Settled by the client.
        settled: bool,
        /// Outcome.
        state: Option<DeliveryState>,
    },
    /// The connection is finished: flush and drop the socket.
    Closed,
}

/// An error to report, as `(error, where)`.
#[derive(Clone, Debug, PartialEq)]
pub enum Failure {
    /// Close the connection.
    Connection(Error),
    /// End the session on this channel.
    Session(u16, Error),
    /// Detach this link.
    Link(u16, u32, Error),
}

#[cfg(test)]
mod tests;
