//! Heartbeat enforcement: a silent client is disconnected, a chatty one is not.

use crate::{
    Case, CaseError, CaseResult, Ctx, case, check,
    raw::{self, Handshake, RawConn},
};
use std::time::{Duration, Instant};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "heartbeat.silent_client_disconnected",
            "a client that negotiates heartbeat=1 and stays silent is dropped within 2-6 s",
            ["raw", "slow"],
            silent
        ),
        case!(
            "heartbeat.active_client_stays",
            "a client that negotiates heartbeat=1 and sends heartbeats stays connected",
            ["raw", "slow"],
            active
        ),
        case!(
            "heartbeat.broker_sends_heartbeats",
            "with heartbeat=1 the broker sends heartbeat frames on channel 0",
            ["raw", "slow"],
            broker_sends
        ),
    ]
}

async fn open_hb(ctx: &Ctx) -> Result<RawConn, CaseError> {
    let mut hs = Handshake::new(ctx.broker());
    hs.heartbeat = 1;
    RawConn::open(ctx.broker(), &hs).await
}

async fn silent(ctx: Ctx) -> CaseResult {
    let mut c = open_hb(&ctx).await?;
    let start = Instant::now();
    // Read (and ignore) the broker's heartbeats until it gives up on us.
    loop {
        match c.read_frame(Duration::from_secs(8)).await? {
            None => break,
            Some(f) if f.kind == raw::FRAME_HEARTBEAT => {}
            Some(f) => {
                let detail = match f.method_id() {
                    Some((10, 50)) => format!("connection.close {:?}", raw::parse_close(&f)?),
                    other => format!("frame type {} method {other:?}", f.kind),
                };
                return Err(CaseError::new(format!("expected only heartbeats then a dropped socket, got {detail}")));
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    check!(
        (2.0..=6.0).contains(&secs),
        "silent client dropped after {secs:.1} s, expected 2-6 s (RabbitMQ: about 3 s)"
    );
    Ok(())
}

async fn active(ctx: Ctx) -> CaseResult {
    let mut c = open_hb(&ctx).await?;
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        c.send(&raw::heartbeat(0)).await?;
        // Drain whatever the broker sent meanwhile (its heartbeats).
        if let Ok(None) = c.read_frame(Duration::from_millis(400)).await {
            return Err(CaseError::new("broker closed a connection that sent heartbeats"));
        }
    }
    c.send(&raw::heartbeat(0)).await?;
    c.send(&raw::channel_open(1)).await?;
    c.expect_method(1, 20, 11).await?;
    Ok(())
}

async fn broker_sends(ctx: Ctx) -> CaseResult {
    let mut c = open_hb(&ctx).await?;
    c.send(&raw::heartbeat(0)).await?;
    let f = c.read_frame(Duration::from_secs(3)).await?.ok_or_else(|| CaseError::new("socket closed"))?;
    check!(
        f.kind == raw::FRAME_HEARTBEAT && f.channel == 0 && f.payload.is_empty(),
        "expected an empty heartbeat frame on channel 0, got {f:?}"
    );
    Ok(())
}
