//! Malformed 0.9.1 input after a successful handshake: frame and channel errors that close
//! the whole connection. Every case first opens a healthy connection and checks it still
//! works afterwards.

use crate::{
    Case, CaseResult, Ctx, case,
    lapin_kit::Healthy,
    raw::{self, Enc, Handshake, RawConn},
};
use std::time::Duration;

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "connection.frame.bad_end_501",
            "a frame whose end octet is not 0xCE closes the connection with 501",
            ["raw"],
            bad_end
        ),
        case!(
            "connection.frame.unknown_type_501",
            "an unknown frame type closes the connection with 501",
            ["raw"],
            unknown_type
        ),
        case!(
            "connection.frame.too_large_501",
            "a frame larger than the negotiated frame_max closes the connection with 501",
            ["raw"],
            too_large
        ),
        case!(
            "connection.channel.unopened_504",
            "a method on a channel never opened closes the connection with 504",
            ["raw"],
            unopened
        ),
        case!(
            "connection.channel.closed_504",
            "a method on a channel after its close closes the connection with 504",
            ["raw"],
            after_close
        ),
        case!(
            "connection.channel.second_open_504",
            "channel.open on an open channel closes the connection with 504",
            ["raw"],
            second_open
        ),
        case!(
            "connection.channel.count_above_channel_max_530",
            "opening more channels than the negotiated channel_max closes the connection with 530",
            ["raw"],
            above_max
        ),
        case!(
            "connection.frame.body_without_method_505",
            "a body frame with no preceding publish closes the connection with 505",
            ["raw"],
            body_without_method
        ),
        case!(
            "connection.frame.header_without_method_505",
            "a content header when a method was expected closes the connection with 505",
            ["raw"],
            header_without_method
        ),
        case!(
            "connection.frame.method_instead_of_header_505",
            "a method frame where a content header was expected closes the connection with 505",
            ["raw"],
            method_instead_of_header
        ),
        case!(
            "connection.frame.heartbeat_on_channel_505",
            "a heartbeat frame on a non-zero channel closes the connection with 505",
            ["raw"],
            heartbeat_on_channel
        ),
        case!(
            "connection.method.unknown_id_dropped",
            "an unknown class/method id drops the socket without a close frame",
            ["raw"],
            unknown_method
        ),
        case!(
            "connection.method.truncated_501",
            "a truncated method payload closes the connection with 501 (not 502)",
            ["raw"],
            truncated
        ),
        case!(
            "connection.method.trailing_bytes_501",
            "extra bytes after a method's arguments close the connection with 501",
            ["raw"],
            trailing
        ),
        case!(
            "connection.method.truncated_publish_501",
            "a basic.publish cut off inside its routing key closes the connection with 501",
            ["raw"],
            truncated_publish
        ),
        case!(
            "connection.method.publish_trailing_bytes_501",
            "extra bytes after basic.publish's flags close the connection with 501",
            ["raw"],
            publish_trailing
        ),
        case!(
            "connection.method.zero_length_method_frame_501",
            "an empty method frame closes the connection with 501",
            ["raw"],
            zero_length_method
        ),
        case!(
            "connection.method.channel_method_on_channel_zero_504",
            "a channel-class method on channel 0 closes the connection with 504",
            ["raw"],
            channel_method_on_zero
        ),
        case!(
            "connection.method.connection_method_after_open_504",
            "connection.tune-ok after the handshake closes the connection with 504",
            ["raw"],
            tune_ok_again
        ),
        case!(
            "connection.method.server_only_method_503",
            "a server-to-client method (basic.qos-ok) sent by the client closes the connection with 503",
            ["raw"],
            server_only_method
        ),
        case!(
            "connection.method.unsolicited_close_ok_503",
            "channel.close-ok for a channel that was not closing closes the connection with 503",
            ["raw"],
            unsolicited_close_ok
        ),
        case!(
            "connection.method.channel_flow_false_540",
            "channel.flow active=false closes the connection with 540",
            ["raw"],
            flow_false
        ),
        case!(
            "connection.method.unknown_class_dropped",
            "an unknown class id drops the socket without a close frame",
            ["raw"],
            unknown_class
        ),
        case!(
            "connection.content.body_too_long_505",
            "an over-long body is not noticed; the next method frame gets 505",
            ["raw"],
            body_too_long
        ),
        case!(
            "connection.channel.number_above_channel_max_accepted",
            "channel numbers above channel_max are accepted (only the count is limited)",
            ["raw"],
            number_above_max
        ),
        case!(
            "connection.content.header_wrong_class_505",
            "a content header of another class after basic.publish closes the connection with 505",
            ["raw"],
            header_wrong_class
        ),
    ]
}

/// Opens a healthy lapin connection, then a raw one with channel 1, sends `bytes`, checks
/// the close, then checks the healthy connection.
async fn bad(ctx: &Ctx, bytes: Vec<u8>, code: u16, text: &str, class_id: u16, method_id: u16) -> CaseResult {
    let healthy = Healthy::open(ctx).await?;
    let mut c = RawConn::open_with_channel(ctx.broker()).await?;
    c.send(&bytes).await?;
    c.expect_connection_close().await?.expect(code, text, class_id, method_id)?;
    healthy.check().await
}

