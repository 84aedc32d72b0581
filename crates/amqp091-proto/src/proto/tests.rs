//! Socket-free tests of the connection state machine: a scripted client feeds frames and
//! reads what the connection wrote.

use std::time::{Duration, Instant};

use amq_protocol::frame::{AMQPFrame, WriteContext, gen_frame};
use amq_protocol::protocol::{AMQPClass, basic, channel, connection};
use amq_protocol::types::{AMQPValue, FieldTable, LongString};
use bytes::{BufMut, Bytes, BytesMut};

use super::*;
use crate::codec::{FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_METHOD, decode_method, parse_frame};

struct TestHost;

impl Host for TestHost {
    fn authenticate(&mut self, _mechanism: &str, username: &str, password: &str) -> bool {
        username == "guest" && password == "guest"
    }

    fn open_vhost(&mut self, _username: &str, vhost: &str) -> Result<(), String> {
        if vhost == "/" { Ok(()) } else { Err(format!("vhost {vhost} not found")) }
    }
}

struct Harness {
    conn: Connection,
    now: Instant,
}

fn frame(channel: u16, method: AMQPClass) -> Vec<u8> {
    let f = AMQPFrame::Method(channel, method);
    gen_frame(&f)(WriteContext::from(Vec::new())).map(|c| c.into_inner().0).unwrap_or_default()
}

fn raw(kind: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.put_u8(kind);
    out.put_u16(channel);
    out.put_u32(u32::try_from(payload.len()).unwrap());
    out.put_slice(payload);
    out.put_u8(FRAME_END);
    out.to_vec()
}

fn start_ok(password: &str, failure_close: bool) -> AMQPClass {
    let mut caps = FieldTable::default();
    caps.insert("authentication_failure_close".into(), AMQPValue::Boolean(failure_close));
    let mut props = FieldTable::default();
    props.insert("capabilities".into(), AMQPValue::FieldTable(caps));
    AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
        client_properties: props,
        mechanism: "PLAIN".into(),
        response: LongString::from(format!("\0guest\0{password}").into_bytes()),
        locale: "en_US".into(),
    }))
}

fn tune_ok(frame_max: u32, heartbeat: u16) -> AMQPClass {
    AMQPClass::Connection(connection::AMQPMethod::TuneOk(connection::TuneOk {
        channel_max: 2047,
        frame_max,
        heartbeat,
    }))
}

fn open(vhost: &str) -> AMQPClass {
    AMQPClass::Connection(connection::AMQPMethod::Open(connection::Open { virtual_host: vhost.into() }))
}

fn channel_open() -> AMQPClass {
    AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {}))
}

impl Harness {
    fn new() -> Self {
        let now = Instant::now();
        Self { conn: Connection::new(ConnectionConfig::default(), now), now }
    }

    fn open() -> Self {
        let mut h = Self::new();
        h.send(&frame(0, start_ok("guest", true)));
        h.send(&frame(0, tune_ok(131_072, 0)));
        h.send(&frame(0, open("/")));
        h.methods();
        h.events();
        h
    }

    /// Opened with a heartbeat of `seconds`.
    fn with_heartbeat(seconds: u16) -> Self {
        let mut h = Self::new();
        h.send(&frame(0, start_ok("guest", false)));
        h.send(&frame(0, tune_ok(131_072, seconds)));
        h.send(&frame(0, open("/")));
        h
    }

    fn send(&mut self, bytes: &[u8]) {
        let mut input = BytesMut::from(bytes);
        self.conn.handle_input(&mut input, self.now, &mut TestHost);
    }

    fn methods(&mut self) -> Vec<(u16, AMQPClass)> {
        let mut out = self.conn.output().split();
        let mut methods = Vec::new();
        while let Ok(Some(f)) = parse_frame(&mut out, 0) {
            if f.kind == FRAME_METHOD {
                methods.push((f.channel, decode_method(&f.payload).unwrap()));
            }
        }
        methods
    }

    fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.conn.poll_event()).collect()
    }

    fn connection_close(&mut self) -> Option<(u16, String, u16, u16)> {
        self.methods().into_iter().find_map(|(_, m)| match m {
            AMQPClass::Connection(connection::AMQPMethod::Close(c)) => {
                Some((c.reply_code, c.reply_text.as_str().to_owned(), c.class_id, c.method_id))
            }
            _ => None,
        })
    }
}

