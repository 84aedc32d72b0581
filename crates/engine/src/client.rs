//! What every protocol's connection keeps of its client: its name and inbox, who logged in,
//! the vhost it opened, the slot that counts it against the connection limits, its
//! registration (by which the broker closes it when its user or vhost is deleted), its
//! publishers and its share of RabbitMQ's message counters. Logging in, opening the vhost,
//! counting and the closing log line are the same for AMQP 0.9.1 and 1.0; only how each
//! protocol asks and answers differs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::access::User;
use crate::broker::Broker;
use crate::connection_info::ConnectionInfo;
use crate::connections::Registration;
use crate::error::EngineError;
use crate::limits::ConnectionSlot;
use crate::login::Peer;
use crate::metrics::{LocalCounters, Protocol};
use crate::session::{SessionEvent, SessionId, SessionSink};
use crate::vhost::VHost;

/// How a client logs in.
#[derive(Clone, Copy, Debug)]
pub enum Credentials<'a> {
    /// A user name and password (SASL PLAIN, AMQPLAIN), under the mechanism's name.
    Password {
        /// The SASL mechanism, for the log line.
        mechanism: &'a str,
        /// The user name.
        username: &'a str,
        /// The password.
        password: &'a str,
    },
    /// SASL EXTERNAL: the user the verified client certificate names.
    Certificate,
    /// SASL ANONYMOUS: the configured anonymous credentials.
    Anonymous,
}

/// Why a vhost could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nobody logged in yet.
    #[error("not authenticated")]
    NotAuthenticated,
    /// The broker refused (no such vhost, no access, a connection limit).
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// What a connection's protocol negotiated, for the broker's registry of open connections
/// (the management API's connection details); the rest comes from the [`Client`] and the peer.
#[derive(Debug)]
pub struct Negotiated {
    /// `"AMQP 0-9-1"` or `"AMQP 1-0"`.
    pub protocol: &'static str,
    /// The SASL mechanism it logged in with.
    pub auth_mechanism: String,
    /// The client's properties (0.9.1 `client-properties`, 1.0 `open` properties).
    pub client_properties: charon_model::Table,
    /// The heartbeat (0.9.1) or idle timeout (1.0), in seconds.
    pub timeout: u32,
    /// The maximum frame size.
    pub frame_max: u32,
    /// The maximum channel (0.9.1) or session (1.0) number.
    pub channel_max: u32,
}

/// One connection's client (see the module documentation).
#[derive(Debug)]
pub struct Client {
    /// RabbitMQ's connection name (`peer -> local`), for the log lines.
    name: String,
    /// When the connection was accepted, for the closing line's duration.
    started: Instant,
    /// Where the connection's queues send its events (deliveries, confirms), and its id.
    sink: SessionSink,
    /// Those events, for the connection's task.
    inbox: mpsc::UnboundedReceiver<SessionEvent>,
    user: Option<User>,
    vhost: Option<Arc<VHost>>,
    counted: Option<ConnectionSlot>,
    registration: Option<Registration>,
    /// RabbitMQ's publishers of the connection: 0.9.1 channels that published, 1.0 sending
    /// links.
    publishers: usize,
    counters: LocalCounters,
}

impl Client {
    /// The client of a `protocol` connection called `name`, accepted now, whose queues reach
    /// it through `sink` (its events arriving in `inbox`); not logged in yet.
    #[must_use]
    pub fn new(
        protocol: Protocol,
        name: String,
        sink: SessionSink,
        inbox: mpsc::UnboundedReceiver<SessionEvent>,
    ) -> Self {
        Self {
            name,
            started: Instant::now(),
            sink,
            inbox,
            user: None,
            vhost: None,
            counted: None,
            registration: None,
            publishers: 0,
            counters: LocalCounters::new(protocol),
        }
    }

    /// RabbitMQ's name of the connection (`peer -> local`).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The events the connection's queues sent it.
    pub fn inbox(&mut self) -> &mut mpsc::UnboundedReceiver<SessionEvent> {
        &mut self.inbox
    }

    /// The connection's broker-unique id (its queues' owner key, its consumers' session).
    #[must_use]
    pub fn id(&self) -> SessionId {
        self.sink.id
    }

    /// Where the connection's queues send its events.
    #[must_use]
    pub fn sink(&self) -> &SessionSink {
        &self.sink
    }

    /// Logs in from `peer` under the broker's login policy (`loopback_users`, the refusal log
    /// line, the failed-login throttle); returns how long the answer waits (the throttle's
    /// delay for the address, whatever the outcome).
    pub fn login(&mut self, broker: &Broker, peer: &Peer, credentials: Credentials<'_>) -> Duration {
        let policy = broker.login();
        let delay = policy.delay(peer.address());
        self.user = match credentials {
            Credentials::Password { mechanism, username, password } => {
                policy.admit(peer.address(), mechanism, username, broker.authenticate(username, password))
            }
            Credentials::Certificate => policy.external_login(broker.access(), peer),
            Credentials::Anonymous => policy.anonymous_login(broker.access(), peer),
        };
        delay
    }

    /// Opens `vhost` for the logged-in user, counted against the vhost's and the user's
    /// connection limits, and registers the connection (by its sink) so the broker can close
    /// it.
    ///
    /// # Errors
    /// Nobody logged in; the broker's refusal (see [`Broker::connect`]).
    pub fn open_vhost(&mut self, broker: &Broker, vhost: &str) -> Result<(), ClientError> {
        let user = self.user.as_ref().ok_or(ClientError::NotAuthenticated)?;
        let (opened, counted) = broker.connect(user, vhost)?;
        self.registration = Some(broker.connections().register(&self.sink, &user.name, vhost));
        self.vhost = Some(opened);
        self.counted = Some(counted);
        Ok(())
    }

