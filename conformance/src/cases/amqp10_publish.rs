//! AMQP 1.0 publishing: every target form, and the outcome RabbitMQ gives in each situation.

use super::amqp10_attach::session;
use crate::{
    Case, CaseError, CaseResult, Ctx, case10, check_eq,
    fe2o3_kit::{exchange_addr, queue_addr},
    lapin_kit::{self as lk, QUIET},
    raw10::{Conn10, Msg, Refusal, WAIT, link::outcome, message::prop},
};
use fe2o3_amqp_types::{definitions::SenderSettleMode, performatives::Performative, primitives::Value};
use lapin::{ExchangeKind, types::FieldTable};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case10!(
            "amqp10.publish.exchange_key_target",
            "/exchanges/x/key routes with the key: outcome accepted",
            exchange_key
        ),
        case10!(
            "amqp10.publish.exchange_target_empty_key",
            "/exchanges/x routes with the empty routing key; the message subject is ignored",
            exchange_subject
        ),
        case10!("amqp10.publish.queue_target", "/queues/q delivers to the queue: outcome accepted", queue_target),
        case10!(
            "amqp10.publish.null_target_to_exchange",
            "a null target routes by the message's `to` (/exchanges/x/key)",
            null_to_exchange
        ),
        case10!(
            "amqp10.publish.null_target_to_queue",
            "a null target routes by the message's `to` (/queues/q)",
            null_to_queue
        ),
        case10!(
            "amqp10.publish.unroutable_released",
            "an unroutable message is released and the link stays attached",
            unroutable
        ),
        case10!(
            "amqp10.publish.queue_target_deleted_detaches",
            "a link that published to /queues/q is detached with amqp:resource-deleted when q is deleted; \
             the session goes on",
            queue_deleted_detaches
        ),
        case10!(
            "amqp10.publish.queue_target_deleted_released",
            "/queues/q after q was deleted: released, the link stays attached",
            queue_deleted
        ),
        case10!(
            "amqp10.publish.null_target_missing_exchange_rejected",
            "`to` naming a missing exchange: rejected amqp:not-found, the link stays",
            null_missing_exchange
        ),
        case10!(
            "amqp10.publish.null_target_without_to_rejected",
            "null target and no `to`: rejected amqp:precondition-failed",
            null_without_to
        ),
        case10!(
            "amqp10.publish.null_target_bad_to_rejected",
            "null target and a `to` that is no v2 address: rejected amqp:precondition-failed",
            null_bad_to
        ),
        case10!(
            "amqp10.publish.presettled_routed",
            "a pre-settled transfer is routed and gets no disposition",
            presettled
        ),
        case10!(
            "amqp10.publish.presettled_without_to_detached",
            "a pre-settled message to the null target without `to` detaches the link with amqp:precondition-failed",
            presettled_without_to
        ),
        case10!(
            "amqp10.publish.reject_publish_overflow_rejected",
            "a full queue with x-overflow reject-publish: outcome rejected, with no error (4.0.5)",
            overflow_rejected
        ),
        case10!(
            "amqp10.publish.multi_frame_body",
            "a 300 KB body sent in frames of the broker's max-frame-size arrives whole over 0.9.1",
            multi_frame
        ),
        case10!(
            "amqp10.publish.fanout_exchange_target",
            "/exchanges/fanout without key reaches every bound queue",
            fanout
        ),
    ]
}

async fn setup(
    ctx: &Ctx,
    kind: ExchangeKind,
    key: &str,
) -> Result<(lapin::Connection, lapin::Channel, String, String), CaseError> {
    let (conn, ch) = ctx.lapin_channel().await?;
    let x = ctx.exchange("x");
    ch.exchange_declare(x.as_str().into(), kind, Default::default(), FieldTable::default()).await?;
    let q = ctx.queue("q");
    lk::queue_bound(&ch, &q, &x, key).await?;
    Ok((conn, ch, x, q))
}

async fn send(c: &mut Conn10, handle: u32, id: u32, msg: Msg) -> Result<String, CaseError> {
    let state = c.publish(0, handle, id, &msg.encode()?).await?;
    Ok(outcome(&state))
}

async fn exchange_key(ctx: Ctx) -> CaseResult {
    let (_conn, ch, x, q) = setup(&ctx, ExchangeKind::Direct, "k").await?;
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, Some(&exchange_addr(&x, Some("k")))).await?;
    check_eq!(send(&mut c, 0, 0, Msg::text("a")).await?, "accepted", "outcome");
    check_eq!(lk::drain(&ch, &q).await?, vec!["a".to_owned()], "queue contents");
    c.close().await
}