#[test]
fn handshake_runs_start_tune_open() {
    let mut h = Harness::new();
    let first = h.methods();
    assert!(matches!(first.as_slice(), [(0, AMQPClass::Connection(connection::AMQPMethod::Start(_)))]));
    h.send(&frame(0, start_ok("guest", false)));
    let tune = h.methods();
    let [(0, AMQPClass::Connection(connection::AMQPMethod::Tune(t)))] = tune.as_slice() else {
        panic!("expected tune, got {tune:?}")
    };
    assert_eq!((t.channel_max, t.frame_max, t.heartbeat), (2047, 131_072, 60));
    h.send(&frame(0, tune_ok(131_072, 30)));
    h.send(&frame(0, open("/")));
    assert!(matches!(h.methods().as_slice(), [(0, AMQPClass::Connection(connection::AMQPMethod::OpenOk(_)))]));
    assert!(
        matches!(h.events().as_slice(), [Event::Opened { username, vhost }] if username == "guest" && vhost == "/")
    );
    assert_eq!(h.conn.state(), ConnectionState::Running);
}

#[test]
fn refused_login_closes_with_403_only_for_clients_that_ask() {
    let mut h = Harness::new();
    h.methods();
    h.send(&frame(0, start_ok("wrong", true)));
    let (code, text, ..) = h.connection_close().unwrap();
    assert_eq!(code, 403);
    assert_eq!(
        text,
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the broker logfile."
    );
    assert_eq!(h.conn.state(), ConnectionState::Closing);

    let mut silent = Harness::new();
    silent.methods();
    silent.send(&frame(0, start_ok("wrong", false)));
    assert!(silent.connection_close().is_none());
    assert_silent_close_after_three_seconds(&mut silent);
}

/// The host behind SASL EXTERNAL: the certificate names `cert-user`, or no known user.
struct CertHost(Option<&'static str>);

impl Host for CertHost {
    fn authenticate(&mut self, _mechanism: &str, _username: &str, _password: &str) -> bool {
        false
    }

    fn authenticate_external(&mut self) -> Option<String> {
        self.0.map(str::to_owned)
    }

    fn authenticate_anonymous(&mut self) -> Option<String> {
        self.0.map(str::to_owned)
    }

    fn open_vhost(&mut self, _username: &str, _vhost: &str) -> Result<(), String> {
        Ok(())
    }
}

fn external_start_ok() -> Vec<u8> {
    start_ok_with("EXTERNAL")
}

fn start_ok_with(mechanism: &str) -> Vec<u8> {
    let mut caps = FieldTable::default();
    caps.insert("authentication_failure_close".into(), AMQPValue::Boolean(true));
    let mut props = FieldTable::default();
    props.insert("capabilities".into(), AMQPValue::FieldTable(caps));
    frame(
        0,
        AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
            client_properties: props,
            mechanism: mechanism.into(),
            response: LongString::from(Vec::new()),
            locale: "en_US".into(),
        })),
    )
}

fn offered_mechanisms(h: &mut Harness) -> String {
    match h.methods().as_slice() {
        [(0, AMQPClass::Connection(connection::AMQPMethod::Start(start)))] => {
            String::from_utf8_lossy(start.mechanisms.as_bytes()).into_owned()
        }
        other => panic!("expected start, got {other:?}"),
    }
}

#[test]
fn external_is_offered_and_accepted_only_when_configured() {
    let now = Instant::now();
    let config = ConnectionConfig { sasl_external: true, ..ConnectionConfig::default() };
    let mut h = Harness { conn: Connection::new(config.clone(), now), now };
    assert_eq!(offered_mechanisms(&mut h), "PLAIN AMQPLAIN EXTERNAL");
    h.conn.handle_input(&mut BytesMut::from(&external_start_ok()[..]), now, &mut CertHost(Some("cert-user")));
    assert!(matches!(h.methods().as_slice(), [(0, AMQPClass::Connection(connection::AMQPMethod::Tune(_)))]));
    h.conn.handle_input(&mut BytesMut::from(&frame(0, tune_ok(131_072, 0))[..]), now, &mut CertHost(None));
    h.conn.handle_input(&mut BytesMut::from(&frame(0, open("/"))[..]), now, &mut CertHost(None));
    assert!(matches!(h.events().as_slice(), [Event::Opened { username, .. }] if username == "cert-user"));

    // A certificate naming no known user: refused as a bad password is.
    let mut refused = Harness { conn: Connection::new(config, now), now };
    refused.methods();
    refused.conn.handle_input(&mut BytesMut::from(&external_start_ok()[..]), now, &mut CertHost(None));
    let (code, text, ..) = refused.connection_close().unwrap();
    assert_eq!(code, 403);
    assert_eq!(
        text,
        "ACCESS_REFUSED - Login was refused using authentication mechanism EXTERNAL. For details see the broker logfile."
    );

    // Not offered (no client certificate): an unknown mechanism, dropped silently as any
    // other handshake error.
    let mut plain = Harness::new();
    assert_eq!(offered_mechanisms(&mut plain), "PLAIN AMQPLAIN");
    plain.conn.handle_input(&mut BytesMut::from(&external_start_ok()[..]), now, &mut CertHost(Some("cert-user")));
    assert!(plain.events().is_empty());
    assert_silent_close_after_three_seconds(&mut plain);
}

