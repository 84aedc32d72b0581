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

/// Runs one connection until it is closed and its output written, or the socket fails.
///
/// Each wake-up (a read batch, engine events, a timer) is acted on in full, then everything
/// it produced goes out in one write: a read of many pipelined frames costs one `read` and
/// one `write`, not one per frame. `alarms` holds publishers (see [`Protocol::on_alarm`]);
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
                    protocol.on_written(Instant::now());
                    if (protocol.is_closed() || eof) && pending.is_empty() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        let deadline = protocol.poll_timeout().map(tokio::time::Instant::from_std);
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
                        T::after_read(&reader);
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
                protocol.on_timeout(Instant::now());
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
