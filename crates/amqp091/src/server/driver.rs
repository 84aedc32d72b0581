//! The connection task: socket, timers, engine events and shutdown around the sans-IO
//! [`Connection`].

use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use charon_engine::{Broker, SessionSink};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tracing::Instrument;

use super::session::Session;
use crate::proto::{Connection, ConnectionConfig, ConnectionState, ReplyCode};

/// Read buffer size: large reads mean one syscall for many small frames.
const READ_CHUNK: usize = 64 * 1024;
/// Stop reading while this much output waits for the socket (a client that does not read).
const OUTPUT_HIGH_WATER: usize = 1024 * 1024;
/// Stop taking deliveries from queues while this much output is pending.
const DELIVERY_HIGH_WATER: usize = 256 * 1024;
/// Deliveries a connection may have in flight towards its socket.
const OUTBOUND_WINDOW: u32 = 2048;

/// Settings for 0.9.1 connections.
#[derive(Clone, Debug, Default)]
pub struct ServerConfig {
    /// Protocol limits and identity.
    pub connection: ConnectionConfig,
}

/// Runs one AMQP 0.9.1 connection whose 8-byte protocol header was already read and
/// accepted. Returns when the connection is closed. `shutdown` turning true closes it with
/// 320 CONNECTION_FORCED.
pub async fn serve(stream: TcpStream, broker: Arc<Broker>, config: ServerConfig, shutdown: watch::Receiver<bool>) {
    let id = broker.next_id();
    let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let span = tracing::info_span!("amqp091", conn = id, peer);
    run(stream, broker, config, shutdown, id).instrument(span).await;
}

async fn run(
    stream: TcpStream,
    broker: Arc<Broker>,
    config: ServerConfig,
    mut shutdown: watch::Receiver<bool>,
    id: u64,
) {
    let (mut reader, mut writer) = stream.into_split();
    let mut alarms = broker.alarms();
    // Whether this connection stopped being read at a held publish: `Some(true)` with
    // connection.blocked sent (an alarm), `Some(false)` without (the store behind).
    let mut blocked: Option<bool> = None;
    let (sink, inbox) = SessionSink::new(id, OUTBOUND_WINDOW);
    let mut session = Session::new(id, broker, sink, inbox);
    let mut conn = Connection::new(config.connection, Instant::now());
    let mut input = BytesMut::with_capacity(READ_CHUNK);
    let mut pending = BytesMut::new();
    let mut events = Vec::with_capacity(256);
    let mut eof = false;
    loop {
        while let Some(event) = conn.poll_event() {
            session.handle_event(event, &mut conn).await;
        }
        session.flush_publishes(&mut conn).await;
        if pending.is_empty() {
            pending = conn.output().split();
        } else if !conn.output().is_empty() {
            let more = conn.output().split();
            pending.extend_from_slice(&more);
        }
        if conn.state() == ConnectionState::Closed && pending.is_empty() {
            break;
        }
        if eof && pending.is_empty() {
            break;
        }
        // RabbitMQ's memory and disk alarms: a connection that publishes while one is on is
        // blocked (connection.blocked, and its socket is no longer read, the publish waiting
        // in the buffer) until it clears; connections that only consume or ack go on. A store
        // behind its publishers holds them the same way, without connection.blocked (flow).
        let current = *alarms.borrow();
        let hold = current.hold_publishes();
        conn.hold_publishes(hold);
        let alarm = current.any();
        if hold && conn.stopped_at_publish() && (blocked.is_none() || (alarm && blocked == Some(false))) {
            blocked = Some(alarm);
            conn.block(alarm.then(|| current.blocked_reason()));
            continue;
        }
        if !hold && (blocked.is_some() || conn.stopped_at_publish()) {
            if blocked.take().is_some() {
                conn.unblock(Instant::now());
            }
            // The held publish is already in the buffer: no read will bring it again.
            let mut login = session.login();
            conn.handle_input(&mut input, Instant::now(), &mut login);
            continue;
        }
        let deadline = conn.poll_timeout().map(tokio::time::Instant::from_std);
        let reading =
            !eof && blocked.is_none() && pending.len() < OUTPUT_HIGH_WATER && conn.state() != ConnectionState::Closed;
        let taking_events = pending.len() < DELIVERY_HIGH_WATER;
        tokio::select! {
            _ = alarms.changed() => {}
            changed = shutdown.changed(), if !*shutdown.borrow() => {
                if changed.is_ok() && *shutdown.borrow() {
                    let text = "broker forced connection closure with reason 'shutdown'";
                    conn.close(ReplyCode::ConnectionForced, text, (0, 0), Instant::now());
                }
            }
            read = reader.read_buf(&mut input), if reading => {
                match read {
                    Ok(0) | Err(_) => eof = true,
                    Ok(_) => {
                        let mut login = session.login();
                        conn.handle_input(&mut input, Instant::now(), &mut login);
                        if input.capacity() - input.len() < 4096 {
                            input.reserve(READ_CHUNK);
                        }
                    }
                }
            }
            written = writer.write(&pending), if !pending.is_empty() => {
                match written {
                    Ok(n) => {
                        let _ = pending.split_to(n);
                        conn.on_written(Instant::now());
                    }
                    Err(_) => break,
                }
            }
            n = session.inbox.recv_many(&mut events, 256), if taking_events => {
                if n == 0 {
                    break;
                }
                for event in events.drain(..) {
                    session.handle_engine_event(event, &mut conn);
                }
                session.emit_confirms(&mut conn);
            }
            () = sleep_until(deadline), if deadline.is_some() => {
                conn.handle_timeout(Instant::now());
            }
        }
    }
    let _ = writer.shutdown().await;
    session.close_all().await;
    tracing::debug!("connection closed");
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
