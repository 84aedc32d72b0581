//! AMQP 1.0 connection setup: SASL, the open exchange and its limits, heartbeats.

use crate::{
    Case, CaseError, CaseResult, Ctx, case10, check, check_eq,
    lapin_kit::Healthy,
    raw10::{
        Conn10, WAIT,
        codec::{self, AMQP_HEADER, SASL_HEADER},
        conn::{Body, default_open, plain},
        link::error_parts,
    },
};
use fe2o3_amqp_types::{
    performatives::{ChannelMax, MaxFrameSize},
    primitives::{Binary, Value},
    sasl::SaslInit,
};
use std::time::{Duration, Instant};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case10!(
            "amqp10.sasl.mechanisms_offered",
            "the SASL header is echoed and sasl-mechanisms lists PLAIN, AMQPLAIN and ANONYMOUS",
            sasl_mechanisms
        ),
        case10!(
            "amqp10.sasl.plain_ok",
            "SASL PLAIN with good credentials gives outcome ok, then the AMQP header and open",
            sasl_plain_ok
        ),
        case10!(
            "amqp10.sasl.plain_refused",
            "SASL PLAIN with a wrong password gives outcome code 1 (auth) after 3 s, then the socket closes",
            ["slow"],
            sasl_plain_refused
        ),
        case10!(
            "amqp10.sasl.anonymous_accepted",
            "SASL ANONYMOUS is accepted (anonymous_login_user = guest) and the connection opens",
            sasl_anonymous
        ),
        case10!(
            "amqp10.sasl.unknown_mechanism_dropped",
            "an unknown SASL mechanism gets no sasl-outcome: the socket is closed after 3 s",
            ["slow"],
            sasl_unknown
        ),
        case10!(
            "amqp10.sasl.no_sasl_header_refused",
            "the plain AMQP 1.0 header without SASL is answered with the SASL header and closed",
            no_sasl
        ),
        case10!(
            "amqp10.open.broker_open_fields",
            "RabbitMQ's open: container-id, max-frame-size 131072, channel-max, idle-time-out 30000, capabilities, properties",
            open_fields
        ),
        case10!(
            "amqp10.open.channel_max_negotiated",
            "the broker's channel-max is min(client channel-max, session limit − 1)",
            open_channel_max
        ),
        case10!(
            "amqp10.open.max_frame_too_small_dropped",
            "max-frame-size 511: no open, no close; the socket is dropped after 3 s",
            open_small_frame
        ),
        case10!(
            "amqp10.open.idle_timeout_too_small_dropped",
            "idle-time-out 500 ms: no open, no close; the socket is dropped after 3 s",
            open_small_idle
        ),
        case10!(
            "amqp10.open.unknown_vhost_dropped",
            "hostname vhost:<missing>: no open, no close; the socket is dropped after 3 s",
            open_unknown_vhost
        ),
        case10!(
            "amqp10.open.default_vhost_without_hostname",
            "an open without hostname (or with a plain host name) uses the default vhost",
            open_no_hostname
        ),
        case10!(
            "amqp10.session.begin_end",
            "begin is answered with begin (remote-channel set), end with end",
            begin_end
        ),
        case10!(
            "amqp10.session.channel_above_max",
            "a begin on a channel above the negotiated channel-max closes the connection with amqp:connection:framing-error",
            channel_above_max
        ),
        case10!(
            "amqp10.idle.broker_sends_heartbeats",
            "with idle-time-out 1000 ms the broker sends empty frames while the client is silent",
            heartbeats_sent
        ),
    ]
}

async fn sasl_mechanisms(ctx: Ctx) -> CaseResult {
    let mut c = Conn10::connect(ctx.broker()).await?;
    let mechs = c.sasl_mechanisms().await?;
    check_eq!(mechs, vec!["PLAIN".to_owned(), "AMQPLAIN".to_owned(), "ANONYMOUS".to_owned()], "sasl-server-mechanisms");
    Ok(())
}

async fn sasl_plain_ok(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let mut c = Conn10::connect(b).await?;
    check_eq!(c.sasl(&plain(&b.user, &b.password)).await?, 0, "sasl-outcome code");
    c.amqp_open(default_open(b)).await?;
    c.close().await
}

async fn sasl_plain_refused(ctx: Ctx) -> CaseResult {
    let healthy = Healthy::open(&ctx).await?;
    let b = ctx.broker();
    let mut c = Conn10::connect(b).await?;
    let start = Instant::now();
    check_eq!(c.sasl(&plain(&b.user, "wrong-password")).await?, 1, "sasl-outcome code");
    let took = start.elapsed();
    check!(took >= Duration::from_millis(2800), "sasl-outcome came after {} ms, expected about 3000", took.as_millis());
    let after = c.read_until_eof(Duration::from_secs(8)).await?;
    check!(after.is_empty(), "expected no frame after the sasl-outcome, got {after:?}");
    healthy.check().await
}

