//! The connection state machine.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use amq_protocol::protocol::{AMQPClass, channel, connection};
use amq_protocol::types::{AMQPValue, FieldTable, LongString};
use bytes::{BufMut, Bytes, BytesMut};
use charon_model::erlang::{self, ErlangText};

use super::channel::{Assembly, ChannelSlot, Phase};
use super::reply::{ReplyCode, reply_text};
use super::{ClientCapabilities, Event, Host};
use crate::codec::{
    FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD, FrameError, MethodError, RawFrame,
    decode_method, encode_method, encode_properties, parse_frame,
};

/// The smallest frame size AMQP 0.9.1 allows; also the limit before tuning.
pub const FRAME_MIN_SIZE: u32 = 4096;
/// A handshake that has not finished by then is dropped.
pub(super) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long we wait for `connection.close-ok` after sending `connection.close`.
const CLOSING_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest a socket stays open after the client's `connection.close` was answered
/// (RabbitMQ's `?CLOSING_TIMEOUT`; a shorter heartbeat interval shortens it).
const LINGER_MAX: Duration = Duration::from_secs(30);
/// RabbitMQ's delay before it drops a connection whose handshake failed (`SILENT_CLOSE_DELAY`).
const SILENT_CLOSE_DELAY: Duration = Duration::from_secs(3);

/// Limits and identity the server offers.
#[derive(Clone, Debug)]
pub struct ConnectionConfig {
    /// Offered channel_max (RabbitMQ: 2047).
    pub channel_max: u16,
    /// Offered frame_max (RabbitMQ: 131072).
    pub frame_max: u32,
    /// Offered heartbeat in seconds (RabbitMQ: 60).
    pub heartbeat: u16,
    /// Largest message body accepted (RabbitMQ 4: 16 MiB).
    pub max_message_size: u64,
    /// `product` server property.
    pub product: String,
    /// `version` server property.
    pub version: String,
    /// Offer SASL EXTERNAL: set per connection, on TLS connections whose client presented a
    /// verified certificate (the user name then comes from [`super::Host::authenticate_external`]).
    pub sasl_external: bool,
    /// Offer SASL ANONYMOUS (RabbitMQ 4 does by default; the login is
    /// [`super::Host::authenticate_anonymous`]'s).
    pub sasl_anonymous: bool,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        Self {
            channel_max: 2047,
            frame_max: 131_072,
            heartbeat: 60,
            max_message_size: 16_777_216,
            product: charon_model::identity::PRODUCT.to_owned(),
            version: charon_model::identity::VERSION.to_owned(),
            sasl_external: false,
            sasl_anonymous: false,
        }
    }
}

/// Where the connection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionState {
    /// `connection.start` sent; waiting for `start-ok`.
    Starting,
    /// `connection.tune` sent; waiting for `tune-ok`.
    Tuning,
    /// Waiting for `connection.open`.
    Opening,
    /// Open.
    Running,
    /// We sent `connection.close`; waiting for `close-ok`.
    Closing,
    /// We answered the client's `connection.close` with `close-ok` and released everything;
    /// what the client still sends is read and dropped until it closes the socket or the
    /// linger deadline passes, as RabbitMQ's `closed` reader does. Closing the socket at once
    /// would make the kernel answer frames still in flight (publishes a client wrote before
    /// its close) with a reset, and the client would see an error instead of its close-ok.
    Lingering,
    /// Finished: flush and drop the socket.
    Closed,
}

