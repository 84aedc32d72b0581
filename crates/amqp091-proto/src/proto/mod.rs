//! The sans-IO AMQP 0.9.1 connection.
//!
//! [`Connection`] is a pure state machine in the style of quinn-proto: the driver feeds it the
//! bytes it read ([`Connection::handle_input`]) and the current time
//! ([`Connection::handle_timeout`]), and takes from it the bytes to write
//! ([`Connection::output`]), the next deadline ([`Connection::poll_timeout`]) and the
//! [`Event`]s the broker must act on ([`Connection::poll_event`]). Everything defined by the
//! protocol itself lives here: version negotiation, the start/tune/open handshake,
//! authentication mechanisms, heartbeats, channel open/close, content assembly and the
//! connection-level errors (501–505, 530). What a channel method *means* is the broker's
//! business (see `crate::server`).

mod channel;
mod channel_frames;
mod channel_zero;
mod connection;
mod handshake;
mod reply;

use amq_protocol::protocol::AMQPClass;
use bytes::Bytes;

pub use connection::{Connection, ConnectionConfig, ConnectionState, ContentProperties, FRAME_MIN_SIZE};
pub use handshake::{AMQP_0_9_1, AMQP_1_0_SASL, Negotiation, negotiate};
pub use reply::{ReplyCode, reply_text};

use crate::codec::{DecodedProperties, Publish};

/// What the connection needs from the broker: logins, vhosts, and the user limits checked
/// before a channel is opened.
pub trait Host {
    /// Checks a PLAIN or AMQPLAIN login (`mechanism`); true when accepted.
    fn authenticate(&mut self, mechanism: &str, username: &str, password: &str) -> bool;
    /// Logs in with SASL EXTERNAL (offered only when [`ConnectionConfig::sasl_external`] is
    /// set): the user the verified client certificate names, or `None` when refused.
    fn authenticate_external(&mut self) -> Option<String> {
        None
    }
    /// Logs in with SASL ANONYMOUS (offered only when [`ConnectionConfig::sasl_anonymous`] is
    /// set): the user it logs in as, or `None` when refused.
    fn authenticate_anonymous(&mut self) -> Option<String> {
        None
    }
    /// Opens a virtual host for the authenticated user. On refusal returns the NOT_ALLOWED
    /// explanation (e.g. `vhost x not found`).
    ///
    /// # Errors
    /// The explanation text for the 530 reply.
    fn open_vhost(&mut self, username: &str, vhost: &str) -> Result<(), String>;

    /// Asked before `channel` is opened (RabbitMQ checks the user's `max-channels` there, so a
    /// refused channel never gets its open-ok). Accepts by default.
    ///
    /// # Errors
    /// The explanation of the 530 NOT_ALLOWED that closes the connection.
    fn open_channel(&mut self, channel: u16) -> Result<(), String> {
        let _ = channel;
        Ok(())
    }
}

/// The capabilities a client advertised in `connection.start-ok`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientCapabilities {
    /// Wants `basic.cancel` when a queue it consumes from is deleted.
    pub consumer_cancel_notify: bool,
    /// Wants `connection.close` (not a bare socket close) on a failed login.
    pub authentication_failure_close: bool,
    /// Understands `connection.blocked` / `connection.unblocked`.
    pub connection_blocked: bool,
}

/// A complete `basic.publish` with its content.
#[derive(Clone, Debug)]
pub struct PublishCommand {
    /// The method.
    pub method: Publish,
    /// The property list as received (for pass-through to 0.9.1 consumers).
    pub raw_properties: Bytes,
    /// The decoded properties.
    pub properties: DecodedProperties,
    /// The body (a slice of the read buffer when it arrived in one frame).
    pub body: Bytes,
}

/// Something the broker must act on.
#[derive(Clone, Debug)]
pub enum Event {
    /// The handshake finished; the connection is open on this vhost for this user.
    Opened {
        /// User name.
        username: String,
        /// Virtual host.
        vhost: String,
    },
    /// A channel was opened (open-ok already sent).
    ChannelOpened(u16),
    /// A method for the broker on an open channel.
    Method(u16, Box<AMQPClass>),
    /// A publish with its content.
    Publish(u16, Box<PublishCommand>),
    /// A publish whose body exceeds the maximum message size (its frames were discarded).
    PublishTooLarge {
        /// Channel.
        channel: u16,
        /// Declared body size.
        size: u64,
    },
    /// The client sent `channel.close`: release the channel's consumers and deliveries, send
    /// the confirms owed for its publishes, then answer with
    /// [`Connection::close_ok_channel`]. Its frames are ignored meanwhile.
    ChannelClosing(u16),
    /// A channel ended (the client acknowledged our close, or the connection closed): release
    /// its resources.
    ChannelClosed(u16),
    /// The connection is finished; flush the output and close the socket.
    Closed,
}

#[cfg(test)]
mod tests;
