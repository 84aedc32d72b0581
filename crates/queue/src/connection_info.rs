//! What the management API shows of a connection: the details fixed at its opening
//! ([`ConnectionInfo`], kept in the registry) and its state now ([`ConnectionReport`], which
//! the connection's own task writes when asked, so nothing is updated per message).

use std::net::{IpAddr, SocketAddr};

use charon_model::Table;

/// The details of a connection that do not change once it is open.
#[derive(Clone, Debug, PartialEq)]
pub struct ConnectionInfo {
    /// `"AMQP 0-9-1"` or `"AMQP 1-0"`.
    pub protocol: &'static str,
    /// Who logged in.
    pub user: String,
    /// The vhost it opened.
    pub vhost: String,
    /// The SASL mechanism (`PLAIN`, `AMQPLAIN`, `EXTERNAL`, `ANONYMOUS`).
    pub auth_mechanism: String,
    /// The broker's end.
    pub local: SocketAddr,
    /// The client's end.
    pub peer: SocketAddr,
    /// Whether it came over TLS.
    pub ssl: bool,
    /// When it was accepted, ms since the epoch.
    pub connected_at: i64,
    /// The client's properties (0.9.1 `client-properties`, 1.0 `open` properties).
    pub client_properties: Table,
    /// The negotiated heartbeat (0.9.1, seconds) or idle timeout (1.0, seconds).
    pub timeout: u32,
    /// The negotiated maximum frame size.
    pub frame_max: u32,
    /// The negotiated maximum channel (0.9.1) or session (1.0) number.
    pub channel_max: u32,
}

impl ConnectionInfo {
    /// RabbitMQ's name for the connection: `"127.0.0.1:51234 -> 127.0.0.1:5672"`, the
    /// addresses as `rabbit_misc:ntoa` writes them (IPv4-mapped IPv6 as IPv4, IPv6 unbracketed).
    #[must_use]
    pub fn name(&self) -> String {
        format!("{}:{} -> {}:{}", host(self.peer.ip()), self.peer.port(), host(self.local.ip()), self.local.port())
    }

    /// `client_properties.connection_name`, which RabbitMQ reports as `user_provided_name`.
    #[must_use]
    pub fn user_provided_name(&self) -> Option<&str> {
        self.client_properties.get("connection_name").and_then(|v| v.as_str())
    }
}

/// An address as RabbitMQ writes it (`rabbit_misc:ntoa`).
#[must_use]
pub fn host(ip: IpAddr) -> String {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or_else(|| v6.to_string(), |v4| v4.to_string()),
        IpAddr::V4(v4) => v4.to_string(),
    }
}

/// A connection's state, as its task reports it on demand.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConnectionReport {
    /// RabbitMQ's connection state: `running`, `blocked` (an alarm holds its publishes),
    /// `flow` (the store holds them), `closing`.
    pub state: &'static str,
    /// Its channels (0.9.1) or sessions (1.0).
    pub channels: Vec<ChannelReport>,
}

/// One 0.9.1 channel (or 1.0 session) of a [`ConnectionReport`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChannelReport {
    /// Channel number.
    pub number: u32,
    /// `basic.qos` prefetch for new consumers (`global=false`).
    pub prefetch_count: u32,
    /// `basic.qos global=true` limit shared by the channel's consumers.
    pub global_prefetch_count: u32,
    /// In confirm mode.
    pub confirm: bool,
    /// In a transaction (`tx.select`).
    pub transactional: bool,
    /// Consumers on it.
    pub consumer_count: u32,
    /// Deliveries awaiting the client's ack.
    pub messages_unacknowledged: u64,
    /// Publishes awaiting a confirm.
    pub messages_unconfirmed: u64,
    /// Publishes waiting for `tx.commit`.
    pub messages_uncommitted: u64,
    /// Acks waiting for `tx.commit`.
    pub acks_uncommitted: u64,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn info(peer: &str, local: &str) -> ConnectionInfo {
        ConnectionInfo {
            protocol: "AMQP 0-9-1",
            user: "guest".into(),
            vhost: "/".into(),
            auth_mechanism: "PLAIN".into(),
            local: local.parse().unwrap(),
            peer: peer.parse().unwrap(),
            ssl: false,
            connected_at: 0,
            client_properties: Table::new(),
            timeout: 60,
            frame_max: 131_072,
            channel_max: 2047,
        }
    }

    #[test]
    fn names_are_rabbitmqs() {
        assert_eq!(info("127.0.0.1:51234", "127.0.0.1:5672").name(), "127.0.0.1:51234 -> 127.0.0.1:5672");
        assert_eq!(info("[::ffff:10.0.0.1]:4000", "[::1]:5672").name(), "10.0.0.1:4000 -> ::1:5672");
    }
}
