//! A raw AMQP 0.9.1 client shape for the flow-control scenario: a publisher that writes
//! pre-encoded publishes in large batches as fast as the socket takes them, and a no-ack
//! consumer that only counts `basic.deliver` frames. Neither parses more than a frame header,
//! so the client costs little CPU and the broker, not the client, sets the pace: the shape of
//! an independent load generator that floods one queue.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::{Context, Result, bail};
use lapin::uri::AMQPUri;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const FRAME_METHOD: u8 = 1;
const FRAME_HEADER: u8 = 2;
const FRAME_BODY: u8 = 3;
const FRAME_END: u8 = 0xCE;
/// Publishes per pre-encoded batch (one `write_all` each).
pub(crate) const BATCH: u64 = 1000;
/// The consumer's read size.
const READ_CHUNK: usize = 256 * 1024;

fn frame(out: &mut Vec<u8>, kind: u8, channel: u16, payload: &[u8]) {
    out.push(kind);
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(&u32::try_from(payload.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(payload);
    out.push(FRAME_END);
}

fn shortstr(out: &mut Vec<u8>, s: &str) {
    out.push(u8::try_from(s.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(s.as_bytes());
}

fn longstr(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&u32::try_from(s.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(s);
}

fn method(out: &mut Vec<u8>, channel: u16, class: u16, id: u16, args: &[u8]) {
    let mut payload = Vec::with_capacity(4 + args.len());
    payload.extend_from_slice(&class.to_be_bytes());
    payload.extend_from_slice(&id.to_be_bytes());
    payload.extend_from_slice(args);
    frame(out, FRAME_METHOD, channel, &payload);
}

/// An open connection with channel 1 open.
pub(crate) struct Raw {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    /// Connects and runs the handshake (PLAIN, heartbeats off), then opens channel 1.
    pub(crate) async fn open(uri: &AMQPUri) -> Result<Self> {
        let stream = TcpStream::connect((uri.authority.host.as_str(), uri.authority.port)).await?;
        stream.set_nodelay(true)?;
        let mut raw = Self { stream, buf: Vec::with_capacity(READ_CHUNK) };
        raw.stream.write_all(b"AMQP\x00\x00\x09\x01").await?;
        raw.expect(0, 10, 10).await?;
        let mut args = Vec::new();
        args.extend_from_slice(&0u32.to_be_bytes()); // empty client properties
        shortstr(&mut args, "PLAIN");
        let user = &uri.authority.userinfo;
        longstr(&mut args, format!("\0{}\0{}", user.username, user.password).as_bytes());
        shortstr(&mut args, "en_US");
        let mut out = Vec::new();
        method(&mut out, 0, 10, 11, &args);
        raw.stream.write_all(&out).await?;
        let tune = raw.expect(0, 10, 30).await?;
        let channel_max = tune.get(4..6).context("tune")?.to_vec();
        let frame_max = tune.get(6..10).context("tune")?.to_vec();
        let mut out = Vec::new();
        let mut args = channel_max;
        args.extend_from_slice(&frame_max);
        args.extend_from_slice(&0u16.to_be_bytes());
        method(&mut out, 0, 10, 31, &args);
        let mut args = Vec::new();
        shortstr(&mut args, &uri.vhost);
        shortstr(&mut args, "");
        args.push(0);
        method(&mut out, 0, 10, 40, &args);
        let mut args = Vec::new();
        shortstr(&mut args, "");
        method(&mut out, 1, 20, 10, &args);
        raw.stream.write_all(&out).await?;
        raw.expect(0, 10, 41).await?;
        raw.expect(1, 20, 11).await?;
        Ok(raw)
    }

    /// Reads frames until a method frame; fails unless it is `class.id` on `channel`. Returns
    /// the method's payload.
    async fn expect(&mut self, channel: u16, class: u16, id: u16) -> Result<Vec<u8>> {
        loop {
            if let Some((kind, ch, payload)) = self.take_frame() {
                if kind != FRAME_METHOD {
                    continue;
                }
                let ids = (
                    u16::from_be_bytes([payload.first().copied().unwrap_or(0), payload.get(1).copied().unwrap_or(0)]),
                    u16::from_be_bytes([payload.get(2).copied().unwrap_or(0), payload.get(3).copied().unwrap_or(0)]),
                );
                if ch != channel || ids != (class, id) {
                    bail!("expected {class}.{id} on channel {channel}, got {ids:?} on {ch}");
                }
                return Ok(payload);
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).await?;
            if n == 0 {
                bail!("the broker closed the connection during the handshake");
            }
            self.buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        }
    }

    fn take_frame(&mut self) -> Option<(u8, u16, Vec<u8>)> {
        let head = self.buf.get(..7)?;
        let kind = head.first().copied()?;
        let channel = u16::from_be_bytes([head.get(1).copied()?, head.get(2).copied()?]);
        let size = usize::try_from(u32::from_be_bytes(head.get(3..7)?.try_into().ok()?)).ok()?;
        let payload = self.buf.get(7..7 + size)?.to_vec();
        self.buf.drain(..size + 8);
        Some((kind, channel, payload))
    }

    /// Declares a transient, non-exclusive classic queue on channel 1.
    pub(crate) async fn declare(&mut self, queue: &str) -> Result<()> {
        let mut args = Vec::new();
        args.extend_from_slice(&0u16.to_be_bytes());
        shortstr(&mut args, queue);
        args.push(0);
        args.extend_from_slice(&0u32.to_be_bytes());
        let mut out = Vec::new();
        method(&mut out, 1, 50, 10, &args);
        self.stream.write_all(&out).await?;
        self.expect(1, 50, 11).await.map(drop)
    }

    /// Publishes to `queue` through the default exchange, `BATCH` pre-encoded publishes of
    /// `body_size` bytes per write, until `stop` or `limit` went; `published` counts what the
    /// socket took.
    pub(crate) async fn flood(
        mut self,
        queue: &str,
        body_size: usize,
        stop: Arc<AtomicBool>,
        limit: u64,
        published: Arc<AtomicU64>,
    ) -> Result<()> {
        let mut batch = Vec::new();
        let mut args = Vec::new();
        args.extend_from_slice(&0u16.to_be_bytes());
        shortstr(&mut args, "");
        shortstr(&mut args, queue);
        args.push(0);
        let body = vec![b'x'; body_size];
        let mut header = Vec::new();
        header.extend_from_slice(&60u16.to_be_bytes());
        header.extend_from_slice(&0u16.to_be_bytes());
        header.extend_from_slice(&(body.len() as u64).to_be_bytes());
        header.extend_from_slice(&0u16.to_be_bytes());
        for _ in 0..BATCH {
            method(&mut batch, 1, 60, 40, &args);
            frame(&mut batch, FRAME_HEADER, 1, &header);
            frame(&mut batch, FRAME_BODY, 1, &body);
        }
        while !stop.load(Ordering::Relaxed) && published.load(Ordering::Relaxed) < limit {
            self.stream.write_all(&batch).await?;
            published.fetch_add(BATCH, Ordering::Relaxed);
        }
        // Gone only once the broker read it all: a close, and its close-ok.
        let mut out = Vec::new();
        let mut args = Vec::new();
        args.extend_from_slice(&200u16.to_be_bytes());
        shortstr(&mut args, "done");
        args.extend_from_slice(&[0, 0, 0, 0]);
        method(&mut out, 0, 10, 50, &args);
        self.stream.write_all(&out).await?;
        self.expect(0, 10, 51).await.map(drop)
    }

    /// Consumes `queue` with no-ack and counts deliveries into `consumed` until the connection
    /// ends.
    pub(crate) async fn count(mut self, queue: &str, consumed: Arc<AtomicU64>) -> Result<()> {
        let mut args = Vec::new();
        args.extend_from_slice(&0u16.to_be_bytes());
        shortstr(&mut args, queue);
        shortstr(&mut args, "count");
        args.push(0b10); // no-ack
        args.extend_from_slice(&0u32.to_be_bytes());
        let mut out = Vec::new();
        method(&mut out, 1, 60, 20, &args);
        self.stream.write_all(&out).await?;
        self.expect(1, 60, 21).await?;
        // Counts method frames of class 60 method 60 across reads, skipping whole frames.
        let mut pending = std::mem::take(&mut self.buf);
        let mut chunk = vec![0u8; READ_CHUNK];
        loop {
            let mut at = 0;
            let mut delivered = 0;
            while let Some(head) = pending.get(at..at + 11) {
                let size = usize::try_from(u32::from_be_bytes(
                    head.get(3..7).and_then(|b| b.try_into().ok()).unwrap_or_default(),
                ))
                .unwrap_or(usize::MAX);
                if pending.len() < at + size + 8 {
                    break;
                }
                if head.first() == Some(&FRAME_METHOD) && head.get(7..11) == Some(&[0, 60, 0, 60]) {
                    delivered += 1;
                }
                at += size + 8;
            }
            pending.drain(..at.min(pending.len()));
            consumed.fetch_add(delivered, Ordering::Relaxed);
            let n = self.stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            pending.extend_from_slice(chunk.get(..n).unwrap_or_default());
        }
    }
}
