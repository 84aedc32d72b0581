//! Transactions (`tx.select`, `tx.commit`, `tx.rollback`): what is held until commit, what a
//! rollback gives back, and RabbitMQ's refusals.

use crate::{
    Case, CaseError, CaseResult, Ctx,
    amqprs_kit::{self as ak, ChanEvent},
    case, check_eq, dlx_kit as dk,
    lapin_kit::{self as lk, eventually},
};
use amqprs::{
    BasicProperties,
    channel::{BasicAckArguments, BasicPublishArguments, ConfirmSelectArguments},
};
use lapin::options::{BasicAckOptions, BasicRecoverOptions, QueueDeclareOptions};
use std::time::Duration;

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "tx.select_ok",
            "tx.select is answered select-ok, again on a transactional channel, and the channel stays open",
            ["amqprs"],
            select_ok
        ),
        case!(
            "tx.rollback_discards_publishes",
            "publishes followed by tx.rollback never reach the queue; a later commit delivers only its own",
            rollback_discards
        ),
        case!(
            "tx.commit_delivers_in_order",
            "publishes are held until tx.commit, which delivers all of them in publish order",
            commit_delivers
        ),
        case!(
            "tx.ack_rollback_leaves_unacked",
            "an ack rolled back leaves the delivery unacked: basic.recover redelivers it",
            ack_rollback_recover
        ),
        case!(
            "tx.ack_rollback_requeued_on_close",
            "an ack rolled back (or never committed) is requeued when the channel closes; a committed one is not",
            ack_rollback_close
        ),
        case!(
            "tx.commit_without_select_406",
            "tx.commit on a channel without tx.select: 406 channel is not transactional",
            ["amqprs"],
            commit_without_select
        ),
        case!(
            "tx.rollback_without_select_406",
            "tx.rollback on a channel without tx.select: 406 channel is not transactional",
            ["amqprs"],
            rollback_without_select
        ),
        case!(
            "tx.select_on_confirm_channel_406",
            "tx.select after confirm.select: 406 cannot switch from confirm to tx mode",
            ["amqprs"],
            select_on_confirm
        ),
        case!(
            "tx.confirm_on_tx_channel_406",
            "confirm.select after tx.select: 406 cannot switch from tx to confirm mode",
            ["amqprs"],
            confirm_on_tx
        ),
        case!(
            "tx.return_at_commit",
            "a mandatory unroutable publish in a transaction is returned at commit, not at publish",
            ["amqprs"],
            return_at_commit
        ),
        case!(
            "tx.ack_unknown_tag_at_ack",
            "an ack of an unknown tag in a transaction fails at the ack, before any commit",
            ["amqprs"],
            ack_unknown_tag
        ),
        case!(
            "tx.partial_completion_406",
            "a commit a reject-publish queue refuses part of: 406 partial tx completion; the accepted part stays",
            ["amqprs"],
            partial_completion
        ),
    ]
}

