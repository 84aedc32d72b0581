//! Protocol header, authentication, vhost and tune negotiation, over raw sockets.

use crate::{
    Case, CaseResult, Ctx, case, check, check_eq,
    lapin_kit::Healthy,
    raw::{self, Handshake, PROTOCOL_HEADER, RawConn, Tune},
};
use std::time::Duration;

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "handshake.sasl.anonymous",
            "connection.start offers ANONYMOUS (with PLAIN and AMQPLAIN); ANONYMOUS with an empty response logs in \
             (as guest, from loopback) and opens the vhost",
            ["raw"],
            anonymous
        ),
        case!(
            "handshake.tune.rabbitmq_defaults",
            "connection.tune offers channel_max 2047, frame_max 131072, heartbeat 60",
            ["raw"],
            tune_defaults
        ),
        case!(
            "handshake.header.amqp_0_9_0",
            "header AMQP 0 0 9 0 is answered with AMQP 0 0 9 1 and a close",
            ["raw"],
            header_090
        ),
        case!(
            "handshake.header.amqp_0_9_old_style_accepted",
            "header AMQP 1 1 0 9 (0-9) is accepted: connection.start with version 0-9 follows",
            ["raw"],
            header_old_09
        ),
        case!(
            "handshake.header.amqp_0_8",
            "header AMQP 1 1 8 0 (0-8) is answered with AMQP 3 1 0 0 and a close",
            ["raw"],
            header_08
        ),
        case!(
            "handshake.header.amqp_0_9_2",
            "header AMQP 0 0 9 2 is answered with AMQP 0 0 9 1 and a close",
            ["raw"],
            header_092
        ),
        case!(
            "handshake.header.http",
            "an HTTP request line is answered with AMQP 3 1 0 0 and a close",
            ["raw"],
            header_http
        ),
        case!(
            "handshake.header.amqp_1_0_without_sasl",
            "header AMQP 0 1 0 0 (1.0 without SASL) is answered with AMQP 3 1 0 0",
            ["raw"],
            header_10_plain
        ),
        case!(
            "handshake.auth.bad_password_close_403",
            "a wrong password with authentication_failure_close gets connection.close 403",
            ["raw"],
            bad_password_capable
        ),
        case!(
            "handshake.auth.bad_password_no_capability",
            "a wrong password without authentication_failure_close gets the socket closed, no frame",
            ["raw"],
            bad_password_plain
        ),
        case!("handshake.auth.unknown_mechanism", "an unknown SASL mechanism is refused", ["raw"], unknown_mechanism),
        case!(
            "handshake.vhost.unknown_530",
            "connection.open of an unknown vhost gets connection.close 530",
            ["raw"],
            unknown_vhost
        ),
        case!(
            "handshake.tune.frame_max_below_4096",
            "tune-ok with frame_max below 4096 is refused",
            ["raw"],
            frame_max_small
        ),
        case!(
            "handshake.tune.frame_max_above_server",
            "tune-ok with frame_max above the server's offer is refused",
            ["raw"],
            frame_max_big
        ),
        case!(
            "handshake.tune.channel_max_above_server",
            "tune-ok with channel_max above 2047 is refused",
            ["raw"],
            channel_max_big
        ),
        case!(
            "handshake.tune.lower_values_accepted",
            "tune-ok with lower channel_max/frame_max works and channels up to the limit open",
            ["raw"],
            lower_values
        ),
    ]
}

async fn tune_defaults(ctx: Ctx) -> CaseResult {
    let c = RawConn::open(ctx.broker(), &Handshake::new(ctx.broker())).await?;
    check_eq!(c.tune, Some(Tune { channel_max: 2047, frame_max: 131_072, heartbeat: 60 }), "connection.tune");
    Ok(())
}

