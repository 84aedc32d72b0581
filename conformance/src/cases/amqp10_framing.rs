//! Malformed AMQP 1.0 input: what RabbitMQ closes, ends or detaches, with which condition.
//! Every case also checks that a healthy connection opened beforehand keeps working.

use super::amqp10_attach::{queue, session};
use crate::{
    Case, CaseError, CaseResult, Ctx, case10, check_eq,
    fe2o3_kit::queue_addr,
    lapin_kit::Healthy,
    raw10::{
        Conn10, Msg, WAIT,
        codec::{self, TYPE_AMQP, TYPE_SASL},
        link::error_parts,
    },
};
use fe2o3_amqp_types::{
    definitions::Handle,
    performatives::{Flow, Performative, Transfer},
    primitives::Binary,
};
use std::time::Duration;

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case10!(
            "amqp10.frame.unknown_descriptor",
            "a performative with an unknown descriptor: close amqp:internal-error Reader error (with a stack trace)",
            unknown_descriptor
        ),
        case10!(
            "amqp10.frame.not_described",
            "a frame body that is not a described type ends the session with amqp:internal-error",
            not_described
        ),
        case10!(
            "amqp10.frame.over_max_frame_size",
            "a frame larger than the negotiated max-frame-size closes with amqp:connection:framing-error",
            too_large
        ),
        case10!("amqp10.frame.sasl_frame_after_open", "a SASL-type frame after the open drops the socket", sasl_type),
        case10!("amqp10.frame.bad_doff", "a frame header with doff 1 drops the socket", bad_doff),
        case10!(
            "amqp10.frame.unknown_channel_ignored",
            "a non-begin frame on a channel with no session is ignored",
            unknown_channel
        ),
        case10!(
            "amqp10.frame.transfer_unknown_handle",
            "a transfer on a handle that was never attached ends the session with amqp:session:unattached-handle",
            transfer_unknown_handle
        ),
        case10!(
            "amqp10.frame.flow_unknown_handle",
            "a flow for a handle that was never attached ends the session with amqp:session:unattached-handle",
            flow_unknown_handle
        ),
        case10!(
            "amqp10.frame.continuation_other_delivery_id",
            "a continuation transfer with another delivery-id ends the session with amqp:connection:framing-error",
            continuation_mismatch
        ),
    ]
}

/// What RabbitMQ did after the bad input: the error-bearing performatives seen until EOF
/// (`close(cond: desc)`, `end(...)`, `detach(...)`), `eof` when the socket closed, or
/// `open` when it stayed up for `wait`.
async fn reaction(c: &mut Conn10, wait: Duration) -> Result<Vec<String>, CaseError> {
    let mut out = Vec::new();
    loop {
        match c.read_raw(wait).await {
            Ok(None) => {
                out.push("eof".to_owned());
                return Ok(out);
            }
            Ok(Some(f)) => {
                if let crate::raw10::conn::Body::Perf(p, _) = f.body {
                    match *p {
                        Performative::Close(cl) => {
                            let (cond, desc) = error_parts(&cl.error);
                            out.push(format!("close({cond}: {})", desc.unwrap_or_default()));
                        }
                        Performative::End(e) => {
                            let (cond, desc) = error_parts(&e.error);
                            out.push(format!("end({cond}: {})", desc.unwrap_or_default()));
                            return Ok(out);
                        }
                        Performative::Detach(d) => {
                            let (cond, desc) = error_parts(&d.error);
                            out.push(format!("detach({cond}: {})", desc.unwrap_or_default()));
                        }
                        _ => {}
                    }
                }
            }
            Err(_) => {
                out.push("open".to_owned());
                return Ok(out);
            }
        }
    }
}

/// Opens a healthy connection, runs `bad` on a fresh raw session, returns the reaction.
async fn bad_input(ctx: &Ctx, bytes: Vec<u8>) -> Result<(Vec<String>, Healthy), CaseError> {
    let healthy = Healthy::open(ctx).await?;
    let mut c = session(ctx).await?;
    c.send(&bytes).await?;
    let r = reaction(&mut c, Duration::from_secs(5)).await?;
    Ok((r, healthy))
}

async fn unknown_descriptor(ctx: Ctx) -> CaseResult {
    let (r, healthy) = bad_input(&ctx, codec::frame(TYPE_AMQP, 0, &[0x00, 0x53, 0x99, 0x45])).await?;
    // The description goes on with an Erlang stack trace; only its first line is stable.
    let first = r.first().cloned().unwrap_or_default();
    let head = "close(amqp:internal-error: Reader error: {unknown,{ulong,153}}\n[";
    crate::check!(first.starts_with(head), "reaction: expected {head:?}... got {r:?}");
    // RabbitMQ then waits for the client's close instead of dropping the socket.
    check_eq!(r.get(1).map(String::as_str), Some("open"), "after the close");
    healthy.check().await
}

