//! Channels and link handles used wrongly: a flow or detach for a handle that is not attached, a
//! begin on a channel in use or above channel-max, an attach reusing a handle, above handle-max
//! or on a channel without a session.

use super::kit::{Bystanders, reaction, sender, still_usable, unexpected};
use crate::{
    CaseResult, Ctx,
    cases::amqp10_attach::{queue, session},
    check_eq,
    fe2o3_kit::queue_addr,
    lapin_kit::{self as lk, QUIET},
    raw10::{
        Conn10, Msg, WAIT,
        link::{attach_frame, outcome, target_of},
    },
};
use fe2o3_amqp_types::{
    definitions::{Handle, Role, SenderSettleMode},
    performatives::{Begin, Detach},
};

pub(super) async fn flow_after_detach(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = sender(&ctx).await?;
    c.detach(0, 0).await?;
    c.expect_refusal(0, 0).await?;
    c.flow(0, 0, 0, 1, false).await?;
    let r = reaction(&mut c, WAIT).await?;
    check_eq!(r, vec!["end(amqp:session:unattached-handle: Unattached link handle: 0)".to_owned()], "reaction");
    by.check().await
}

pub(super) async fn detach_unknown(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = session(&ctx).await?;
    c.perf(0, &Detach { handle: Handle(7), closed: true, error: None }).await?;
    let r = reaction(&mut c, QUIET).await?;
    check_eq!(r, vec!["open".to_owned()], "reaction");
    still_usable(&mut c, &ctx, 0, 0).await?;
    c.close().await?;
    by.check().await
}

fn begin() -> Begin {
    Begin {
        remote_channel: None,
        next_outgoing_id: 0,
        incoming_window: 5000,
        outgoing_window: 5000,
        handle_max: Handle(255),
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

pub(super) async fn begin_in_use(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = session(&ctx).await?;
    c.perf(0, &begin()).await?;
    let r = reaction(&mut c, WAIT).await?;
    let text = unexpected(
        "begin",
        &[
            "{remote_channel,undefined}",
            "{next_outgoing_id,{uint,0}}",
            "{incoming_window,{uint,5000}}",
            "{outgoing_window,{uint,5000}}",
            "{handle_max,{uint,255}}",
            "{offered_capabilities,undefined}",
            "{desired_capabilities,undefined}",
            "{properties,undefined}",
        ],
    );
    check_eq!(r, vec![format!("end(amqp:internal-error: {text})")], "reaction");
    // The connection and its other sessions survive.
    c.begin(1).await?;
    c.close().await?;
    by.check().await
}

pub(super) async fn begin_over_max(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = Conn10::open(ctx.broker()).await?;
    let max = c.remote_open.as_ref().map(|o| o.channel_max.0).unwrap_or_default();
    c.perf(max + 1, &begin()).await?;
    let r = reaction(&mut c, WAIT).await?;
    check_eq!(
        r,
        vec![
            format!(
                "close(amqp:connection:framing-error: channel number ({}) exceeds maximum channel number ({max}))",
                max + 1
            ),
            "open".to_owned()
        ],
        "reaction"
    );
    by.check().await
}

pub(super) async fn attach_in_use(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = sender(&ctx).await?;
    let q = queue(&ctx).await?;
    let a =
        attach_frame("again", 0, Role::Sender, SenderSettleMode::Mixed, None, Some(target_of(Some(&queue_addr(&q)))));
    c.perf(0, &a).await?;
    let r = reaction(&mut c, WAIT).await?;
    // RabbitMQ does not check: the new link replaces the old one under the same handle.
    check_eq!(r, vec!["attach(0)".to_owned(), "flow(Some(0))".to_owned(), "open".to_owned()], "reaction");
    let state = c.publish(0, 0, 0, &Msg::text("to the new target").encode()?).await?;
    check_eq!(outcome(&state), "accepted", "publish on the reused handle");
    let conn = ctx.lapin().await?;
    check_eq!(lk::message_count(&conn, &q).await?, 1, "messages in the second link's queue");
    c.close().await?;
    by.check().await
}

pub(super) async fn attach_over_max(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = Conn10::open(ctx.broker()).await?;
    let b = c.begin(0).await?;
    let max = b.handle_max.0;
    let q = queue(&ctx).await?;
    let a = attach_frame(
        "big",
        max + 1,
        Role::Sender,
        SenderSettleMode::Mixed,
        None,
        Some(target_of(Some(&queue_addr(&q)))),
    );
    c.perf(0, &a).await?;
    let r = reaction(&mut c, WAIT).await?;
    // Checked in the session, so it ends the session, not the connection.
    check_eq!(
        r,
        vec![format!(
            "end(amqp:connection:framing-error: link handle value ({}) exceeds maximum link handle value ({max}))",
            max + 1
        )],
        "reaction"
    );
    by.check().await
}

pub(super) async fn attach_no_session(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = session(&ctx).await?;
    let q = queue(&ctx).await?;
    let a =
        attach_frame("lost", 0, Role::Sender, SenderSettleMode::Mixed, None, Some(target_of(Some(&queue_addr(&q)))));
    c.perf(5, &a).await?;
    let r = reaction(&mut c, QUIET).await?;
    check_eq!(r, vec!["open".to_owned()], "reaction");
    still_usable(&mut c, &ctx, 0, 0).await?;
    c.close().await?;
    by.check().await
}
