//! A raw AMQP 1.0 peer over a plain `TcpStream`: headers, SASL, open, and frame I/O.

use super::codec::{self, AMQP_HEADER, SASL_HEADER, TYPE_AMQP, TYPE_SASL};
use crate::{broker::Broker, error::CaseError};
use fe2o3_amqp::frames::sasl::Frame as SaslFrame;
use fe2o3_amqp_types::{
    definitions::Error as AmqpError,
    performatives::{ChannelMax, Close, MaxFrameSize, Open, Performative},
    primitives::Binary,
    sasl::{SaslCode, SaslInit},
};
use std::{collections::VecDeque, time::Duration};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    time::Instant,
};

/// Default wait for a frame the broker must send.
pub const WAIT: Duration = Duration::from_secs(5);
/// Wait for the broker's open: longer, since a busy broker (or one still delaying a refused
/// SASL exchange elsewhere) can take a few seconds to get there.
const OPEN_WAIT: Duration = Duration::from_secs(10);

/// What a received frame carried.
#[derive(Debug)]
pub enum Body {
    /// An AMQP performative and the payload after it (transfers only).
    Perf(Box<Performative>, Vec<u8>),
    /// A SASL frame.
    Sasl(Box<SaslFrame>),
    /// An empty frame (heartbeat).
    Empty,
}

/// One received frame.
#[derive(Debug)]
pub struct Frame {
    /// Channel number from the frame header.
    pub channel: u16,
    /// Decoded body.
    pub body: Body,
}

/// Per-session transfer counters, for flow frames.
#[derive(Debug, Default, Clone, Copy)]
pub struct SessionIds {
    /// Transfer id of the next transfer this peer sends.
    pub next_outgoing: u32,
    /// Transfer id expected on the next incoming transfer.
    pub next_incoming: u32,
}

/// A raw connection: reads whole frames, remembers the broker's open, and can put frames back.
#[derive(Debug)]
pub struct Conn10 {
    stream: TcpStream,
    buf: Vec<u8>,
    pending: VecDeque<Frame>,
    /// The broker's open, once received.
    pub remote_open: Option<Open>,
    /// Transfer counters per channel.
    pub sessions: std::collections::HashMap<u16, SessionIds>,
    /// Largest frame this peer sends (from the broker's open).
    pub max_frame: usize,
    /// Delivery-count per receiving link `(channel, handle)`, as this receiver knows it.
    pub delivery_counts: std::collections::HashMap<(u16, u32), u32>,
}