#[test]
fn anonymous_is_offered_first_and_logs_in_as_the_host_says() {
    let now = Instant::now();
    let config = ConnectionConfig { sasl_anonymous: true, ..ConnectionConfig::default() };
    let mut h = Harness { conn: Connection::new(config.clone(), now), now };
    assert_eq!(offered_mechanisms(&mut h), "ANONYMOUS PLAIN AMQPLAIN");
    h.conn.handle_input(&mut BytesMut::from(&start_ok_with("ANONYMOUS")[..]), now, &mut CertHost(Some("guest")));
    assert!(matches!(h.methods().as_slice(), [(0, AMQPClass::Connection(connection::AMQPMethod::Tune(_)))]));
    h.conn.handle_input(&mut BytesMut::from(&frame(0, tune_ok(131_072, 0))[..]), now, &mut CertHost(None));
    h.conn.handle_input(&mut BytesMut::from(&frame(0, open("/"))[..]), now, &mut CertHost(None));
    assert!(matches!(h.events().as_slice(), [Event::Opened { username, .. }] if username == "guest"));

    let mut refused = Harness { conn: Connection::new(config, now), now };
    refused.methods();
    refused.conn.handle_input(&mut BytesMut::from(&start_ok_with("ANONYMOUS")[..]), now, &mut CertHost(None));
    assert_eq!(refused.connection_close().map(|(code, ..)| code), Some(403));

    // Not offered: an unknown mechanism.
    let mut plain = Harness::new();
    assert_eq!(offered_mechanisms(&mut plain), "PLAIN AMQPLAIN");
    plain.conn.handle_input(&mut BytesMut::from(&start_ok_with("ANONYMOUS")[..]), now, &mut CertHost(Some("guest")));
    assert!(plain.events().is_empty());
    assert_silent_close_after_three_seconds(&mut plain);
}

/// RabbitMQ drops a failed handshake without a frame, 3 s later.
fn assert_silent_close_after_three_seconds(h: &mut Harness) {
    assert!(h.conn.output().is_empty());
    h.conn.handle_timeout(h.now + Duration::from_millis(2999));
    assert_ne!(h.conn.state(), ConnectionState::Closed);
    h.conn.handle_timeout(h.now + Duration::from_secs(3));
    assert_eq!(h.conn.state(), ConnectionState::Closed);
    assert!(h.conn.output().is_empty());
}

#[test]
fn unknown_vhost_is_530() {
    let mut h = Harness::new();
    h.send(&frame(0, start_ok("guest", false)));
    h.send(&frame(0, tune_ok(131_072, 0)));
    h.methods();
    h.send(&frame(0, open("nope")));
    assert_eq!(h.connection_close(), Some((530, "NOT_ALLOWED - vhost nope not found".into(), 10, 40)));
}

#[test]
fn out_of_range_tuning_is_dropped_silently() {
    for (frame_max, channel_max) in [(1024, 2047), (1_000_000, 2047), (131_072, 5000)] {
        let mut h = Harness::new();
        h.send(&frame(0, start_ok("guest", false)));
        h.methods();
        let tune = connection::TuneOk { channel_max, frame_max, heartbeat: 0 };
        h.send(&frame(0, AMQPClass::Connection(connection::AMQPMethod::TuneOk(tune))));
        assert_silent_close_after_three_seconds(&mut h);
    }
}

#[test]
fn channel_errors_are_504() {
    let mut h = Harness::open();
    let qos = AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos { prefetch_count: 1, global: false }));
    h.send(&frame(1, qos));
    assert_eq!(h.connection_close(), Some((504, "CHANNEL_ERROR - expected 'channel.open'".into(), 60, 10)));

    let mut h = Harness::open();
    h.send(&frame(1, channel_open()));
    h.send(&frame(1, channel_open()));
    assert_eq!(h.connection_close(), Some((504, "CHANNEL_ERROR - second 'channel.open' seen".into(), 20, 10)));
}