async fn sasl_anonymous(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let mut c = Conn10::connect(b).await?;
    let init = SaslInit { mechanism: "ANONYMOUS".into(), initial_response: None, hostname: None };
    check_eq!(c.sasl(&init).await?, 0, "sasl-outcome code for ANONYMOUS");
    c.amqp_open(default_open(b)).await?;
    c.close().await
}

async fn sasl_unknown(ctx: Ctx) -> CaseResult {
    let healthy = Healthy::open(&ctx).await?;
    let mut c = Conn10::connect(ctx.broker()).await?;
    c.send(SASL_HEADER).await?;
    let _ = c.read_header(WAIT).await?;
    let _mechs = c.read_raw(WAIT).await?;
    let init = SaslInit { mechanism: "NOPE".into(), initial_response: Some(Binary::from(vec![0u8])), hostname: None };
    c.send(&codec::frame(codec::TYPE_SASL, 0, &codec::encode(&init)?)).await?;
    let start = Instant::now();
    let mut frames = Vec::new();
    loop {
        match c.read_raw(Duration::from_secs(8)).await? {
            None => break,
            Some(f) => frames.push(format!("{:?}", f.body)),
        }
    }
    check!(frames.is_empty(), "expected no frame for an unknown mechanism, got {frames:?}");
    let took = start.elapsed();
    check!(took >= Duration::from_millis(2800), "socket closed after {} ms, expected about 3000", took.as_millis());
    healthy.check().await
}

async fn no_sasl(ctx: Ctx) -> CaseResult {
    let mut c = Conn10::connect(ctx.broker()).await?;
    c.send(AMQP_HEADER).await?;
    let h = c.read_header(WAIT).await?;
    check_eq!(&h, SASL_HEADER, "header answered to AMQP 0 1 0 0");
    let rest = c.read_until_eof(WAIT).await?;
    check!(rest.is_empty(), "expected nothing after the header, got {rest:?}");
    Ok(())
}

fn props(open: &fe2o3_amqp_types::performatives::Open) -> Vec<(String, Value)> {
    open.properties.as_ref().map(|p| p.iter().map(|(k, v)| (k.0.clone(), v.clone())).collect()).unwrap_or_default()
}

async fn open_fields(ctx: Ctx) -> CaseResult {
    let mut c = Conn10::open(ctx.broker()).await?;
    let o = c.remote_open.clone().ok_or_else(|| CaseError::new("no open"))?;
    // RabbitMQ sends its cluster name (by default the node name, `rabbit4@<host>`).
    check!(o.container_id.contains('@'), "container-id: expected the cluster name, got {:?}", o.container_id);
    check_eq!(o.hostname.clone(), None, "hostname");
    check_eq!(o.max_frame_size.0, 131_072, "max-frame-size");
    check_eq!(o.channel_max.0, 63, "channel-max (client offered 255, session_max_per_connection 64)");
    check_eq!(o.idle_time_out, Some(30_000), "idle-time-out (half the 60 s heartbeat)");
    let caps: Vec<String> =
        o.offered_capabilities.clone().map(|a| a.0.into_iter().map(|s| s.0).collect()).unwrap_or_default();
    check_eq!(caps, vec!["LINK_PAIR_V1_0".to_owned(), "ANONYMOUS-RELAY".to_owned()], "offered-capabilities");
    let p = props(&o);
    let keys: Vec<&str> = p.iter().map(|(k, _)| k.as_str()).collect();
    check_eq!(
        keys,
        vec!["node", "cluster_name", "copyright", "information", "platform", "product", "version"],
        "open property keys"
    );
    let get = |k: &str| p.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    check_eq!(get("product"), Some(Value::String("RabbitMQ".into())), "product");
    check_eq!(get("version"), Some(Value::String("4.0.5".into())), "version");
    c.close().await
}

async fn open_channel_max(ctx: Ctx) -> CaseResult {
    let mut open = default_open(ctx.broker());
    open.channel_max = ChannelMax(3);
    let mut c = Conn10::open_with(ctx.broker(), open).await?;
    let o = c.remote_open.clone().ok_or_else(|| CaseError::new("no open"))?;
    check_eq!(o.channel_max.0, 3, "channel-max echoed as the minimum");
    c.close().await
}

