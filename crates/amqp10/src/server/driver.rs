//! The connection task around the sans-IO AMQP 1.0 [`Connection`].

use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use charon_engine::{Broker, SessionSink};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tracing::Instrument;

use super::session::Session;
use crate::proto::{Config, Connection, State, error};

const READ_CHUNK: usize = 64 * 1024;
const OUTPUT_HIGH_WATER: usize = 1024 * 1024;
const DELIVERY_HIGH_WATER: usize = 256 * 1024;
const OUTBOUND_WINDOW: u32 = 2048;

/// Settings for AMQP 1.0 connections.
#[derive(Clone, Debug, Default)]
pub struct ServerConfig {
    /// Protocol limits and identity.
    pub connection: Config,
    /// The user SASL ANONYMOUS logs in as; ANONYMOUS is not offered when unset.
    pub anonymous_user: Option<String>,
}

/// Runs one AMQP 1.0 connection whose SASL protocol header was already read. Returns when it
/// is closed; `shutdown` turning true closes it with `amqp:connection:forced`.
pub async fn serve(stream: TcpStream, broker: Arc<Broker>, config: ServerConfig, shutdown: watch::Receiver<bool>) {
    let id = broker.next_id();
    let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let span = tracing::info_span!("amqp10", conn = id, peer);
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
    let (sink, inbox) = SessionSink::new(id, OUTBOUND_WINDOW);
    let mut session = Session::new(id, broker, sink, inbox);
    let mut conn = Connection::new(config.connection.clone(), config.anonymous_user.is_some(), Instant::now());
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
        if (conn.state() == State::Closed || eof) && pending.is_empty() {
            break;
        }
        // RabbitMQ's memory and disk alarms over 1.0 (and a store behind its publishers):
        // senders get no new link credit until they clear; what they hold is still accepted.
        let alarm = alarms.borrow().hold_publishes();
        if alarm != conn.publishing_paused() {
            conn.set_publishing_paused(alarm);
            continue;
        }
        let deadline = conn.poll_timeout().map(tokio::time::Instant::from_std);
        let reading = !eof && pending.len() < OUTPUT_HIGH_WATER && conn.state() != State::Closed;
        let taking_events = pending.len() < DELIVERY_HIGH_WATER && conn.blocked_transfers() < OUTBOUND_WINDOW as usize;
        tokio::select! {
            _ = alarms.changed() => {}
            changed = shutdown.changed(), if !*shutdown.borrow() => {
                if changed.is_ok() && *shutdown.borrow() {
                    let err = error("amqp:connection:forced", "broker forced connection closure with reason 'shutdown'");
                    conn.close(Some(err), Instant::now());
                }
            }
            read = reader.read_buf(&mut input), if reading => {
                match read {
                    Ok(0) | Err(_) => eof = true,
                    Ok(_) => {
                        // Acknowledge at once, not after the kernel's delayed-ACK timer: a
                        // client with Nagle's algorithm on (fe2o3-amqp's default) holds each
                        // small frame until the one before is acknowledged, and S10 ran at 4.7k
                        // msg/s instead of 66k. Linux clears the flag as it goes, hence once per
                        // read (a read batch, not a message).
                        #[cfg(target_os = "linux")]
                        let _ = reader.as_ref().set_quickack(true);
                        feed(&mut conn, &mut session, &mut input, config.anonymous_user.as_deref()).await;
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

/// Feeds the protocol engine one frame at a time, acting on each frame's events before the
/// next: a client may pipeline an attach and a flow for the new link in one write (Qpid Proton
/// does), and the flow is only valid once the attach has been answered.
async fn feed(conn: &mut Connection, session: &mut Session, input: &mut BytesMut, anonymous: Option<&str>) {
    while let Some(len) = next_unit(input).filter(|&len| len < input.len()) {
        let mut unit = input.split_to(len);
        conn.handle_input(&mut unit, Instant::now(), &mut session.login(anonymous));
        if !unit.is_empty() {
            unit.unsplit(input.split());
            *input = unit;
            break;
        }
        while let Some(event) = conn.poll_event() {
            session.handle_event(event, conn).await;
        }
    }
    conn.handle_input(input, Instant::now(), &mut session.login(anonymous));
}

/// Length of the protocol header or whole frame at the start of `input`, if it is complete.
fn next_unit(input: &[u8]) -> Option<usize> {
    if input.starts_with(b"AMQP") {
        return (input.len() >= 8).then_some(8);
    }
    let size = usize::try_from(u32::from_be_bytes(input.get(..4)?.try_into().ok()?)).ok()?;
    (size >= 8 && size <= input.len()).then_some(size)
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
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
