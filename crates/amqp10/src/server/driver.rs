//! The connection task around the sans-IO AMQP 1.0 [`Connection`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use charon_engine::login::Peer;
use charon_engine::metrics::Protocol as Counted;
use charon_engine::{Alarms, Broker, Client, SessionEvent, SessionSink};
use charon_net::{AlarmStep, Protocol, Transport, drive};
use tokio::sync::watch;
use tracing::Instrument;

use super::session::Session;
use crate::proto::{Config, Connection, State, error};

/// Deliveries a connection may have in flight towards its socket.
const OUTBOUND_WINDOW: u32 = 2048;
/// Engine events taken per wake-up.
const EVENT_BATCH: usize = 256;

/// Settings for AMQP 1.0 connections.
#[derive(Clone, Debug, Default)]
pub struct ServerConfig {
    /// Protocol limits and identity.
    pub connection: Config,
}

/// Runs one AMQP 1.0 connection whose SASL protocol header was already read, over plain TCP
/// or TLS; `peer` is its address and verified client certificate (SASL EXTERNAL is offered
/// when it has one). Returns when it is closed; `shutdown` turning true closes it with
/// `amqp:connection:forced`.
pub async fn serve<T: Transport>(
    stream: T,
    peer: Peer,
    broker: Arc<Broker>,
    mut config: ServerConfig,
    shutdown: watch::Receiver<bool>,
) {
    let id = broker.next_id();
    let span = tracing::info_span!("amqp10", conn = id, peer = %peer.address());
    let alarms = broker.alarms();
    let (sink, inbox) = SessionSink::new(id, OUTBOUND_WINDOW);
    config.connection.sasl_external = peer.certificate().is_some();
    let anonymous = broker.login().offers_anonymous();
    let client = Client::new(Counted::Amqp10, peer.connection_name(), sink, inbox);
    let session = Session::new(broker, client, (peer.clone(), charon_engine::clock::now_ms()));
    let protocol = Amqp10 {
        conn: Connection::new(config.connection, anonymous, Instant::now()),
        session,
        peer,
        alarm_holds: false,
        login_delay: Duration::ZERO,
        events: Vec::with_capacity(EVENT_BATCH),
    };
    drive(stream, protocol, alarms, shutdown).instrument(span).await;
}

/// One AMQP 1.0 connection: protocol core and broker session.
struct Amqp10 {
    conn: Connection,
    session: Session,
    peer: Peer,
    /// A memory or disk alarm (or the store behind) holds publishers.
    alarm_holds: bool,
    /// Set by a login attempt: the failed-login throttle's wait before the answer goes out.
    login_delay: Duration,
    events: Vec<SessionEvent>,
}

impl Protocol for Amqp10 {
    type Alarm = Alarms;

    /// fe2o3-amqp leaves Nagle's algorithm on. ACKed at once, its frames came one per segment
    /// whenever a runtime worker was idle to read each: S10 with two workers cost 15–36 CPU-s
    /// per million messages, and 7–8 with deferred ACKs (bench/history/until-2026-11-29.md).
    const DEFERS_ACKS: bool = true;

    async fn on_input(&mut self, input: &mut BytesMut, now: Instant) {
        feed(&mut self.conn, &mut self.session, input, &self.peer, &mut self.login_delay, now).await;
        // A login answered in this batch waits here, in this connection's task, before the
        // driver writes it: the login policy slows addresses that failed recently.
        let delay = std::mem::take(&mut self.login_delay);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
    }

    async fn act(&mut self) {
        while let Some(event) = self.conn.poll_event() {
            self.session.handle_event(event, &mut self.conn).await;
        }
        self.session.flush(&mut self.conn, false).await;
        self.withhold_credit();
        self.session.fold_counters();
    }

    /// RabbitMQ's memory and disk alarms over 1.0 (and a store behind its publishers):
    /// senders get no new link credit until they clear; what they hold is still accepted.
    fn on_alarm(&mut self, alarms: &Alarms, _now: Instant) -> AlarmStep {
        self.alarm_holds = alarms.hold_publishes();
        if self.withhold_credit() { AlarmStep::Again } else { AlarmStep::Wait }
    }