/// One AMQP 0.9.1 connection, without I/O. See the module docs of [`crate::proto`].
#[derive(Debug)]
pub struct Connection {
    pub(super) config: ConnectionConfig,
    pub(super) state: ConnectionState,
    pub(super) out: BytesMut,
    pub(super) events: VecDeque<Event>,
    pub(super) channels: HashMap<u16, ChannelSlot>,
    pub(super) frame_max: u32,
    pub(super) channel_max: u16,
    pub(super) heartbeat: Option<Duration>,
    /// When the heartbeat was agreed: the silent-peer check ticks from here.
    pub(super) heartbeat_since: Instant,
    pub(super) capabilities: ClientCapabilities,
    pub(super) mechanism: String,
    pub(super) username: String,
    /// `connection.start-ok`'s client properties, for the management API.
    pub(super) client_properties: FieldTable,
    pub(super) last_read: Instant,
    /// The driver is not reading (blocked by an alarm): missing heartbeats prove nothing.
    reads_paused: bool,
    /// Input stops before the next `basic.publish` (an alarm is on).
    publishes_held: bool,
    /// `connection.blocked` was sent and `connection.unblocked` not yet.
    sent_blocked: bool,
    /// Input stopped at a held `basic.publish`.
    publish_waiting: bool,
    pub(super) last_write: Instant,
    pub(super) deadline: Option<Instant>,
    /// Set after a framing error: the byte stream can no longer be trusted.
    pub(super) input_dead: bool,
    /// The broker was told to release every channel and the connection ([`Event::Closed`]).
    released: bool,
}

/// Why processing stopped on a frame: a connection error to report with `connection.close`.
pub(super) struct HardError {
    pub(super) code: ReplyCode,
    pub(super) explanation: String,
    pub(super) class_method: (u16, u16),
}

impl HardError {
    pub(super) fn new(code: ReplyCode, explanation: impl Into<String>) -> Self {
        Self { code, explanation: explanation.into(), class_method: (0, 0) }
    }

    pub(super) fn during(mut self, class_method: (u16, u16)) -> Self {
        self.class_method = class_method;
        self
    }
}

/// RabbitMQ's `type T, all octets = <<...>>` / `first 16 octets` prefix of frame-error texts.
fn frame_text(kind: u8, payload: &[u8]) -> ErlangText {
    let (which, shown) =
        if payload.len() <= 16 { ("all", payload) } else { ("first 16", payload.get(..16).unwrap_or_default()) };
    let mut text = ErlangText::new();
    text.push(&format!("type {kind}, {which} octets = ")).binary(shown);
    text
}

pub(super) fn unexpected_frame(frame: &RawFrame) -> HardError {
    HardError::new(ReplyCode::UnexpectedFrame, frame_text(frame.kind, &frame.payload).finish())
}

/// Whether a frame has the minimal shape of its type (`rabbit_command_assembler:analyze_frame`):
/// a method carries class and method ids, a content header class, weight and size, a
/// heartbeat nothing. Anything else is an `unknown_frame` error.
pub(super) fn well_formed(frame: &RawFrame) -> bool {
    match frame.kind {
        FRAME_METHOD => frame.payload.len() >= 4,
        FRAME_HEADER => frame.payload.len() >= 12,
        FRAME_BODY => true,
        FRAME_HEARTBEAT => frame.payload.is_empty(),
        _ => false,
    }
}

/// `basic.qos` prefetch-size, read from the raw payload.
pub(super) fn qos_prefetch_size(payload: &[u8]) -> u32 {
    payload.get(4..8).and_then(|b| b.try_into().ok()).map_or(0, u32::from_be_bytes)
}

pub(super) fn bool_value(table: &FieldTable, key: &str) -> bool {
    matches!(table.inner().get(key), Some(AMQPValue::Boolean(true)))
}

impl Connection {
    /// A connection whose client just sent the 0-9-1 protocol header: `connection.start` is
    /// queued at once.
    #[must_use]
    pub fn new(config: ConnectionConfig, now: Instant) -> Self {
        let mut conn = Self {
            config,
            state: ConnectionState::Starting,
            out: BytesMut::with_capacity(8 * 1024),
            events: VecDeque::new(),
            channels: HashMap::new(),
            frame_max: FRAME_MIN_SIZE,
            channel_max: 0,
            heartbeat: None,
            capabilities: ClientCapabilities::default(),
            mechanism: String::new(),
            username: String::new(),
            client_properties: FieldTable::default(),
            last_read: now,
            heartbeat_since: now,
            reads_paused: false,
            publishes_held: false,
            sent_blocked: false,
            publish_waiting: false,
            last_write: now,
            deadline: Some(now + HANDSHAKE_TIMEOUT),
            input_dead: false,
            released: false,
        };
        conn.send_start();
        conn
    }