#[test]
fn content_out_of_place_is_505() {
    let mut h = Harness::open();
    h.send(&frame(1, channel_open()));
    h.methods();
    h.send(&raw(FRAME_BODY, 1, b"hello"));
    let (code, text, ..) = h.connection_close().unwrap();
    assert_eq!((code, text.as_str()), (505, "UNEXPECTED_FRAME - expected method frame, got non method frame instead"));

    let mut h = Harness::open();
    h.send(&raw(crate::codec::FRAME_HEARTBEAT, 1, b""));
    let (code, text, ..) = h.connection_close().unwrap();
    assert_eq!((code, text.as_str()), (505, "UNEXPECTED_FRAME - type 8, all octets = <<>>"));
}

#[test]
fn corrupt_framing_is_501_and_stops_reading() {
    let mut h = Harness::open();
    let mut bad = raw(FRAME_METHOD, 1, &[0, 20, 0, 10, 0]);
    if let Some(last) = bad.last_mut() {
        *last = 0;
    }
    h.send(&bad);
    let (code, text, ..) = h.connection_close().unwrap();
    assert_eq!(code, 501);
    assert_eq!(text, "FRAME_ERROR - type 1, all octets = <<0,20,0,10,0>>: {invalid_frame_end_marker,0}");
    h.send(&frame(1, channel_open()));
    assert!(h.methods().is_empty(), "nothing is read after a framing error");

    let mut h = Harness::open();
    h.send(&raw(FRAME_METHOD, 1, &vec![0; 131_073]));
    let (code, text, ..) = h.connection_close().unwrap();
    assert_eq!(code, 501);
    assert_eq!(text, "FRAME_ERROR - type 1, all octets = <<>>: {frame_too_large,131073,131064}");
}

#[test]
fn truncated_method_is_501_and_unknown_method_drops_silently() {
    let mut h = Harness::open();
    h.send(&frame(1, channel_open()));
    h.methods();
    h.send(&raw(FRAME_METHOD, 1, &[0, 60, 0, 80, 0, 0]));
    let (code, text, class, method) = h.connection_close().unwrap();
    assert_eq!((code, text.as_str(), class, method), (501, "FRAME_ERROR - cannot decode <<0,0>>", 60, 80));

    let mut h = Harness::open();
    h.send(&raw(FRAME_METHOD, 0, &[0, 60, 0, 99]));
    assert!(h.connection_close().is_none());
    assert_eq!(h.conn.state(), ConnectionState::Closed);
}

#[test]
fn too_many_channels_is_530() {
    let mut h = Harness::new();
    h.send(&frame(0, start_ok("guest", false)));
    let tune = AMQPClass::Connection(connection::AMQPMethod::TuneOk(connection::TuneOk {
        channel_max: 2,
        frame_max: 131_072,
        heartbeat: 0,
    }));
    h.send(&frame(0, tune));
    h.send(&frame(0, open("/")));
    h.methods();
    for id in 1..=3 {
        h.send(&frame(id, channel_open()));
    }
    let (code, text, ..) = h.connection_close().unwrap();
    assert_eq!(
        (code, text.as_str()),
        (530, "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)")
    );
}

/// `basic.publish` to queue `q` through the default exchange.
fn publish_to_q() -> AMQPClass {
    AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
        exchange: "".into(),
        routing_key: "q".into(),
        mandatory: false,
        immediate: false,
    }))
}

/// A whole `basic.publish` to `q` with `body` and no properties: method, header, body.
fn publish_frames(channel: u16, body: &[u8]) -> Vec<u8> {
    let mut header = BytesMut::new();
    header.put_u16(60);
    header.put_u16(0);
    header.put_u64(u64::try_from(body.len()).unwrap());
    header.put_u16(0);
    let mut out = frame(channel, publish_to_q());
    out.extend_from_slice(&raw(FRAME_HEADER, channel, &header));
    out.extend_from_slice(&raw(FRAME_BODY, channel, body));
    out
}