/// A lapin channel in a transaction, with a fresh queue.
async fn tx_channel(ctx: &Ctx) -> Result<(lapin::Connection, lapin::Channel, String), CaseError> {
    let (conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    ch.tx_select().await?;
    Ok((conn, ch, q))
}

async fn select_ok(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    ch.tx_select().await?;
    ch.tx_select().await?;
    ch.tx_commit().await?;
    ch.tx_rollback().await?;
    ev.quiet(lk::QUIET).await
}

async fn rollback_discards(ctx: Ctx) -> CaseResult {
    let (conn, ch, q) = tx_channel(&ctx).await?;
    lk::publish(&ch, "", &q, b"gone1").await?;
    lk::publish(&ch, "", &q, b"gone2").await?;
    ch.tx_rollback().await?;
    tokio::time::sleep(lk::QUIET).await;
    check_eq!(lk::message_count(&conn, &q).await?, 0, "messages after rollback");
    lk::publish(&ch, "", &q, b"kept").await?;
    ch.tx_commit().await?;
    let other = conn.create_channel().await?;
    check_eq!(lk::drain(&other, &q).await?, vec!["kept".to_owned()], "queue after rollback, then commit");
    Ok(())
}

async fn commit_delivers(ctx: Ctx) -> CaseResult {
    let (conn, ch, q) = tx_channel(&ctx).await?;
    let cch = conn.create_channel().await?;
    let mut consumer = lk::consume(&cch, &q).await?;
    let sent: Vec<String> = (1..=5).map(|i| format!("m{i}")).collect();
    for body in &sent {
        lk::publish(&ch, "", &q, body.as_bytes()).await?;
    }
    lk::nothing(&mut consumer, lk::QUIET).await.map_err(|e| e.context("before commit"))?;
    ch.tx_commit().await?;
    let got: Vec<String> = lk::take(&mut consumer, 5).await?.iter().map(lk::text).collect();
    check_eq!(got, sent, "deliveries after commit");
    lk::nothing(&mut consumer, lk::QUIET).await
}

/// A channel in a transaction holding `n` deliveries of a fresh queue (m1..mn, tags 1..n).
async fn tx_holding(
    ctx: &Ctx,
    n: usize,
) -> Result<(lapin::Connection, lapin::Channel, lapin::Consumer, String), CaseError> {
    let (conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    for i in 1..=n {
        lk::publish(&ch, "", &q, format!("m{i}").as_bytes()).await?;
    }
    let cch = conn.create_channel().await?;
    let mut consumer = lk::consume(&cch, &q).await?;
    lk::take(&mut consumer, n).await?;
    cch.tx_select().await?;
    Ok((conn, cch, consumer, q))
}

async fn ack_rollback_recover(ctx: Ctx) -> CaseResult {
    let (_conn, cch, mut consumer, _q) = tx_holding(&ctx, 3).await?;
    cch.basic_ack(1, BasicAckOptions::default()).await?;
    cch.tx_commit().await?;
    cch.basic_ack(3, BasicAckOptions::default()).await?;
    cch.tx_rollback().await?;
    lk::nothing(&mut consumer, lk::QUIET).await.map_err(|e| e.context("a rollback requeues nothing"))?;
    cch.basic_recover(BasicRecoverOptions { requeue: true }).await?;
    let again = lk::take(&mut consumer, 2).await?;
    let seen: Vec<(String, bool, u64)> = again.iter().map(|d| (lk::text(d), d.redelivered, d.delivery_tag)).collect();
    check_eq!(
        seen,
        vec![("m2".to_owned(), true, 4), ("m3".to_owned(), true, 5)],
        "(body, redelivered, tag) recovered after ack 1 + commit, ack 3 + rollback"
    );
    lk::nothing(&mut consumer, lk::QUIET).await
}

async fn ack_rollback_close(ctx: Ctx) -> CaseResult {
    let (conn, cch, _consumer, q) = tx_holding(&ctx, 4).await?;
    cch.basic_ack(1, BasicAckOptions::default()).await?;
    cch.tx_commit().await?;
    cch.basic_ack(2, BasicAckOptions::default()).await?;
    cch.tx_rollback().await?;
    // Acked in the transaction but never committed: the close requeues it like the others.
    cch.basic_ack(3, BasicAckOptions::default()).await?;
    cch.close(200, "bye".into()).await?;
    eventually(Duration::from_secs(5), "requeue", || async { Ok(lk::message_count(&conn, &q).await? == 3) }).await?;
    let ch = conn.create_channel().await?;
    check_eq!(
        lk::drain(&ch, &q).await?,
        vec!["m2".to_owned(), "m3".to_owned(), "m4".to_owned()],
        "requeued after the channel closed"
    );
    Ok(())
}

async fn commit_without_select(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let text = "PRECONDITION_FAILED - channel is not transactional";
    ak::expect_call_close(ch.tx_commit(), &mut ev, 406, text, 90, 20).await
}

async fn rollback_without_select(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let text = "PRECONDITION_FAILED - channel is not transactional";
    ak::expect_call_close(ch.tx_rollback(), &mut ev, 406, text, 90, 30).await
}

async fn select_on_confirm(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    ch.confirm_select(ConfirmSelectArguments::new(false)).await?;
    let text = "PRECONDITION_FAILED - cannot switch from confirm to tx mode";
    ak::expect_call_close(ch.tx_select(), &mut ev, 406, text, 90, 10).await
}

async fn confirm_on_tx(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    ch.tx_select().await?;
    let text = "PRECONDITION_FAILED - cannot switch from tx to confirm mode";
    ak::expect_call_close(ch.confirm_select(ConfirmSelectArguments::new(false)), &mut ev, 406, text, 85, 10).await
}

async fn return_at_commit(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    ch.tx_select().await?;
    let mut args = BasicPublishArguments::new("", &ctx.queue("nowhere"));
    args.mandatory = true;
    ch.basic_publish(BasicProperties::default(), b"back".to_vec(), args).await?;
    ev.quiet(lk::QUIET).await.map_err(|e| e.context("before commit"))?;
    ch.tx_commit().await?;
    match ev.next(lk::ARRIVE).await? {
        ChanEvent::Return { code: 312, body, .. } if body == b"back" => {}
        other => return Err(CaseError::new(format!("expected the message returned 312 after commit, got {other:?}"))),
    }
    ev.quiet(lk::QUIET).await
}

async fn ack_unknown_tag(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    ch.tx_select().await?;
    ch.basic_ack(BasicAckArguments::new(42, false)).await?;
    ev.expect_close().await?.expect(406, "PRECONDITION_FAILED - unknown delivery tag 42", 60, 80)
}

async fn partial_completion(ctx: Ctx) -> CaseResult {
    let (_lapin, setup) = ctx.lapin_channel().await?;
    let q = ctx.queue("full");
    let full = dk::args(&[("x-max-length", dk::long(1)), ("x-overflow", dk::text("reject-publish"))]);
    setup.queue_declare(q.as_str().into(), QueueDeclareOptions::default(), full).await?;
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    ch.tx_select().await?;
    ak::publish(&ch, "", &q, BasicProperties::default(), b"fits".to_vec()).await?;
    ak::publish(&ch, "", &q, BasicProperties::default(), b"refused".to_vec()).await?;
    ak::expect_call_close(ch.tx_commit(), &mut ev, 406, "PRECONDITION_FAILED - partial tx completion", 90, 20).await?;
    let other = conn.open_channel(None).await?;
    check_eq!(ak::drain(&other, &q).await?, vec!["fits".to_owned()], "what the full queue accepted");
    Ok(())
}