async fn exchange_subject(ctx: Ctx) -> CaseResult {
    // A v2 `/exchanges/x` target routes with the empty key; `subject` is only consulted for
    // v1 addresses (rabbit_amqp_session:parse_target_v2_string0/1).
    let (_conn, ch, x, q) = setup(&ctx, ExchangeKind::Direct, "k").await?;
    let q_empty = ctx.queue("empty");
    lk::queue_bound(&ch, &q_empty, &x, "").await?;
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, Some(&exchange_addr(&x, None))).await?;
    let m = Msg::new().prop(prop::SUBJECT, Value::String("k".into())).data(b"subject-k");
    check_eq!(send(&mut c, 0, 0, m).await?, "accepted", "outcome with subject k");
    check_eq!(send(&mut c, 0, 1, Msg::text("no-subject")).await?, "accepted", "outcome without subject");
    check_eq!(lk::drain(&ch, &q).await?, Vec::<String>::new(), "queue bound with k");
    check_eq!(
        lk::drain(&ch, &q_empty).await?,
        vec!["subject-k".to_owned(), "no-subject".to_owned()],
        "queue bound with the empty key"
    );
    c.close().await
}

async fn queue_target(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, Some(&queue_addr(&q))).await?;
    check_eq!(send(&mut c, 0, 0, Msg::text("a")).await?, "accepted", "outcome");
    check_eq!(lk::drain(&ch, &q).await?, vec!["a".to_owned()], "queue contents");
    c.close().await
}

async fn null_to_exchange(ctx: Ctx) -> CaseResult {
    let (_conn, ch, x, q) = setup(&ctx, ExchangeKind::Direct, "k").await?;
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, None).await?;
    let m = Msg::new().prop(prop::TO, Value::String(exchange_addr(&x, Some("k")))).data(b"a");
    check_eq!(send(&mut c, 0, 0, m).await?, "accepted", "outcome");
    check_eq!(lk::drain(&ch, &q).await?, vec!["a".to_owned()], "queue contents");
    c.close().await
}

async fn null_to_queue(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, None).await?;
    let m = Msg::new().prop(prop::TO, Value::String(queue_addr(&q))).data(b"a");
    check_eq!(send(&mut c, 0, 0, m).await?, "accepted", "outcome");
    check_eq!(lk::drain(&ch, &q).await?, vec!["a".to_owned()], "queue contents");
    c.close().await
}

async fn unroutable(ctx: Ctx) -> CaseResult {
    let (_conn, ch, x, q) = setup(&ctx, ExchangeKind::Direct, "k").await?;
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, Some(&exchange_addr(&x, Some("nobody")))).await?;
    check_eq!(send(&mut c, 0, 0, Msg::text("lost")).await?, "released", "outcome");
    c.attach_sender(0, 1, Some(&exchange_addr(&x, Some("k")))).await?;
    check_eq!(send(&mut c, 1, 1, Msg::text("a")).await?, "accepted", "outcome on another link");
    check_eq!(send(&mut c, 0, 2, Msg::text("lost2")).await?, "released", "the first link is still attached");
    check_eq!(lk::drain(&ch, &q).await?, vec!["a".to_owned()], "queue contents");
    c.close().await
}

async fn queue_deleted(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, Some(&queue_addr(&q))).await?;
    ch.queue_delete(q.as_str().into(), Default::default()).await?;
    check_eq!(send(&mut c, 0, 0, Msg::text("lost")).await?, "released", "outcome");
    lk::declare_queue(&ch, &q).await?;
    check_eq!(send(&mut c, 0, 1, Msg::text("back")).await?, "accepted", "outcome once the queue exists again");
    c.close().await
}

async fn queue_deleted_detaches(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, Some(&queue_addr(&q))).await?;
    check_eq!(send(&mut c, 0, 0, Msg::text("a")).await?, "accepted", "outcome");
    ch.queue_delete(q.as_str().into(), Default::default()).await?;
    // Nothing is sent: the broker detaches the link on its own.
    match c.expect_refusal(0, 0).await? {
        Refusal::Detach(true, cond, None) if cond == "amqp:resource-deleted" => {}
        other => return Err(CaseError::new(format!("expected detach(closed) amqp:resource-deleted, got {other:?}"))),
    }
    let other = ctx.queue("other");
    lk::declare_queue(&ch, &other).await?;
    c.attach_sender(0, 1, Some(&queue_addr(&other))).await?;
    check_eq!(send(&mut c, 1, 1, Msg::text("b")).await?, "accepted", "a publish on a new link");
    c.close().await
}