#[test]
fn publish_content_is_reassembled_from_several_frames() {
    let mut h = Harness::open();
    h.send(&frame(1, channel_open()));
    h.events();
    h.send(&frame(1, publish_to_q()));
    let mut header = BytesMut::new();
    header.put_u16(60);
    header.put_u16(0);
    header.put_u64(10);
    header.put_u16(0x8000);
    header.put_u8(4);
    header.put_slice(b"text");
    h.send(&raw(FRAME_HEADER, 1, &header));
    h.send(&raw(FRAME_BODY, 1, b"hello"));
    assert!(h.events().is_empty());
    h.send(&raw(FRAME_BODY, 1, b"world"));
    let events = h.events();
    let [Event::Publish(1, command)] = events.as_slice() else { panic!("{events:?}") };
    assert_eq!(command.body, Bytes::from_static(b"helloworld"));
    let properties = command.properties.properties.as_deref().expect("content-type was set");
    assert_eq!(properties.content_type.as_deref(), Some("text"));
    assert_eq!(command.method.routing_key.as_str(), "q");
}

#[test]
fn heartbeats_are_sent_and_a_silent_peer_is_dropped() {
    let mut h = Harness::with_heartbeat(1);
    h.conn.output().clear();
    let start = h.now;
    h.conn.on_written(start);
    let next = h.conn.poll_timeout().unwrap();
    assert_eq!(next, start + Duration::from_millis(500));
    h.conn.handle_timeout(next);
    assert_eq!(&h.conn.output()[..], &[8, 0, 0, 0, 0, 0, 0, 0xCE]);
    h.conn.output().clear();
    h.conn.handle_timeout(start + Duration::from_millis(1999));
    assert_eq!(h.conn.state(), ConnectionState::Running);
    h.conn.handle_timeout(start + Duration::from_secs(2));
    assert_eq!(h.conn.state(), ConnectionState::Closed);
}

#[test]
fn a_silent_peer_is_dropped_at_the_second_empty_check_as_rabbitmq_ticks() {
    let mut h = Harness::with_heartbeat(1);
    let agreed = h.now;
    // Data 300 ms after the heartbeat was agreed: the checks at 1 s (data seen) and 2 s (none)
    // keep it; the one at 3 s is the second without data.
    let mut input = BytesMut::from(&[8u8, 0, 0, 0, 0, 0, 0, 0xCE][..]);
    h.conn.handle_input(&mut input, agreed + Duration::from_millis(300), &mut TestHost);
    assert_eq!(h.conn.poll_timeout().map(|t| t >= agreed + Duration::from_secs(3)), Some(false), "heartbeats go out");
    h.conn.handle_timeout(agreed + Duration::from_millis(2999));
    assert_eq!(h.conn.state(), ConnectionState::Running);
    h.conn.handle_timeout(agreed + Duration::from_secs(3));
    assert_eq!(h.conn.state(), ConnectionState::Closed);
}

#[test]
fn client_channel_close_waits_for_the_broker_and_drops_what_follows() {
    let mut h = Harness::open();
    h.send(&frame(1, channel_open()));
    h.events();
    h.methods();
    let close = AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close {
        reply_code: 200,
        reply_text: "bye".into(),
        class_id: 0,
        method_id: 0,
    }));
    h.send(&frame(1, close));
    // No close-ok yet: the broker sends what it owes for the channel first.
    assert!(h.methods().is_empty());
    assert!(matches!(h.events().as_slice(), [Event::ChannelClosing(1)]));
    assert!(!h.conn.is_channel_open(1));
    // What the client sends meanwhile is dropped, a publish included.
    let qos = AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos { prefetch_count: 1, global: false }));
    h.send(&frame(1, qos));
    h.send(&publish_frames(1, b"late"));
    assert!(h.events().is_empty());
    assert!(h.methods().is_empty());
    h.conn.close_ok_channel(1);
    assert!(matches!(h.methods().as_slice(), [(1, AMQPClass::Channel(channel::AMQPMethod::CloseOk(_)))]));
    // Only once, and the id can be reused at once.
    h.conn.close_ok_channel(1);
    assert!(h.methods().is_empty());
    h.send(&frame(1, channel_open()));
    assert!(matches!(h.events().as_slice(), [Event::ChannelOpened(1)]));
}

