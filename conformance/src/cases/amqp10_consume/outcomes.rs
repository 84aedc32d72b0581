//! Settlement outcomes on a 1.0 receiver: accepted, rejected, released and the variants of
//! modified on classic and quorum queues, pre-settled links, and dispositions over ranges or
//! with settled=false.

use super::kit::{acq, body, filled, modified, quorum, receiver, take};
use crate::{
    CaseError, CaseResult, Ctx,
    cases::amqp10_attach::session,
    check, check_eq,
    fe2o3_kit::queue_addr,
    lapin_kit::{self as lk, QUIET},
    raw10::{Conn10, Delivery, Received, WAIT, codec},
};
use fe2o3_amqp_types::{
    definitions::SenderSettleMode,
    messaging::{Accepted, DeliveryState, Rejected, Released},
    primitives::Value,
};
use lapin::types::FieldTable;

async fn settle_one(
    ctx: &Ctx,
    state: DeliveryState,
    args: FieldTable,
) -> Result<(Conn10, lapin::Connection, String), CaseError> {
    let (conn, _ch, q) = filled(ctx, args, &["m"]).await?;
    let mut c = receiver(ctx, &q).await?;
    c.credit(0, 0, 10, false).await?;
    let d = c.recv(0, WAIT).await?;
    check_eq!(acq(&d)?, (true, 0), "first delivery header");
    c.settle(0, d.id(), d.id(), state).await?;
    Ok((c, conn, q))
}

pub(super) async fn accepted(ctx: Ctx) -> CaseResult {
    let (mut c, conn, q) = settle_one(&ctx, DeliveryState::Accepted(Accepted {}), FieldTable::default()).await?;
    c.no_transfer(0, QUIET).await?;
    check_eq!(lk::message_count(&conn, &q).await?, 0, "messages left");
    c.close().await
}

pub(super) async fn rejected(ctx: Ctx) -> CaseResult {
    let (mut c, conn, q) =
        settle_one(&ctx, DeliveryState::Rejected(Rejected { error: None }), FieldTable::default()).await?;
    c.no_transfer(0, QUIET).await?;
    check_eq!(lk::message_count(&conn, &q).await?, 0, "messages left");
    c.close().await
}

pub(super) async fn released(ctx: Ctx) -> CaseResult {
    let (mut c, _conn, _q) = settle_one(&ctx, DeliveryState::Released(Released {}), FieldTable::default()).await?;
    let d = c.recv(0, WAIT).await?;
    check_eq!(body(&d)?, "m", "redelivered body");
    check_eq!(acq(&d)?, (false, 0), "(first-acquirer, delivery-count) after released");
    c.close().await
}

/// Settles with modified{delivery-failed} twice and checks the delivery-counts seen.
async fn failed_twice(ctx: &Ctx, args: FieldTable, counts: (u32, u32)) -> CaseResult {
    let (mut c, _conn, _q) = settle_one(ctx, modified(Some(true), None, None), args).await?;
    let d = c.recv(0, WAIT).await?;
    check_eq!(acq(&d)?, (false, counts.0), "(first-acquirer, delivery-count) after modified{{delivery-failed}}");
    c.settle(0, d.id(), d.id(), modified(Some(true), Some(false), None)).await?;
    let d = c.recv(0, WAIT).await?;
    check_eq!(acq(&d)?, (false, counts.1), "after a second modified{{delivery-failed}}");
    c.close().await
}

pub(super) async fn modified_failed(ctx: Ctx) -> CaseResult {
    failed_twice(&ctx, FieldTable::default(), (0, 0)).await
}

pub(super) async fn modified_failed_quorum(ctx: Ctx) -> CaseResult {
    failed_twice(&ctx, quorum(), (1, 2)).await
}

pub(super) async fn released_quorum(ctx: Ctx) -> CaseResult {
    let (mut c, _conn, _q) = settle_one(&ctx, DeliveryState::Released(Released {}), quorum()).await?;
    let d = c.recv(0, WAIT).await?;
    check_eq!(acq(&d)?, (false, 0), "(first-acquirer, delivery-count) after released (quorum)");
    c.close().await
}

pub(super) async fn modified_undeliverable(ctx: Ctx) -> CaseResult {
    let (mut c, conn, q) = settle_one(&ctx, modified(None, Some(true), None), FieldTable::default()).await?;
    c.no_transfer(0, QUIET).await?;
    check_eq!(lk::message_count(&conn, &q).await?, 0, "messages left");
    c.close().await
}