impl Conn10 {
    /// Opens the TCP connection only.
    pub async fn connect(broker: &Broker) -> Result<Self, CaseError> {
        let stream = TcpStream::connect(broker.addr()).await?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            buf: Vec::new(),
            pending: VecDeque::new(),
            remote_open: None,
            sessions: Default::default(),
            max_frame: 512,
            delivery_counts: Default::default(),
        })
    }

    /// SASL PLAIN with the broker's credentials, then AMQP open with `open`.
    pub async fn open_with(broker: &Broker, open: Open) -> Result<Self, CaseError> {
        let mut c = Self::connect(broker).await?;
        let code = c.sasl(&plain(&broker.user, &broker.password)).await?;
        if code != 0 {
            return Err(CaseError::new(format!("SASL PLAIN refused with code {code}")));
        }
        c.amqp_open(open).await?;
        Ok(c)
    }

    /// SASL PLAIN + a default open (`vhost:<vhost>`, max-frame-size 1 MiB).
    pub async fn open(broker: &Broker) -> Result<Self, CaseError> {
        Self::open_with(broker, default_open(broker)).await
    }

    /// Writes raw bytes.
    pub async fn send(&mut self, bytes: &[u8]) -> Result<(), CaseError> {
        self.stream.write_all(bytes).await?;
        Ok(())
    }

    /// Sends a performative (no payload).
    pub async fn perf<T: serde::Serialize>(&mut self, channel: u16, p: &T) -> Result<(), CaseError> {
        let f = codec::perf(channel, p, &[])?;
        self.send(&f).await
    }

    /// Reads exactly `n` bytes, or `None` on EOF before any of them.
    async fn fill(&mut self, n: usize, deadline: Instant) -> Result<bool, CaseError> {
        while self.buf.len() < n {
            self.buf.reserve(65536);
            let read = tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.buf))
                .await
                .map_err(|_| CaseError::new("timed out waiting for the broker"))?;
            match read {
                Ok(0) => return Ok(false),
                Ok(_) => {}
                // A reset after the broker closed counts as EOF.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(false),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(true)
    }

    /// Reads an 8-byte protocol header.
    pub async fn read_header(&mut self, timeout: Duration) -> Result<[u8; 8], CaseError> {
        let deadline = Instant::now() + timeout;
        if !self.fill(8, deadline).await? {
            return Err(CaseError::new(format!("connection closed before a protocol header (got {:?})", self.buf)));
        }
        let mut h = [0u8; 8];
        h.copy_from_slice(self.buf.get(..8).unwrap_or(&[0; 8]));
        self.buf.drain(..8);
        Ok(h)
    }

    /// Reads the next frame, `None` on EOF. Heartbeats are returned as [`Body::Empty`].
    pub async fn read_raw(&mut self, timeout: Duration) -> Result<Option<Frame>, CaseError> {
        if let Some(f) = self.pending.pop_front() {
            return Ok(Some(f));
        }
        let deadline = Instant::now() + timeout;
        if !self.fill(8, deadline).await? {
            return Ok(None);
        }
        let head: [u8; 8] =
            self.buf.get(..8).and_then(|s| s.try_into().ok()).ok_or_else(|| CaseError::new("short frame header"))?;
        let size = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let doff = usize::from(head[4]) * 4;
        let kind = head[5];
        let channel = u16::from_be_bytes([head[6], head[7]]);
        if size < 8 || doff < 8 || doff > size {
            return Err(CaseError::new(format!("bad frame header {head:02x?}")));
        }
        if !self.fill(size, deadline).await? {
            return Ok(None);
        }
        let body: Vec<u8> = self.buf.get(doff..size).unwrap_or_default().to_vec();
        self.buf.drain(..size);
        let body = if body.is_empty() {
            Body::Empty
        } else if kind == TYPE_SASL {
            let f: SaslFrame =
                serde_amqp::from_slice(&body).map_err(|e| CaseError::new(format!("SASL frame decode: {e}")))?;
            Body::Sasl(Box::new(f))
        } else if kind == TYPE_AMQP {
            let n = codec::value_len(&body)?;
            let p: Performative = serde_amqp::from_slice(body.get(..n).unwrap_or_default())
                .map_err(|e| CaseError::new(format!("performative decode: {e} ({body:02x?})")))?;
            if let Performative::Transfer(t) = &p {
                let ids = self.sessions.entry(channel).or_default();
                ids.next_incoming = ids.next_incoming.wrapping_add(1);
                if let (Some(_), Some(dc)) = (t.delivery_id, self.delivery_counts.get_mut(&(channel, t.handle.0))) {
                    *dc = dc.wrapping_add(1);
                }
            }
            Body::Perf(Box::new(p), body.get(n..).unwrap_or_default().to_vec())
        } else {
            return Err(CaseError::new(format!("unknown frame type {kind}")));
        };
        if trace() {
            eprintln!("<- ch{channel} {body:?}");
        }
        Ok(Some(Frame { channel, body }))
    }

    /// The next performative (heartbeats skipped), failing on EOF or timeout.
    pub async fn next(&mut self, timeout: Duration) -> Result<(u16, Performative, Vec<u8>), CaseError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.read_raw(left).await? {
                None => return Err(CaseError::new("connection closed by the broker")),
                Some(Frame { body: Body::Empty, .. }) => {}
                Some(Frame { body: Body::Sasl(s), .. }) => {
                    return Err(CaseError::new(format!("unexpected SASL frame {s:?}")));
                }
                Some(Frame { channel, body: Body::Perf(p, payload) }) => return Ok((channel, *p, payload)),
            }
        }
    }

    /// Reads performatives until `pick` accepts one; the others are kept for later reads.
    pub async fn expect<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut pick: impl FnMut(u16, &Performative, &[u8]) -> Option<T>,
    ) -> Result<T, CaseError> {
        let deadline = Instant::now() + timeout;
        let mut skipped = VecDeque::new();
        let mut seen = Vec::new();
        let out = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left).await {
                Ok((ch, p, payload)) => {
                    if let Some(t) = pick(ch, &p, &payload) {
                        break Ok(t);
                    }
                    seen.push(format!("ch{ch} {}", short(&p)));
                    skipped.push_back(Frame { channel: ch, body: Body::Perf(Box::new(p), payload) });
                }
                Err(e) => break Err(e.context(&format!("waiting for {what} (saw {seen:?})"))),
            }
        };
        skipped.append(&mut self.pending);
        self.pending = skipped;
        out
    }

    /// SASL: header exchange, mechanisms, the given init; returns the outcome code.
    pub async fn sasl(&mut self, init: &SaslInit) -> Result<u8, CaseError> {
        self.send(SASL_HEADER).await?;
        let h = self.read_header(WAIT).await?;
        if &h != SASL_HEADER {
            return Err(CaseError::new(format!("expected the SASL header back, got {h:?}")));
        }
        let mechs = self.read_raw(WAIT).await?;
        if !matches!(mechs, Some(Frame { body: Body::Sasl(ref m), .. }) if matches!(**m, SaslFrame::Mechanisms(_))) {
            return Err(CaseError::new(format!("expected sasl-mechanisms, got {mechs:?}")));
        }
        self.send(&codec::frame(TYPE_SASL, 0, &codec::encode(init)?)).await?;
        match self.read_raw(Duration::from_secs(6)).await? {
            Some(Frame { body: Body::Sasl(s), .. }) => match *s {
                SaslFrame::Outcome(o) => Ok(sasl_code(&o.code)),
                other => Err(CaseError::new(format!("expected sasl-outcome, got {other:?}"))),
            },
            other => Err(CaseError::new(format!("expected sasl-outcome, got {other:?}"))),
        }
    }

    /// The SASL mechanisms the broker offers (as symbols), after sending the SASL header.
    pub async fn sasl_mechanisms(&mut self) -> Result<Vec<String>, CaseError> {
        self.send(SASL_HEADER).await?;
        let h = self.read_header(WAIT).await?;
        if &h != SASL_HEADER {
            return Err(CaseError::new(format!("expected the SASL header back, got {h:?}")));
        }
        match self.read_raw(WAIT).await? {
            Some(Frame { body: Body::Sasl(s), .. }) => match *s {
                SaslFrame::Mechanisms(m) => Ok(m.sasl_server_mechanisms.0.into_iter().map(|s| s.0).collect()),
                other => Err(CaseError::new(format!("expected sasl-mechanisms, got {other:?}"))),
            },
            other => Err(CaseError::new(format!("expected sasl-mechanisms, got {other:?}"))),
        }
    }

    /// AMQP header exchange and open; stores and returns the broker's open.
    pub async fn amqp_open(&mut self, open: Open) -> Result<Open, CaseError> {
        self.send(AMQP_HEADER).await?;
        let h = self.read_header(WAIT).await?;
        if &h != AMQP_HEADER {
            return Err(CaseError::new(format!("expected the AMQP header back, got {h:?}")));
        }
        self.perf(0, &open).await?;
        let got = self
            .expect("open", OPEN_WAIT, |_, p, _| match p {
                Performative::Open(o) => Some(o.clone()),
                _ => None,
            })
            .await?;
        self.max_frame = usize::try_from(got.max_frame_size.0).unwrap_or(usize::MAX).min(1 << 20);
        self.remote_open = Some(got.clone());
        Ok(got)
    }

    /// Waits for a close from the broker and returns its error.
    pub async fn expect_close(&mut self, timeout: Duration) -> Result<Option<AmqpError>, CaseError> {
        self.expect("close", timeout, |_, p, _| match p {
            Performative::Close(c) => Some(c.error.clone()),
            _ => None,
        })
        .await
    }

    /// Sends close and waits for the broker's close.
    pub async fn close(&mut self) -> Result<(), CaseError> {
        self.perf(0, &Close { error: None }).await?;
        let err = self.expect_close(WAIT).await?;
        match err {
            None => Ok(()),
            Some(e) => Err(CaseError::new(format!("close answered with error {e:?}"))),
        }
    }

    /// Waits until the broker closes the socket, returning every performative seen before.
    pub async fn read_until_eof(&mut self, timeout: Duration) -> Result<Vec<Performative>, CaseError> {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.read_raw(left).await {
                Ok(None) => return Ok(seen),
                Ok(Some(Frame { body: Body::Perf(p, _), .. })) => seen.push(*p),
                Ok(Some(_)) => {}
                Err(e) => {
                    return Err(e.context(&format!(
                        "socket still open after {} ms (saw {:?})",
                        timeout.as_millis(),
                        seen.iter().map(short).collect::<Vec<_>>()
                    )));
                }
            }
        }
    }
}