#[test]
fn after_close_ok_the_socket_lingers_and_drops_what_comes() {
    let mut h = Harness::open();
    h.send(&frame(1, channel_open()));
    h.events();
    h.methods();
    let close = AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
        reply_code: 200,
        reply_text: "bye".into(),
        class_id: 0,
        method_id: 0,
    }));
    h.send(&frame(0, close.clone()));
    assert!(matches!(h.methods().as_slice(), [(0, AMQPClass::Connection(connection::AMQPMethod::CloseOk(_)))]));
    assert!(matches!(h.events().as_slice(), [Event::ChannelClosed(1), Event::Closed]));
    assert_eq!(h.conn.state(), ConnectionState::Lingering);
    // Publishes still in flight are read and dropped, not refused; a repeated close is
    // answered again, as RabbitMQ does.
    let mut late = BytesMut::from(&publish_frames(1, b"late")[..]);
    h.conn.handle_input(&mut late, h.now, &mut TestHost);
    assert!(late.is_empty());
    h.send(&frame(0, close));
    assert!(matches!(h.methods().as_slice(), [(0, AMQPClass::Connection(connection::AMQPMethod::CloseOk(_)))]));
    assert!(h.events().is_empty());
    // Without a heartbeat it lingers RabbitMQ's 30 s at most.
    assert_eq!(h.conn.poll_timeout(), Some(h.now + Duration::from_secs(30)));
    h.conn.handle_timeout(h.now + Duration::from_secs(30));
    assert_eq!(h.conn.state(), ConnectionState::Closed);
    assert!(h.events().is_empty(), "released once");
}

#[test]
fn a_heartbeat_shortens_the_linger_and_garbage_stops_the_reading() {
    let mut h = Harness::with_heartbeat(5);
    let close = AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
        reply_code: 200,
        reply_text: "bye".into(),
        class_id: 0,
        method_id: 0,
    }));
    h.send(&frame(0, close));
    h.methods();
    assert_eq!(h.conn.poll_timeout(), Some(h.now + Duration::from_secs(5)));
    let mut garbage = BytesMut::from(&[9u8, 9, 9, 9, 9, 9, 9, 9, 9][..]);
    h.conn.handle_input(&mut garbage, h.now, &mut TestHost);
    assert!(garbage.is_empty());
    assert_eq!(h.conn.state(), ConnectionState::Lingering);
    // A shutdown while lingering just drops the socket.
    h.conn.close(ReplyCode::ConnectionForced, "shutdown", (0, 0), h.now);
    assert_eq!(h.conn.state(), ConnectionState::Closed);
    assert!(h.methods().is_empty());
}

#[test]
fn server_channel_close_ignores_frames_until_close_ok() {
    let mut h = Harness::open();
    h.send(&frame(1, channel_open()));
    h.methods();
    h.events();
    h.conn.close_channel(1, ReplyCode::NotFound, "no queue 'q' in vhost '/'", (50, 10));
    let methods = h.methods();
    assert!(matches!(methods.as_slice(), [(1, AMQPClass::Channel(channel::AMQPMethod::Close(c)))]
        if c.reply_code == 404 && c.reply_text.as_str() == "NOT_FOUND - no queue 'q' in vhost '/'"));
    let qos = AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos { prefetch_count: 1, global: false }));
    h.send(&frame(1, qos));
    assert!(h.events().is_empty());
    h.send(&frame(1, AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {}))));
    h.send(&frame(1, channel_open()));
    assert!(matches!(h.events().as_slice(), [Event::ChannelOpened(1)]));
}

/// Random bytes after a good handshake never panic the state machine, and it always ends in a
/// defined state (still running, closing or closed).
#[test]
fn random_input_never_panics() {
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..2000 {
        let mut h = Harness::open();
        h.send(&frame(1, channel_open()));
        let len = usize::try_from(next() % 300).unwrap();
        let mut bytes: Vec<u8> = (0..len).map(|_| u8::try_from(next() & 0xff).unwrap()).collect();
        // Half the rounds use well-framed garbage so the parsers behind framing get exercised.
        if round % 2 == 0 && bytes.len() > 8 {
            let kind = [FRAME_METHOD, FRAME_HEADER, FRAME_BODY, 8, 9][usize::try_from(next() % 5).unwrap()];
            let payload = bytes.split_off(4);
            bytes = raw(kind, u16::try_from(next() % 3).unwrap(), &payload);
        }
        h.send(&bytes);
        h.conn.handle_timeout(h.now + Duration::from_secs(5));
        let _ = h.methods();
        let _ = h.events();
    }
}

/// A field table `{"a": {"a": ... {"a": 1}}}` with `tables` tables inside the outer one,
/// length prefix first, built as bytes (a model value 10,000 deep could not even be dropped).
fn nested_table_bytes(tables: u32) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(7 * tables + 7).to_be_bytes());
    for i in 0..tables {
        out.extend_from_slice(&[1, b'a', b'F']);
        out.extend_from_slice(&(7 * (tables - i)).to_be_bytes());
    }
    out.extend_from_slice(&[1, b'a', b'I', 0, 0, 0, 1]);
    out
}

