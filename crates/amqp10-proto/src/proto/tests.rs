//! Socket-free tests of the AMQP 1.0 connection: a scripted client feeds frames and reads
//! what the connection wrote.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::definitions::{Handle, Role, SenderSettleMode};
use fe2o3_amqp_types::messaging::{Source, Target, TargetArchetype};
use fe2o3_amqp_types::performatives::{
    Attach, Begin, ChannelMax, Close, Detach, End, Flow, MaxFrameSize, Open, Performative, Transfer,
};
use fe2o3_amqp_types::primitives::Binary;
use fe2o3_amqp_types::sasl::{SaslCode, SaslInit, SaslOutcome};
use serde::Serialize;

use super::*;
use crate::codec::{FRAME_TYPE_AMQP, FRAME_TYPE_SASL, decode_performative, encode_value, parse_frame, write_frame};

struct TestHost;

impl Host for TestHost {
    fn authenticate(&mut self, _mechanism: &str, username: &str, password: &str) -> bool {
        username == "guest" && password == "guest"
    }
    fn anonymous_user(&mut self) -> Option<String> {
        None
    }
    fn open_vhost(&mut self, _username: &str, vhost: &str) -> Result<(), String> {
        if vhost == "/" { Ok(()) } else { Err(format!("virtual host '{vhost}' does not exist")) }
    }
}

struct Harness {
    conn: Connection,
    now: Instant,
}

fn frame<T: Serialize>(kind: u8, channel: u16, body: &T, payload: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    write_frame(&mut out, kind, channel, &encode_value(body), payload);
    out.to_vec()
}