async fn null_missing_exchange(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    let x = ctx.name("missing");
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, None).await?;
    let m = Msg::new().prop(prop::TO, Value::String(exchange_addr(&x, Some("k")))).data(b"a");
    check_eq!(
        send(&mut c, 0, 0, m).await?,
        format!("rejected(amqp:not-found: no exchange '{x}' in vhost '/')"),
        "outcome"
    );
    let m = Msg::new().prop(prop::TO, Value::String(queue_addr(&q))).data(b"b");
    check_eq!(send(&mut c, 0, 1, m).await?, "accepted", "the link stays usable");
    c.close().await
}

async fn null_without_to(ctx: Ctx) -> CaseResult {
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, None).await?;
    check_eq!(
        send(&mut c, 0, 0, Msg::text("a")).await?,
        "rejected(amqp:precondition-failed: anonymous terminus requires 'to' address to be set)",
        "outcome"
    );
    c.close().await
}

async fn null_bad_to(ctx: Ctx) -> CaseResult {
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, None).await?;
    let m = Msg::new().prop(prop::TO, Value::String("/bad/address".into())).data(b"a");
    check_eq!(
        send(&mut c, 0, 0, m).await?,
        "rejected(amqp:precondition-failed: bad 'to' address string: /bad/address)",
        "outcome"
    );
    c.close().await
}

async fn presettled(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, Some(&queue_addr(&q))).await?;
    c.transfer(0, 0, 0, true, &Msg::text("a").encode()?).await?;
    let got = c.expect("disposition", QUIET, |_, p, _| matches!(p, Performative::Disposition(_)).then_some(())).await;
    check_eq!(got.is_ok(), false, "a disposition for a pre-settled transfer");
    lk::eventually(WAIT, "message enqueued", || async { Ok(lk::message_count(&_conn, &q).await? == 1) }).await?;
    c.close().await
}

async fn presettled_without_to(ctx: Ctx) -> CaseResult {
    let mut c = session(&ctx).await?;
    c.send_attach_sender(0, 0, "s", None, SenderSettleMode::Settled).await?;
    c.expect_attach(0, 0).await?;
    c.expect_flow(0, 0).await?;
    c.transfer(0, 0, 0, true, &Msg::text("a").encode()?).await?;
    let r = c.expect_refusal(0, 0).await?;
    check_eq!(
        r,
        Refusal::Detach(
            true,
            "amqp:precondition-failed".to_owned(),
            Some("anonymous terminus requires 'to' address to be set".to_owned())
        ),
        "detach"
    );
    c.close().await
}

async fn multi_frame(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, Some(&queue_addr(&q))).await?;
    check_eq!(send(&mut c, 0, 0, Msg::new().data(&body)).await?, "accepted", "outcome");
    let got = lk::get(&ch, &q).await?.ok_or_else(|| CaseError::new("no message"))?;
    check_eq!(got.delivery.data.len(), body.len(), "body length");
    check_eq!(got.delivery.data == body, true, "body bytes equal");
    c.close().await
}

async fn fanout(ctx: Ctx) -> CaseResult {
    let (_conn, ch, x, q) = setup(&ctx, ExchangeKind::Fanout, "ignored").await?;
    let q2 = ctx.queue("q2");
    lk::queue_bound(&ch, &q2, &x, "").await?;
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, Some(&exchange_addr(&x, None))).await?;
    check_eq!(send(&mut c, 0, 0, Msg::text("f")).await?, "accepted", "outcome");
    check_eq!(lk::drain(&ch, &q).await?, vec!["f".to_owned()], "q1");
    check_eq!(lk::drain(&ch, &q2).await?, vec!["f".to_owned()], "q2");
    c.close().await
}

async fn overflow_rejected(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    let mut args = FieldTable::default();
    args.insert("x-max-length".into(), lapin::types::AMQPValue::LongLongInt(1));
    args.insert("x-overflow".into(), lapin::types::AMQPValue::LongString("reject-publish".into()));
    ch.queue_declare(q.as_str().into(), Default::default(), args).await?;
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, Some(&queue_addr(&q))).await?;
    check_eq!(send(&mut c, 0, 0, Msg::text("1")).await?, "accepted", "first outcome");
    // RabbitMQ 4.3 adds amqp:resource-limit-exceeded here; 4.0.5 sends a bare rejected.
    check_eq!(send(&mut c, 0, 1, Msg::text("2")).await?, "rejected", "second outcome");
    check_eq!(send(&mut c, 0, 2, Msg::text("3")).await?, "rejected", "the link stays usable");
    c.close().await
}