fn queue_declare_with_arguments(arguments: &[u8]) -> Vec<u8> {
    let mut payload = vec![0, 50, 0, 10, 0, 0, 1, b'q', 0];
    payload.extend_from_slice(arguments);
    raw(FRAME_METHOD, 1, &payload)
}

/// A declare whose arguments nest 10,000 tables deep (80 KB, inside frame_max) is a frame
/// error; before the shared depth limit it overflowed the worker's stack in amq-protocol's
/// parser and aborted the broker. 63 tables inside the outer one (values 64 deep) still decode.
#[test]
fn a_declare_nested_ten_thousand_deep_is_a_frame_error_and_the_limit_itself_decodes() {
    let mut h = Harness::open();
    h.send(&frame(1, channel_open()));
    h.methods();
    h.send(&queue_declare_with_arguments(&nested_table_bytes(10_000)));
    let (code, text, class, method) = h.connection_close().unwrap();
    assert_eq!((code, class, method), (501, 50, 10));
    assert!(text.starts_with("FRAME_ERROR - cannot decode <<"), "{text}");

    for (tables, refused) in [(63, false), (64, true)] {
        let mut h = Harness::open();
        h.send(&frame(1, channel_open()));
        h.methods();
        h.events();
        h.send(&queue_declare_with_arguments(&nested_table_bytes(tables)));
        assert_eq!(h.connection_close().is_some(), refused, "{tables} tables");
        if !refused {
            assert!(matches!(h.events().as_slice(), [Event::Method(1, _)]), "{tables} tables");
        }
    }
}

/// Headers nested past the limit are refused at the content header (502, as any properties
/// that do not decode), so a message the store could not read back is never accepted.
#[test]
fn headers_nested_past_the_limit_are_a_syntax_error() {
    for (tables, refused) in [(63, false), (64, true), (10_000, true)] {
        let mut h = Harness::open();
        h.send(&frame(1, channel_open()));
        h.events();
        h.send(&frame(1, publish_to_q()));
        let mut header = BytesMut::new();
        header.put_u16(60);
        header.put_u16(0);
        header.put_u64(0);
        header.put_u16(0x2000);
        header.put_slice(&nested_table_bytes(tables));
        h.send(&raw(FRAME_HEADER, 1, &header));
        match h.connection_close() {
            Some((code, text, class, method)) => {
                assert!(refused, "{tables} tables: {text}");
                assert_eq!((code, class, method), (502, 60, 40));
                assert!(text.starts_with("SYNTAX_ERROR - cannot decode properties"), "{text}");
            }
            None => {
                assert!(!refused, "{tables} tables were accepted");
                assert!(matches!(h.events().as_slice(), [Event::Publish(1, _)]));
            }
        }
    }
}

/// A connection blocked by an alarm is not read, so its client's heartbeats cannot arrive:
/// as RabbitMQ, the check pauses while blocked (heartbeats still go out) and starts afresh
/// when reading resumes. Before, a publisher blocked for two heartbeat intervals was dropped.
#[test]
fn a_blocked_connection_is_not_dropped_for_heartbeats_it_could_not_send() {
    let mut h = Harness::with_heartbeat(1);
    let start = h.now;
    h.conn.block(Some("low on memory"));
    h.conn.handle_timeout(start + Duration::from_secs(30));
    assert_eq!(h.conn.state(), ConnectionState::Running);
    assert!(h.conn.poll_timeout().unwrap() <= start + Duration::from_secs(31), "heartbeats still go out");
    let resumed = start + Duration::from_secs(60);
    h.conn.unblock(resumed);
    h.conn.handle_timeout(resumed + Duration::from_millis(1999));
    assert_eq!(h.conn.state(), ConnectionState::Running);
    h.conn.handle_timeout(resumed + Duration::from_secs(2));
    assert_eq!(h.conn.state(), ConnectionState::Closed);
}

