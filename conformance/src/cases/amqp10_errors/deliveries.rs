//! Dispositions and transfers that do not fit the session: dispositions for unknown deliveries,
//! with role sender or without the settled field, transfers with a delivery-id gap, without a
//! delivery-id or on a receiving link.

use super::kit::{Bystanders, reaction, sender, still_usable, transfer, unexpected};
use crate::{
    CaseResult, Ctx,
    cases::amqp10_attach::{queue, session},
    check_eq,
    fe2o3_kit::queue_addr,
    lapin_kit::{self as lk, QUIET},
    raw10::{Msg, WAIT, codec, link::outcome},
};
use fe2o3_amqp_types::{
    definitions::Role,
    messaging::{Accepted, DeliveryState},
    performatives::Disposition,
};

fn disposition(role: Role, first: u32, last: u32) -> Disposition {
    Disposition {
        role,
        first,
        last: Some(last),
        settled: true,
        state: Some(DeliveryState::Accepted(Accepted {})),
        batchable: false,
    }
}

pub(super) async fn disposition_unknown(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = session(&ctx).await?;
    c.perf(0, &disposition(Role::Receiver, 40, 50)).await?;
    let r = reaction(&mut c, QUIET).await?;
    check_eq!(r, vec!["open".to_owned()], "reaction");
    still_usable(&mut c, &ctx, 0, 0).await?;
    c.close().await?;
    by.check().await
}

pub(super) async fn disposition_sender(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = session(&ctx).await?;
    c.perf(0, &disposition(Role::Sender, 0, 0)).await?;
    let r = reaction(&mut c, WAIT).await?;
    let text = unexpected(
        "disposition",
        &[
            "{role,false}",
            "{first,{uint,0}}",
            "{last,{uint,0}}",
            "{settled,true}",
            "{state,{'v1_0.accepted',[]}}",
            "{batchable,undefined}",
        ],
    );
    check_eq!(r, vec![format!("end(amqp:internal-error: {text})")], "reaction");
    by.check().await
}

pub(super) async fn delivery_id_gap(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = sender(&ctx).await?;
    let first = c.publish(0, 0, 0, &Msg::text("0").encode()?).await?;
    check_eq!(outcome(&first), "accepted", "first publish");
    c.send(&codec::perf(0, &transfer(0, Some(5)), &Msg::text("5").encode()?)?).await?;
    let d = c.expect_disposition(0, 5).await?;
    // RabbitMQ does not check the sequence: the delivery is accepted under the id it carries.
    check_eq!((d.first, d.last, outcome(&d.state)), (5, None, "accepted".to_owned()), "disposition");
    let next = c.publish(0, 0, 6, &Msg::text("6").encode()?).await?;
    check_eq!(outcome(&next), "accepted", "the next publish");
    c.close().await?;
    by.check().await
}

pub(super) async fn no_delivery_id(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = sender(&ctx).await?;
    c.send(&codec::perf(0, &transfer(0, None), &Msg::text("x").encode()?)?).await?;
    let r = reaction(&mut c, WAIT).await?;
    // The session process crashes on the missing id; the stack trace is cut off.
    check_eq!(r, vec!["end(amqp:internal-error: {badmatch,undefined}\u{2026})".to_owned()], "reaction");
    by.check().await
}

pub(super) async fn transfer_on_receiver(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let q = queue(&ctx).await?;
    let mut c = session(&ctx).await?;
    c.attach_receiver(0, 0, &queue_addr(&q)).await?;
    c.send(&codec::perf(0, &transfer(0, Some(0)), &Msg::text("x").encode()?)?).await?;
    let r = reaction(&mut c, WAIT).await?;
    check_eq!(r, vec!["end(amqp:session:unattached-handle: Unknown link handle: 0)".to_owned()], "reaction");
    by.check().await
}

pub(super) async fn settled_absent(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    let q = queue(&ctx).await?;
    lk::confirm(&ch).await?;
    lk::publish(&ch, "", &q, b"m").await?;
    let mut c = session(&ctx).await?;
    c.attach_receiver(0, 0, &queue_addr(&q)).await?;
    c.credit(0, 0, 1, false).await?;
    let d = c.recv(0, WAIT).await?;
    let mut disposition = disposition(Role::Receiver, d.id(), d.id());
    disposition.settled = false;
    c.perf(0, &disposition).await?;
    let r = reaction(&mut c, QUIET).await?;
    check_eq!(r, vec![format!("disposition(Sender, {}..Some({}))", d.id(), d.id()), "open".to_owned()], "reaction");
    lk::eventually(WAIT, "queue empty", || async { Ok(lk::message_count(&conn, &q).await? == 0) }).await?;
    c.close().await
}