fn qos(channel: u16) -> Vec<u8> {
    raw::method(channel, 60, 10, &Enc::new().u32(0).u16(10).u8(0).done())
}

async fn bad_end(ctx: Ctx) -> CaseResult {
    let mut f = qos(1);
    if let Some(last) = f.last_mut() {
        *last = 0x00;
    }
    // The text embeds the frame's octets and an Erlang-formatted reason, line break included.
    bad(
        &ctx,
        f,
        501,
        "FRAME_ERROR - type 1, all octets = <<0,60,0,10,0,0,0,0,0,10,0>>: {invalid_frame_end_marker,\n                                                    0}",
        0,
        0,
    )
    .await
}

async fn unknown_type(ctx: Ctx) -> CaseResult {
    bad(&ctx, raw::frame(9, 1, b"\x00\x00"), 501, "FRAME_ERROR - type 9, all octets = <<0,0>>: unknown_frame", 0, 0)
        .await
}

async fn too_large(ctx: Ctx) -> CaseResult {
    // Announce a 200000-byte body frame (frame_max is 131072) and send part of it.
    let mut f = vec![raw::FRAME_BODY, 0, 1];
    f.extend_from_slice(&200_000u32.to_be_bytes());
    f.extend_from_slice(&[0u8; 1000]);
    // 131064 = frame_max - 8 (the largest payload RabbitMQ accepts); the octets are not echoed.
    bad(&ctx, f, 501, "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,200000,131064}", 0, 0).await
}

async fn unopened(ctx: Ctx) -> CaseResult {
    bad(&ctx, qos(5), 504, "CHANNEL_ERROR - expected 'channel.open'", 60, 10).await
}

async fn after_close(ctx: Ctx) -> CaseResult {
    let healthy = Healthy::open(&ctx).await?;
    let mut c = RawConn::open_with_channel(ctx.broker()).await?;
    c.send(&raw::method(1, 20, 40, &Enc::new().u16(200).shortstr("bye").u16(0).u16(0).done())).await?;
    c.expect_method(1, 20, 41).await?;
    c.send(&qos(1)).await?;
    c.expect_connection_close().await?.expect(504, "CHANNEL_ERROR - expected 'channel.open'", 60, 10)?;
    healthy.check().await
}

async fn second_open(ctx: Ctx) -> CaseResult {
    bad(&ctx, raw::channel_open(1), 504, "CHANNEL_ERROR - second 'channel.open' seen", 20, 10).await
}

async fn above_max(ctx: Ctx) -> CaseResult {
    let healthy = Healthy::open(&ctx).await?;
    let mut hs = Handshake::new(ctx.broker());
    hs.channel_max = Some(2);
    let mut c = RawConn::open(ctx.broker(), &hs).await?;
    for ch in [1, 2] {
        c.send(&raw::channel_open(ch)).await?;
        c.expect_method(ch, 20, 11).await?;
    }
    c.send(&raw::channel_open(3)).await?;
    c.expect_connection_close().await?.expect(
        530,
        "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)",
        0,
        0,
    )?;
    healthy.check().await
}

async fn body_without_method(ctx: Ctx) -> CaseResult {
    bad(
        &ctx,
        raw::body(1, b"orphan"),
        505,
        "UNEXPECTED_FRAME - expected method frame, got non method frame instead",
        0,
        0,
    )
    .await
}

async fn header_without_method(ctx: Ctx) -> CaseResult {
    bad(
        &ctx,
        raw::content_header(1, 3),
        505,
        "UNEXPECTED_FRAME - expected method frame, got non method frame instead",
        0,
        0,
    )
    .await
}

async fn method_instead_of_header(ctx: Ctx) -> CaseResult {
    let mut b = raw::basic_publish(1, "amq.fanout", "");
    b.extend(qos(1));
    bad(
        &ctx,
        b,
        505,
        "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame instead",
        60,
        40,
    )
    .await
}

async fn heartbeat_on_channel(ctx: Ctx) -> CaseResult {
    bad(&ctx, raw::heartbeat(1), 505, "UNEXPECTED_FRAME - type 8, all octets = <<>>", 0, 0).await
}

async fn unknown_method(ctx: Ctx) -> CaseResult {
    let healthy = Healthy::open(&ctx).await?;
    let mut c = RawConn::open_with_channel(ctx.broker()).await?;
    c.send(&raw::method(1, 60, 999, &[])).await?;
    c.expect_silent_drop(Duration::from_secs(5)).await?;
    healthy.check().await
}

async fn truncated(ctx: Ctx) -> CaseResult {
    // queue.declare cut off inside the queue name shortstr.
    let args = Enc::new().u16(0).u8(20).bytes(b"abc").done();
    // RabbitMQ never answers 502 SYNTAX_ERROR for undecodable arguments: it is a 501 that
    // echoes the argument octets.
    bad(&ctx, raw::method(1, 50, 10, &args), 501, "FRAME_ERROR - cannot decode <<0,0,20,97,98,99>>", 50, 10).await
}

