//! A raw AMQP 0.9.1 client with exact field types and header order (lapin's tables are sorted
//! maps): `basic.publish` with confirms, `basic.get`, `basic.ack` / `basic.reject` by hand.

use crate::raw::{self, RawConn};
use crate::wire::Settle;
use crate::{CaseError, CaseResult, Ctx, check};

/// A 0.9.1 field value with its exact type letter.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::cases) enum F {
    /// `t`
    Bool(bool),
    /// `b`
    I8(i8),
    /// `B`
    U8(u8),
    /// `s`
    I16(i16),
    /// `u`
    U16(u16),
    /// `I`
    I32(i32),
    /// `i`
    U32(u32),
    /// `l`
    I64(i64),
    /// `f`
    F32(f32),
    /// `d`
    F64(f64),
    /// `D`: scale, value.
    Decimal(u8, u32),
    /// `S` (lossy UTF-8).
    S(String),
    /// `x`
    Bytes(Vec<u8>),
    /// `T` (seconds).
    T(u64),
    /// `A`
    A(Vec<F>),
    /// `F`, in wire order.
    Table(Vec<(String, F)>),
    /// `V`
    Void,
}

impl F {
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            Self::Bool(b) => out.extend([b't', u8::from(*b)]),
            Self::I8(v) => out.extend([b'b', v.to_be_bytes()[0]]),
            Self::U8(v) => out.extend([b'B', *v]),
            Self::I16(v) => tagged(out, b's', &v.to_be_bytes()),
            Self::U16(v) => tagged(out, b'u', &v.to_be_bytes()),
            Self::I32(v) => tagged(out, b'I', &v.to_be_bytes()),
            Self::U32(v) => tagged(out, b'i', &v.to_be_bytes()),
            Self::I64(v) => tagged(out, b'l', &v.to_be_bytes()),
            Self::F32(v) => tagged(out, b'f', &v.to_be_bytes()),
            Self::F64(v) => tagged(out, b'd', &v.to_be_bytes()),
            Self::Decimal(scale, v) => {
                out.extend([b'D', *scale]);
                out.extend(v.to_be_bytes());
            }
            Self::S(s) => {
                out.push(b'S');
                put_long_bytes(out, s.as_bytes());
            }
            Self::Bytes(b) => {
                out.push(b'x');
                put_long_bytes(out, b);
            }
            Self::T(v) => tagged(out, b'T', &v.to_be_bytes()),
            Self::A(items) => {
                let mut body = Vec::new();
                for item in items {
                    item.put(&mut body);
                }
                out.push(b'A');
                put_long_bytes(out, &body);
            }
            Self::Table(entries) => {
                out.push(b'F');
                put_table(out, entries);
            }
            Self::Void => out.push(b'V'),
        }
    }
}

fn tagged(out: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
    out.push(tag);
    out.extend_from_slice(bytes);
}