    /// Current state.
    #[must_use]
    pub fn state(&self) -> ConnectionState {
        self.state
    }

    /// What the client said it understands.
    #[must_use]
    pub fn capabilities(&self) -> ClientCapabilities {
        self.capabilities
    }

    /// Largest message body accepted; a larger publish closes its channel with 406.
    #[must_use]
    pub fn max_message_size(&self) -> u64 {
        self.config.max_message_size
    }

    /// The client's properties from `connection.start-ok`.
    #[must_use]
    pub fn client_properties(&self) -> &FieldTable {
        &self.client_properties
    }

    /// The SASL mechanism the client logged in with.
    #[must_use]
    pub fn mechanism(&self) -> &str {
        &self.mechanism
    }

    /// The negotiated channel_max.
    #[must_use]
    pub fn channel_max(&self) -> u16 {
        self.channel_max
    }

    /// The negotiated heartbeat in seconds (0: none).
    #[must_use]
    pub fn heartbeat_secs(&self) -> u64 {
        self.heartbeat.map_or(0, |h| h.as_secs())
    }

    /// The negotiated maximum frame size.
    #[must_use]
    pub fn frame_max(&self) -> u32 {
        self.frame_max
    }

    /// Bytes to write. The driver writes them and `advance`s past what was written.
    pub fn output(&mut self) -> &mut BytesMut {
        &mut self.out
    }

    /// Tells the connection that bytes were written at `now` (resets the heartbeat sender).
    pub fn on_written(&mut self, now: Instant) {
        self.last_write = now;
    }

    /// The next event for the broker.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Whether the channel is open (not starting, not closing).
    #[must_use]
    pub fn is_channel_open(&self, channel: u16) -> bool {
        self.channels.get(&channel).is_some_and(|c| c.phase == Phase::Open)
    }

    fn send_start(&mut self) {
        let mut capabilities = FieldTable::default();
        for name in [
            "publisher_confirms",
            "exchange_exchange_bindings",
            "basic.nack",
            "consumer_cancel_notify",
            "connection.blocked",
            "consumer_priorities",
            "authentication_failure_close",
            "per_consumer_qos",
            "direct_reply_to",
        ] {
            capabilities.insert(name.into(), AMQPValue::Boolean(true));
        }
        let mut props = FieldTable::default();
        props.insert("capabilities".into(), AMQPValue::FieldTable(capabilities));
        let text = |s: &str| AMQPValue::LongString(LongString::from(s.as_bytes().to_vec()));
        // The same as the 1.0 open properties (charon_model::identity).
        props.insert("cluster_name".into(), text(&charon_model::node_name()));
        props.insert("copyright".into(), text(charon_model::identity::COPYRIGHT));
        props.insert("information".into(), text(&charon_model::identity::information()));
        props.insert("platform".into(), text(charon_model::identity::PLATFORM));
        props.insert("product".into(), text(&self.config.product));
        props.insert("version".into(), text(&self.config.version));
        let start = connection::Start {
            version_major: 0,
            version_minor: 9,
            server_properties: props,
            mechanisms: LongString::from(self.mechanisms().as_bytes().to_vec()),
            locales: LongString::from(b"en_US".to_vec()),
        };
        self.send_method(0, &AMQPClass::Connection(connection::AMQPMethod::Start(start)));
    }

    /// The SASL mechanisms offered in `connection.start`, in RabbitMQ 4.3's order (ANONYMOUS
    /// first; 4.0.5 put it last).
    pub(super) fn mechanisms(&self) -> String {
        let anonymous = if self.config.sasl_anonymous { "ANONYMOUS " } else { "" };
        let external = if self.config.sasl_external { " EXTERNAL" } else { "" };
        format!("{anonymous}PLAIN AMQPLAIN{external}")
    }

