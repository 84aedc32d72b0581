//! What a broker sends, and how long it keeps the socket, after a close: the orderings real
//! clients depend on (amqplib's `close()` under load, a confirm channel closed with publishes
//! in flight).

use super::amqp10_attach::{queue, session};
use crate::{
    Case, CaseError, CaseResult, Ctx, case, case10, check, check_eq,
    fe2o3_kit::queue_addr,
    raw::{self, Enc, FRAME_HEARTBEAT, Frame, Handshake, RawConn},
    raw10::{Msg, conn::Body},
};
use fe2o3_amqp_types::performatives::{Close, End, Performative};
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
        case!(
            "close.nothing_after_a_forced_close",
            "a consumer's connection closed through the management API while deliveries stream: nothing follows \
             connection.close",
            ["raw", "management"],
            nothing_after_forced_close
        ),
        case10!(
            "amqp10.close.lingers_after_close",
            "after the client's close is answered the socket stays open and frames still in flight are dropped \
             without a reset",
            lingers10
        ),
        case10!(
            "amqp10.close.no_disposition_after_end",
            "unsettled transfers to a durable queue and end in one write: no disposition for them reaches a session \
             begun afterwards on the same channel",
            no_disposition_after_end
        )
        .deliberate(
            "RabbitMQ 4.3.6 and 4.0.5 sometimes send the ended session's dispositions on the session begun after \
             it on the same channel (in 2 and 1 of 3 runs, and in each full catalogue run)",
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

/// A management `DELETE /api/connections/{name}` closes the connection with 320; deliveries the
/// queue had already sent towards it must not follow the close on the wire.
async fn nothing_after_forced_close(ctx: Ctx) -> CaseResult {
    let consumer = ctx.user_with("", Some((".*", ".*", ".*"))).await?;
    let q = ctx.queue("q");
    let (_conn, ch) = ctx.lapin_channel().await?;
    crate::lapin_kit::declare_queue(&ch, &q).await?;
    let mut c = RawConn::open_with_channel(&consumer).await?;
    let consume = Enc::new().u16(0).shortstr(&q).shortstr("stream").u8(0b10).table(&[]).done(); // no-ack
    c.send(&raw::method(1, 60, 20, &consume)).await?;
    c.expect_method(1, 60, 21).await?;
    let publisher = {
        let (ch, q) = (ch.clone(), q.clone());
        tokio::spawn(async move {
            for i in 0..200_000u32 {
                let published = ch
                    .basic_publish(
                        "".into(),
                        q.as_str().into(),
                        Default::default(),
                        &i.to_be_bytes(),
                        Default::default(),
                    )
                    .await;
                if published.is_err() {
                    return;
                }
            }
        })
    };
    // RabbitMQ lists a connection once its stats are emitted (every 5 s by default).
    let name = {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let listed = ctx.api("GET", "/api/connections", None).await?;
            let all: serde_json::Value = serde_json::from_str(&listed.body).unwrap_or_default();
            let found = all.as_array().and_then(|all| {
                all.iter()
                    .find(|x| x.get("user") == Some(&serde_json::json!(consumer.user)))?
                    .get("name")?
                    .as_str()
                    .map(str::to_owned)
            });
            if let Some(name) = found {
                break name;
            }
            check!(Instant::now() < deadline, "the consumer's connection is not listed");
            // Keep reading: a consumer that stops reading is not sent more.
            while c.read_frame(Duration::from_millis(100)).await.is_ok() {}
        }
    };
    // Deleted from another task while this one reads on, so deliveries are streaming when the
    // close comes.
    let deleting = {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            ctx.api("DELETE", &format!("/api/connections/{}", crate::admin::segment(&name)), None).await
        })
    };
    let mut after_close = Vec::new();
    let mut closed = false;
    loop {
        match c.read_frame(Duration::from_secs(5)).await? {
            None => break,
            Some(f) if closed => after_close.push((f.kind, f.channel, f.method_id())),
            Some(f) if f.method_id() == Some((10, 50)) => {
                closed = true;
                // Answered, as a client does; the broker may already have dropped the socket.
                let _ = c.send(&raw::method(0, 10, 51, &[])).await;
            }
            Some(_) => {}
        }
    }
    publisher.abort();
    let deleted = deleting.await.map_err(|e| CaseError::new(format!("the DELETE task: {e}")))??;
    check_eq!(deleted.status, 204, "DELETE the connection");
    check!(closed, "no connection.close before the socket closed");
    check_eq!(after_close, Vec::new(), "frames after connection.close");
    Ok(())
}

/// RabbitMQ's 1.0 reader answers the client's close, then drops what comes until the client
/// closes the socket (or 30 s pass).
async fn lingers10(ctx: Ctx) -> CaseResult {
    let q = queue(&ctx).await?;
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, Some(&queue_addr(&q))).await?;
    c.perf(0, &Close { error: None }).await?;
    check_eq!(c.expect_close(Duration::from_secs(5)).await?, None, "the broker's close");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let message = Msg::text("late").encode()?;
    for id in 0..500 {
        c.transfer(0, 0, id, true, &message).await?;
    }
    match c.read_raw(Duration::from_millis(1500)).await {
        Err(_) => Ok(()),
        Ok(None) => Err(CaseError::new("the socket closed (or was reset) under the late frames")),
        Ok(Some(f)) => Err(CaseError::new(format!("a frame after close: {:?}", f.body))),
    }
}

/// An ended session takes nothing more; its channel number may carry a new session at once.
async fn no_disposition_after_end(ctx: Ctx) -> CaseResult {
    // Durable, so its confirms wait for the disk and come after the new session began.
    let q = ctx.queue("durable");
    let (_conn, ch) = ctx.lapin_channel().await?;
    let durable = lapin::options::QueueDeclareOptions { durable: true, ..Default::default() };
    ch.queue_declare(q.as_str().into(), durable, Default::default()).await?;
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, Some(&queue_addr(&q))).await?;
    let message = Msg::text("m").encode()?;
    let mut burst = Vec::new();
    for id in 0..200u32 {
        let t = super::amqp10_errors::kit::transfer(0, Some(id));
        burst.extend(crate::raw10::codec::perf(0, &t, &message)?);
    }
    burst.extend(crate::raw10::codec::perf(0, &End { error: None }, &[])?);
    c.send(&burst).await?;
    // Dispositions may come before the end; nothing for those deliveries after it.
    c.expect("end", Duration::from_secs(5), |ch, p, _| matches!(p, Performative::End(_) if ch == 0).then_some(()))
        .await?;
    c.begin(0).await?;
    c.attach_sender(0, 0, Some(&queue_addr(&q))).await?;
    loop {
        match c.read_raw(Duration::from_millis(500)).await {
            Err(_) => break,
            Ok(None) => return Err(CaseError::new("the broker closed the connection")),
            Ok(Some(f)) => match f.body {
                Body::Perf(p, _) if matches!(*p, Performative::Disposition(_)) => {
                    return Err(CaseError::new(format!("a disposition on the new session: {p:?}")));
                }
                _ => {}
            },
        }
    }
    c.close().await
}
