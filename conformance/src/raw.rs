//! A hand-written AMQP 0.9.1 frame builder and reader over a plain `TcpStream`.
//!
//! Malformed-input and handshake cases must send bytes no client library would produce, so this
//! module builds frames byte by byte (frame type, channel, size, payload, `0xCE`) and parses the
//! replies just enough to assert class/method ids and the reply code and text of
//! `connection.close` / `channel.close`. It deliberately does not use amq-protocol, which Charon
//! itself uses: the point is an independent view of the wire.

use crate::{broker::Broker, error::CaseError};
use std::time::Duration;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    time::Instant,
};

/// The AMQP 0.9.1 protocol header.
pub const PROTOCOL_HEADER: &[u8; 8] = b"AMQP\x00\x00\x09\x01";
/// Method frame type.
pub const FRAME_METHOD: u8 = 1;
/// Content header frame type.
pub const FRAME_HEADER: u8 = 2;
/// Content body frame type.
pub const FRAME_BODY: u8 = 3;
/// Heartbeat frame type.
pub const FRAME_HEARTBEAT: u8 = 8;
/// The frame-end octet.
pub const FRAME_END: u8 = 0xCE;

/// Byte-level encoder for method arguments and tables.
#[derive(Debug, Default, Clone)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }
    /// Appends an octet.
    pub fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    /// Appends a big-endian short.
    pub fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    /// Appends a big-endian long.
    pub fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    /// Appends a big-endian long long.
    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    /// Appends a shortstr (length octet + bytes; truncated to 255 bytes).
    pub fn shortstr(mut self, s: &str) -> Self {
        let b = s.as_bytes();
        let b = b.get(..b.len().min(255)).unwrap_or_default();
        self.0.push(u8::try_from(b.len()).unwrap_or(u8::MAX));
        self.0.extend_from_slice(b);
        self
    }
    /// Appends a longstr (length long + bytes).
    pub fn longstr(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(&u32::try_from(b.len()).unwrap_or(u32::MAX).to_be_bytes());
        self.0.extend_from_slice(b);
        self
    }
    /// Appends a field table given already-encoded `(name, type letter + value)` entries.
    pub fn table(mut self, entries: &[(&str, Vec<u8>)]) -> Self {
        let mut body = Enc::new();
        for (k, v) in entries {
            body = body.shortstr(k);
            body.0.extend_from_slice(v);
        }
        self.0.extend_from_slice(&u32::try_from(body.0.len()).unwrap_or(0).to_be_bytes());
        self.0.extend_from_slice(&body.0);
        self
    }
    /// Appends raw bytes.
    pub fn bytes(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
    /// The encoded bytes.
    pub fn done(self) -> Vec<u8> {
        self.0
    }
}

/// Field value `t` (boolean).
pub fn field_bool(v: bool) -> Vec<u8> {
    vec![b't', u8::from(v)]
}

/// Field value `S` (longstr).
pub fn field_longstr(s: &str) -> Vec<u8> {
    Enc::new().u8(b'S').longstr(s.as_bytes()).done()
}

/// Field value `F` (nested table).
pub fn field_table(entries: &[(&str, Vec<u8>)]) -> Vec<u8> {
    Enc::new().u8(b'F').table(entries).done()
}