    /// Queues a method frame.
    pub fn send_method(&mut self, channel: u16, method: &AMQPClass) {
        encode_method(&mut self.out, channel, method);
    }

    /// Queues a content header and body frames after a method the caller already wrote
    /// (`basic.deliver`, `basic.get-ok`, `basic.return`), splitting the body at the negotiated
    /// frame size. `raw_properties` are sent verbatim when present.
    pub fn send_content(&mut self, channel: u16, properties: ContentProperties<'_>, body: &[u8]) {
        let out = &mut self.out;
        out.put_u8(FRAME_HEADER);
        out.put_u16(channel);
        let size_at = out.len();
        out.put_u32(0);
        out.put_u16(60);
        out.put_u16(0);
        out.put_u64(u64::try_from(body.len()).unwrap_or(u64::MAX));
        match properties {
            ContentProperties::Raw(raw) => out.extend_from_slice(raw),
            ContentProperties::Encode { properties, headers, expiration } => {
                encode_properties(out, properties, headers, expiration);
            }
        }
        let size = u32::try_from(out.len() - size_at - 4).unwrap_or(u32::MAX);
        if let Some(slot) = out.get_mut(size_at..size_at + 4) {
            slot.copy_from_slice(&size.to_be_bytes());
        }
        out.put_u8(FRAME_END);
        let chunk = usize::try_from(self.frame_max.saturating_sub(8)).unwrap_or(usize::MAX).max(1);
        for part in body.chunks(chunk) {
            out.put_u8(FRAME_BODY);
            out.put_u16(channel);
            out.put_u32(u32::try_from(part.len()).unwrap_or(u32::MAX));
            out.extend_from_slice(part);
            out.put_u8(FRAME_END);
        }
    }

    /// Closes a channel with a soft error (403–406): sends `channel.close` and ignores the
    /// channel until the client answers `close-ok`. The broker releases the channel's
    /// resources itself when it calls this.
    pub fn close_channel(&mut self, channel: u16, code: ReplyCode, explanation: &str, class_method: (u16, u16)) {
        let Some(slot) = self.channels.get_mut(&channel) else {
            return;
        };
        slot.phase = Phase::Closing;
        slot.assembly = Assembly::Idle;
        let close = channel::Close {
            reply_code: code.code(),
            reply_text: reply_text(code, explanation).into(),
            class_id: class_method.0,
            method_id: class_method.1,
        };
        self.send_method(channel, &AMQPClass::Channel(channel::AMQPMethod::Close(close)));
    }

    /// Closes the connection with `code` (a hard error, or 320 at shutdown).
    pub fn close(&mut self, code: ReplyCode, explanation: &str, class_method: (u16, u16), now: Instant) {
        match self.state {
            ConnectionState::Closing | ConnectionState::Closed => return,
            // Already closed on the client's word: only the socket is left to drop.
            ConnectionState::Lingering => return self.finish(),
            _ => {}
        }
        let close = connection::Close {
            reply_code: code.code(),
            reply_text: reply_text(code, explanation).into(),
            class_id: class_method.0,
            method_id: class_method.1,
        };
        self.send_method(0, &AMQPClass::Connection(connection::AMQPMethod::Close(close)));
        self.state = ConnectionState::Closing;
        self.deadline = Some(now + CLOSING_TIMEOUT);
        for (id, _) in self.channels.drain() {
            self.events.push_back(Event::ChannelClosed(id));
        }
    }

    pub(super) fn finish(&mut self) {
        self.release();
        self.state = ConnectionState::Closed;
    }

    /// Tells the broker, once, that every channel and the connection are gone.
    fn release(&mut self) {
        if !std::mem::replace(&mut self.released, true) {
            for (id, _) in self.channels.drain() {
                self.events.push_back(Event::ChannelClosed(id));
            }
            self.events.push_back(Event::Closed);
        }
    }