/// While publishes are held (an alarm), input stops at the next `basic.publish` and leaves it
/// in the buffer; acks and other methods before it are handled. Released, the publish goes on.
#[test]
fn held_publishes_stop_input_at_the_publish_and_leave_it_unread() {
    let mut h = Harness::open();
    h.send(&frame(1, channel_open()));
    h.events();
    h.conn.hold_publishes(true);
    let mut input = BytesMut::new();
    input.extend_from_slice(&frame(1, ack_one()));
    input.extend_from_slice(&frame(1, publish_to_q()));
    let mut header = BytesMut::new();
    header.put_u16(60);
    header.put_u16(0);
    header.put_u64(2);
    header.put_u16(0);
    input.extend_from_slice(&raw(FRAME_HEADER, 1, &header));
    input.extend_from_slice(&raw(FRAME_BODY, 1, b"hi"));
    let unread = input.len() - frame(1, ack_one()).len();
    h.conn.handle_input(&mut input, h.now, &mut TestHost);
    assert!(h.conn.stopped_at_publish());
    assert_eq!(input.len(), unread, "everything from the publish on is left in the buffer");
    assert!(matches!(h.events().as_slice(), [Event::Method(1, _)]), "the ack was handled");

    h.conn.hold_publishes(false);
    h.conn.handle_input(&mut input, h.now, &mut TestHost);
    assert!(!h.conn.stopped_at_publish());
    assert!(input.is_empty());
    assert!(matches!(h.events().as_slice(), [Event::Publish(1, _)]));
}

fn ack_one() -> AMQPClass {
    AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack { delivery_tag: 1, multiple: false }))
}

/// Flow control (the store behind) pauses reads without `connection.blocked`; an alarm that
/// comes on meanwhile sends it, once; resuming sends `connection.unblocked` only to a client
/// that was told it was blocked.
#[test]
fn blocked_frames_go_only_for_alarms_and_only_once() {
    let mut caps = FieldTable::default();
    caps.insert("connection.blocked".into(), AMQPValue::Boolean(true));
    let mut props = FieldTable::default();
    props.insert("capabilities".into(), AMQPValue::FieldTable(caps));
    let start_ok = AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
        client_properties: props,
        mechanism: "PLAIN".into(),
        response: LongString::from(b"\0guest\0guest".to_vec()),
        locale: "en_US".into(),
    }));
    let mut h = Harness::new();
    h.send(&frame(0, start_ok));
    h.send(&frame(0, tune_ok(131_072, 0)));
    h.send(&frame(0, open("/")));
    h.methods();
    let blocked_or_unblocked = |h: &mut Harness| -> Vec<u16> {
        h.methods()
            .into_iter()
            .filter_map(|(_, m)| match m {
                AMQPClass::Connection(connection::AMQPMethod::Blocked(_)) => Some(60),
                AMQPClass::Connection(connection::AMQPMethod::Unblocked(_)) => Some(61),
                _ => None,
            })
            .collect()
    };
    h.conn.block(None);
    assert_eq!(blocked_or_unblocked(&mut h), Vec::<u16>::new(), "flow control sends nothing");
    h.conn.block(Some("low on disk"));
    h.conn.block(Some("low on disk"));
    assert_eq!(blocked_or_unblocked(&mut h), [60], "connection.blocked once");
    h.conn.unblock(h.now);
    assert_eq!(blocked_or_unblocked(&mut h), [61]);
    h.conn.block(None);
    h.conn.unblock(h.now);
    assert_eq!(blocked_or_unblocked(&mut h), Vec::<u16>::new(), "no unblocked for a flow pause");
}

#[test]
fn server_properties_name_the_product_and_version_the_1_0_open_names() {
    let mut h = Harness::new();
    let methods = h.methods();
    let Some((0, AMQPClass::Connection(connection::AMQPMethod::Start(start)))) = methods.first() else {
        panic!("expected connection.start, got {methods:?}");
    };
    let text = |key: &str| match start.server_properties.inner().get(key) {
        Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        other => panic!("{key}: {other:?}"),
    };
    assert_eq!((text("product"), text("version")), ("RabbitMQ".to_owned(), "4.0.5".to_owned()));
    assert_eq!(text("platform"), charon_model::identity::PLATFORM);
    assert_eq!(text("information"), charon_model::identity::information());
    assert_eq!(text("cluster_name"), charon_model::node_name());
}

#[test]
fn server_capabilities_announce_direct_reply_to_and_consumer_priorities() {
    let mut h = Harness::new();
    let methods = h.methods();
    let Some((0, AMQPClass::Connection(connection::AMQPMethod::Start(start)))) = methods.first() else {
        panic!("expected connection.start, got {methods:?}");
    };
    let Some(AMQPValue::FieldTable(caps)) = start.server_properties.inner().get("capabilities") else {
        panic!("no capabilities table");
    };
    assert_eq!(caps.inner().get("direct_reply_to"), Some(&AMQPValue::Boolean(true)));
    assert_eq!(caps.inner().get("consumer_priorities"), Some(&AMQPValue::Boolean(true)));
}