/// RabbitMQ 4's default `anonymous_login_user`/`anonymous_login_pass` are guest/guest: real
/// clients (RabbitMQ's own Go AMQP 1.0 client, lapin with `auth_mechanism=anonymous`) log in
/// with ANONYMOUS by default.
async fn anonymous(ctx: Ctx) -> CaseResult {
    let mut c = RawConn::connect(ctx.broker()).await?;
    c.send(PROTOCOL_HEADER).await?;
    let start = c.expect_method(0, 10, 10).await?;
    let mut d = raw::Dec::new(start.args());
    let (_major, _minor) = (d.u8()?, d.u8()?);
    let properties = usize::try_from(d.u32()?).unwrap_or(usize::MAX);
    d.take(properties)?;
    let length = usize::try_from(d.u32()?).unwrap_or(usize::MAX);
    let offered = String::from_utf8_lossy(d.take(length)?).into_owned();
    let mut mechanisms: Vec<&str> = offered.split(' ').collect();
    mechanisms.sort_unstable();
    // The order differs: 4.0.5 lists ANONYMOUS last, 4.3 first.
    check_eq!(mechanisms, vec!["AMQPLAIN", "ANONYMOUS", "PLAIN"], "mechanisms (sorted)");
    let props = [("capabilities", raw::field_table(&[("authentication_failure_close", raw::field_bool(true))]))];
    let args = raw::Enc::new().table(&props).shortstr("ANONYMOUS").longstr(b"").shortstr("en_US").done();
    c.send(&raw::method(0, 10, 11, &args)).await?;
    let tune = c.expect_tune().await?;
    let hs = Handshake::new(ctx.broker());
    c.send_tune_ok(&hs, tune).await?;
    c.send_open(&hs.vhost).await?;
    c.expect_method(0, 10, 41).await?;
    c.send(&raw::channel_open(1)).await?;
    c.expect_method(1, 20, 11).await?;
    Ok(())
}

/// Sends `header` as the first bytes and checks the broker answers `reply` then closes.
async fn bad_header(ctx: &Ctx, header: &[u8], reply: &[u8]) -> CaseResult {
    let healthy = Healthy::open(ctx).await?;
    let mut c = RawConn::connect(ctx.broker()).await?;
    c.send(header).await?;
    let got = c.read_until_eof(Duration::from_secs(5)).await?;
    check_eq!(got, reply.to_vec(), "bytes sent back before the socket closed");
    healthy.check().await
}

async fn header_090(ctx: Ctx) -> CaseResult {
    bad_header(&ctx, b"AMQP\x00\x00\x09\x00", PROTOCOL_HEADER).await
}

async fn header_old_09(ctx: Ctx) -> CaseResult {
    // rabbit_reader maps the pre-0-9-1 "AMQP 1 1 0 9" header onto 0-9-1 framing.
    let mut c = RawConn::connect(ctx.broker()).await?;
    c.send(b"AMQP\x01\x01\x00\x09").await?;
    let start = c.expect_method(0, 10, 10).await?;
    check_eq!(start.args().get(..2), Some(&[0u8, 9][..]), "connection.start version-major, version-minor");
    Ok(())
}

async fn header_08(ctx: Ctx) -> CaseResult {
    bad_header(&ctx, b"AMQP\x01\x01\x08\x00", b"AMQP\x03\x01\x00\x00").await
}

async fn header_092(ctx: Ctx) -> CaseResult {
    bad_header(&ctx, b"AMQP\x00\x00\x09\x02", PROTOCOL_HEADER).await
}

async fn header_http(ctx: Ctx) -> CaseResult {
    bad_header(&ctx, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"AMQP\x03\x01\x00\x00").await
}

async fn header_10_plain(ctx: Ctx) -> CaseResult {
    bad_header(&ctx, b"AMQP\x00\x01\x00\x00", b"AMQP\x03\x01\x00\x00").await
}

async fn bad_password(ctx: &Ctx, capable: bool) -> Result<RawConn, crate::CaseError> {
    let mut hs = Handshake::new(ctx.broker());
    hs.password = "definitely-wrong".to_owned();
    hs.auth_failure_close = capable;
    let mut c = RawConn::connect(ctx.broker()).await?;
    c.send(PROTOCOL_HEADER).await?;
    c.expect_method(0, 10, 10).await?;
    c.send_start_ok(&hs).await?;
    Ok(c)
}

async fn bad_password_capable(ctx: Ctx) -> CaseResult {
    let healthy = Healthy::open(&ctx).await?;
    let mut c = bad_password(&ctx, true).await?;
    c.expect_connection_close().await?.expect(
        403,
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the broker logfile.",
        0,
        0,
    )?;
    healthy.check().await
}

async fn bad_password_plain(ctx: Ctx) -> CaseResult {
    let healthy = Healthy::open(&ctx).await?;
    let mut c = bad_password(&ctx, false).await?;
    silent_drop(&mut c).await?;
    healthy.check().await
}