fn put_long_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend(u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn put_short(out: &mut Vec<u8>, s: &str) {
    let b = s.as_bytes();
    let b = b.get(..b.len().min(255)).unwrap_or_default();
    out.push(u8::try_from(b.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(b);
}

fn put_table(out: &mut Vec<u8>, entries: &[(String, F)]) {
    let mut body = Vec::new();
    for (k, v) in entries {
        put_short(&mut body, k);
        v.put(&mut body);
    }
    put_long_bytes(out, &body);
}

/// A bounds-checked reader of 0.9.1 fields.
struct Rd<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Rd<'a> {
    fn new(b: &'a [u8]) -> Self {
        Self { b, at: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], CaseError> {
        let s =
            self.b.get(self.at..self.at.saturating_add(n)).ok_or_else(|| CaseError::new("truncated 0.9.1 frame"))?;
        self.at += n;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], CaseError> {
        self.take(N)?.try_into().map_err(|_| CaseError::new("truncated 0.9.1 frame"))
    }
    fn u8(&mut self) -> Result<u8, CaseError> {
        Ok(u8::from_be_bytes(self.arr()?))
    }
    fn u16(&mut self) -> Result<u16, CaseError> {
        Ok(u16::from_be_bytes(self.arr()?))
    }
    fn u32(&mut self) -> Result<u32, CaseError> {
        Ok(u32::from_be_bytes(self.arr()?))
    }
    fn u64(&mut self) -> Result<u64, CaseError> {
        Ok(u64::from_be_bytes(self.arr()?))
    }
    fn short(&mut self) -> Result<String, CaseError> {
        let n = usize::from(self.u8()?);
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
    fn long_bytes(&mut self) -> Result<&'a [u8], CaseError> {
        let n = usize::try_from(self.u32()?).unwrap_or(usize::MAX);
        self.take(n)
    }
    fn done(&self) -> bool {
        self.at >= self.b.len()
    }
    fn field(&mut self) -> Result<F, CaseError> {
        let tag = self.u8()?;
        Ok(match tag {
            b't' => F::Bool(self.u8()? != 0),
            b'b' => F::I8(i8::from_be_bytes(self.arr()?)),
            b'B' => F::U8(self.u8()?),
            b's' => F::I16(i16::from_be_bytes(self.arr()?)),
            b'u' => F::U16(self.u16()?),
            b'I' => F::I32(i32::from_be_bytes(self.arr()?)),
            b'i' => F::U32(self.u32()?),
            b'l' => F::I64(i64::from_be_bytes(self.arr()?)),
            b'f' => F::F32(f32::from_be_bytes(self.arr()?)),
            b'd' => F::F64(f64::from_be_bytes(self.arr()?)),
            b'D' => F::Decimal(self.u8()?, self.u32()?),
            b'S' => F::S(String::from_utf8_lossy(self.long_bytes()?).into_owned()),
            b'x' => F::Bytes(self.long_bytes()?.to_vec()),
            b'T' => F::T(self.u64()?),
            b'A' => {
                let mut inner = Rd::new(self.long_bytes()?);
                let mut items = Vec::new();
                while !inner.done() {
                    items.push(inner.field()?);
                }
                F::A(items)
            }
            b'F' => F::Table(self.table()?),
            b'V' => F::Void,
            other => return Err(CaseError::new(format!("unknown 0.9.1 field type {:?}", char::from(other)))),
        })
    }
    fn table(&mut self) -> Result<Vec<(String, F)>, CaseError> {
        let mut inner = Rd::new(self.long_bytes()?);
        let mut entries = Vec::new();
        while !inner.done() {
            let key = inner.short()?;
            entries.push((key, inner.field()?));
        }
        Ok(entries)
    }
}

/// Basic properties with the headers in wire order.
#[derive(Clone, Debug, Default, PartialEq)]
pub(in crate::cases) struct Props {
    pub(in crate::cases) content_type: Option<String>,
    pub(in crate::cases) content_encoding: Option<String>,
    pub(in crate::cases) headers: Option<Vec<(String, F)>>,
    pub(in crate::cases) delivery_mode: Option<u8>,
    pub(in crate::cases) priority: Option<u8>,
    pub(in crate::cases) correlation_id: Option<String>,
    pub(in crate::cases) reply_to: Option<String>,
    pub(in crate::cases) expiration: Option<String>,
    pub(in crate::cases) message_id: Option<String>,
    pub(in crate::cases) timestamp: Option<u64>,
    pub(in crate::cases) kind: Option<String>,
    pub(in crate::cases) user_id: Option<String>,
    pub(in crate::cases) app_id: Option<String>,
}

impl Props {
    fn encode(&self) -> Vec<u8> {
        fn short(v: &Option<String>, bit: u16, flags: &mut u16, out: &mut Vec<u8>) {
            if let Some(s) = v {
                *flags |= 1 << bit;
                put_short(out, s);
            }
        }
        let mut flags = 0u16;
        let mut out = Vec::new();
        short(&self.content_type, 15, &mut flags, &mut out);
        short(&self.content_encoding, 14, &mut flags, &mut out);
        if let Some(h) = &self.headers {
            flags |= 1 << 13;
            put_table(&mut out, h);
        }
        if let Some(v) = self.delivery_mode {
            flags |= 1 << 12;
            out.push(v);
        }
        if let Some(v) = self.priority {
            flags |= 1 << 11;
            out.push(v);
        }
        short(&self.correlation_id, 10, &mut flags, &mut out);
        short(&self.reply_to, 9, &mut flags, &mut out);
        short(&self.expiration, 8, &mut flags, &mut out);
        short(&self.message_id, 7, &mut flags, &mut out);
        if let Some(v) = self.timestamp {
            flags |= 1 << 6;
            out.extend(v.to_be_bytes());
        }
        short(&self.kind, 5, &mut flags, &mut out);
        short(&self.user_id, 4, &mut flags, &mut out);
        short(&self.app_id, 3, &mut flags, &mut out);
        let mut all = flags.to_be_bytes().to_vec();
        all.extend(out);
        all
    }

    fn decode(r: &mut Rd<'_>) -> Result<Self, CaseError> {
        let flags = r.u16()?;
        check!(flags & 1 == 0, "property flags continue past one word: {flags:#06x}");
        let has = |bit: u16| flags & (1 << bit) != 0;
        let mut p = Self::default();
        let short = |bit: u16, r: &mut Rd<'_>| if has(bit) { r.short().map(Some) } else { Ok(None) };
        p.content_type = short(15, r)?;
        p.content_encoding = short(14, r)?;
        p.headers = if has(13) { Some(r.table()?) } else { None };
        p.delivery_mode = if has(12) { Some(r.u8()?) } else { None };
        p.priority = if has(11) { Some(r.u8()?) } else { None };
        p.correlation_id = short(10, r)?;
        p.reply_to = short(9, r)?;
        p.expiration = short(8, r)?;
        p.message_id = short(7, r)?;
        p.timestamp = if has(6) { Some(r.u64()?) } else { None };
        p.kind = short(5, r)?;
        p.user_id = short(4, r)?;
        p.app_id = short(3, r)?;
        Ok(p)
    }
}

/// A message taken with `basic.get`.
#[derive(Clone, Debug)]
pub(in crate::cases) struct Got091 {
    pub(in crate::cases) tag: u64,
    pub(in crate::cases) redelivered: bool,
    pub(in crate::cases) exchange: String,
    pub(in crate::cases) routing_key: String,
    pub(in crate::cases) props: Props,
    pub(in crate::cases) body: Vec<u8>,
}

impl Got091 {
    /// One header, by name.
    pub(in crate::cases) fn header(&self, name: &str) -> Option<&F> {
        self.props.headers.as_ref()?.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// The `x-death` entries as tables in wire order.
    pub(in crate::cases) fn x_death(&self) -> Vec<Vec<(String, F)>> {
        match self.header("x-death") {
            Some(F::A(items)) => items
                .iter()
                .filter_map(|i| match i {
                    F::Table(t) => Some(t.clone()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Field `name` of `x-death[i]`.
    pub(in crate::cases) fn x_death_field(&self, i: usize, name: &str) -> Option<F> {
        self.x_death().get(i)?.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }
}

/// A raw 0.9.1 connection with channel 1 in confirm mode.
pub(in crate::cases) struct Raw091 {
    conn: RawConn,
    frame_max: usize,
}

impl Raw091 {
    /// Connects, opens channel 1 and selects confirms.
    pub(in crate::cases) async fn open(ctx: &Ctx) -> Result<Self, CaseError> {
        // The reference broker answers about one connection in fifty only after 5 s (also with
        // a plain socket): try again rather than fail on the raw peer's 5 s reply timeout.
        let mut attempt = 0;
        let mut conn = loop {
            match RawConn::open_with_channel(ctx.broker()).await {
                Ok(conn) => break conn,
                Err(e) if attempt < 2 && e.message().contains("timed out") => attempt += 1,
                Err(e) => return Err(e.context("raw 0.9.1 open")),
            }
        };
        conn.send(&raw::method(1, 85, 10, &[0])).await?;
        conn.expect_method(1, 85, 11).await.map_err(|e| e.context("confirm.select"))?;
        let frame_max = conn.tune.map_or(4096, |t| usize::try_from(t.frame_max).unwrap_or(4096)).max(4096);
        Ok(Self { conn, frame_max })
    }

    /// The next frame other than a heartbeat; a channel or connection close is an error.
    async fn frame(&mut self) -> Result<raw::Frame, CaseError> {
        loop {
            let f = self
                .conn
                .read_frame(raw::REPLY_TIMEOUT)
                .await?
                .ok_or_else(|| CaseError::new("the broker closed the socket"))?;
            match f.method_id() {
                _ if f.kind == raw::FRAME_HEARTBEAT => continue,
                Some((20, 40)) | Some((10, 50)) => {
                    return Err(CaseError::new(format!("the broker closed: {:?}", raw::parse_close(&f)?)));
                }
                _ => return Ok(f),
            }
        }
    }

    /// Publishes and waits for the confirm.
    pub(in crate::cases) async fn publish(
        &mut self,
        exchange: &str,
        key: &str,
        props: &Props,
        body: &[u8],
    ) -> CaseResult {
        let mut bytes = raw::basic_publish(1, exchange, key);
        let mut header = Vec::new();
        header.extend(60u16.to_be_bytes());
        header.extend(0u16.to_be_bytes());
        header.extend(u64::try_from(body.len()).unwrap_or(u64::MAX).to_be_bytes());
        header.extend(props.encode());
        bytes.extend(raw::frame(raw::FRAME_HEADER, 1, &header));
        for chunk in body.chunks(self.frame_max - 8) {
            bytes.extend(raw::body(1, chunk));
        }
        self.conn.send(&bytes).await?;
        let f = self.frame().await.map_err(|e| e.context("waiting for the publish confirm"))?;
        match f.method_id() {
            Some((60, 80)) => Ok(()),
            other => Err(CaseError::new(format!("publish to {exchange:?}/{key:?}: expected basic.ack, got {other:?}"))),
        }
    }

    /// `basic.get`: `None` when the queue is empty.
    pub(in crate::cases) async fn get(&mut self, queue: &str, no_ack: bool) -> Result<Option<Got091>, CaseError> {
        let mut args = 0u16.to_be_bytes().to_vec();
        put_short(&mut args, queue);
        args.push(u8::from(no_ack));
        self.conn.send(&raw::method(1, 60, 70, &args)).await?;
        let f = self.frame().await.map_err(|e| e.context(&format!("basic.get {queue}")))?;
        match f.method_id() {
            Some((60, 72)) => return Ok(None),
            Some((60, 71)) => {}
            other => return Err(CaseError::new(format!("basic.get {queue}: got {other:?}"))),
        }
        let mut r = Rd::new(f.args());
        let tag = r.u64()?;
        let redelivered = r.u8()? & 1 == 1;
        let exchange = r.short()?;
        let routing_key = r.short()?;
        let header = self.frame().await?;
        check!(header.kind == raw::FRAME_HEADER, "expected a content header, got frame type {}", header.kind);
        let mut r = Rd::new(&header.payload);
        let (_class, _weight) = (r.u16()?, r.u16()?);
        let size = usize::try_from(r.u64()?).unwrap_or(usize::MAX);
        let props = Props::decode(&mut r)?;
        let mut body = Vec::new();
        while body.len() < size {
            let f = self.frame().await?;
            check!(f.kind == raw::FRAME_BODY, "expected a body frame, got frame type {}", f.kind);
            body.extend(f.payload);
        }
        Ok(Some(Got091 { tag, redelivered, exchange, routing_key, props, body }))
    }

    /// Closes the connection politely (`connection.close`, then waits for close-ok).
    pub(in crate::cases) async fn close(mut self) {
        let args = raw::Enc::new().u16(200).shortstr("bye").u16(0).u16(0).done();
        if self.conn.send(&raw::method(0, 10, 50, &args)).await.is_ok() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), self.conn.expect_method(0, 10, 51)).await;
        }
    }

    /// `basic.ack` / `basic.reject`.
    pub(in crate::cases) async fn settle(&mut self, tag: u64, how: Settle) -> CaseResult {
        let mut args = tag.to_be_bytes().to_vec();
        let frame = match how {
            Settle::Ack => {
                args.push(0);
                raw::method(1, 60, 80, &args)
            }
            Settle::Requeue | Settle::Reject => {
                args.push(u8::from(how == Settle::Requeue));
                raw::method(1, 60, 90, &args)
            }
        };
        self.conn.send(&frame).await
    }
}
