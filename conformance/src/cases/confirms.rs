//! Publisher confirms: tags count from 1, unroutable messages are confirmed too.

use crate::{
    Case, CaseError, CaseResult, Ctx,
    amqprs_kit::{self as ak, ChanEvent},
    case, check, check_eq,
    lapin_kit::{self as lk},
};
use amqprs::{
    BasicProperties,
    channel::{BasicPublishArguments, ConfirmSelectArguments, ExchangeDeclareArguments, QueueDeclareArguments},
};
use lapin::{Confirmation, options::BasicPublishOptions};
use std::collections::BTreeSet;

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "confirms.tags_count_from_one",
            "every publish is acked; tags run 1..n (single or multiple acks)",
            ["amqprs"],
            tags_from_one
        ),
        case!(
            "confirms.unroutable_acked",
            "a non-mandatory unroutable publish is still acked",
            ["amqprs"],
            unroutable_acked
        ),
        case!(
            "confirms.mandatory_unroutable_return_before_ack",
            "a mandatory unroutable publish gets basic.return, then basic.ack",
            ["amqprs"],
            return_then_ack
        ),
        case!(
            "confirms.lapin_confirmation_ack",
            "lapin sees Confirmation::Ack for a routed publish and the channel stays usable",
            lapin_ack
        ),
        case!(
            "confirms.select_twice_ok",
            "confirm.select on a channel already in confirm mode is answered select-ok",
            ["amqprs"],
            select_twice
        ),
    ]
}

/// Collects confirm events until tags 1..=n are all covered; returns the set of acked tags.
async fn collect_acks(ev: &mut ak::Events, n: u64) -> Result<BTreeSet<u64>, CaseError> {
    let mut acked = BTreeSet::new();
    while acked.len() < usize::try_from(n).unwrap_or(usize::MAX) {
        match ev.next(lk::ARRIVE).await? {
            ChanEvent::Ack(tag, multiple) => {
                check!(tag >= 1 && tag <= n, "ack for tag {tag} outside 1..={n}");
                if multiple {
                    acked.extend(1..=tag);
                } else {
                    check!(acked.insert(tag), "tag {tag} acked twice");
                }
            }
            other => {
                return Err(CaseError::new(format!("expected only acks, got {other:?} after {acked:?}")));
            }
        }
    }
    Ok(acked)
}

async fn tags_from_one(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let q = ctx.queue("q");
    ch.queue_declare(QueueDeclareArguments::new(&q)).await?;
    ch.confirm_select(ConfirmSelectArguments::new(false)).await?;
    for i in 0..20 {
        ak::publish(&ch, "", &q, BasicProperties::default(), format!("m{i}").into_bytes()).await?;
    }
    let acked = collect_acks(&mut ev, 20).await?;
    check_eq!(acked, (1..=20).collect::<BTreeSet<u64>>(), "acked tags");
    ev.quiet(lk::QUIET).await
}

async fn unroutable_acked(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let x = ctx.exchange("x");
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "direct")).await?;
    ch.confirm_select(ConfirmSelectArguments::new(false)).await?;
    ak::publish(&ch, &x, "nowhere", BasicProperties::default(), b"lost".to_vec()).await?;
    match ev.next(lk::ARRIVE).await? {
        ChanEvent::Ack(1, _) => {}
        other => {
            return Err(CaseError::new(format!("expected ack of tag 1, got {other:?}")));
        }
    }
    ev.quiet(lk::QUIET).await
}

async fn return_then_ack(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let x = ctx.exchange("x");
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "direct")).await?;
    ch.confirm_select(ConfirmSelectArguments::new(false)).await?;
    let mut args = BasicPublishArguments::new(&x, "nowhere");
    args.mandatory = true;
    ch.basic_publish(BasicProperties::default(), b"back".to_vec(), args).await?;
    match ev.next(lk::ARRIVE).await? {
        ChanEvent::Return { code: 312, .. } => {}
        other => {
            return Err(CaseError::new(format!("expected basic.return 312 first, got {other:?}")));
        }
    }
    match ev.next(lk::ARRIVE).await? {
        ChanEvent::Ack(1, false) => Ok(()),
        other => Err(CaseError::new(format!("expected ack of tag 1 after the return, got {other:?}"))),
    }
}

async fn lapin_ack(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    let c = ch
        .basic_publish(
            "".into(),
            q.as_str().into(),
            BasicPublishOptions::default(),
            b"x",
            lapin::BasicProperties::default(),
        )
        .await?
        .await?;
    check!(matches!(c, Confirmation::Ack(None)), "expected Confirmation::Ack(None), got {c:?}");
    check_eq!(lk::message_count(&_c, &q).await?, 1, "messages in queue after the confirm");
    Ok(())
}

async fn select_twice(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    ch.confirm_select(ConfirmSelectArguments::new(false)).await?;
    ch.confirm_select(ConfirmSelectArguments::new(false)).await?;
    ev.quiet(std::time::Duration::from_millis(100)).await
}
