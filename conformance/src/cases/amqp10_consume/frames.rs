//! Deliveries split over several transfer frames under a small max-frame-size, and bodies with
//! every byte value crossing between 0.9.1 and 1.0 unchanged.

use super::kit::{filled, receiver};
use crate::{
    CaseError, CaseResult, Ctx,
    cases::amqp10_attach::session,
    check, check_eq,
    fe2o3_kit::queue_addr,
    lapin_kit as lk,
    raw10::{Conn10, Received, WAIT},
};
use fe2o3_amqp_types::performatives::Performative;
use lapin::types::FieldTable;

pub(super) async fn multi_frame(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    let data: Vec<u8> = (0..20_000u32).map(|i| (i % 239) as u8).collect();
    lk::publish(&ch, "", &q, &data).await?;
    let mut open = crate::raw10::conn::default_open(ctx.broker());
    open.max_frame_size = fe2o3_amqp_types::performatives::MaxFrameSize(4096);
    let mut c = Conn10::open_with(ctx.broker(), open).await?;
    c.begin(0).await?;
    c.attach_receiver(0, 0, &queue_addr(&q)).await?;
    c.credit(0, 0, 1, false).await?;
    let d = c.recv(0, WAIT).await?;
    check!(d.frames >= 5, "expected at least 5 transfer frames, got {}", d.frames);
    check_eq!(Received::parse(&d.payload)?.data(), Some(data), "reassembled body");
    c.close().await
}

/// Reads one delivery frame by frame: every transfer and its payload.
async fn frames_of_one(c: &mut Conn10) -> Result<Vec<(fe2o3_amqp_types::performatives::Transfer, Vec<u8>)>, CaseError> {
    let mut out = Vec::new();
    loop {
        let (t, p) = c
            .expect("transfer", WAIT, |ch, p, payload| match p {
                Performative::Transfer(t) if ch == 0 => Some((t.clone(), payload.to_vec())),
                _ => None,
            })
            .await?;
        let more = t.more;
        out.push((t, p));
        if !more {
            return Ok(out);
        }
    }
}

pub(super) async fn small_frames(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    lk::publish(&ch, "", &q, &data).await?;
    let mut open = crate::raw10::conn::default_open(ctx.broker());
    open.max_frame_size = fe2o3_amqp_types::performatives::MaxFrameSize(512);
    let mut c = Conn10::open_with(ctx.broker(), open).await?;
    c.begin(0).await?;
    c.attach_receiver(0, 0, &queue_addr(&q)).await?;
    c.credit(0, 0, 1, false).await?;
    let frames = frames_of_one(&mut c).await?;
    check!(frames.len() >= 7, "expected at least 7 transfer frames, got {}", frames.len());
    let mores: Vec<bool> = frames.iter().map(|(t, _)| t.more).collect();
    let mut expected = vec![true; frames.len() - 1];
    expected.push(false);
    check_eq!(mores, expected, "more flags");
    let first_id = frames.first().and_then(|(t, _)| t.delivery_id);
    check!(
        frames.iter().skip(1).all(|(t, _)| t.delivery_id.is_none() || t.delivery_id == first_id),
        "continuation transfers carry no other delivery-id"
    );
    check!(frames.iter().all(|(_, p)| p.len() < 512), "a payload does not fit in a 512-byte frame");
    let payload: Vec<u8> = frames.into_iter().flat_map(|(_, p)| p).collect();
    check_eq!(Received::parse(&payload)?.data(), Some(data), "reassembled body");
    c.close().await
}

/// Every byte value, twice, so the body is neither text nor short.
fn all_bytes() -> Vec<u8> {
    (0..512u32).map(|i| (i % 256) as u8).collect()
}

pub(super) async fn body_from_091(ctx: Ctx) -> CaseResult {
    let (_conn, ch, q) = filled(&ctx, FieldTable::default(), &[]).await?;
    lk::publish(&ch, "", &q, &all_bytes()).await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 1, false).await?;
    let m = Received::parse(&c.recv(0, WAIT).await?.payload)?;
    check_eq!(m.body().len(), 1, "body sections");
    check_eq!(m.data(), Some(all_bytes()), "data section");
    c.close().await
}

pub(super) async fn body_to_091(ctx: Ctx) -> CaseResult {
    let (_conn, ch, q) = filled(&ctx, FieldTable::default(), &[]).await?;
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, Some(&queue_addr(&q))).await?;
    let state = c.publish(0, 0, 0, &crate::raw10::Msg::new().data(&all_bytes()).encode()?).await?;
    check_eq!(crate::raw10::link::outcome(&state), "accepted", "publish outcome");
    let got = lk::get(&ch, &q).await?.ok_or_else(|| CaseError::new("queue empty"))?;
    check_eq!(got.delivery.data.clone(), all_bytes(), "0.9.1 body");
    c.close().await
}