/// A complete frame: type, channel, size, payload, frame-end.
pub fn frame(kind: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 8);
    out.push(kind);
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(&u32::try_from(payload.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(payload);
    out.push(FRAME_END);
    out
}

/// A method frame for `class.method` with already-encoded arguments.
pub fn method(channel: u16, class: u16, method: u16, args: &[u8]) -> Vec<u8> {
    let payload = Enc::new().u16(class).u16(method).bytes(args).done();
    frame(FRAME_METHOD, channel, &payload)
}

/// A basic-class content header frame with no properties.
pub fn content_header(channel: u16, body_size: u64) -> Vec<u8> {
    let payload = Enc::new().u16(60).u16(0).u64(body_size).u16(0).done();
    frame(FRAME_HEADER, channel, &payload)
}

/// A content body frame.
pub fn body(channel: u16, data: &[u8]) -> Vec<u8> {
    frame(FRAME_BODY, channel, data)
}

/// A heartbeat frame on the given channel (0 is the legal one).
pub fn heartbeat(channel: u16) -> Vec<u8> {
    frame(FRAME_HEARTBEAT, channel, &[])
}

/// `channel.open` on `channel`.
pub fn channel_open(channel: u16) -> Vec<u8> {
    method(channel, 20, 10, &Enc::new().shortstr("").done())
}

/// `queue.declare` of a server-named, exclusive, auto-delete queue (`passive=false`).
pub fn queue_declare_exclusive(channel: u16) -> Vec<u8> {
    let args = Enc::new()
        .u16(0)
        .shortstr("")
        .u8(0b0000_1100) // exclusive | auto-delete
        .table(&[])
        .done();
    method(channel, 50, 10, &args)
}

/// `basic.publish` to `exchange` with `routing_key` (no flags).
pub fn basic_publish(channel: u16, exchange: &str, routing_key: &str) -> Vec<u8> {
    let args = Enc::new().u16(0).shortstr(exchange).shortstr(routing_key).u8(0).done();
    method(channel, 60, 40, &args)
}

/// One frame as read off the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Frame type octet.
    pub kind: u8,
    /// Channel number.
    pub channel: u16,
    /// Payload (without the frame-end octet).
    pub payload: Vec<u8>,
}

impl Frame {
    /// `(class id, method id)` when this is a method frame.
    pub fn method_id(&self) -> Option<(u16, u16)> {
        if self.kind != FRAME_METHOD {
            return None;
        }
        let mut d = Dec::new(&self.payload);
        Some((d.u16().ok()?, d.u16().ok()?))
    }

    /// The method arguments after the class and method ids.
    pub fn args(&self) -> &[u8] {
        self.payload.get(4..).unwrap_or_default()
    }
}

/// What `connection.close` or `channel.close` carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseInfo {
    /// Reply code (e.g. 501).
    pub code: u16,
    /// Reply text, verbatim.
    pub text: String,
    /// Class id of the method that caused the close (0 if none).
    pub class_id: u16,
    /// Method id of the method that caused the close (0 if none).
    pub method_id: u16,
}

impl CloseInfo {
    /// Fails unless code, text, class id and method id all match.
    pub fn expect(&self, code: u16, text: &str, class_id: u16, method_id: u16) -> Result<(), CaseError> {
        let want = (code, text, class_id, method_id);
        let got = (self.code, self.text.as_str(), self.class_id, self.method_id);
        if want == got {
            Ok(())
        } else {
            Err(CaseError::new(format!("close (code, text, class, method): expected {want:?} got {got:?}")))
        }
    }
}

/// Values the broker offered in `connection.tune`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tune {
    /// Highest channel number the broker allows.
    pub channel_max: u16,
    /// Largest frame the broker accepts.
    pub frame_max: u32,
    /// Heartbeat interval in seconds the broker proposes.
    pub heartbeat: u16,
}

/// How the raw client negotiates during the handshake.
#[derive(Debug, Clone)]
pub struct Handshake {
    /// User for PLAIN.
    pub user: String,
    /// Password for PLAIN.
    pub password: String,
    /// Virtual host for `connection.open`.
    pub vhost: String,
    /// Channel max for tune-ok; `None` accepts the broker's.
    pub channel_max: Option<u16>,
    /// Frame max for tune-ok; `None` accepts the broker's.
    pub frame_max: Option<u32>,
    /// Heartbeat for tune-ok; defaults to 0 (off) so raw cases are not killed mid-way.
    pub heartbeat: u16,
    /// Advertise `authentication_failure_close` in the client capabilities.
    pub auth_failure_close: bool,
}

impl Handshake {
    /// The broker's credentials and vhost, heartbeats off, capabilities advertised.
    pub fn new(broker: &Broker) -> Self {
        Self {
            user: broker.user.clone(),
            password: broker.password.clone(),
            vhost: broker.vhost.clone(),
            channel_max: None,
            frame_max: None,
            heartbeat: 0,
            auth_failure_close: true,
        }
    }
}