    /// The logged-in user.
    #[must_use]
    pub fn user(&self) -> Option<&User> {
        self.user.as_ref()
    }

    /// The vhost the client opened.
    #[must_use]
    pub fn vhost(&self) -> Option<&Arc<VHost>> {
        self.vhost.as_ref()
    }

    /// The connection's registration with the broker, once its vhost is open.
    #[must_use]
    pub fn registration(&self) -> Option<&Registration> {
        self.registration.as_ref()
    }

    /// The connection's counts since the last fold (plain integers, no atomics per message).
    pub fn counters(&mut self) -> &mut LocalCounters {
        &mut self.counters
    }

    /// One more publisher (a 0.9.1 channel's first publish, a 1.0 sending link attached).
    pub fn publisher_added(&mut self) {
        self.publishers += 1;
    }

    /// One publisher fewer (its channel or link went).
    pub fn publisher_gone(&mut self) {
        self.publishers = self.publishers.saturating_sub(1);
    }

    /// Folds the connection's counts, with its `consumers` and publishers now, into the
    /// node's (once per read or event batch: see [`LocalCounters`]).
    pub fn fold_counters(&mut self, consumers: usize) {
        self.counters.set_consumers(consumers);
        self.counters.set_publishers(self.publishers);
        self.counters.fold();
    }

    /// Records the open connection's details in the broker's registry: who logged in to which
    /// vhost from `peer`, accepted at `connected_at` (ms since the epoch), with what its
    /// protocol `negotiated`. Nothing before the vhost is open.
    pub fn describe(&self, peer: &Peer, connected_at: i64, negotiated: Negotiated) {
        let (Some(tracked), Some(user), Some(vhost)) = (&self.registration, &self.user, &self.vhost) else {
            return;
        };
        let Negotiated { protocol, auth_mechanism, client_properties, timeout, frame_max, channel_max } = negotiated;
        tracked.describe(ConnectionInfo {
            protocol,
            user: user.name.clone(),
            vhost: vhost.name().to_owned(),
            auth_mechanism,
            local: peer.local(),
            peer: peer.address(),
            ssl: peer.tls(),
            connected_at,
            client_properties,
            timeout,
            frame_max,
            channel_max,
        });
    }

    /// RabbitMQ's line for the connection as it ends (see
    /// [`crate::connections::log_closing`]).
    pub fn log_closing(&self) {
        let opened =
            self.user.as_ref().zip(self.vhost.as_ref()).map(|(user, vhost)| (user.name.as_str(), vhost.name()));
        crate::connections::log_closing(&self.name, opened, self.started.elapsed());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::BrokerConfig;

    fn peer(address: &str) -> Peer {
        Peer::new(address.parse().unwrap(), None)
    }

    #[tokio::test]
    async fn a_login_then_a_vhost_open_registers_the_connection() {
        let broker = Broker::new(BrokerConfig::default());
        let (sink, events) = SessionSink::new(broker.next_id(), 100);
        let mut client = Client::new(Protocol::Amqp091, "a -> b".to_owned(), sink.clone(), events);
        assert_eq!(client.id(), sink.id);
        assert!(matches!(client.open_vhost(&broker, "/"), Err(ClientError::NotAuthenticated)));
        let wrong = Credentials::Password { mechanism: "PLAIN", username: "guest", password: "nope" };
        for _ in 0..5 {
            client.login(&broker, &peer("127.0.0.1:4000"), wrong);
            assert!(client.user().is_none(), "a wrong password");
        }
        let right = Credentials::Password { mechanism: "PLAIN", username: "guest", password: "guest" };
        let delay = client.login(&broker, &peer("127.0.0.1:4000"), right);
        assert!(delay > Duration::ZERO, "the address failed five times: its answers wait");
        assert_eq!(client.user().map(|u| u.name.as_str()), Some("guest"));
        assert!(matches!(
            client.open_vhost(&broker, "nowhere"),
            Err(ClientError::Engine(EngineError::VhostNotFound(_)))
        ));
        client.open_vhost(&broker, "/").unwrap();
        assert_eq!(client.vhost().map(|v| v.name()), Some("/"));
        assert!(client.registration().is_some());
        assert_eq!(broker.connections().len(), 1, "the broker can find it to close it");
        assert!(broker.connections().list().is_empty(), "listed once described");
        let negotiated = Negotiated {
            protocol: "AMQP 0-9-1",
            auth_mechanism: "PLAIN".to_owned(),
            client_properties: charon_model::Table::new(),
            timeout: 60,
            frame_max: 131_072,
            channel_max: 2047,
        };
        client.describe(&peer("127.0.0.1:4000"), 1_700_000_000_000, negotiated);
        let listed = broker.connections().list();
        let info = &listed.first().unwrap().info;
        assert_eq!(
            (info.protocol, info.user.as_str(), info.vhost.as_str(), info.peer.to_string(), info.connected_at),
            ("AMQP 0-9-1", "guest", "/", "127.0.0.1:4000".to_owned(), 1_700_000_000_000)
        );
        assert_eq!(
            (info.auth_mechanism.as_str(), info.timeout, info.frame_max, info.channel_max),
            ("PLAIN", 60, 131_072, 2047)
        );
        let (other, events) = SessionSink::new(broker.next_id(), 100);
        let mut anonymous = Client::new(Protocol::Amqp10, "c -> d".to_owned(), other, events);
        anonymous.login(&broker, &peer("192.0.2.1:4000"), Credentials::Anonymous);
        assert!(anonymous.user().is_none(), "guest, the anonymous user, only from loopback");
    }
}
