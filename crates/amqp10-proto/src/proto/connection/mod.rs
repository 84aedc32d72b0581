//! The connection: protocol headers, SASL, open/close, heartbeats, and dispatch of frames to
//! sessions.
//!
//! Its fields are private to this module and its children: [`login`] (SASL and open),
//! [`session_frames`] (what the client sends on a session) and [`answers`] (the broker's
//! answers to events). Per-session state and rules live in [`Session`] and [`super::link`].

mod answers;
mod login;
mod session_frames;

use std::collections::VecDeque;

use foldhash::{HashMap, HashMapExt};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use charon_model::MAX_DEPTH;
use fe2o3_amqp_types::definitions::Error;
use fe2o3_amqp_types::performatives::{Close, Disposition, Flow, Performative};
use fe2o3_amqp_types::primitives::{Array, Symbol};
use fe2o3_amqp_types::sasl::{SaslCode, SaslMechanisms, SaslOutcome};
use serde::Serialize;

use super::erlang::{self, NO_TRACE, Undecodable};
use super::errors::error;
use super::session::Session;
use super::{Event, Failure, Host};
use crate::codec::{
    DecodeError, FRAME_TYPE_AMQP, FRAME_TYPE_SASL, FrameError, decode_performative, encode_value, hot, parse_frame,
    write_frame, write_heartbeat,
};

/// The AMQP 1.0 protocol header that follows a successful SASL exchange.
const AMQP_HEADER: &[u8; 8] = b"AMQP\x00\x01\x00\x00";
/// The SASL protocol header.
const SASL_HEADER: &[u8; 8] = b"AMQP\x03\x01\x00\x00";
/// Frame limit before open (RabbitMQ's `?INITIAL_MAX_FRAME_SIZE`).
const INITIAL_MAX_FRAME_SIZE: u32 = 8192;
/// The smallest max-frame-size a client may ask for.
const MIN_MAX_FRAME_SIZE: u32 = 512;
/// RabbitMQ's silent-close delay for failed handshakes.
const SILENT_CLOSE_DELAY: Duration = Duration::from_secs(3);
/// How long we wait for the client's close after sending ours on an open connection
/// (RabbitMQ's `?CLOSING_TIMEOUT`; its 60 s receive timeout is longer).
const CLOSING_TIMEOUT: Duration = Duration::from_secs(30);
/// The same wait before the connection is open (RabbitMQ's `?NORMAL_TIMEOUT`).
const HANDSHAKE_CLOSING_TIMEOUT: Duration = Duration::from_secs(3);
/// A client that has not opened by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Limits and identity.
#[derive(Clone, Debug)]
pub struct Config {
    /// Largest frame we accept (RabbitMQ: 131072).
    pub max_frame_size: u32,
    /// Highest channel number (RabbitMQ: 63, from `session_max_per_connection` 64).
    pub channel_max: u16,
    /// Our receive timeout; we advertise half of it as idle-time-out (RabbitMQ: 60 s).
    pub idle_timeout: Duration,
    /// Largest message accepted (RabbitMQ 4: 16 MiB).
    pub max_message_size: usize,
    /// `product` in the open frame's properties. RabbitMQ's AMQP 1.0 clients refuse brokers
    /// that do not say `RabbitMQ` here, so a compatible broker has to.
    pub product: String,
    /// `version` in the open frame's properties (the official clients want 4.x or later).
    pub version: String,
    /// Container id we announce; like RabbitMQ's cluster name it is `<name>@<host>`, and it is
    /// also sent as the `node` and `cluster_name` open properties.
    pub container_id: String,
    /// Offer SASL EXTERNAL: set per connection, on TLS connections whose client presented a
    /// verified certificate (the user name then comes from
    /// [`crate::proto::Host::authenticate_external`]).
    pub sasl_external: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            max_frame_size: 131_072,
            channel_max: 63,
            idle_timeout: Duration::from_secs(60),
            max_message_size: 16_777_216,
            product: charon_model::identity::PRODUCT.to_owned(),
            version: charon_model::identity::VERSION.to_owned(),
            container_id: charon_model::node_name(),
            sasl_external: false,
        }
    }
}

/// Where the connection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Waiting for `sasl-init`.
    Sasl,
    /// SASL done; waiting for the AMQP protocol header.
    AwaitHeader,
    /// Waiting for `open`.
    AwaitOpen,
    /// Open.
    Open,
    /// We sent `close`; waiting for the client's.
    Closing,
    /// We answered the client's `close` and released every session: what the client still
    /// sends is read and dropped (a repeated `close` is answered again) until it closes the
    /// socket or [`CLOSING_TIMEOUT`] passes, as RabbitMQ's closed reader does. Dropping the
    /// socket at once would make the kernel reset it under frames still in flight.
    Lingering,
    /// Finished.
    Closed,
}