/// Sends `open` after SASL and checks RabbitMQ's answer: no open, no close, the socket dropped
/// about 3 s later (errors before the connection is running are not reported on the wire).
async fn refused_open(ctx: &Ctx, open: fe2o3_amqp_types::performatives::Open) -> CaseResult {
    let b = ctx.broker();
    let mut c = Conn10::connect(b).await?;
    check_eq!(c.sasl(&plain(&b.user, &b.password)).await?, 0, "sasl-outcome code");
    c.send(AMQP_HEADER).await?;
    let _ = c.read_header(WAIT).await?;
    c.perf(0, &open).await?;
    let start = Instant::now();
    let frames = c.read_until_eof(Duration::from_secs(8)).await?;
    check!(frames.is_empty(), "expected the socket dropped without a frame, got {frames:?}");
    let took = start.elapsed();
    check!(took >= Duration::from_millis(2800), "socket closed after {} ms, expected about 3000", took.as_millis());
    Ok(())
}

async fn open_small_frame(ctx: Ctx) -> CaseResult {
    let healthy = Healthy::open(&ctx).await?;
    let mut open = default_open(ctx.broker());
    open.max_frame_size = MaxFrameSize(511);
    refused_open(&ctx, open).await?;
    healthy.check().await
}

async fn open_small_idle(ctx: Ctx) -> CaseResult {
    let healthy = Healthy::open(&ctx).await?;
    let mut open = default_open(ctx.broker());
    open.idle_time_out = Some(500);
    refused_open(&ctx, open).await?;
    healthy.check().await
}

async fn open_unknown_vhost(ctx: Ctx) -> CaseResult {
    let healthy = Healthy::open(&ctx).await?;
    let mut open = default_open(ctx.broker());
    let vhost = ctx.name("novhost");
    // (RabbitMQ logs amqp:unauthorized-access "AMQP 1.0 connection failed: virtual host ... does not exist".)
    open.hostname = Some(format!("vhost:{vhost}"));
    refused_open(&ctx, open).await?;
    healthy.check().await
}

async fn open_no_hostname(ctx: Ctx) -> CaseResult {
    for hostname in [None, Some("127.0.0.1".to_owned())] {
        let mut open = default_open(ctx.broker());
        open.hostname = hostname;
        let mut c = Conn10::open_with(ctx.broker(), open).await?;
        c.begin(0).await?;
        c.close().await?;
    }
    Ok(())
}

async fn begin_end(ctx: Ctx) -> CaseResult {
    let mut c = Conn10::open(ctx.broker()).await?;
    let b = c.begin(2).await?;
    check_eq!(b.remote_channel, Some(2), "begin.remote-channel");
    c.end(2).await?;
    let e = c
        .expect("end", WAIT, |ch, p, _| match p {
            fe2o3_amqp_types::performatives::Performative::End(e) if ch == 2 => Some(e.error.clone()),
            _ => None,
        })
        .await?;
    check!(e.is_none(), "end answered with error {e:?}");
    c.close().await
}

async fn channel_above_max(ctx: Ctx) -> CaseResult {
    let healthy = Healthy::open(&ctx).await?;
    let mut open = default_open(ctx.broker());
    open.channel_max = ChannelMax(1);
    let mut c = Conn10::open_with(ctx.broker(), open).await?;
    c.sessions.insert(5, Default::default());
    let begin = fe2o3_amqp_types::performatives::Begin {
        remote_channel: None,
        next_outgoing_id: 0,
        incoming_window: 10,
        outgoing_window: 10,
        handle_max: fe2o3_amqp_types::definitions::Handle(10),
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    };
    c.perf(5, &begin).await?;
    let err = c.expect_close(WAIT).await?;
    check_eq!(
        error_parts(&err),
        (
            "amqp:connection:framing-error".to_owned(),
            Some("channel number (5) exceeds maximum channel number (1)".to_owned())
        ),
        "close error"
    );
    healthy.check().await
}

async fn heartbeats_sent(ctx: Ctx) -> CaseResult {
    let mut open = default_open(ctx.broker());
    open.idle_time_out = Some(1000);
    let mut c = Conn10::open_with(ctx.broker(), open).await?;
    let start = Instant::now();
    let mut empties = 0;
    while start.elapsed() < Duration::from_millis(2600) {
        match c.read_raw(Duration::from_millis(2700)).await {
            Ok(Some(f)) if matches!(f.body, Body::Empty) => empties += 1,
            Ok(Some(f)) => return Err(CaseError::new(format!("unexpected frame {:?}", f.body))),
            Ok(None) => return Err(CaseError::new("connection closed while idle")),
            Err(_) => break,
        }
    }
    check!(empties >= 2, "expected at least 2 empty frames in 2.6 s with idle-time-out 1000 ms, got {empties}");
    c.close().await
}