async fn not_described(ctx: Ctx) -> CaseResult {
    let (r, healthy) = bad_input(&ctx, codec::frame(TYPE_AMQP, 0, &[0xa1, 0x03, b'a', b'b', b'c'])).await?;
    check_eq!(r, vec!["end(amqp:internal-error: Unexpected frame {utf8,<<\"abc\">>})".to_owned()], "reaction");
    healthy.check().await
}

async fn too_large(ctx: Ctx) -> CaseResult {
    let mut bytes = 200_000u32.to_be_bytes().to_vec();
    bytes.extend_from_slice(&[2, TYPE_AMQP, 0, 0]);
    let (r, healthy) = bad_input(&ctx, bytes).await?;
    check_eq!(
        r,
        vec![
            "close(amqp:connection:framing-error: frame size (200000 bytes) > maximum frame size (131072 bytes))"
                .to_owned(),
            "open".to_owned()
        ],
        "reaction"
    );
    healthy.check().await
}

async fn sasl_type(ctx: Ctx) -> CaseResult {
    let (r, healthy) = bad_input(&ctx, codec::frame(TYPE_SASL, 0, &[0x00, 0x53, 0x41, 0x45])).await?;
    check_eq!(r, vec!["eof".to_owned()], "reaction");
    healthy.check().await
}

async fn bad_doff(ctx: Ctx) -> CaseResult {
    let mut f = codec::frame(TYPE_AMQP, 0, &[0x00, 0x53, 0x18, 0x45]);
    if let Some(d) = f.get_mut(4) {
        *d = 1;
    }
    let (r, healthy) = bad_input(&ctx, f).await?;
    check_eq!(r, vec!["eof".to_owned()], "reaction");
    healthy.check().await
}

fn flow_for(handle: u32) -> Flow {
    Flow {
        next_incoming_id: Some(0),
        incoming_window: 100,
        next_outgoing_id: 0,
        outgoing_window: 100,
        handle: Some(Handle(handle)),
        delivery_count: Some(0),
        link_credit: Some(1),
        available: None,
        drain: false,
        echo: false,
        properties: None,
    }
}

async fn unknown_channel(ctx: Ctx) -> CaseResult {
    let q = queue(&ctx).await?;
    let mut c = session(&ctx).await?;
    c.send(&codec::perf(7, &flow_for(0), &[])?).await?;
    let r = reaction(&mut c, Duration::from_millis(300)).await?;
    check_eq!(r, vec!["open".to_owned()], "reaction");
    c.attach_sender(0, 0, Some(&queue_addr(&q))).await?;
    check_eq!(
        crate::raw10::link::outcome(&c.publish(0, 0, 0, &Msg::text("ok").encode()?).await?),
        "accepted",
        "publish afterwards"
    );
    c.close().await
}

async fn transfer_unknown_handle(ctx: Ctx) -> CaseResult {
    let t = Transfer {
        handle: Handle(5),
        delivery_id: Some(0),
        delivery_tag: Some(Binary::from(vec![1u8])),
        message_format: Some(0),
        settled: Some(false),
        more: false,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: false,
    };
    let (r, healthy) = bad_input(&ctx, codec::perf(0, &t, &Msg::text("x").encode()?)?).await?;
    check_eq!(r, vec!["end(amqp:session:unattached-handle: Unknown link handle: 5)".to_owned()], "reaction");
    healthy.check().await
}

async fn flow_unknown_handle(ctx: Ctx) -> CaseResult {
    let healthy = Healthy::open(&ctx).await?;
    let mut c = session(&ctx).await?;
    c.flow(0, 5, 0, 1, false).await?;
    let r = reaction(&mut c, WAIT).await?;
    check_eq!(r, vec!["end(amqp:session:unattached-handle: Unattached link handle: 5)".to_owned()], "reaction");
    healthy.check().await
}

async fn continuation_mismatch(ctx: Ctx) -> CaseResult {
    let healthy = Healthy::open(&ctx).await?;
    let q = queue(&ctx).await?;
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, Some(&queue_addr(&q))).await?;
    let mut t = Transfer {
        handle: Handle(0),
        delivery_id: Some(0),
        delivery_tag: Some(Binary::from(vec![1u8])),
        message_format: Some(0),
        settled: Some(false),
        more: true,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: false,
    };
    let payload = Msg::text("two frames").encode()?;
    let (a, b) = payload.split_at(4);
    c.send(&codec::perf(0, &t, a)?).await?;
    t.delivery_id = Some(9);
    t.more = false;
    c.send(&codec::perf(0, &t, b)?).await?;
    let r = reaction(&mut c, WAIT).await?;
    check_eq!(
        r,
        vec!["end(amqp:connection:framing-error: delivery-id of continuation transfer ({uint,9}) differs from delivery-id on first transfer (0))".to_owned()],
        "reaction"
    );
    healthy.check().await
}