/// One AMQP 1.0 connection, without I/O. See [`crate::proto`].
#[derive(Debug)]
pub struct Connection {
    config: Config,
    state: State,
    out: BytesMut,
    events: VecDeque<Event>,
    /// By channel (foldhash: looked up for every frame).
    sessions: HashMap<u16, Session>,
    /// Frames the client accepts from us.
    remote_max_frame_size: usize,
    incoming_max_frame_size: u32,
    channel_max: u16,
    /// Send something at least this often (half the client's idle-time-out).
    send_interval: Option<Duration>,
    last_read: Instant,
    last_write: Instant,
    deadline: Option<Instant>,
    username: String,
    /// The SASL mechanism the client chose (for the broker's log line and the management API).
    mechanism: String,
    input_dead: bool,
    /// ANONYMOUS is offered.
    anonymous: bool,
    /// A login was refused: the `auth` outcome goes out when the silent-close delay ends.
    refused_login: bool,
    /// The broker was told, once, that every session and the connection are gone.
    released: bool,
    /// Publisher links get no new credit (the broker's disk alarm is on).
    publishing_paused: bool,
    /// The `open` frame's properties, for the management API.
    client_properties: Option<fe2o3_amqp_types::definitions::Fields>,
}

impl Connection {
    /// The largest message this connection accepts (announced on publisher links).
    #[must_use]
    pub fn max_message_size(&self) -> usize {
        self.config.max_message_size
    }

    /// A connection whose client sent the SASL protocol header: our header and the
    /// mechanisms are queued at once.
    #[must_use]
    pub fn new(config: Config, anonymous: bool, now: Instant) -> Self {
        let mut conn = Self {
            config,
            state: State::Sasl,
            out: BytesMut::with_capacity(8 * 1024),
            events: VecDeque::new(),
            sessions: HashMap::new(),
            remote_max_frame_size: 512,
            incoming_max_frame_size: INITIAL_MAX_FRAME_SIZE,
            channel_max: 0,
            send_interval: None,
            last_read: now,
            last_write: now,
            deadline: Some(now + HANDSHAKE_TIMEOUT),
            username: String::new(),
            mechanism: String::new(),
            input_dead: false,
            anonymous,
            refused_login: false,
            released: false,
            publishing_paused: false,
            client_properties: None,
        };
        conn.out.extend_from_slice(SASL_HEADER);
        let mut mechanisms = vec![Symbol::from("PLAIN"), Symbol::from("AMQPLAIN")];
        if anonymous {
            mechanisms.push(Symbol::from("ANONYMOUS"));
        }
        if conn.config.sasl_external {
            mechanisms.push(Symbol::from("EXTERNAL"));
        }
        let offer = SaslMechanisms { sasl_server_mechanisms: Array::from(mechanisms) };
        conn.send_frame(FRAME_TYPE_SASL, 0, &offer, &[]);
        conn
    }

    /// The SASL mechanism the client logged in with.
    #[must_use]
    pub fn mechanism(&self) -> &str {
        &self.mechanism
    }

    /// The client's `open` properties.
    #[must_use]
    pub fn client_properties(&self) -> Option<&fe2o3_amqp_types::definitions::Fields> {
        self.client_properties.as_ref()
    }

    /// The client's `max-frame-size` (what RabbitMQ reports as the connection's `frame_max`).
    #[must_use]
    pub fn frame_max(&self) -> u32 {
        u32::try_from(self.remote_max_frame_size).unwrap_or(u32::MAX)
    }

    /// The negotiated `channel-max`.
    #[must_use]
    pub fn channel_max(&self) -> u16 {
        self.channel_max
    }

    /// The broker's idle time-out in seconds (RabbitMQ reports its heartbeat setting as the
    /// connection's `timeout`).
    #[must_use]
    pub fn idle_timeout_secs(&self) -> u64 {
        self.config.idle_timeout.as_secs()
    }

    /// Current state.
    #[must_use]
    pub fn state(&self) -> State {
        self.state
    }

    /// Bytes to write.
    pub fn output(&mut self) -> &mut BytesMut {
        &mut self.out
    }

    /// The driver wrote bytes at `now`.
    pub fn on_written(&mut self, now: Instant) {
        self.last_write = now;
    }