fn open() -> Open {
    Open {
        container_id: "test".into(),
        hostname: Some("vhost:/".into()),
        max_frame_size: MaxFrameSize(65_536),
        channel_max: ChannelMax(10),
        idle_time_out: None,
        outgoing_locales: None,
        incoming_locales: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

fn begin() -> Begin {
    Begin {
        remote_channel: None,
        next_outgoing_id: 0,
        incoming_window: 100,
        outgoing_window: 100,
        handle_max: Handle(10),
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

fn attach_sender(handle: u32, address: &str) -> Attach {
    Attach {
        name: format!("link-{handle}"),
        handle: Handle(handle),
        role: Role::Sender,
        snd_settle_mode: SenderSettleMode::Unsettled,
        rcv_settle_mode: Default::default(),
        source: Some(Box::new(Source::default())),
        target: Some(Box::new(TargetArchetype::Target(Target { address: Some(address.into()), ..Target::default() }))),
        unsettled: None,
        incomplete_unsettled: false,
        initial_delivery_count: Some(0),
        max_message_size: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

impl Harness {
    fn new() -> Self {
        let now = Instant::now();
        Self { conn: Connection::new(Config::default(), false, now), now }
    }

    fn send(&mut self, bytes: &[u8]) {
        let mut input = BytesMut::from(bytes);
        self.conn.handle_input(&mut input, self.now, &mut TestHost);
    }

    fn login(&mut self) {
        self.output();
        let init = SaslInit {
            mechanism: "PLAIN".into(),
            initial_response: Some(Binary::from(b"\0guest\0guest".to_vec())),
            hostname: None,
        };
        self.send(&frame(FRAME_TYPE_SASL, 0, &init, &[]));
    }

    fn opened() -> Self {
        let mut h = Self::new();
        h.login();
        h.send(b"AMQP\x00\x01\x00\x00");
        h.send(&frame(FRAME_TYPE_AMQP, 0, &open(), &[]));
        h.send(&frame(FRAME_TYPE_AMQP, 1, &begin(), &[]));
        h.output();
        h.events();
        h
    }

    fn output(&mut self) -> BytesMut {
        self.conn.output().split()
    }

    /// The performatives written, skipping protocol headers.
    fn performatives(&mut self) -> Vec<(u16, Performative)> {
        let mut out = self.output();
        if out.starts_with(b"AMQP") {
            let _ = out.split_to(8);
        }
        let mut found = Vec::new();
        while let Ok(Some(f)) = parse_frame(&mut out, u32::MAX) {
            if f.kind == FRAME_TYPE_AMQP
                && !f.body.is_empty()
                && let Ok((p, _)) = decode_performative(&f.body)
            {
                found.push((f.channel, p));
            }
            if out.starts_with(b"AMQP") {
                let _ = out.split_to(8);
            }
        }
        found
    }

    fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.conn.poll_event()).collect()
    }

    fn close_error(&mut self) -> Option<(String, Option<String>)> {
        self.performatives().into_iter().find_map(|(_, p)| match p {
            Performative::Close(c) => c.error.map(|e| (condition(&e), e.description)),
            _ => None,
        })
    }
}

fn condition(e: &fe2o3_amqp_types::definitions::Error) -> String {
    let bytes = encode_value(&e.condition);
    // A symbol: 0xa3 len bytes.
    String::from_utf8_lossy(bytes.get(2..).unwrap_or_default()).into_owned()
}

#[test]
fn sasl_then_header_then_open() {
    let mut h = Harness::new();
    let first = h.output();
    assert!(first.starts_with(b"AMQP\x03\x01\x00\x00"));
    h.login();
    let mut out = h.output();
    let outcome = parse_frame(&mut out, u32::MAX).unwrap().unwrap();
    assert_eq!(outcome.kind, FRAME_TYPE_SASL);
    assert_eq!(crate::codec::decode_exact::<SaslOutcome>(&outcome.body).unwrap().code, SaslCode::Ok);
    assert_eq!(h.conn.state(), State::AwaitHeader);
    h.send(b"AMQP\x00\x01\x00\x00");
    h.send(&frame(FRAME_TYPE_AMQP, 0, &open(), &[]));
    let mut out = h.output();
    assert!(out.starts_with(b"AMQP\x00\x01\x00\x00"));
    let _ = out.split_to(8);
    let open_frame = parse_frame(&mut out, u32::MAX).unwrap().unwrap();
    let Performative::Open(reply) = decode_performative(&open_frame.body).unwrap().0 else { panic!("expected open") };
    assert_eq!(reply.max_frame_size.0, 131_072);
    assert_eq!(reply.idle_time_out, Some(30_000));
    assert_eq!(reply.channel_max.0, 10);
    assert!(matches!(h.events().as_slice(), [Event::Opened { vhost, .. }] if vhost == "/"));
}

fn sasl_init(mechanism: &str, response: &[u8]) -> Vec<u8> {
    let init = SaslInit {
        mechanism: mechanism.into(),
        initial_response: Some(Binary::from(response.to_vec())),
        hostname: None,
    };
    frame(FRAME_TYPE_SASL, 0, &init, &[])
}

fn sasl_outcome(h: &mut Harness) -> Option<SaslCode> {
    let mut out = h.output();
    let outcome = parse_frame(&mut out, u32::MAX).ok()??;
    Some(crate::codec::decode_exact::<SaslOutcome>(&outcome.body).ok()?.code)
}

/// The mechanism names in the `sasl-mechanisms` frame a new connection writes.
fn offered_mechanisms(conn: &mut Connection) -> Vec<String> {
    let mut out = conn.output().split();
    let _ = out.split_to(8);
    let frame = parse_frame(&mut out, u32::MAX).unwrap().unwrap();
    let offer = crate::codec::decode_exact::<fe2o3_amqp_types::sasl::SaslMechanisms>(&frame.body).unwrap();
    offer.sasl_server_mechanisms.0.into_iter().map(|s| s.0).collect()
}

#[test]
fn anonymous_is_offered_only_when_configured() {
    let now = Instant::now();
    let mut plain = Connection::new(Config::default(), false, now);
    assert_eq!(offered_mechanisms(&mut plain), ["PLAIN", "AMQPLAIN"]);
    let mut anonymous = Connection::new(Config::default(), true, now);
    assert_eq!(offered_mechanisms(&mut anonymous), ["PLAIN", "AMQPLAIN", "ANONYMOUS"]);
    // Not offered, so not accepted: no outcome, the socket is dropped after the delay.
    let mut h = Harness::new();
    h.output();
    h.send(&sasl_init("ANONYMOUS", b""));
    assert_eq!(sasl_outcome(&mut h), None);
    h.conn.handle_timeout(h.now + Duration::from_secs(3));
    assert_eq!(h.conn.state(), State::Closed);
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
    fn anonymous_user(&mut self) -> Option<String> {
        None
    }
    fn open_vhost(&mut self, _username: &str, _vhost: &str) -> Result<(), String> {
        Ok(())
    }
}

#[test]
fn external_is_offered_and_accepted_only_when_configured() {
    let now = Instant::now();
    let config = Config { sasl_external: true, ..Config::default() };
    let mut h = Harness { conn: Connection::new(config.clone(), false, now), now };
    assert_eq!(offered_mechanisms(&mut h.conn), ["PLAIN", "AMQPLAIN", "EXTERNAL"]);
    h.conn.handle_input(&mut BytesMut::from(&sasl_init("EXTERNAL", b"")[..]), now, &mut CertHost(Some("cert-user")));
    assert_eq!(sasl_outcome(&mut h), Some(SaslCode::Ok));
    h.conn.handle_input(&mut BytesMut::from(&b"AMQP\x00\x01\x00\x00"[..]), now, &mut CertHost(None));
    h.conn.handle_input(&mut BytesMut::from(&frame(FRAME_TYPE_AMQP, 0, &open(), &[])[..]), now, &mut CertHost(None));
    assert!(matches!(h.events().as_slice(), [Event::Opened { username, .. }] if username == "cert-user"));

    // No known user: refused as a bad password is (the auth outcome after the delay).
    let mut refused = Harness { conn: Connection::new(config, false, now), now };
    refused.output();
    refused.conn.handle_input(&mut BytesMut::from(&sasl_init("EXTERNAL", b"")[..]), now, &mut CertHost(None));
    assert_eq!(sasl_outcome(&mut refused), None);
    refused.conn.handle_timeout(now + Duration::from_secs(3));
    assert_eq!(sasl_outcome(&mut refused), Some(SaslCode::Auth));

    // Not offered (no client certificate): no outcome, dropped after the delay.
    let mut plain = Harness::new();
    plain.output();
    plain.conn.handle_input(
        &mut BytesMut::from(&sasl_init("EXTERNAL", b"")[..]),
        now,
        &mut CertHost(Some("cert-user")),
    );
    assert_eq!(sasl_outcome(&mut plain), None);
    plain.conn.handle_timeout(plain.now + Duration::from_secs(3));
    assert_eq!(plain.conn.state(), State::Closed);
    assert!(!plain.events().iter().any(|e| matches!(e, Event::Opened { .. })));
}

#[test]
fn amqplain_logs_in_with_a_field_table() {
    let mut h = Harness::new();
    h.output();
    let mut table = Vec::new();
    for (key, value) in [("LOGIN", "guest"), ("PASSWORD", "guest")] {
        table.push(u8::try_from(key.len()).unwrap());
        table.extend_from_slice(key.as_bytes());
        table.push(b'S');
        table.extend_from_slice(&u32::try_from(value.len()).unwrap().to_be_bytes());
        table.extend_from_slice(value.as_bytes());
    }
    h.send(&sasl_init("AMQPLAIN", &table));
    assert_eq!(sasl_outcome(&mut h), Some(SaslCode::Ok));
    assert_eq!(h.conn.state(), State::AwaitHeader);
    let mut h = Harness::new();
    h.output();
    h.send(&sasl_init("AMQPLAIN", &table[..table.len() - 1]));
    assert_eq!(sasl_outcome(&mut h), None, "a truncated table is a refused login: the outcome waits");
}

#[test]
fn refused_login_sends_the_auth_outcome_after_three_seconds_then_drops() {
    let mut h = Harness::new();
    h.output();
    h.send(&sasl_init("PLAIN", b"\0guest\0bad"));
    assert_eq!(sasl_outcome(&mut h), None);
    h.conn.handle_timeout(h.now + Duration::from_millis(2999));
    assert_ne!(h.conn.state(), State::Closed);
    h.conn.handle_timeout(h.now + Duration::from_secs(3));
    assert_eq!(sasl_outcome(&mut h), Some(SaslCode::Auth));
    assert_eq!(h.conn.state(), State::Closed);
}

#[test]
fn refused_opens_get_no_frame_and_are_dropped_after_three_seconds() {
    let too_small = Open { max_frame_size: MaxFrameSize(511), ..open() };
    let short_idle = Open { idle_time_out: Some(500), ..open() };
    let unknown_vhost = Open { hostname: Some("vhost:nope".into()), ..open() };
    for refused in [too_small, short_idle, unknown_vhost] {
        let mut h = Harness::new();
        h.login();
        h.output();
        h.send(b"AMQP\x00\x01\x00\x00");
        h.send(&frame(FRAME_TYPE_AMQP, 0, &refused, &[]));
        let out = h.output();
        assert_eq!(&out[..], b"AMQP\x00\x01\x00\x00", "only the protocol header for {refused:?}");
        h.conn.handle_timeout(h.now + Duration::from_secs(3));
        assert_eq!(h.conn.state(), State::Closed);
    }
}

#[test]
fn oversized_and_undecodable_frames_close_the_connection() {
    let mut h = Harness::opened();
    let mut big = vec![0u8, 0x02, 0, 0x08, 2, 0, 0, 1];
    big.extend(vec![0u8; 131_072]);
    h.send(&big);
    let (cond, description) = h.close_error().unwrap();
    assert_eq!(cond, "amqp:connection:framing-error");
    assert_eq!(description.as_deref(), Some("frame size (131080 bytes) > maximum frame size (131072 bytes)"));

    // Like RabbitMQ's reader crashing in its parser: the exception it raises, no stack trace.
    let mut h = Harness::opened();
    h.send(&[0, 0, 0, 12, 2, 0, 0, 1, 0x00, 0x53, 0x13, 0x99]);
    let (cond, description) = h.close_error().unwrap();
    assert_eq!(cond, "amqp:internal-error");
    assert_eq!(description.as_deref(), Some("Reader error: {primitive_type_unsupported,153,{position,0}}\n[]"));
}

#[test]
fn bad_frame_headers_drop_the_socket_without_a_frame() {
    for header in [[0u8, 0, 0, 4, 2, 0, 0, 0], [0, 0, 0, 16, 1, 0, 0, 0], [0, 0, 0, 16, 2, 1, 0, 0]] {
        let mut h = Harness::opened();
        h.send(&header);
        assert_eq!(h.conn.state(), State::Closed, "{header:?}");
        assert!(h.performatives().is_empty(), "{header:?}");
    }
}

#[test]
fn undecodable_session_frames_end_the_session_or_are_honoured_like_rabbitmq() {
    // A flow whose handle is a string: the session ends with amqp:internal-error.
    let mut h = Harness::opened();
    h.send(&[0, 0, 0, 20, 2, 0, 0, 1, 0x00, 0x53, 0x13, 0xc0, 0x07, 0x05, 0x43, 0x43, 0x43, 0xa1, 0x01, b'x']);
    let ended: Vec<(u16, Option<String>)> = h
        .performatives()
        .into_iter()
        .filter_map(|(ch, p)| match p {
            Performative::End(e) => Some((ch, e.error.map(|e| condition(&e)))),
            _ => None,
        })
        .collect();
    assert_eq!(ended, vec![(1, Some("amqp:internal-error".to_owned()))]);
    assert_eq!(h.conn.state(), State::Open);

    // An end whose error is a string still ends the session normally.
    let mut h = Harness::opened();
    h.send(&[0, 0, 0, 17, 2, 0, 0, 1, 0x00, 0x53, 0x17, 0xc0, 0x04, 0x01, 0xa1, 0x01, b'x']);
    let ended: Vec<(u16, Option<String>)> = h
        .performatives()
        .into_iter()
        .filter_map(|(ch, p)| match p {
            Performative::End(e) => Some((ch, e.error.map(|e| condition(&e)))),
            _ => None,
        })
        .collect();
    assert_eq!(ended, vec![(1, None)]);
    assert!(matches!(h.events().as_slice(), [Event::SessionEnded(1)]));
}

#[test]
fn after_an_oversized_frame_the_next_header_is_read_right_behind_its_header() {
    let mut h = Harness::opened();
    // A refused 200000-byte frame, then a close where its body would have started.
    let mut bytes = vec![0u8, 0x03, 0x0d, 0x40, 2, 0, 0, 0];
    bytes.extend(frame(FRAME_TYPE_AMQP, 0, &Close { error: None }, &[]));
    h.send(&bytes);
    let closes: Vec<Option<String>> = h
        .performatives()
        .into_iter()
        .filter_map(|(_, p)| match p {
            Performative::Close(c) => Some(c.error.map(|e| condition(&e))),
            _ => None,
        })
        .collect();
    assert_eq!(closes, vec![Some("amqp:connection:framing-error".to_owned()), None]);
    assert_eq!(h.conn.state(), State::Closed);
}

/// A flow granting credit on `handle`, as a client sends it.
fn link_flow(handle: u32) -> Flow {
    Flow {
        next_incoming_id: Some(0),
        incoming_window: 10,
        next_outgoing_id: 0,
        outgoing_window: 10,
        handle: Some(Handle(handle)),
        delivery_count: Some(0),
        link_credit: Some(5),
        available: None,
        drain: false,
        echo: false,
        properties: None,
    }
}

/// The first (or only) transfer of delivery 0 on `handle`, unsettled.
fn transfer(handle: u32, more: bool) -> Transfer {
    Transfer {
        handle: Handle(handle),
        delivery_id: Some(0),
        delivery_tag: Some(serde_bytes::ByteBuf::from(vec![1])),
        message_format: Some(0),
        settled: Some(false),
        more,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: false,
    }
}

/// The channel, condition and description of the `end` with an error the connection sent.
fn ended_with_error(h: &mut Harness) -> Option<(u16, String, Option<String>)> {
    h.performatives().into_iter().find_map(|(ch, p)| match p {
        Performative::End(End { error: Some(e) }) => Some((ch, condition(&e), e.description)),
        _ => None,
    })
}

#[test]
fn flow_for_an_unknown_handle_ends_the_session() {
    let mut h = Harness::opened();
    h.send(&frame(FRAME_TYPE_AMQP, 1, &link_flow(7), &[]));
    let unattached = (1, "amqp:session:unattached-handle".into(), Some("Unattached link handle: 7".into()));
    assert_eq!(ended_with_error(&mut h), Some(unattached));
    assert!(matches!(h.events().as_slice(), [Event::SessionEnded(1)]));
}

/// An open connection whose client attached a sender on handle 0 of session 1, answered.
fn attached_publisher() -> Harness {
    let mut h = Harness::opened();
    h.send(&frame(FRAME_TYPE_AMQP, 1, &attach_sender(0, "/queues/q"), &[]));
    let events = h.events();
    let [Event::Attach { attach, .. }] = events.as_slice() else { panic!("{events:?}") };
    let reply = Attach { role: Role::Receiver, ..(**attach).clone() };
    h.conn.attach(1, reply);
    h
}

#[test]
fn a_message_in_two_transfers_arrives_whole_with_credit() {
    let mut h = attached_publisher();
    h.conn.grant_initial_credit(1, 0, 0);
    let flows: Vec<_> = h
        .performatives()
        .into_iter()
        .filter_map(|(_, p)| if let Performative::Flow(f) = p { Some(f) } else { None })
        .collect();
    assert_eq!(flows.first().and_then(|f| f.link_credit), Some(170));
    let mut first = transfer(0, true);
    h.send(&frame(FRAME_TYPE_AMQP, 1, &first, b"hello "));
    assert!(h.events().is_empty());
    first.more = false;
    first.delivery_id = None;
    h.send(&frame(FRAME_TYPE_AMQP, 1, &first, b"world"));
    let events = h.events();
    let [Event::Transfer { payload, delivery_id, settled, .. }] = events.as_slice() else { panic!("{events:?}") };
    assert_eq!((payload.clone(), *delivery_id, *settled), (Bytes::from_static(b"hello world"), 0, false));
}

/// Frames a client sent before our detach reached it still name the handle: they are dropped,
/// not taken for frames on an unattached handle (which would end the session), until the
/// client's own detach frees the handle.
#[test]
fn frames_sent_before_our_detach_arrived_are_dropped_until_the_clients_detach() {
    let mut h = attached_publisher();
    let _ = h.performatives();
    h.conn.detach(1, 0, None);
    let sent: Vec<_> =
        h.performatives().into_iter().map(|(ch, p)| (ch, matches!(p, Performative::Detach(_)))).collect();
    assert_eq!(sent, vec![(1, true)]);
    h.send(&frame(FRAME_TYPE_AMQP, 1, &transfer(0, false), b"in flight"));
    h.send(&frame(FRAME_TYPE_AMQP, 1, &link_flow(0), &[]));
    assert!(h.performatives().is_empty());
    assert!(h.events().is_empty());
    // The client's answer: nothing goes back, and the handle is free.
    h.send(&frame(FRAME_TYPE_AMQP, 1, &Detach { handle: Handle(0), closed: true, error: None }, &[]));
    assert!(h.performatives().is_empty());
    h.send(&frame(FRAME_TYPE_AMQP, 1, &link_flow(0), &[]));
    let unattached = (1, "amqp:session:unattached-handle".into(), Some("Unattached link handle: 0".into()));
    assert_eq!(ended_with_error(&mut h), Some(unattached));
}

/// Random bytes after open never panic the state machine.
#[test]
fn random_input_never_panics() {
    let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..3000 {
        let mut h = Harness::opened();
        let len = usize::try_from(next() % 200).unwrap();
        let mut body: Vec<u8> = (0..len).map(|_| u8::try_from(next() & 0xff).unwrap()).collect();
        if round % 2 == 0 {
            // A described list header makes the decoders work harder.
            body.splice(0..0, [0x00, 0x53, u8::try_from(0x10 + next() % 9).unwrap(), 0xc0]);
        }
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&u32::try_from(body.len() + 8).unwrap().to_be_bytes());
        bytes.extend_from_slice(&[2, 0, 0, u8::try_from(next() % 3).unwrap()]);
        bytes.extend(body);
        h.send(&bytes);
        h.conn.handle_timeout(h.now + Duration::from_secs(100));
        let _ = h.performatives();
        let _ = h.events();
    }
}

#[test]
fn outgoing_messages_are_split_to_the_clients_max_frame_size() {
    let mut h = Harness::new();
    h.login();
    h.send(b"AMQP\x00\x01\x00\x00");
    let mut o = open();
    o.max_frame_size = MaxFrameSize(512);
    h.send(&frame(FRAME_TYPE_AMQP, 0, &o, &[]));
    h.send(&frame(FRAME_TYPE_AMQP, 1, &begin(), &[]));
    let mut attach = attach_sender(3, "/queues/q");
    attach.role = Role::Receiver;
    h.send(&frame(FRAME_TYPE_AMQP, 1, &attach, &[]));
    h.events();
    h.conn.attach(1, Attach { role: Role::Sender, ..attach });
    h.output();
    let message: Vec<u8> = (0..2000u32).map(|i| u8::try_from(i % 251).unwrap()).collect();
    let id = h.conn.send_transfer(1, 3, &[1, 2, 3, 4], false, &message);
    assert_eq!(id, Some(0));
    let mut out = h.output();
    let mut reassembled = Vec::new();
    let mut frames = 0;
    while let Ok(Some(f)) = parse_frame(&mut out, 512) {
        let (Performative::Transfer(t), payload) = decode_performative(&f.body).unwrap() else { panic!("transfer") };
        frames += 1;
        reassembled.extend_from_slice(&payload);
        if !t.more {
            break;
        }
    }
    assert!(frames >= 4, "{frames} frames");
    assert_eq!(reassembled, message);
}

#[test]
fn idle_timeouts_both_ways_heartbeats_out_and_a_silent_client_is_closed() {
    let mut h = Harness::new();
    h.login();
    h.send(b"AMQP\x00\x01\x00\x00");
    h.send(&frame(FRAME_TYPE_AMQP, 0, &Open { idle_time_out: Some(4_000), ..open() }, &[]));
    h.output();
    // We write at least every half of the client's idle-time-out: an empty frame.
    h.conn.handle_timeout(h.now + Duration::from_millis(1_999));
    assert!(h.output().is_empty());
    h.conn.handle_timeout(h.now + Duration::from_millis(2_000));
    assert_eq!(&h.output()[..], &[0, 0, 0, 8, 2, 0, 0, 0]);
    // A client that sends nothing for our idle timeout (60 s) is closed.
    h.conn.handle_timeout(h.now + Duration::from_secs(60));
    assert_eq!(
        h.close_error(),
        Some((
            "amqp:resource-limit-exceeded".into(),
            Some("no frame received from client within idle timeout threshold".into())
        ))
    );
}

#[test]
fn paused_publishing_grants_no_credit_until_it_resumes() {
    let mut h = attached_publisher();
    h.conn.set_publishing_paused(true);
    h.conn.grant_initial_credit(1, 0, 0);
    let credits = |h: &mut Harness| -> Vec<Option<u32>> {
        h.performatives()
            .into_iter()
            .filter_map(|(_, p)| if let Performative::Flow(f) = p { Some(f.link_credit) } else { None })
            .collect()
    };
    assert_eq!(credits(&mut h), vec![Some(0)], "no credit while paused");
    assert!(h.conn.publishing_paused());
    h.conn.set_publishing_paused(false);
    assert_eq!(credits(&mut h), vec![Some(170)], "the full credit once resumed");
    h.conn.set_publishing_paused(false);
    assert_eq!(credits(&mut h), Vec::<Option<u32>>::new(), "a link with credit is not topped up again");
}

/// An `attach` whose `properties` hold `{k: value}`, hand-encoded (a 4,000-deep value could
/// not be built, encoded or dropped as a tree on a test thread's stack).
fn attach_with_property(value: &[u8]) -> Vec<u8> {
    let mut fields = vec![0xa1, 4, b'l', b'i', b'n', b'k', 0x52, 0, 0x42];
    fields.extend([0x40; 10]);
    fields.push(0xd1);
    fields.extend_from_slice(&u32::try_from(4 + 3 + value.len()).unwrap().to_be_bytes());
    fields.extend_from_slice(&2u32.to_be_bytes());
    fields.extend_from_slice(&[0xa3, 1, b'k']);
    fields.extend_from_slice(value);
    let mut body = vec![0x00, 0x53, 0x12, 0xd0];
    body.extend_from_slice(&u32::try_from(4 + fields.len()).unwrap().to_be_bytes());
    body.extend_from_slice(&14u32.to_be_bytes());
    body.extend_from_slice(&fields);
    let mut out = BytesMut::new();
    write_frame(&mut out, FRAME_TYPE_AMQP, 1, &body, &[]);
    out.to_vec()
}

/// A null inside `lists` nested list32s.
fn nested_lists(lists: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..lists {
        out.push(0xd0);
        out.extend_from_slice(&u32::try_from(9 * (lists - i - 1) + 1 + 4).unwrap().to_be_bytes());
        out.extend_from_slice(&1u32.to_be_bytes());
    }
    out.push(0x40);
    out
}

/// An attach whose properties nest a list 4,000 deep used to overflow the worker's stack in
/// serde_amqp and abort the broker; now the connection is closed with `amqp:decode-error`.
/// The performative's own levels count (described → list → map → value: 3), so 61 lists are
/// the deepest an attach's properties can hold.
#[test]
fn an_attach_nested_four_thousand_deep_is_a_decode_error_and_the_limit_itself_decodes() {
    for (lists, refused) in [(4_000, true), (62, true), (61, false)] {
        let mut h = Harness::opened();
        h.send(&attach_with_property(&nested_lists(lists)));
        let close = h.close_error();
        if refused {
            let (cond, description) = close.unwrap();
            assert_eq!(cond, "amqp:decode-error", "{lists} lists");
            assert_eq!(description.as_deref(), Some("values nested deeper than 64 levels"));
        } else {
            assert_eq!(close, None, "{lists} lists");
        }
    }
}

/// A harness with a consumer link (we send) on channel 1, handle 3.
fn attached_consumer() -> Harness {
    let mut h = Harness::opened();
    let mut attach = attach_sender(3, "/queues/q");
    attach.role = Role::Receiver;
    h.send(&frame(FRAME_TYPE_AMQP, 1, &attach, &[]));
    h.events();
    h.conn.attach(1, Attach { role: Role::Sender, ..attach });
    h.output();
    h
}

#[test]
fn a_small_message_is_one_transfer_frame_as_serde_amqp_would_write_it() {
    let mut h = attached_consumer();
    assert_eq!(h.conn.send_transfer(1, 3, &[0, 0, 0, 9], false, b"body"), Some(0));
    assert_eq!(h.conn.send_transfer(1, 3, &[], true, b"next"), Some(1));
    let mut first = transfer(3, false);
    first.delivery_id = Some(0);
    first.delivery_tag = Some(serde_bytes::ByteBuf::from(vec![0, 0, 0, 9]));
    first.message_format = Some(0);
    first.settled = Some(false);
    let mut second = first.clone();
    second.delivery_id = Some(1);
    second.delivery_tag = Some(serde_bytes::ByteBuf::from(Vec::new()));
    second.settled = Some(true);
    let mut expected = frame(FRAME_TYPE_AMQP, 1, &first, b"body");
    expected.extend(frame(FRAME_TYPE_AMQP, 1, &second, b"next"));
    assert_eq!(h.output().to_vec(), expected);
}

#[test]
fn transfers_wait_for_the_clients_session_window_in_order() {
    let mut h = attached_consumer();
    // The client opens a window of one transfer, counted from our first transfer id.
    let mut window = link_flow(3);
    window.handle = None;
    window.link_credit = None;
    window.delivery_count = None;
    window.next_incoming_id = Some(u32::MAX - 3);
    window.incoming_window = 1;
    h.send(&frame(FRAME_TYPE_AMQP, 1, &window, &[]));
    let _ = h.performatives();
    for body in [&b"one"[..], b"two", b"three"] {
        h.conn.send_transfer(1, 3, &[], true, body);
    }
    let sent = |h: &mut Harness| {
        h.performatives()
            .into_iter()
            .filter_map(|(_, p)| if let Performative::Transfer(t) = p { t.delivery_id } else { None })
            .collect::<Vec<_>>()
    };
    assert_eq!(sent(&mut h), vec![0]);
    assert_eq!(h.conn.blocked_transfers(), 2);
    window.incoming_window = 3;
    h.send(&frame(FRAME_TYPE_AMQP, 1, &window, &[]));
    assert_eq!(sent(&mut h), vec![1, 2]);
    assert_eq!(h.conn.blocked_transfers(), 0);
}

#[test]
fn a_range_of_publishes_settles_in_one_disposition() {
    let mut h = attached_publisher();
    let _ = h.performatives();
    let accepted = || fe2o3_amqp_types::messaging::DeliveryState::Accepted(fe2o3_amqp_types::messaging::Accepted {});
    h.conn.settle_incoming_range(1, 5, 7, accepted());
    h.conn.settle_incoming(1, 9, accepted());
    let dispositions: Vec<_> = h
        .performatives()
        .into_iter()
        .filter_map(|(_, p)| if let Performative::Disposition(d) = p { Some(d) } else { None })
        .map(|d| (d.role, d.first, d.last, d.settled, d.state))
        .collect();
    assert_eq!(
        dispositions,
        vec![(Role::Receiver, 5, Some(7), true, Some(accepted())), (Role::Receiver, 9, None, true, Some(accepted())),]
    );
}

/// After the client's close is answered the socket lingers, as RabbitMQ's closed reader does:
/// what still arrives is dropped, a repeated close is answered again, and the socket goes
/// when the client closes it or 30 s later.
#[test]
fn after_the_clients_close_the_socket_lingers_and_drops_what_comes() {
    let mut h = attached_publisher();
    h.conn.grant_initial_credit(1, 0, 0);
    h.output();
    h.send(&frame(FRAME_TYPE_AMQP, 0, &Close { error: None }, &[]));
    assert!(matches!(h.performatives().as_slice(), [(0, Performative::Close(c))] if c.error.is_none()));
    assert!(matches!(h.events().as_slice(), [Event::SessionEnded(1), Event::Closed]));
    assert_eq!(h.conn.state(), State::Lingering);
    h.send(&frame(FRAME_TYPE_AMQP, 1, &transfer(0, false), b"late"));
    assert!(h.events().is_empty());
    assert!(h.performatives().is_empty());
    h.send(&frame(FRAME_TYPE_AMQP, 0, &Close { error: None }, &[]));
    assert!(matches!(h.performatives().as_slice(), [(0, Performative::Close(_))]));
    assert_eq!(h.conn.poll_timeout(), Some(h.now + Duration::from_secs(30)));
    h.conn.handle_timeout(h.now + Duration::from_secs(30));
    assert_eq!(h.conn.state(), State::Closed);
    assert!(h.events().is_empty(), "released once");
}

/// After our own close, the client's answer finishes the connection at once.
#[test]
fn the_clients_answer_to_our_close_drops_the_socket() {
    let mut h = Harness::opened();
    h.conn.close(None, h.now);
    h.output();
    h.send(&frame(FRAME_TYPE_AMQP, 0, &Close { error: None }, &[]));
    assert_eq!(h.conn.state(), State::Closed);
    assert!(matches!(h.events().as_slice(), [Event::SessionEnded(1), Event::Closed]));
}