/// A field table `{"a": {"a": ... {"a": 1}}}` with `tables` tables inside the outer one, its
/// length prefix first: nesting as deep as a test needs, built as bytes (a tree that deep
/// could not even be dropped on a small stack).
#[must_use]
pub fn nested_table(tables: u32) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(7 * tables + 7).to_be_bytes());
    for i in 0..tables {
        out.extend_from_slice(&[1, b'a', b'F']);
        out.extend_from_slice(&(7 * (tables - i)).to_be_bytes());
    }
    out.extend_from_slice(&[1, b'a', b'I', 0, 0, 0, 1]);
    out
}

/// A raw AMQP connection: a socket plus a read buffer.
#[derive(Debug)]
pub struct RawConn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Tune values the broker offered (after [`RawConn::open`]).
    pub tune: Option<Tune>,
}

/// Default wait for a reply frame.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

impl RawConn {
    /// Opens the TCP connection only.
    pub async fn connect(broker: &Broker) -> Result<Self, CaseError> {
        let stream = TcpStream::connect(broker.addr()).await?;
        stream.set_nodelay(true)?;
        Ok(Self { stream, buf: Vec::new(), tune: None })
    }

    /// Connects and runs the whole handshake up to `connection.open-ok`.
    pub async fn open(broker: &Broker, hs: &Handshake) -> Result<Self, CaseError> {
        let mut c = Self::connect(broker).await?;
        c.send(PROTOCOL_HEADER).await?;
        c.expect_method(0, 10, 10).await?;
        c.send_start_ok(hs).await?;
        let tune = c.expect_tune().await?;
        c.send_tune_ok(hs, tune).await?;
        c.send_open(&hs.vhost).await?;
        c.expect_method(0, 10, 41).await?;
        Ok(c)
    }

    /// Connects with the URL's credentials, opens the connection and channel 1.
    pub async fn open_with_channel(broker: &Broker) -> Result<Self, CaseError> {
        let mut c = Self::open(broker, &Handshake::new(broker)).await?;
        c.send(&channel_open(1)).await?;
        c.expect_method(1, 20, 11).await?;
        Ok(c)
    }

    /// Writes bytes as they are.
    pub async fn send(&mut self, bytes: &[u8]) -> Result<(), CaseError> {
        self.stream.write_all(bytes).await.map_err(|e| CaseError::new(format!("write failed: {e}")))
    }

    /// Sends `connection.start-ok` with PLAIN credentials.
    pub async fn send_start_ok(&mut self, hs: &Handshake) -> Result<(), CaseError> {
        let mut caps = vec![
            ("publisher_confirms", field_bool(true)),
            ("consumer_cancel_notify", field_bool(true)),
            ("basic.nack", field_bool(true)),
        ];
        if hs.auth_failure_close {
            caps.push(("authentication_failure_close", field_bool(true)));
        }
        let props = [("product", field_longstr("charon-conformance-raw")), ("capabilities", field_table(&caps))];
        let mut response = vec![0u8];
        response.extend_from_slice(hs.user.as_bytes());
        response.push(0);
        response.extend_from_slice(hs.password.as_bytes());
        let args = Enc::new().table(&props).shortstr("PLAIN").longstr(&response).shortstr("en_US").done();
        self.send(&method(0, 10, 11, &args)).await
    }

    /// Reads `connection.tune` and records it.
    pub async fn expect_tune(&mut self) -> Result<Tune, CaseError> {
        let f = self.expect_method(0, 10, 30).await?;
        let mut d = Dec::new(f.args());
        let tune = Tune { channel_max: d.u16()?, frame_max: d.u32()?, heartbeat: d.u16()? };
        self.tune = Some(tune);
        Ok(tune)
    }

