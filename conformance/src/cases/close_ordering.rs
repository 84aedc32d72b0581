//! What a broker sends, and how long it keeps the socket, after a close: the orderings real
//! clients depend on (amqplib's `close()` under load, a confirm channel closed with publishes
//! in flight).

use crate::{
    Case, CaseError, CaseResult, Ctx, case, check, check_eq,
    raw::{self, Enc, FRAME_HEARTBEAT, Frame, Handshake, RawConn},
};
use std::time::{Duration, Instant};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "close.connection_lingers_after_close_ok",
            "after close-ok the socket stays open, frames still in flight are dropped without a reset, \
             and it closes within the heartbeat interval",
            ["raw"],
            lingers
        ),
        case!(
            "close.confirms_before_channel_close_ok",
            "publishes (half of them unroutable) and channel.close in one write: acks come before close-ok, \
             none after it (five times on one connection)",
            ["raw"],
            confirms_before_close_ok
        ),
    ]
}

/// `connection.close` (on channel 0) or `channel.close` with reply 200.
fn close(channel: u16) -> Vec<u8> {
    let (class, method) = if channel == 0 { (10, 50) } else { (20, 40) };
    raw::method(channel, class, method, &Enc::new().u16(200).shortstr("bye").u16(0).u16(0).done())
}

/// One `basic.publish` of `body` to the default exchange with `routing_key`: method, header
/// and body frames.
fn publish(channel: u16, routing_key: &str, body: &[u8]) -> Vec<u8> {
    let mut out = raw::basic_publish(channel, "", routing_key);
    out.extend(raw::content_header(channel, u64::try_from(body.len()).unwrap_or(0)));
    out.extend(raw::body(channel, body));
    out
}

/// The next frame that is not a heartbeat.
async fn next(c: &mut RawConn, timeout: Duration) -> Result<Option<Frame>, CaseError> {
    loop {
        match c.read_frame(timeout).await? {
            Some(f) if f.kind == FRAME_HEARTBEAT => {}
            other => return Ok(other),
        }
    }
}

/// RabbitMQ's reader, once it answered `connection.close`, drops what comes and closes the
/// socket after the heartbeat interval (30 s at most). A broker that closes at once makes the
/// kernel reset the connection when the client's buffered publishes arrive, and the client
/// sees an error instead of its close completing.
async fn lingers(ctx: Ctx) -> CaseResult {
    let mut hs = Handshake::new(ctx.broker());
    hs.heartbeat = 2;
    let mut c = RawConn::open(ctx.broker(), &hs).await?;
    c.send(&raw::channel_open(1)).await?;
    c.expect_method(1, 20, 11).await?;
    c.send(&close(0)).await?;
    let f = next(&mut c, raw::REPLY_TIMEOUT).await?.ok_or_else(|| CaseError::new("socket closed before close-ok"))?;
    check_eq!(f.method_id(), Some((10, 51)), "the answer to connection.close");
    let answered = Instant::now();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let late: Vec<u8> = (0..2000).flat_map(|i| publish(1, "nowhere", format!("late-{i}").as_bytes())).collect();
    c.send(&late).await?;
    // Only heartbeats until the socket closes: not before 1.5 s, and by 5 s.
    loop {
        match c.read_frame(Duration::from_secs(5)).await {
            Ok(Some(f)) if f.kind == FRAME_HEARTBEAT => {}
            Ok(Some(f)) => {
                return Err(CaseError::new(format!(
                    "after close-ok: frame type {} channel {} method {:?}",
                    f.kind,
                    f.channel,
                    f.method_id()
                )));
            }
            Ok(None) => break,
            Err(e) => return Err(e.context("the socket stayed open 5 s after close-ok with heartbeat 2")),
        }
    }
    let open_for = answered.elapsed();
    check!(
        open_for >= Duration::from_millis(1500),
        "the socket closed {open_for:?} after close-ok, before the heartbeat interval"
    );
    Ok(())
}

/// RabbitMQ's channel answers `channel.close` after the confirms its queues sent before it; a
/// client frees the channel at close-ok (amqplib: `Frame on unknown channel` for a later ack).
/// Charon goes further and sends every confirm owed first; RabbitMQ may leave later ones
/// unsent, so the case asserts only that none follows close-ok.
async fn confirms_before_close_ok(ctx: Ctx) -> CaseResult {
    let mut c = RawConn::open(ctx.broker(), &Handshake::new(ctx.broker())).await?;
    let q = ctx.queue("q");
    c.send(&raw::channel_open(1)).await?;
    c.expect_method(1, 20, 11).await?;
    c.send(&raw::method(1, 50, 10, &Enc::new().u16(0).shortstr(&q).u8(0).table(&[]).done())).await?;
    c.expect_method(1, 50, 11).await?;
    for round in 0..5 {
        c.send(&raw::channel_open(2)).await?;
        c.expect_method(2, 20, 11).await?;
        c.send(&raw::method(2, 85, 10, &[0])).await?;
        c.expect_method(2, 85, 11).await?;
        // Every other one unroutable: those are confirmed at once, the others when their
        // queue has them.
        let key = |i: u32| if i.is_multiple_of(2) { q.as_str() } else { "nowhere" };
        let mut burst: Vec<u8> = (0..1000).flat_map(|i| publish(2, key(i), format!("m{i}").as_bytes())).collect();
        burst.extend(close(2));
        c.send(&burst).await?;
        loop {
            let f = next(&mut c, raw::REPLY_TIMEOUT).await?.ok_or_else(|| CaseError::new("socket closed"))?;
            match (f.channel, f.method_id()) {
                (2, Some((60, 80))) => {
                    let mut d = raw::Dec::new(f.args());
                    let tag = d.u64()?;
                    check!((1..=1000).contains(&tag), "round {round}: ack of tag {tag}");
                }
                (2, Some((20, 41))) => break,
                (channel, id) => {
                    return Err(CaseError::new(format!("round {round}: before close-ok: channel {channel} {id:?}")));
                }
            }
        }
        // The next frame on channel 2 is the answer to a new open, not a late ack.
        c.send(&raw::channel_open(2)).await?;
        let f = next(&mut c, raw::REPLY_TIMEOUT).await?.ok_or_else(|| CaseError::new("socket closed"))?;
        let (channel, id) = (f.channel, f.method_id());
        check!((channel, id) == (2, Some((20, 11))), "round {round}: after close-ok: channel {channel} {id:?}");
        c.send(&close(2)).await?;
        c.expect_method(2, 20, 41).await?;
    }
    Ok(())
}