async fn channel_method_on_zero(ctx: Ctx) -> CaseResult {
    bad(&ctx, qos(0), 504, "CHANNEL_ERROR - unexpected method in connection state running", 60, 10).await
}

async fn body_too_long(ctx: Ctx) -> CaseResult {
    let mut b = raw::basic_publish(1, "amq.fanout", "");
    b.extend(raw::content_header(1, 3));
    b.extend(raw::body(1, b"12345"));
    let healthy = Healthy::open(&ctx).await?;
    let mut c = RawConn::open_with_channel(ctx.broker()).await?;
    c.send(&b).await?;
    // RabbitMQ does not notice the excess: the channel stays in "expecting body" state...
    match c.read_frame(Duration::from_millis(300)).await {
        Err(_) => {}
        Ok(other) => {
            return Err(crate::CaseError::new(format!("expected silence after an over-long body, got {other:?}")));
        }
    }
    // ...so the next method frame is the error.
    c.send(&qos(1)).await?;
    c.expect_connection_close().await?.expect(
        505,
        "UNEXPECTED_FRAME - expected content body, got non content body frame instead",
        60,
        40,
    )?;
    healthy.check().await
}

async fn header_wrong_class(ctx: Ctx) -> CaseResult {
    let mut b = raw::basic_publish(1, "amq.fanout", "");
    let payload = Enc::new().u16(50).u16(0).u64(3).u16(0).done();
    b.extend(raw::frame(raw::FRAME_HEADER, 1, &payload));
    bad(&ctx, b, 505, "UNEXPECTED_FRAME - expected content header for class 60, got one for class 50 instead", 60, 40)
        .await
}

async fn trailing(ctx: Ctx) -> CaseResult {
    let args = Enc::new().u32(0).u16(10).u8(0).bytes(b"xyz").done();
    bad(&ctx, raw::method(1, 60, 10, &args), 501, "FRAME_ERROR - cannot decode <<0,0,0,0,0,10,0,120,121,122>>", 60, 10)
        .await
}

// basic.publish has a decoder of its own in a broker that decodes it by hand: the same rules.
async fn truncated_publish(ctx: Ctx) -> CaseResult {
    // The routing key announces 5 octets and carries 2; no flags octet.
    let args = Enc::new().u16(0).shortstr("amq.fanout").u8(5).bytes(b"ab").done();
    let text = "FRAME_ERROR - cannot decode <<0,0,10,97,109,113,46,102,97,110,111,117,116,5,97,98>>";
    bad(&ctx, raw::method(1, 60, 40, &args), 501, text, 60, 40).await
}

async fn publish_trailing(ctx: Ctx) -> CaseResult {
    let args = Enc::new().u16(0).shortstr("").shortstr("k").u8(0).u8(7).done();
    bad(&ctx, raw::method(1, 60, 40, &args), 501, "FRAME_ERROR - cannot decode <<0,0,0,1,107,0,7>>", 60, 40).await
}

async fn zero_length_method(ctx: Ctx) -> CaseResult {
    bad(
        &ctx,
        raw::frame(raw::FRAME_METHOD, 1, &[]),
        501,
        "FRAME_ERROR - type 1, all octets = <<>>: unknown_frame",
        0,
        0,
    )
    .await
}

async fn tune_ok_again(ctx: Ctx) -> CaseResult {
    let args = Enc::new().u16(0).u32(131_072).u16(0).done();
    bad(
        &ctx,
        raw::method(0, 10, 31, &args),
        504,
        "CHANNEL_ERROR - unexpected method in connection state running",
        10,
        31,
    )
    .await
}

async fn server_only_method(ctx: Ctx) -> CaseResult {
    bad(&ctx, raw::method(1, 60, 11, &[]), 503, "COMMAND_INVALID - unimplemented method", 60, 11).await
}

async fn unsolicited_close_ok(ctx: Ctx) -> CaseResult {
    bad(&ctx, raw::method(1, 20, 41, &[]), 503, "COMMAND_INVALID - unimplemented method", 20, 41).await
}

async fn flow_false(ctx: Ctx) -> CaseResult {
    bad(&ctx, raw::method(1, 20, 20, &[0]), 540, "NOT_IMPLEMENTED - active=false", 20, 20).await
}

async fn unknown_class(ctx: Ctx) -> CaseResult {
    let healthy = Healthy::open(&ctx).await?;
    let mut c = RawConn::open_with_channel(ctx.broker()).await?;
    c.send(&raw::method(1, 99, 10, &[])).await?;
    c.expect_silent_drop(Duration::from_secs(5)).await?;
    healthy.check().await
}

async fn number_above_max(ctx: Ctx) -> CaseResult {
    let mut c = RawConn::open_with_channel(ctx.broker()).await?;
    for ch in [3000, 65535] {
        c.send(&raw::channel_open(ch)).await?;
        c.expect_method(ch, 20, 11).await?;
    }
    c.send(&raw::method(65535, 60, 10, &Enc::new().u32(0).u16(1).u8(0).done())).await?;
    c.expect_method(65535, 60, 11).await?;
    Ok(())
}