    /// Sends `connection.tune-ok`, using the handshake's overrides or the broker's offer.
    pub async fn send_tune_ok(&mut self, hs: &Handshake, tune: Tune) -> Result<(), CaseError> {
        let args = Enc::new()
            .u16(hs.channel_max.unwrap_or(tune.channel_max))
            .u32(hs.frame_max.unwrap_or(tune.frame_max))
            .u16(hs.heartbeat)
            .done();
        self.send(&method(0, 10, 31, &args)).await
    }

    /// Sends `connection.open` for `vhost`.
    pub async fn send_open(&mut self, vhost: &str) -> Result<(), CaseError> {
        let args = Enc::new().shortstr(vhost).shortstr("").u8(0).done();
        self.send(&method(0, 10, 40, &args)).await
    }

    /// Reads one frame. `Ok(None)` means the broker closed the socket (EOF or reset).
    pub async fn read_frame(&mut self, timeout: Duration) -> Result<Option<Frame>, CaseError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(f) = self.take_frame()? {
                return Ok(Some(f));
            }
            if !self.fill(deadline).await? {
                return Ok(None);
            }
        }
    }

    fn take_frame(&mut self) -> Result<Option<Frame>, CaseError> {
        let Some(head) = self.buf.get(..7) else {
            return Ok(None);
        };
        let mut d = Dec::new(head);
        let kind = d.u8()?;
        let channel = d.u16()?;
        let size = usize::try_from(d.u32()?).unwrap_or(usize::MAX);
        let total = size.saturating_add(8);
        if self.buf.len() < total {
            return Ok(None);
        }
        let payload = self.buf.get(7..7 + size).unwrap_or_default().to_vec();
        let end = self.buf.get(7 + size).copied();
        self.buf.drain(..total);
        if end != Some(FRAME_END) {
            return Err(CaseError::new(format!("broker sent a frame with end byte {end:?}, not 0xCE")));
        }
        Ok(Some(Frame { kind, channel, payload }))
    }

    /// Reads more bytes; `Ok(false)` on EOF or connection reset, error on timeout.
    async fn fill(&mut self, deadline: Instant) -> Result<bool, CaseError> {
        self.buf.reserve(65536);
        match tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.buf)).await {
            Err(_) => Err(CaseError::new("timed out waiting for the broker")),
            Ok(Ok(0)) => Ok(false),
            Ok(Ok(_)) => Ok(true),
            Ok(Err(e)) if is_reset(&e) => Ok(false),
            Ok(Err(e)) => Err(e.into()),
        }
    }

    /// Reads everything until the broker closes the socket; fails if it stays open.
    pub async fn read_until_eof(&mut self, timeout: Duration) -> Result<Vec<u8>, CaseError> {
        let deadline = Instant::now() + timeout;
        while self.fill(deadline).await.map_err(|e| e.context("waiting for the broker to close the socket"))? {}
        Ok(std::mem::take(&mut self.buf))
    }

    /// Reads the next non-heartbeat frame and fails unless it is `class.method` on `channel`.
    pub async fn expect_method(&mut self, channel: u16, class: u16, method: u16) -> Result<Frame, CaseError> {
        loop {
            let f = self.read_frame(REPLY_TIMEOUT).await?.ok_or_else(|| {
                CaseError::new(format!("expected method {class}.{method} on channel {channel}, but the socket closed"))
            })?;
            if f.kind == FRAME_HEARTBEAT {
                continue;
            }
            if let Some((10, 50)) = f.method_id() {
                let info = parse_close(&f)?;
                return Err(CaseError::new(format!(
                    "expected method {class}.{method} on channel {channel}, got connection.close {info:?}"
                )));
            }
            if f.channel == channel && f.method_id() == Some((class, method)) {
                return Ok(f);
            }
            return Err(CaseError::new(format!(
                "expected method {class}.{method} on channel {channel}, got frame type {} channel {} method {:?}",
                f.kind,
                f.channel,
                f.method_id()
            )));
        }
    }

    /// Waits for `connection.close`, answers close-ok, and checks the socket then closes.
    pub async fn expect_connection_close(&mut self) -> Result<CloseInfo, CaseError> {
        let info = self.wait_close(0, (10, 50)).await?;
        self.send(&method(0, 10, 51, &[])).await?;
        self.read_until_eof(REPLY_TIMEOUT).await?;
        Ok(info)
    }

    /// Waits for a `connection.close` the broker forces (320): RabbitMQ drops the socket right
    /// after sending it, so no close-ok is written.
    pub async fn expect_forced_close(&mut self) -> Result<CloseInfo, CaseError> {
        self.wait_close(0, (10, 50)).await
    }

    /// Waits for `channel.close` on `channel` and answers close-ok.
    pub async fn expect_channel_close(&mut self, channel: u16) -> Result<CloseInfo, CaseError> {
        let info = self.wait_close(channel, (20, 40)).await?;
        self.send(&method(channel, 20, 41, &[])).await?;
        Ok(info)
    }

    async fn wait_close(&mut self, channel: u16, ids: (u16, u16)) -> Result<CloseInfo, CaseError> {
        loop {
            let f = self.read_frame(REPLY_TIMEOUT).await?.ok_or_else(|| {
                CaseError::new(format!("expected close method {ids:?}, but the socket closed without a close frame"))
            })?;
            match f.method_id() {
                Some(id) if id == ids && f.channel == channel => return parse_close(&f),
                Some((10, 50)) => {
                    return Err(CaseError::new(format!(
                        "expected close {ids:?} on channel {channel}, got connection.close {:?}",
                        parse_close(&f)?
                    )));
                }
                _ if f.kind == FRAME_HEARTBEAT => {}
                other => {
                    return Err(CaseError::new(format!(
                        "expected close {ids:?} on channel {channel}, got frame type {} channel {} method {other:?}",
                        f.kind, f.channel
                    )));
                }
            }
        }
    }

    /// Fails unless the broker closes the socket without sending any frame first.
    pub async fn expect_silent_drop(&mut self, timeout: Duration) -> Result<(), CaseError> {
        loop {
            match self.read_frame(timeout).await? {
                None => return Ok(()),
                Some(f) if f.kind == FRAME_HEARTBEAT => {}
                Some(f) => {
                    let detail = match f.method_id() {
                        Some((10, 50)) => format!("connection.close {:?}", parse_close(&f)?),
                        other => format!("frame type {} method {other:?}", f.kind),
                    };
                    return Err(CaseError::new(format!(
                        "expected the socket to be dropped without a frame, got {detail}"
                    )));
                }
            }
        }
    }
}