    /// The next event for the broker.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn send_frame<T: Serialize>(&mut self, kind: u8, channel: u16, performative: &T, payload: &[u8]) {
        let bytes = encode_value(performative);
        write_frame(&mut self.out, kind, channel, &bytes, payload);
    }

    fn send_performative<T: Serialize>(&mut self, channel: u16, performative: &T) {
        self.send_frame(FRAME_TYPE_AMQP, channel, performative, &[]);
    }

    /// A flow, encoded by hand when it can be (see [`hot`]).
    fn send_flow(&mut self, channel: u16, flow: &Flow) {
        write_flow(&mut self.out, channel, flow);
    }

    /// A disposition, encoded by hand when it can be (see [`hot`]).
    fn send_disposition(&mut self, channel: u16, disposition: &Disposition) {
        if !hot::put_disposition(&mut self.out, channel, disposition) {
            self.send_performative(channel, disposition);
        }
    }

    fn finish(&mut self) {
        self.release();
        self.state = State::Closed;
    }

    /// Tells the broker, once, that every session and the connection are gone.
    fn release(&mut self) {
        if !std::mem::replace(&mut self.released, true) {
            for channel in std::mem::take(&mut self.sessions).into_keys() {
                self.events.push_back(Event::SessionEnded(channel));
            }
            self.events.push_back(Event::Closed);
        }
    }

    fn close_silently(&mut self, now: Instant) {
        self.input_dead = true;
        self.state = State::Closing;
        self.deadline = Some(now + SILENT_CLOSE_DELAY);
    }

    /// Closes the connection with an error (or none, at a clean shutdown).
    pub fn close(&mut self, err: Option<Error>, now: Instant) {
        match self.state {
            State::Closing | State::Closed => return,
            // Already closed on the client's word: only the socket is left to drop.
            State::Lingering => return self.finish(),
            _ => {}
        }
        if self.state != State::Open && self.state != State::AwaitOpen {
            self.close_silently(now);
            return;
        }
        self.send_performative(0, &Close { error: err });
        let wait = if self.state == State::Open { CLOSING_TIMEOUT } else { HANDSHAKE_CLOSING_TIMEOUT };
        self.state = State::Closing;
        self.deadline = Some(now + wait);
        for channel in std::mem::take(&mut self.sessions).into_keys() {
            self.events.push_back(Event::SessionEnded(channel));
        }
    }

    fn fail(&mut self, failure: Failure, now: Instant) {
        match failure {
            Failure::Connection(err) => self.close(Some(err), now),
            Failure::Session(channel, err) => self.end_session(channel, err),
            Failure::Link(channel, handle, err) => {
                self.detach(channel, handle, Some(err));
                self.events.push_back(Event::Detached { channel, handle });
            }
        }
    }

    /// When [`Self::handle_timeout`] must run next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let keepalive = match self.state {
            State::Open => {
                let dead = Some(self.last_read + self.config.idle_timeout);
                let send = self.send_interval.map(|i| self.last_write + i);
                match (dead, send) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            }
            _ => None,
        };
        match (keepalive, self.deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Handles elapsed time: heartbeats, the idle timeout and handshake/closing deadlines.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.deadline.is_some_and(|d| now >= d) {
            self.deadline = None;
            if std::mem::take(&mut self.refused_login) {
                self.send_frame(FRAME_TYPE_SASL, 0, &SaslOutcome { code: SaslCode::Auth, additional_data: None }, &[]);
            }
            self.finish();
            return;
        }
        if self.state != State::Open {
            return;
        }
        if now >= self.last_read + self.config.idle_timeout {
            let text = "no frame received from client within idle timeout threshold";
            self.close(Some(error("amqp:resource-limit-exceeded", text)), now);
            return;
        }
        if let Some(interval) = self.send_interval
            && now >= self.last_write + interval
            && self.out.is_empty()
        {
            write_heartbeat(&mut self.out);
            self.last_write = now;
        }
    }

    /// Consumes complete frames from `input`.
    pub fn handle_input(&mut self, input: &mut BytesMut, now: Instant, host: &mut dyn Host) {
        if !input.is_empty() {
            self.last_read = now;
        }
        while !self.input_dead && self.state != State::Closed {
            if self.state == State::AwaitHeader {
                let Some(header) = input.get(..8) else { break };
                if header == AMQP_HEADER {
                    let _ = input.split_to(8);
                    self.out.extend_from_slice(AMQP_HEADER);
                    self.state = State::AwaitOpen;
                    continue;
                }
                self.close_silently(now);
                break;
            }
            if self.opened() && foreign_frame_type(input) {
                self.drop_now();
                break;
            }
            let frame = match parse_frame(input, self.incoming_max_frame_size) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(err) if self.opened() => {
                    if self.bad_frame_when_open(&err, input, now) {
                        continue;
                    }
                    break;
                }
                Err(err) => {
                    self.input_dead = true;
                    let text = match err {
                        FrameError::TooLarge { .. } => err.to_string(),
                        FrameError::BadHeader => "malformed frame header".to_owned(),
                    };
                    self.fail(Failure::Connection(error("amqp:connection:framing-error", text)), now);
                    break;
                }
            };
            if let Err(failure) = self.handle_frame(frame, now, host) {
                self.fail(failure, now);
            }
        }
        if self.input_dead {
            input.clear();
            if self.state == State::Closing && self.deadline.is_none() {
                self.deadline = Some(now + SILENT_CLOSE_DELAY);
            }
        }
    }

    /// Open, or closing after it was: RabbitMQ's reader runs its frame loop.
    fn opened(&self) -> bool {
        matches!(self.state, State::Open | State::Closing)
    }

    /// Drops the socket at once without a frame, as RabbitMQ does when its reader crashes on a
    /// frame header.
    fn drop_now(&mut self) {
        self.input_dead = true;
        self.finish();
    }

    /// A frame header that cannot start a frame on an open connection. An oversized frame is
    /// refused with a close, and reading goes on right after its 8-byte header (RabbitMQ reads
    /// the next header there); any other bad header drops the socket. Returns whether to keep
    /// reading.
    fn bad_frame_when_open(&mut self, err: &FrameError, input: &mut BytesMut, now: Instant) -> bool {
        match err {
            FrameError::TooLarge { .. } => {
                input.advance(8);
                self.fail(Failure::Connection(error("amqp:connection:framing-error", err.to_string())), now);
                true
            }
            FrameError::BadHeader => {
                self.drop_now();
                false
            }
        }
    }

    fn handle_frame(
        &mut self,
        frame: crate::codec::RawFrame,
        now: Instant,
        host: &mut dyn Host,
    ) -> Result<(), Failure> {
        match (self.state, frame.kind) {
            (State::Sasl, FRAME_TYPE_SASL) => self.handle_sasl(&frame.body, now, host),
            (State::Sasl, _) => {
                self.close_silently(now);
                Ok(())
            }
            (_, FRAME_TYPE_SASL) => {
                Err(Failure::Connection(error("amqp:connection:framing-error", "SASL frame after the SASL exchange")))
            }
            (_, FRAME_TYPE_AMQP) if frame.body.is_empty() => Ok(()),
            (_, FRAME_TYPE_AMQP) => {
                if self.state == State::Open && frame.channel > self.channel_max {
                    let text = format!(
                        "channel number ({}) exceeds maximum channel number ({})",
                        frame.channel, self.channel_max
                    );
                    return Err(Failure::Connection(error("amqp:connection:framing-error", text)));
                }
                let (performative, payload) = match decode_performative(&frame.body) {
                    Ok(decoded) => decoded,
                    // Charon's own bound, not RabbitMQ's (which follows any depth): the
                    // protocol's decode error, for the whole connection.
                    Err(DecodeError::TooDeep) => {
                        let text = format!("values nested deeper than {MAX_DEPTH} levels");
                        return Err(Failure::Connection(error("amqp:decode-error", text)));
                    }
                    Err(_) if self.opened() => return self.undecodable(frame.channel, &frame.body, now),
                    Err(e) => {
                        let text = format!("failed to decode frame: {e}");
                        return Err(Failure::Connection(error("amqp:decode-error", text)));
                    }
                };
                self.handle_performative(frame.channel, performative, payload, &frame.body, now, host)
            }
            _ => Err(Failure::Connection(error("amqp:connection:framing-error", "unknown frame type"))),
        }
    }

    /// A body that is no performative Charon can use, answered the way RabbitMQ's reader and
    /// session fail on it (see [`erlang`]).
    fn undecodable(&mut self, channel: u16, body: &[u8], now: Instant) -> Result<(), Failure> {
        match erlang::classify(body) {
            Undecodable::Reader(exception) => Err(reader_error(&exception)),
            Undecodable::NotPerformative(text) => self.session_crash(channel, text),
            Undecodable::BadFields("open") => Err(reader_error("function_clause")),
            // RabbitMQ closes, or ends a session, whatever the fields of a close or end hold.
            Undecodable::BadFields("close") => {
                self.on_close(now);
                Ok(())
            }
            Undecodable::BadFields("end") if self.state == State::Open => {
                self.on_end(channel);
                Ok(())
            }
            Undecodable::BadFields(name) => {
                self.session_crash(channel, format!("{name} performative with fields of the wrong type{NO_TRACE}"))
            }
        }
    }

    /// The session on `channel` fails with `amqp:internal-error`; without a running session
    /// the frame is ignored, as RabbitMQ ignores frames for channels it does not know.
    fn session_crash(&mut self, channel: u16, text: String) -> Result<(), Failure> {
        match self.sessions.get(&channel) {
            Some(session) if !session.is_ending() && self.state == State::Open => {
                Err(Failure::Session(channel, error("amqp:internal-error", text)))
            }
            _ => Ok(()),
        }
    }

    /// The client's close: answered with a close (RabbitMQ answers it even after closing the
    /// connection itself, and again when repeated). After our own close the connection is
    /// finished; otherwise it lingers ([`State::Lingering`]).
    fn on_close(&mut self, now: Instant) {
        self.send_performative(0, &Close { error: None });
        self.last_write = now;
        match self.state {
            State::Open => {
                self.release();
                self.state = State::Lingering;
                self.deadline = Some(now + CLOSING_TIMEOUT);
            }
            State::Lingering => {}
            _ => self.finish(),
        }
    }

    fn handle_performative(
        &mut self,
        channel: u16,
        performative: Performative,
        payload: Bytes,
        body: &[u8],
        now: Instant,
        host: &mut dyn Host,
    ) -> Result<(), Failure> {
        match (self.state, performative) {
            (State::AwaitOpen, Performative::Open(open)) => self.on_open(&open, now, host),
            (State::AwaitOpen, _) => Err(Failure::Connection(error("amqp:illegal-state", "expected open"))),
            (State::Open | State::Closing | State::Lingering, Performative::Close(_)) => {
                self.on_close(now);
                Ok(())
            }
            (State::Closing | State::Lingering | State::Closed, _) => Ok(()),
            // RabbitMQ's reader has no clause for an open once running.
            (State::Open, Performative::Open(_)) => Err(reader_error("function_clause")),
            (State::Open, Performative::Begin(begin)) => self.on_begin(channel, &begin, body),
            (State::Open, other) => {
                let ending = self.sessions.get(&channel).map(Session::is_ending);
                match ending {
                    // RabbitMQ ignores frames for channels without a session.
                    None => Ok(()),
                    Some(true) => {
                        if matches!(other, Performative::End(_)) {
                            self.sessions.remove(&channel);
                        }
                        Ok(())
                    }
                    Some(false) => self.session_frame(channel, other, payload, body),
                }
            }
            (State::Sasl | State::AwaitHeader, _) => Ok(()),
        }
    }

    fn session_frame(
        &mut self,
        channel: u16,
        performative: Performative,
        payload: Bytes,
        body: &[u8],
    ) -> Result<(), Failure> {
        match performative {
            Performative::Attach(attach) => self.on_attach(channel, attach),
            Performative::Flow(flow) => self.on_flow(channel, &flow),
            Performative::Transfer(transfer) => self.on_transfer(channel, transfer, payload),
            Performative::Disposition(disposition) => self.on_disposition(channel, disposition, body),
            Performative::Detach(detach) => self.on_detach(channel, &detach),
            Performative::End(_) => {
                self.on_end(channel);
                Ok(())
            }
            Performative::Open(_) | Performative::Begin(_) | Performative::Close(_) => {
                Err(Failure::Connection(error("amqp:internal-error", "Unexpected frame")))
            }
        }
    }
}

/// Writes a flow, encoded by hand when it can be (see [`hot`]); a free function so that it
/// can write while a session is borrowed.
fn write_flow(out: &mut BytesMut, channel: u16, flow: &Flow) {
    if !hot::put_flow(out, channel, flow) {
        write_frame(out, FRAME_TYPE_AMQP, channel, &encode_value(flow), &[]);
    }
}

/// The close RabbitMQ sends when its reader crashes: `Reader error: <exception>` and the stack
/// trace (Charon has none).
fn reader_error(exception: &str) -> Failure {
    Failure::Connection(error("amqp:internal-error", format!("Reader error: {exception}{NO_TRACE}")))
}

/// Whether the next frame header announces a type other than AMQP: RabbitMQ's reader checks
/// the type (and the data offset) of every header on an open connection and crashes, dropping
/// the socket, when it is wrong.
fn foreign_frame_type(input: &[u8]) -> bool {
    input.len() >= 8 && input.get(5).is_some_and(|kind| *kind != FRAME_TYPE_AMQP)
}