    async fn engine_events(&mut self) -> bool {
        let received = tokio::select! {
            received = self.session.client.inbox().recv_many(&mut self.events, EVENT_BATCH) => received,
            // The queue that held the publishes admits them (`act` hands them over), or a
            // queue published to by name was deleted.
            woken = self.session.incoming.admitted_or_deleted() => {
                if let Some(deleted) = woken {
                    self.session.queue_deleted(&deleted, &mut self.conn);
                }
                return true;
            }
        };
        if received == 0 {
            return false;
        }
        for event in self.events.drain(..) {
            self.session.handle_engine_event(event, &mut self.conn);
        }
        self.session.fold_counters();
        true
    }

    fn taking_events(&self) -> bool {
        self.conn.blocked_transfers() < OUTBOUND_WINDOW as usize
    }

    fn output(&mut self) -> &mut BytesMut {
        self.conn.output()
    }

    fn on_written(&mut self, now: Instant) {
        self.conn.on_written(now);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.conn.poll_timeout()
    }

    fn on_timeout(&mut self, now: Instant) {
        self.conn.handle_timeout(now);
    }

    fn on_shutdown(&mut self, now: Instant) {
        let err = error("amqp:connection:forced", "broker forced connection closure with reason 'shutdown'");
        self.conn.close(Some(err), now);
    }

    fn is_closed(&self) -> bool {
        self.conn.state() == State::Closed
    }

    async fn finish(&mut self) {
        self.session.flush(&mut self.conn, true).await;
        self.session.close_all().await;
        self.session.client.log_closing();
    }
}

impl Amqp10 {
    /// Withholds new link credit from the sending links while an alarm or a queue's flow
    /// holds publishes, and grants it again (topping the links up) once neither does; true
    /// when that changed.
    fn withhold_credit(&mut self) -> bool {
        let paused = self.alarm_holds || self.session.incoming.held();
        if paused == self.conn.publishing_paused() {
            return false;
        }
        self.conn.set_publishing_paused(paused);
        true
    }
}

/// Feeds the protocol engine one frame at a time, acting on each frame's events before the
/// next: a client may pipeline an attach and a flow for the new link in one write (Qpid Proton
/// does), and the flow is only valid once the attach has been answered.
async fn feed(
    conn: &mut Connection,
    session: &mut Session,
    input: &mut BytesMut,
    peer: &Peer,
    delay: &mut Duration,
    now: Instant,
) {
    while let Some(len) = next_unit(input).filter(|&len| len < input.len()) {
        let mut unit = input.split_to(len);
        conn.handle_input(&mut unit, now, &mut session.login(peer, delay));
        if !unit.is_empty() {
            unit.unsplit(input.split());
            *input = unit;
            break;
        }
        while let Some(event) = conn.poll_event() {
            session.handle_event(event, conn).await;
        }
    }
    conn.handle_input(input, now, &mut session.login(peer, delay));
}

/// Length of the protocol header or whole frame at the start of `input`, if it is complete.
fn next_unit(input: &[u8]) -> Option<usize> {
    if input.starts_with(b"AMQP") {
        return (input.len() >= 8).then_some(8);
    }
    let size = usize::try_from(u32::from_be_bytes(input.get(..4)?.try_into().ok()?)).ok()?;
    (size >= 8 && size <= input.len()).then_some(size)
}

#[cfg(test)]
mod tests {
    use super::next_unit;

    #[test]
    fn units_are_headers_and_whole_frames() {
        assert_eq!(next_unit(b"AMQP\x00\x01\x00\x00rest"), Some(8));
        assert_eq!(next_unit(b"AMQP\x00"), None);
        let frame = [0, 0, 0, 12, 2, 0, 0, 0, 1, 2, 3, 4, 9, 9];
        assert_eq!(next_unit(&frame), Some(12));
        assert_eq!(next_unit(frame.get(..10).unwrap_or_default()), None);
        assert_eq!(next_unit(&[0, 0, 0, 4, 2, 0, 0, 0]), None);
        assert_eq!(next_unit(&[0, 0]), None);
    }
}
