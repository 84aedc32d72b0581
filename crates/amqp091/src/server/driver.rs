//! The 0.9.1 connection as [`charon_net`] drives it: the sans-IO [`Connection`] with the
//! broker [`Session`] that answers its events, and RabbitMQ's publisher blocking.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use charon_engine::login::Peer;
use charon_engine::metrics::Protocol as Counted;
use charon_engine::{Alarms, Broker, Client, Flush, SessionEvent, SessionSink};
use charon_net::{AlarmStep, Protocol, Transport, drive};
use tokio::sync::watch;
use tracing::Instrument;

use super::report;
use super::session::Session;
use crate::proto::{Connection, ConnectionConfig, ConnectionState, Event, ReplyCode};

/// Deliveries a connection may have in flight towards its socket.
const OUTBOUND_WINDOW: u32 = 2048;
/// Engine events taken per wake-up.
const EVENT_BATCH: usize = 256;

/// Settings for 0.9.1 connections.
#[derive(Clone, Debug, Default)]
pub struct ServerConfig {
    /// Protocol limits and identity.
    pub connection: ConnectionConfig,
}

/// Runs one AMQP 0.9.1 connection whose 8-byte protocol header was already read and
/// accepted, over plain TCP or TLS; `peer` is its address and verified client certificate
/// (SASL EXTERNAL is offered when it has one). Returns when the connection is closed.
/// `shutdown` turning true closes it with 320 CONNECTION_FORCED.
pub async fn serve<T: Transport>(
    stream: T,
    peer: Peer,
    broker: Arc<Broker>,
    mut config: ServerConfig,
    shutdown: watch::Receiver<bool>,
) {
    let id = broker.next_id();
    let span = tracing::info_span!("amqp091", conn = id, peer = %peer.address());
    let alarms = broker.alarms();
    let (sink, inbox) = SessionSink::new(id, OUTBOUND_WINDOW);
    config.connection.sasl_external = peer.certificate().is_some();
    config.connection.sasl_anonymous = broker.login().offers_anonymous();
    let client = Client::new(Counted::Amqp091, peer.connection_name(), sink, inbox);
    let session = Session::new(broker, client);
    let protocol = Amqp091 {
        session,
        conn: Connection::new(config.connection, Instant::now()),
        peer,
        login_delay: Duration::ZERO,
        blocked: None,
        events: Vec::with_capacity(EVENT_BATCH),
        ack_check: None,
        connected_at: charon_engine::clock::now_ms(),
    };
    drive(stream, protocol, alarms, shutdown).instrument(span).await;
}

/// One 0.9.1 connection: protocol core and broker session.
struct Amqp091 {
    conn: Connection,
    session: Session,
    peer: Peer,
    /// Set by a login attempt: the failed-login throttle's wait before the answer goes out.
    login_delay: Duration,
    /// Whether this connection stopped being read at a held publish: `Some(true)` with
    /// connection.blocked sent (an alarm), `Some(false)` without (the store behind).
    blocked: Option<bool>,
    events: Vec<SessionEvent>,
    /// Set by the timer: a channel's oldest delivery may have timed out at this instant.
    ack_check: Option<Instant>,
    /// When the socket was accepted, ms since the epoch (the management API's `connected_at`).
    connected_at: i64,
}

impl Protocol for Amqp091 {
    type Alarm = Alarms;

    async fn on_input(&mut self, input: &mut BytesMut, now: Instant) {
        let mut login = self.session.login(&self.peer, &mut self.login_delay);
        self.conn.handle_input(input, now, &mut login);
        // A login answered in this batch waits here, in this connection's task, before the
        // driver writes it: the login policy slows addresses that failed recently.
        let delay = std::mem::take(&mut self.login_delay);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
    }

    async fn act(&mut self) {
        if let Some(now) = self.ack_check.take() {
            self.session.expire_unacked(now, &mut self.conn).await;
        }
        // While a queue holds this connection's publishes (flow), nothing the client sent after
        // them is acted on; engine events still are.
        if self.session.resume(&mut self.conn).await {
            while let Some(event) = self.conn.poll_event() {
                if matches!(event, Event::Opened { .. }) {
                    report::describe(&self.session.client, &self.peer, &self.conn, self.connected_at);
                }
                self.session.handle_event(event, &mut self.conn).await;
                if self.session.held() {
                    break;
                }
            }
            self.session.flush_publishes(&mut self.conn, Flush::Hold).await;
        }
        // A method (basic.cancel) may have taken a waiting commit's last answers from the
        // inbox.
        self.session.finish_commits(&mut self.conn).await;
        self.session.fold_counters();
    }

    /// RabbitMQ's memory and disk alarms: a connection that publishes while one is on is
    /// blocked (connection.blocked, and its socket is no longer read, the publish waiting in
    /// the buffer) until it clears; connections that only consume or ack go on. A store behind
    /// its publishers holds them the same way, without connection.blocked (flow).
    fn on_alarm(&mut self, alarms: &Alarms, now: Instant) -> AlarmStep {
        let hold = alarms.hold_publishes();
        self.conn.hold_publishes(hold);
        let alarm = alarms.any();
        let blocked = self.blocked;
        if hold && self.conn.stopped_at_publish() && (blocked.is_none() || (alarm && blocked == Some(false))) {
            self.blocked = Some(alarm);
            self.conn.block(alarm.then(|| alarms.blocked_reason()));
            return AlarmStep::Again;
        }
        if !hold && (blocked.is_some() || self.conn.stopped_at_publish()) {
            if self.blocked.take().is_some() {
                self.conn.unblock(now);
            }
            return AlarmStep::Refeed;
        }
        AlarmStep::Wait
    }

    async fn engine_events(&mut self) -> bool {
        let received = tokio::select! {
            received = self.session.client.inbox().recv_many(&mut self.events, EVENT_BATCH) => received,
            // The queue that held the publishes admits them: `act` goes on with them.
            () = charon_engine::queue::until_admitted(self.session.publisher.holding()) => return true,
        };
        if received == 0 {
            return false;
        }
        for event in self.events.drain(..) {
            match event {
                SessionEvent::Report(reply) => {
                    let flow = self.blocked.or(self.session.held().then_some(false));
                    let _ = reply.send(report::report(&self.session.channels, &self.conn, flow));
                }
                event => self.session.handle_engine_event(event, &mut self.conn),
            }
        }
        self.session.emit_confirms(&mut self.conn);
        self.session.finish_commits(&mut self.conn).await;
        self.session.fold_counters();
        true
    }

    fn reading(&self) -> bool {
        self.blocked.is_none() && !self.session.held()
    }

    fn output(&mut self) -> &mut BytesMut {
        self.conn.output()
    }

    fn on_written(&mut self, now: Instant) {
        self.conn.on_written(now);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match (self.conn.poll_timeout(), self.session.ack_timer.next()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn on_timeout(&mut self, now: Instant) {
        self.conn.handle_timeout(now);
        // The checks close channels, which waits for their queues: done in `act`, next.
        if self.session.ack_timer.is_due(now) {
            self.ack_check = Some(now);
        }
    }

    fn on_shutdown(&mut self, now: Instant) {
        let text = "broker forced connection closure with reason 'shutdown'";
        self.conn.close(ReplyCode::ConnectionForced, text, (0, 0), now);
    }

    fn is_closed(&self) -> bool {
        self.conn.state() == ConnectionState::Closed
    }

    async fn finish(&mut self) {
        self.session.close_all().await;
        self.session.client.log_closing();
    }
}
