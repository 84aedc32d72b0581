//! What the `amqp10.consume.*` cases share: a queue filled over 0.9.1, a raw 1.0 receiver on it,
//! reading deliveries and their header, and the settlement states and queue arguments the
//! cases pass around.

use crate::{
    CaseError, Ctx,
    cases::amqp10_attach::session,
    fe2o3_kit::queue_addr,
    lapin_kit as lk,
    raw10::{Conn10, Delivery, Received, WAIT, message::hdr},
};
use fe2o3_amqp_types::{
    messaging::{DeliveryState, Modified},
    primitives::Value,
};
use lapin::{
    options::QueueDeclareOptions,
    types::{AMQPValue, FieldTable},
};

/// Declares a queue (with `args`) and publishes `bodies` to it over 0.9.1 with confirms.
pub(super) async fn filled(
    ctx: &Ctx,
    args: FieldTable,
    bodies: &[&str],
) -> Result<(lapin::Connection, lapin::Channel, String), CaseError> {
    let (conn, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = ctx.queue("q");
    let durable = args.inner().contains_key("x-queue-type");
    ch.queue_declare(q.as_str().into(), QueueDeclareOptions { durable, ..Default::default() }, args).await?;
    for b in bodies {
        lk::publish(&ch, "", &q, b.as_bytes()).await?;
    }
    Ok((conn, ch, q))
}

/// A raw session with receiving link 0 attached to `q` (no credit yet).
pub(super) async fn receiver(ctx: &Ctx, q: &str) -> Result<Conn10, CaseError> {
    let mut c = session(ctx).await?;
    c.attach_receiver(0, 0, &queue_addr(q)).await?;
    Ok(c)
}

pub(super) fn body(d: &Delivery) -> Result<String, CaseError> {
    Ok(Received::parse(&d.payload)?.text())
}

pub(super) async fn take(c: &mut Conn10, n: usize) -> Result<Vec<Delivery>, CaseError> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(c.recv(0, WAIT).await?);
    }
    Ok(out)
}

/// `(first-acquirer, delivery-count)` of a delivery's header (absent fields as defaults).
pub(super) fn acq(d: &Delivery) -> Result<(bool, u32), CaseError> {
    let m = Received::parse(&d.payload)?;
    let fa = matches!(m.header(hdr::FIRST_ACQUIRER), Some(Value::Bool(true)));
    let dc = match m.header(hdr::DELIVERY_COUNT) {
        Some(Value::Uint(n)) => n,
        None => 0,
        Some(other) => return Err(CaseError::new(format!("delivery-count of type {other:?}"))),
    };
    Ok((fa, dc))
}

pub(super) fn modified(failed: Option<bool>, undeliverable: Option<bool>, ann: Option<(&str, Value)>) -> DeliveryState {
    DeliveryState::Modified(Modified {
        delivery_failed: failed,
        undeliverable_here: undeliverable,
        message_annotations: ann.map(|(k, v)| [(k.into(), v)].into_iter().collect()),
    })
}

pub(super) fn quorum() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    args
}