    /// Answers the client's `connection.close`: `close-ok`, everything released, then the
    /// socket lingers ([`ConnectionState::Lingering`]) for at most the heartbeat interval,
    /// and never longer than [`LINGER_MAX`].
    pub(super) fn close_ok(&mut self, now: Instant) {
        self.send_method(0, &AMQPClass::Connection(connection::AMQPMethod::CloseOk(connection::CloseOk {})));
        self.release();
        self.state = ConnectionState::Lingering;
        let linger = self.heartbeat.filter(|h| *h < LINGER_MAX).unwrap_or(LINGER_MAX);
        self.deadline = Some(now + linger);
    }

    /// Ends a channel the client closed ([`Event::ChannelClosing`]): `close-ok`, after which
    /// the client may open the channel number again. Anything else the broker writes for the
    /// channel must come before this.
    pub fn close_ok_channel(&mut self, channel: u16) {
        if self.channels.get(&channel).is_some_and(|c| c.phase == Phase::ClientClosing) {
            self.channels.remove(&channel);
            self.send_method(channel, &AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {})));
        }
    }

    /// The driver stops reading this connection: the check for the client's heartbeats pauses,
    /// as RabbitMQ's reader pauses its heartbeat monitor (an unread socket cannot show them).
    /// With a `reason` (a resource alarm) `connection.blocked` goes to a client that
    /// understands it; without one (flow control) nothing is sent. A reason given later, while
    /// still paused, sends it then.
    pub fn block(&mut self, reason: Option<&str>) {
        self.reads_paused = true;
        if let Some(reason) = reason
            && !self.sent_blocked
            && self.capabilities.connection_blocked
            && self.state == ConnectionState::Running
        {
            self.sent_blocked = true;
            let blocked = connection::Blocked { reason: reason.into() };
            self.send_method(0, &AMQPClass::Connection(connection::AMQPMethod::Blocked(blocked)));
        }
    }

    /// The driver reads again: `connection.unblocked` to a client that was sent
    /// `connection.blocked`, and the heartbeat check starts afresh from `now`.
    pub fn unblock(&mut self, now: Instant) {
        self.reads_paused = false;
        self.last_read = now;
        if std::mem::take(&mut self.sent_blocked) && self.state == ConnectionState::Running {
            self.send_method(0, &AMQPClass::Connection(connection::AMQPMethod::Unblocked(connection::Unblocked {})));
        }
    }

    /// When the driver must call [`Self::handle_timeout`] next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let heartbeat = self.heartbeat.filter(|_| self.state == ConnectionState::Running).map(|h| {
            let send_at = self.last_write + h / 2;
            if self.reads_paused {
                return send_at;
            }
            send_at.min(self.silent_deadline(h))
        });
        match (heartbeat, self.deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When a peer that sent nothing since [`Self::last_read`] is dropped: as RabbitMQ's
    /// heartbeat receiver, which checks for new data once per interval (from when the heartbeat
    /// was agreed) and gives up at the second check in a row that found none — between two and
    /// three intervals after the last data (about 3 s for a silent client with heartbeat 1).
    fn silent_deadline(&self, interval: Duration) -> Instant {
        let due = (self.last_read + interval * 2).saturating_duration_since(self.heartbeat_since);
        let ticks = due.as_nanos().div_ceil(interval.as_nanos().max(1));
        self.heartbeat_since + interval * u32::try_from(ticks).unwrap_or(u32::MAX)
    }

    /// Handles elapsed time: heartbeats out, a silent peer dropped after two to three intervals
    /// (see [`Self::silent_deadline`]), and
    /// handshake / closing deadlines.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.deadline.is_some_and(|d| now >= d) {
            self.deadline = None;
            self.finish();
            return;
        }
        let Some(interval) = self.heartbeat.filter(|_| self.state == ConnectionState::Running) else {
            return;
        };
        if !self.reads_paused && now >= self.silent_deadline(interval) {
            tracing::info!("missed heartbeats from client, timeout: {}s", interval.as_secs());
            self.finish();
            return;
        }
        if now >= self.last_write + interval / 2 && self.out.is_empty() {
            self.out.extend_from_slice(&[FRAME_HEARTBEAT, 0, 0, 0, 0, 0, 0, FRAME_END]);
            self.last_write = now;
        }
    }

    /// While `held` (a resource alarm is on), input stops at the next `basic.publish`, which
    /// stays unread: RabbitMQ blocks a connection only when it publishes during an alarm, so
    /// consumers (and their acks) go on. [`Self::stopped_at_publish`] then tells the driver to
    /// block.
    pub fn hold_publishes(&mut self, held: bool) {
        self.publishes_held = held;
    }

    /// Whether the last [`Self::handle_input`] stopped at a `basic.publish` held by
    /// [`Self::hold_publishes`] (it is still in the input).
    #[must_use]
    pub fn stopped_at_publish(&self) -> bool {
        self.publish_waiting
    }

    /// Consumes as many complete frames from `input` as possible.
    pub fn handle_input(&mut self, input: &mut BytesMut, now: Instant, host: &mut dyn Host) {
        if !input.is_empty() {
            self.last_read = now;
        }
        if self.state == ConnectionState::Lingering {
            return self.linger(input);
        }
        self.publish_waiting = false;
        while !self.input_dead && self.state != ConnectionState::Closed {
            if self.publishes_held && self.state == ConnectionState::Running && starts_with_publish(input) {
                self.publish_waiting = true;
                break;
            }
            let frame = match parse_frame(input, self.frame_max) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(error) => {
                    self.framing_error(&error, now);
                    break;
                }
            };
            if let Err(error) = self.handle_frame(frame, now, host) {
                self.fail(error, now);
            }
        }
        if self.input_dead {
            input.clear();
        }
    }

    /// While lingering, whole frames are dropped but for a repeated `connection.close`, which
    /// RabbitMQ answers with `close-ok` again; a framing error stops looking at the bytes.
    fn linger(&mut self, input: &mut BytesMut) {
        while !self.input_dead {
            match parse_frame(input, self.frame_max) {
                Ok(Some(frame)) => {
                    let repeated_close = frame.channel == 0
                        && frame.kind == FRAME_METHOD
                        && matches!(
                            decode_method(&frame.payload),
                            Ok(AMQPClass::Connection(connection::AMQPMethod::Close(_)))
                        );
                    if repeated_close {
                        let close_ok = connection::AMQPMethod::CloseOk(connection::CloseOk {});
                        self.send_method(0, &AMQPClass::Connection(close_ok));
                    }
                }
                Ok(None) => return,
                Err(_) => self.input_dead = true,
            }
        }
        input.clear();
    }

    fn framing_error(&mut self, error: &FrameError, now: Instant) {
        let explanation = match error {
            FrameError::TooLarge { kind, size, max, .. } => frame_text(*kind, &[])
                .push(": ")
                .tagged_tuple("frame_too_large", &[size.to_string(), max.to_string()])
                .finish(),
            FrameError::BadEnd { kind, marker, payload, .. } => frame_text(*kind, payload)
                .push(": ")
                .tagged_tuple("invalid_frame_end_marker", &[marker.to_string()])
                .finish(),
        };
        self.input_dead = true;
        self.fail(HardError::new(ReplyCode::FrameError, explanation), now);
    }

    /// Drops the connection without a close frame after RabbitMQ's silent-close delay, which
    /// keeps a misbehaving client from retrying handshakes in a tight loop.
    pub(super) fn close_silently(&mut self, now: Instant) {
        self.input_dead = true;
        self.state = ConnectionState::Closing;
        self.deadline = Some(now + SILENT_CLOSE_DELAY);
    }

    /// Reports a connection error the way RabbitMQ does in the current state: before the
    /// connection is open, errors other than a refused login or vhost close the socket
    /// silently; afterwards they are sent as `connection.close`.
    fn fail(&mut self, error: HardError, now: Instant) {
        match self.state {
            ConnectionState::Running | ConnectionState::Opening => {
                self.close(error.code, &error.explanation, error.class_method, now);
                if self.input_dead {
                    // After a framing error nothing more is read, so no close-ok can arrive:
                    // RabbitMQ closes the socket after its silent-close delay.
                    self.deadline = Some(now + SILENT_CLOSE_DELAY);
                }
            }
            ConnectionState::Closing | ConnectionState::Lingering | ConnectionState::Closed => {}
            ConnectionState::Starting | ConnectionState::Tuning => {
                tracing::debug!(code = error.code.code(), explanation = error.explanation, "handshake error");
                self.close_silently(now);
            }
        }
    }

    fn handle_frame(&mut self, frame: RawFrame, now: Instant, host: &mut dyn Host) -> Result<(), HardError> {
        match self.state {
            ConnectionState::Closed | ConnectionState::Lingering => Ok(()),
            ConnectionState::Closing => {
                // Only connection.close / close-ok matter now.
                if frame.channel == 0 && frame.kind == FRAME_METHOD {
                    match decode_method(&frame.payload) {
                        Ok(AMQPClass::Connection(connection::AMQPMethod::CloseOk(_))) => self.finish(),
                        Ok(AMQPClass::Connection(connection::AMQPMethod::Close(_))) => {
                            self.send_method(
                                0,
                                &AMQPClass::Connection(connection::AMQPMethod::CloseOk(connection::CloseOk {})),
                            );
                        }
                        _ => {}
                    }
                }
                Ok(())
            }
            _ if frame.channel == 0 => self.handle_channel_zero(frame, now, host),
            ConnectionState::Running => self.handle_channel_frame(frame, host),
            _ => Err(unexpected_frame(&frame)),
        }
    }

    /// Decodes a method frame. `Ok(None)` is a method id outside the spec: RabbitMQ's reader
    /// crashes on those and drops the socket without a close frame, and so do we, deliberately.
    pub(super) fn decode(frame: &RawFrame) -> Result<Option<AMQPClass>, HardError> {
        match decode_method(&frame.payload) {
            Ok(method) => Ok(Some(method)),
            Err(MethodError::Unknown { .. }) => Ok(None),
            Err(MethodError::Malformed { class, method }) => Err(Self::cannot_decode(frame, (class, method))),
        }
    }

    /// RabbitMQ's FRAME_ERROR for a method whose fields do not decode.
    pub(super) fn cannot_decode(frame: &RawFrame, ids: (u16, u16)) -> HardError {
        let fields = erlang::binary(frame.payload.get(4..).unwrap_or_default());
        HardError::new(ReplyCode::FrameError, format!("cannot decode {fields}")).during(ids)
    }

    pub(super) fn unknown_frame(&self, frame: &RawFrame) -> HardError {
        HardError::new(ReplyCode::FrameError, frame_text(frame.kind, &frame.payload).push(": unknown_frame").finish())
    }
}

/// Whether `input` starts with a method frame (on any channel but 0) carrying `basic.publish`:
/// type 1, then the channel, the size, and class 60 method 40.
fn starts_with_publish(input: &[u8]) -> bool {
    matches!(input.get(..11), Some([FRAME_METHOD, c0, c1, _, _, _, _, 0, 60, 0, 40]) if [*c0, *c1] != [0, 0])
}

/// How to send a content header's properties.
#[derive(Clone, Copy, Debug)]
pub enum ContentProperties<'a> {
    /// The property list exactly as a 0.9.1 publisher sent it.
    Raw(&'a Bytes),
    /// Encode from the model.
    Encode {
        /// Properties.
        properties: &'a charon_model::Properties,
        /// Headers table.
        headers: &'a charon_model::Table,
        /// Expiration string to send, if any.
        expiration: Option<&'a str>,
    },
}