async fn unknown_mechanism(ctx: Ctx) -> CaseResult {
    let healthy = Healthy::open(&ctx).await?;
    let mut c = RawConn::connect(ctx.broker()).await?;
    c.send(PROTOCOL_HEADER).await?;
    c.expect_method(0, 10, 10).await?;
    let args = raw::Enc::new().table(&[]).shortstr("NOPE").longstr(b"\0guest\0guest").shortstr("en_US").done();
    c.send(&raw::method(0, 10, 11, &args)).await?;
    silent_drop(&mut c).await?;
    healthy.check().await
}

/// Runs the handshake up to and including tune-ok with `hs`, then connection.open.
async fn until_open(ctx: &Ctx, hs: &Handshake) -> Result<RawConn, crate::CaseError> {
    let mut c = RawConn::connect(ctx.broker()).await?;
    c.send(PROTOCOL_HEADER).await?;
    c.expect_method(0, 10, 10).await?;
    c.send_start_ok(hs).await?;
    let tune = c.expect_tune().await?;
    c.send_tune_ok(hs, tune).await?;
    c.send_open(&hs.vhost).await?;
    Ok(c)
}

async fn unknown_vhost(ctx: Ctx) -> CaseResult {
    let healthy = Healthy::open(&ctx).await?;
    let mut hs = Handshake::new(ctx.broker());
    hs.vhost = "no-such-vhost".to_owned();
    let mut c = until_open(&ctx, &hs).await?;
    c.expect_connection_close().await?.expect(530, "NOT_ALLOWED - vhost no-such-vhost not found", 10, 40)?;
    healthy.check().await
}

async fn frame_max_small(ctx: Ctx) -> CaseResult {
    let healthy = Healthy::open(&ctx).await?;
    let mut hs = Handshake::new(ctx.broker());
    hs.frame_max = Some(1024);
    let mut c = until_open(&ctx, &hs).await?;
    silent_drop(&mut c).await?;
    healthy.check().await
}

async fn frame_max_big(ctx: Ctx) -> CaseResult {
    let healthy = Healthy::open(&ctx).await?;
    let mut hs = Handshake::new(ctx.broker());
    hs.frame_max = Some(1_000_000);
    let mut c = until_open(&ctx, &hs).await?;
    silent_drop(&mut c).await?;
    healthy.check().await
}

async fn channel_max_big(ctx: Ctx) -> CaseResult {
    let healthy = Healthy::open(&ctx).await?;
    let mut hs = Handshake::new(ctx.broker());
    hs.channel_max = Some(5000);
    let mut c = until_open(&ctx, &hs).await?;
    silent_drop(&mut c).await?;
    healthy.check().await
}

async fn lower_values(ctx: Ctx) -> CaseResult {
    let mut hs = Handshake::new(ctx.broker());
    hs.channel_max = Some(3);
    hs.frame_max = Some(4096);
    let mut c = until_open(&ctx, &hs).await?;
    c.expect_method(0, 10, 41).await?;
    for ch in 1..=3 {
        c.send(&raw::channel_open(ch)).await?;
        c.expect_method(ch, 20, 11).await?;
    }
    // A publish whose body spans several 4096-byte frames is accepted.
    let body = vec![7u8; 10_000];
    c.send(&raw::basic_publish(1, "amq.fanout", "")).await?;
    c.send(&raw::content_header(1, body.len() as u64)).await?;
    for chunk in body.chunks(4096 - 8) {
        c.send(&raw::body(1, chunk)).await?;
    }
    c.send(&raw::method(1, 20, 40, &raw::Enc::new().u16(200).shortstr("bye").u16(0).u16(0).done())).await?;
    let f = c.expect_method(1, 20, 41).await?;
    check!(f.args().is_empty(), "channel.close-ok carries no arguments");
    Ok(())
}

/// Handshake errors before the connection is open are not reported with connection.close:
/// RabbitMQ waits a while (rabbit_reader's silent-close delay) and drops the socket.
async fn silent_drop(c: &mut RawConn) -> CaseResult {
    let start = std::time::Instant::now();
    c.expect_silent_drop(Duration::from_secs(8)).await?;
    let secs = start.elapsed().as_secs_f64();
    // RabbitMQ 4.0.5 sleeps ?SILENT_CLOSE_DELAY (3 s) before closing, to slow down abusers.
    check!((2.5..=4.5).contains(&secs), "socket dropped after {secs:.2} s, expected about 3 s");
    Ok(())
}