pub(super) async fn modified_ann_classic(ctx: Ctx) -> CaseResult {
    let ann = Some(("x-opt-reason", Value::String("retry".into())));
    let (mut c, _conn, _q) = settle_one(&ctx, modified(Some(false), Some(false), ann), FieldTable::default()).await?;
    let d = c.recv(0, WAIT).await?;
    let m = Received::parse(&d.payload)?;
    check_eq!(m.ann("x-opt-reason"), None, "annotation on the classic-queue redelivery");
    c.close().await
}

pub(super) async fn modified_ann_quorum(ctx: Ctx) -> CaseResult {
    let ann = Some(("x-opt-reason", Value::String("retry".into())));
    let (mut c, _conn, _q) = settle_one(&ctx, modified(Some(false), Some(false), ann), quorum()).await?;
    let d = c.recv(0, WAIT).await?;
    let m = Received::parse(&d.payload)?;
    check_eq!(m.ann("x-opt-reason"), Some(Value::String("retry".into())), "annotation on the quorum-queue redelivery");
    c.close().await
}

pub(super) async fn presettled(ctx: Ctx) -> CaseResult {
    let (conn, _ch, q) = filled(&ctx, FieldTable::default(), &["a", "b"]).await?;
    let mut c = session(&ctx).await?;
    c.send_attach_receiver(0, 0, "r", Some(&queue_addr(&q)), SenderSettleMode::Settled).await?;
    let a = c.expect_attach(0, 0).await?;
    check_eq!(a.snd_settle_mode, SenderSettleMode::Settled, "snd-settle-mode echoed");
    c.credit(0, 0, 10, false).await?;
    let got = take(&mut c, 2).await?;
    check!(got.iter().all(Delivery::settled), "transfers must be pre-settled");
    check_eq!(lk::message_count(&conn, &q).await?, 0, "messages left");
    c.close().await
}

pub(super) async fn settle_range(ctx: Ctx) -> CaseResult {
    let (conn, _ch, q) = filled(&ctx, FieldTable::default(), &["a", "b", "c"]).await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 10, false).await?;
    let got = take(&mut c, 3).await?;
    let first = got.first().map(Delivery::id).unwrap_or_default();
    let last = got.last().map(Delivery::id).unwrap_or_default();
    c.settle(0, first, last, DeliveryState::Accepted(Accepted {})).await?;
    lk::eventually(WAIT, "queue empty", || async { Ok(lk::message_count(&conn, &q).await? == 0) }).await?;
    c.close().await
}

pub(super) async fn unsettled_disposition(ctx: Ctx) -> CaseResult {
    let (conn, _ch, q) = filled(&ctx, FieldTable::default(), &["m"]).await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 1, false).await?;
    let d = c.recv(0, WAIT).await?;
    // Encoded by hand: serde_amqp leaves out `settled = false` (the default), and RabbitMQ
    // 4.0.5 needs it present (see amqp10.errors.disposition_settled_absent).
    let fields = vec![
        Value::Bool(true),
        Value::Uint(d.id()),
        Value::Null,
        Value::Bool(false),
        codec::described(0x24, Value::List(vec![])),
    ];
    let bytes = codec::encode(&codec::described(0x15, Value::List(fields)))?;
    c.send(&codec::frame(codec::TYPE_AMQP, 0, &bytes)).await?;
    let answer = c.expect_disposition(0, d.id()).await?;
    check_eq!(
        (answer.role, answer.first, answer.last, answer.settled, crate::raw10::link::outcome(&answer.state)),
        (fe2o3_amqp_types::definitions::Role::Sender, d.id(), None, true, "accepted".to_owned()),
        "the broker's disposition (role, first, last, settled, state)"
    );
    lk::eventually(WAIT, "queue empty", || async { Ok(lk::message_count(&conn, &q).await? == 0) }).await?;
    c.close().await
}

pub(super) async fn release_range(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, q) = filled(&ctx, FieldTable::default(), &["a", "b", "c"]).await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 3, false).await?;
    let got = take(&mut c, 3).await?;
    let first = got.first().map(Delivery::id).unwrap_or_default();
    let last = got.last().map(Delivery::id).unwrap_or_default();
    c.settle(0, first, last, DeliveryState::Released(Released {})).await?;
    c.credit(0, 0, 3, false).await?;
    let again = take(&mut c, 3).await?;
    check_eq!(
        again.iter().map(body).collect::<Result<Vec<_>, _>>()?,
        vec!["a".to_owned(), "b".to_owned(), "c".to_owned()],
        "redelivered in order"
    );
    check_eq!(again.iter().map(acq).collect::<Result<Vec<_>, _>>()?, vec![(false, 0); 3], "headers");
    c.close().await
}
