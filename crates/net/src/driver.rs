//! The socket loop.

use std::time::Instant;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use crate::protocol::{AlarmStep, Protocol};
use crate::transport::Transport;

/// Read buffer size: one read takes every frame the client pipelined, up to this much.
pub const READ_CHUNK: usize = 64 * 1024;
/// Stop reading while this much output waits for the socket (a client that does not read).
pub const OUTPUT_HIGH_WATER: usize = 1024 * 1024;
/// Stop taking deliveries from queues while this much output is pending.
pub const DELIVERY_HIGH_WATER: usize = 256 * 1024;
/// How long the ACK of a read waits for a write to carry it, where the protocol lets it wait
/// ([`Protocol::DEFERS_ACKS`]).
pub const ACK_DELAY: std::time::Duration = std::time::Duration::from_millis(1);

/// Runs one connection until it is closed and its output written, or the socket fails.
///
/// Each wake-up (a read batch, engine events, a timer) is acted on in full, then everything
/// it produced goes out in one write: a read of many pipelined frames costs one `read` and
/// one `write`, not one per frame. Each read is acknowledged at once
/// ([`Transport::after_read`]), or, where the protocol [defers ACKs](Protocol::DEFERS_ACKS),
/// by the next write or after [`ACK_DELAY`]. `alarms` holds publishers (see [`Protocol::on_alarm`]);
/// `shutdown` turning true closes the connection the protocol's way. `stream` is plain TCP or
/// TLS (see [`Transport`]).
pub async fn drive<T: Transport, P: Protocol>(
    stream: T,
    mut protocol: P,
    mut alarms: watch::Receiver<P::Alarm>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (mut reader, mut writer) = stream.into_split();
    // Bytes the writer took but may still hold (TLS records): flushed once nothing waits.
    let mut unflushed = false;
    let mut input = BytesMut::with_capacity(READ_CHUNK);
    let mut pending = BytesMut::new();
    let mut eof = false;
    // Watched until it turns true (or its sender goes): a shutdown that came before this task
    // ran is acted on at once, and one that comes later wakes the `select!`.
    let mut watching_shutdown = true;
    if *shutdown.borrow_and_update() {
        watching_shutdown = false;
        protocol.on_shutdown(Instant::now());
    }
    let mut watching_alarms = true;
    // A read this wake-up has not answered yet, and when an ACK of it is due at the latest.
    let mut unanswered_read = false;
    let mut ack_due: Option<tokio::time::Instant> = None;
    loop {
        protocol.act().await;
        take_output(&mut pending, protocol.output());
        if (protocol.is_closed() || eof) && pending.is_empty() {
            break;
        }
        let alarm = alarms.borrow().clone();
        match protocol.on_alarm(&alarm, Instant::now()) {
            AlarmStep::Wait => {}
            AlarmStep::Again => continue,
            AlarmStep::Refeed => {
                protocol.on_input(&mut input, Instant::now()).await;
                continue;
            }
        }
        if !pending.is_empty() {
            match write_now::<T>(&writer, &mut pending) {
                Ok(0) => {}
                Ok(_) => {
                    (unanswered_read, ack_due) = (false, None);
                    protocol.on_written(Instant::now());
                    if (protocol.is_closed() || eof) && pending.is_empty() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        if std::mem::take(&mut unanswered_read) {
            ack_due.get_or_insert_with(|| tokio::time::Instant::now() + ACK_DELAY);
        }
        let protocol_deadline = protocol.poll_timeout().map(tokio::time::Instant::from_std);
        let deadline = match (protocol_deadline, ack_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let reading = !eof && protocol.reading() && pending.len() < OUTPUT_HIGH_WATER && !protocol.is_closed();
        let taking_events = pending.len() < DELIVERY_HIGH_WATER && protocol.taking_events();
        tokio::select! {
            changed = alarms.changed(), if watching_alarms => watching_alarms = changed.is_ok(),
            changed = shutdown.changed(), if watching_shutdown => {
                if changed.is_err() {
                    watching_shutdown = false;
                } else if *shutdown.borrow_and_update() {
                    watching_shutdown = false;
                    protocol.on_shutdown(Instant::now());
                }
            }
            read = reader.read_buf(&mut input), if reading => {
                match read {
                    Ok(0) | Err(_) => eof = true,
                    Ok(_) => {
                        if P::DEFERS_ACKS {
                            unanswered_read = true;
                        } else {
                            T::after_read(&reader);
                        }
                        protocol.on_input(&mut input, Instant::now()).await;
                        if input.capacity() - input.len() < 4096 {
                            input.reserve(READ_CHUNK);
                        }
                    }
                }
            }
            written = write_or_flush(&mut writer, &pending), if !pending.is_empty() || unflushed => {
                match written {
                    Ok(n) => {
                        ack_due = None;
                        if pending.is_empty() {
                            unflushed = false;
                        } else {
                            pending.advance(n);
                            unflushed = T::BUFFERED;
                            protocol.on_written(Instant::now());
                        }
                    }
                    Err(_) => break,
                }
            }
            open = protocol.engine_events(), if taking_events => {
                if !open {
                    break;
                }
            }
            () = sleep_until(deadline), if deadline.is_some() => {
                let now = tokio::time::Instant::now();
                if ack_due.is_some_and(|due| due <= now) {
                    ack_due = None;
                    T::after_read(&reader);
                }
                if protocol_deadline.is_some_and(|due| due <= now) {
                    protocol.on_timeout(Instant::now());
                }
            }
        }
    }
    let _ = writer.shutdown().await;
    protocol.finish().await;
    tracing::debug!("connection closed");
}

/// Moves the protocol's new output behind what still waits for the socket.
pub(crate) fn take_output(pending: &mut BytesMut, output: &mut BytesMut) {
    if output.is_empty() {
        return;
    }
    if pending.is_empty() {
        *pending = output.split();
    } else {
        pending.extend_from_slice(output);
        output.clear();
    }
}

/// Writes what the socket takes without waiting; returns the bytes written (0 when it is
/// full, or the transport cannot write without waiting, and the driver then waits for it in
/// its `select!`).
fn write_now<T: Transport>(writer: &T::Writer, pending: &mut BytesMut) -> std::io::Result<usize> {
    let n = T::try_write(writer, pending)?;
    pending.advance(n);
    Ok(n)
}

/// Writes some of `pending`, or flushes the writer when nothing is pending (one future, so the
/// `select!` borrows the writer once). Cancel-safe, as `write` and rustls' `flush` are.
async fn write_or_flush<W: AsyncWrite + Unpin>(writer: &mut W, pending: &[u8]) -> std::io::Result<usize> {
    if pending.is_empty() { writer.flush().await.map(|()| 0) } else { writer.write(pending).await }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