/// Whether `RAW10_TRACE` is set: every received frame is printed to stderr (debugging aid).
fn trace() -> bool {
    std::env::var_os("RAW10_TRACE").is_some()
}

/// A SASL PLAIN init for `user` / `password`.
pub fn plain(user: &str, password: &str) -> SaslInit {
    let mut resp = vec![0u8];
    resp.extend_from_slice(user.as_bytes());
    resp.push(0);
    resp.extend_from_slice(password.as_bytes());
    SaslInit { mechanism: "PLAIN".into(), initial_response: Some(Binary::from(resp)), hostname: None }
}

/// The open the raw peer sends by default: hostname `vhost:<vhost>`, max-frame-size 1 MiB.
pub fn default_open(broker: &Broker) -> Open {
    Open {
        container_id: "conformance-raw10".into(),
        hostname: Some(format!("vhost:{}", broker.vhost)),
        max_frame_size: MaxFrameSize(1 << 20),
        channel_max: ChannelMax(255),
        idle_time_out: None,
        outgoing_locales: None,
        incoming_locales: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

/// The wire byte of a SASL code.
pub fn sasl_code(code: &SaslCode) -> u8 {
    match code {
        SaslCode::Ok => 0,
        SaslCode::Auth => 1,
        SaslCode::Sys => 2,
        SaslCode::SysPerm => 3,
        SaslCode::SysTemp => 4,
    }
}

/// A short name of a performative for messages.
pub fn short(p: &Performative) -> String {
    match p {
        Performative::Open(_) => "open".into(),
        Performative::Begin(_) => "begin".into(),
        Performative::Attach(a) => format!("attach({})", a.handle.0),
        Performative::Flow(f) => format!(
            "flow(handle {:?}, dc {:?}, credit {:?}, drain {})",
            f.handle.as_ref().map(|h| h.0),
            f.delivery_count,
            f.link_credit,
            f.drain
        ),
        Performative::Transfer(t) => format!("transfer({})", t.handle.0),
        Performative::Disposition(d) => format!("disposition({:?})", d.state),
        Performative::Detach(d) => format!("detach({}, {:?})", d.handle.0, d.error),
        Performative::End(e) => format!("end({:?})", e.error),
        Performative::Close(c) => format!("close({:?})", c.error),
    }
}