fn is_reset(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::BrokenPipe
    )
}

/// Parses the arguments of `connection.close` or `channel.close`.
pub fn parse_close(f: &Frame) -> Result<CloseInfo, CaseError> {
    let mut d = Dec::new(f.args());
    Ok(CloseInfo { code: d.u16()?, text: d.shortstr()?, class_id: d.u16()?, method_id: d.u16()? })
}

/// A bounds-checked big-endian reader.
#[derive(Debug)]
pub struct Dec<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Dec<'a> {
    /// Reads from the start of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }
    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], CaseError> {
        let s = self
            .data
            .get(self.pos..self.pos.saturating_add(n))
            .ok_or_else(|| CaseError::new("broker frame shorter than expected"))?;
        self.pos += n;
        Ok(s)
    }
    /// An octet.
    pub fn u8(&mut self) -> Result<u8, CaseError> {
        Ok(self.take(1)?.first().copied().unwrap_or_default())
    }
    /// A short.
    pub fn u16(&mut self) -> Result<u16, CaseError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes(b.try_into().unwrap_or_default()))
    }
    /// A long.
    pub fn u32(&mut self) -> Result<u32, CaseError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes(b.try_into().unwrap_or_default()))
    }
    /// A long long.
    pub fn u64(&mut self) -> Result<u64, CaseError> {
        let b = self.take(8)?;
        Ok(u64::from_be_bytes(b.try_into().unwrap_or_default()))
    }
    /// A shortstr (lossy UTF-8).
    pub fn shortstr(&mut self) -> Result<String, CaseError> {
        let n = usize::from(self.u8()?);
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
}
