//! Redelivery of unsettled 1.0 deliveries: after a detach or a dropped connection (classic and
//! quorum queues), and after a release or an undeliverable-here when another link has credit.

use super::kit::{acq, body, filled, modified, quorum, receiver, take};
use crate::{
    CaseError, CaseResult, Ctx, check_eq,
    fe2o3_kit::queue_addr,
    lapin_kit::{self as lk, QUIET},
    raw10::{Conn10, Delivery, WAIT},
};
use fe2o3_amqp_types::messaging::{Accepted, DeliveryState, Released};
use lapin::types::FieldTable;

pub(super) async fn after_detach(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, q) = filled(&ctx, FieldTable::default(), &["a", "b"]).await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 10, false).await?;
    let _ = take(&mut c, 2).await?;
    c.detach(0, 0).await?;
    c.expect_refusal(0, 0).await?;
    c.attach_receiver(0, 1, &queue_addr(&q)).await?;
    c.credit(0, 1, 10, false).await?;
    let again = take(&mut c, 2).await?;
    check_eq!(
        again.iter().map(body).collect::<Result<Vec<_>, _>>()?,
        vec!["a".to_owned(), "b".to_owned()],
        "redelivered in order"
    );
    check_eq!(
        acq(again.first().ok_or_else(|| CaseError::new("none"))?)?,
        (false, 0),
        "(first-acquirer, delivery-count)"
    );
    c.close().await
}

pub(super) async fn after_drop(ctx: Ctx) -> CaseResult {
    let (conn, _ch, q) = filled(&ctx, FieldTable::default(), &["a"]).await?;
    {
        let mut c = receiver(&ctx, &q).await?;
        c.credit(0, 0, 10, false).await?;
        let _ = c.recv(0, WAIT).await?;
        // Dropping the raw connection closes the socket without close frames.
    }
    lk::eventually(WAIT, "message back in the queue", || async { Ok(lk::message_count(&conn, &q).await? == 1) })
        .await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 10, false).await?;
    let d = c.recv(0, WAIT).await?;
    check_eq!(acq(&d)?, (false, 0), "(first-acquirer, delivery-count) after connection loss");
    c.close().await
}

/// A session with two receiving links on `q`: handle 0 with 1 credit, handle 1 without.
async fn two_receivers(ctx: &Ctx, q: &str) -> Result<Conn10, CaseError> {
    let mut c = receiver(ctx, q).await?;
    c.attach_receiver(0, 1, &queue_addr(q)).await?;
    c.credit(0, 0, 1, false).await?;
    Ok(c)
}

pub(super) async fn released_other_link(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, q) = filled(&ctx, FieldTable::default(), &["m"]).await?;
    let mut c = two_receivers(&ctx, &q).await?;
    let d = c.recv(0, WAIT).await?;
    check_eq!(d.transfer.handle.0, 0, "first delivery on handle");
    c.credit(0, 1, 1, false).await?;
    c.no_transfer(0, QUIET).await?;
    c.settle(0, d.id(), d.id(), DeliveryState::Released(Released {})).await?;
    let again = c.recv(0, WAIT).await?;
    check_eq!((again.transfer.handle.0, body(&again)?), (1, "m".to_owned()), "redelivery (handle, body)");
    check_eq!(acq(&again)?, (false, 0), "(first-acquirer, delivery-count)");
    c.close().await
}

pub(super) async fn undeliverable_other_link(ctx: Ctx) -> CaseResult {
    let (conn, _ch, q) = filled(&ctx, FieldTable::default(), &["m"]).await?;
    let mut c = two_receivers(&ctx, &q).await?;
    let d = c.recv(0, WAIT).await?;
    c.credit(0, 1, 1, false).await?;
    c.settle(0, d.id(), d.id(), modified(None, Some(true), None)).await?;
    c.no_transfer(0, QUIET).await?;
    check_eq!(lk::message_count(&conn, &q).await?, 0, "messages left");
    c.close().await
}

pub(super) async fn detach_only_unsettled(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, q) = filled(&ctx, FieldTable::default(), &["a", "b"]).await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 2, false).await?;
    let got = take(&mut c, 2).await?;
    let first = got.first().map(Delivery::id).unwrap_or_default();
    c.settle(0, first, first, DeliveryState::Accepted(Accepted {})).await?;
    c.detach(0, 0).await?;
    c.expect_refusal(0, 0).await?;
    c.attach_receiver(0, 1, &queue_addr(&q)).await?;
    c.credit(0, 1, 10, false).await?;
    check_eq!(body(&c.recv(0, WAIT).await?)?, "b", "the unsettled one comes back");
    c.no_transfer(0, QUIET).await?;
    c.close().await
}

pub(super) async fn after_detach_quorum(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, q) = filled(&ctx, quorum(), &["a"]).await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 10, false).await?;
    let _ = c.recv(0, WAIT).await?;
    c.detach(0, 0).await?;
    c.expect_refusal(0, 0).await?;
    c.attach_receiver(0, 1, &queue_addr(&q)).await?;
    c.credit(0, 1, 10, false).await?;
    let d = c.recv(0, WAIT).await?;
    check_eq!(body(&d)?, "a", "redelivered body");
    check_eq!(acq(&d)?, (false, 0), "(first-acquirer, delivery-count) after detach (quorum)");
    c.close().await
}

pub(super) async fn after_drop_quorum(ctx: Ctx) -> CaseResult {
    let (conn, _ch, q) = filled(&ctx, quorum(), &["a"]).await?;
    {
        let mut c = receiver(&ctx, &q).await?;
        c.credit(0, 0, 10, false).await?;
        let _ = c.recv(0, WAIT).await?;
    }
    lk::eventually(WAIT, "message back in the queue", || async { Ok(lk::message_count(&conn, &q).await? == 1) })
        .await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 10, false).await?;
    let d = c.recv(0, WAIT).await?;
    // Unlike a detach, a lost connection counts as a failed delivery in a quorum queue.
    check_eq!(acq(&d)?, (false, 1), "(first-acquirer, delivery-count) after connection loss (quorum)");
    c.close().await
}
