//! AMQP 1.0 attach: what RabbitMQ answers to good, missing, bad and locked addresses.

use crate::{
    Case, CaseError, CaseResult, Ctx, case10, check, check_eq,
    fe2o3_kit::{exchange_addr, queue_addr},
    lapin_kit::{self as lk, Healthy},
    raw10::{Conn10, Refusal, WAIT},
};
use fe2o3_amqp_types::{
    definitions::{ReceiverSettleMode, Role, SenderSettleMode},
    messaging::TargetArchetype,
    performatives::Performative,
};
use lapin::{options::QueueDeclareOptions, types::FieldTable};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case10!(
            "amqp10.attach.sender_reply",
            "a sender attach to /queues/q is answered with role receiver, the same target, max-message-size and a flow granting credit",
            sender_reply
        ),
        case10!(
            "amqp10.attach.receiver_reply",
            "a receiver attach to /queues/q is answered with role sender, the same source and initial-delivery-count 2^32-5",
            receiver_reply
        ),
        case10!(
            "amqp10.attach.receiver_missing_queue",
            "a receiver attach to a missing queue ends the session with amqp:not-found (4.0.5)",
            receiver_missing_queue
        ),
        case10!(
            "amqp10.attach.sender_missing_exchange",
            "a sender attach to a missing exchange ends the session with amqp:not-found",
            sender_missing_exchange
        ),
        case10!(
            "amqp10.attach.sender_missing_queue",
            "a sender attach to /queues/<missing> ends the session with amqp:not-found",
            sender_missing_queue
        ),
        case10!(
            "amqp10.attach.sender_bad_address",
            "a sender attach to an address outside /exchanges and /queues ends the session with amqp:invalid-field",
            sender_bad_address
        ),
        case10!(
            "amqp10.attach.receiver_bad_address",
            "a receiver attach to an exchange address ends the session with amqp:invalid-field",
            receiver_bad_address
        ),
        case10!(
            "amqp10.attach.queue_address_with_a_slash",
            "a sender or receiver attach to /queues/a/b (a queue segment with an unencoded slash) ends the session with amqp:invalid-field",
            queue_address_with_a_slash
        ),
        case10!(
            "amqp10.attach.exclusive_other_connection",
            "a receiver attach to another connection's exclusive queue ends the session with amqp:resource-locked",
            exclusive_locked
        ),
        case10!(
            "amqp10.attach.default_exchange_refused",
            "a sender attach to /exchanges/amq.default ends the session with amqp:invalid-field (bad_address_string)",
            default_exchange
        ),
        case10!(
            "amqp10.attach.percent_encoded_names",
            "queue and exchange names with '/', space and non-ASCII are addressed percent-encoded",
            percent_encoded
        ),
        case10!(
            "amqp10.detach.echoed",
            "a client detach (closed) is answered with detach closed, and the session stays usable",
            detach_echoed
        ),
        case10!(
            "amqp10.detach.queue_deleted",
            "deleting a queue detaches its receivers with amqp:resource-deleted",
            queue_deleted
        ),
        case10!(
            "amqp10.detach.exchange_deleted_sender",
            "a message to a deleted exchange through a fixed target is released and the link detached with amqp:not-found",
            exchange_deleted
        ),
    ]
}

/// A raw connection with session 0 begun.
pub(crate) async fn session(ctx: &Ctx) -> Result<Conn10, CaseError> {
    session_of(ctx.broker()).await
}

/// A raw connection to `broker` (with its credentials) with session 0 begun.
pub(crate) async fn session_of(broker: &crate::broker::Broker) -> Result<Conn10, CaseError> {
    let mut c = Conn10::open(broker).await?;
    c.begin(0).await?;
    Ok(c)
}

/// Declares a plain queue over 0.9.1 and returns its name.
pub(crate) async fn queue(ctx: &Ctx) -> Result<String, CaseError> {
    let (_c, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    Ok(q)
}

async fn sender_reply(ctx: Ctx) -> CaseResult {
    let q = queue(&ctx).await?;
    let mut c = session(&ctx).await?;
    let addr = queue_addr(&q);
    c.send_attach_sender(0, 0, "s", Some(&addr), SenderSettleMode::Mixed).await?;
    let a = c.expect_attach(0, 0).await?;
    check_eq!(a.role, Role::Receiver, "role");
    check_eq!(a.name.as_str(), "s", "name");
    let target = match a.target.as_deref() {
        Some(TargetArchetype::Target(t)) => t.address.clone(),
        other => return Err(CaseError::new(format!("target: {other:?}"))),
    };
    check_eq!(target, Some(addr), "target address echoed");
    check_eq!(a.snd_settle_mode, SenderSettleMode::Mixed, "snd-settle-mode echoed");
    check_eq!(a.rcv_settle_mode, ReceiverSettleMode::First, "rcv-settle-mode");
    check_eq!(a.max_message_size, Some(16_777_216), "max-message-size (16 MiB)");
    let f = c.expect_flow(0, 0).await?;
    check_eq!((f.delivery_count, f.link_credit), (Some(0), Some(170)), "first flow (delivery-count, link-credit)");
    c.close().await
}

async fn receiver_reply(ctx: Ctx) -> CaseResult {
    let q = queue(&ctx).await?;
    let mut c = session(&ctx).await?;
    let addr = queue_addr(&q);
    c.send_attach_receiver(0, 0, "r", Some(&addr), SenderSettleMode::Unsettled).await?;
    let a = c.expect_attach(0, 0).await?;
    check_eq!(a.role, Role::Sender, "role");
    check_eq!(a.source.as_ref().and_then(|s| s.address.clone()), Some(addr), "source address echoed");
    // RabbitMQ starts delivery-counts near the top of the u32 range to exercise wrap-around.
    check_eq!(a.initial_delivery_count, Some(u32::MAX - 4), "initial-delivery-count");
    check_eq!(a.snd_settle_mode, SenderSettleMode::Unsettled, "snd-settle-mode");
    check_eq!(a.max_message_size, None, "max-message-size (not set on outgoing links)");
    c.no_transfer(0, lk::QUIET).await?;
    c.close().await
}

/// Expects the attach answer with a null terminus followed by an end with `cond`/`desc`.
async fn expect_end(ctx: &Ctx, role: Role, addr: &str, cond: &str, desc: &str) -> CaseResult {
    let healthy = Healthy::open(ctx).await?;
    let mut c = session(ctx).await?;
    match role {
        Role::Sender => c.send_attach_sender(0, 0, "l", Some(addr), SenderSettleMode::Unsettled).await?,
        Role::Receiver => c.send_attach_receiver(0, 0, "l", Some(addr), SenderSettleMode::Unsettled).await?,
    }
    let mut seen = Vec::new();
    let end = loop {
        let (ch, p, _) = c.next(WAIT).await?;
        match p {
            Performative::End(e) if ch == 0 => break crate::raw10::link::error_parts(&e.error),
            Performative::Close(e) => {
                return Err(CaseError::new(format!("expected end, got close {:?} after {seen:?}", e.error)));
            }
            other => seen.push(crate::raw10::conn::short(&other)),
        }
    };
    check_eq!(end, (cond.to_owned(), Some(desc.to_owned())), "end error (after {seen:?})");
    check_eq!(seen, Vec::<String>::new(), "frames before the end");
    // The connection survives a session error.
    c.begin(1).await?;
    c.close().await?;
    healthy.check().await
}

async fn receiver_missing_queue(ctx: Ctx) -> CaseResult {
    let q = ctx.name("missing");
    expect_end(&ctx, Role::Receiver, &queue_addr(&q), "amqp:not-found", &format!("no queue '{q}' in vhost '/'")).await
}

async fn sender_missing_exchange(ctx: Ctx) -> CaseResult {
    let x = ctx.name("missing");
    expect_end(
        &ctx,
        Role::Sender,
        &exchange_addr(&x, Some("k")),
        "amqp:not-found",
        &format!("no exchange '{x}' in vhost '/'"),
    )
    .await
}

async fn sender_missing_queue(ctx: Ctx) -> CaseResult {
    let q = ctx.name("missing");
    expect_end(&ctx, Role::Sender, &queue_addr(&q), "amqp:not-found", &format!("no queue '{q}' in vhost '/'")).await
}

async fn sender_bad_address(ctx: Ctx) -> CaseResult {
    expect_end(
        &ctx,
        Role::Sender,
        "/topics/x",
        "amqp:invalid-field",
        "Attach rejected: {unknown_destination,\"/topics/x\"}",
    )
    .await
}

async fn receiver_bad_address(ctx: Ctx) -> CaseResult {
    expect_end(
        &ctx,
        Role::Receiver,
        "/exchanges/amq.direct",
        "amqp:invalid-field",
        "Attach rejected: {unknown_destination,\"/exchanges/amq.direct\"}",
    )
    .await
}

async fn queue_address_with_a_slash(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let (_conn, ch) = ctx.lapin_channel().await?;
    lk::declare_queue(&ch, &format!("{q}/b")).await?;
    ctx.track_queue(&format!("{q}/b"));
    let address = format!("/queues/{q}/b");
    let sender = format!("Attach rejected: {{bad_address_string,<<\"{address}\">>}}");
    expect_end(&ctx, Role::Sender, &address, "amqp:invalid-field", &sender).await?;
    let receiver = format!("Attach rejected: {{bad_address,{{utf8,<<\"{address}\">>}}}}");
    expect_end(&ctx, Role::Receiver, &address, "amqp:invalid-field", &receiver).await
}

async fn exclusive_locked(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("excl");
    ch.queue_declare(
        q.as_str().into(),
        QueueDeclareOptions { exclusive: true, ..Default::default() },
        FieldTable::default(),
    )
    .await?;
    expect_end(
        &ctx,
        Role::Receiver,
        &queue_addr(&q),
        "amqp:resource-locked",
        &format!("cannot obtain exclusive access to locked queue '{q}' in vhost '/'"),
    )
    .await
}

async fn default_exchange(ctx: Ctx) -> CaseResult {
    expect_end(
        &ctx,
        Role::Sender,
        "/exchanges/amq.default",
        "amqp:invalid-field",
        "Attach rejected: {bad_address_string,<<\"/exchanges/amq.default\">>}",
    )
    .await
}

async fn percent_encoded(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = format!("{} a/b é", ctx.queue("q"));
    ctx.track_queue(&q);
    let x = format!("{} x/y", ctx.exchange("x"));
    if let Ok(()) = Ok::<(), CaseError>(()) {
        // tracked for cleanup under its real name
    }
    ch.exchange_declare(x.as_str().into(), lapin::ExchangeKind::Direct, Default::default(), FieldTable::default())
        .await?;
    lk::queue_bound(&ch, &q, &x, "k/ é").await?;
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, Some(&exchange_addr(&x, Some("k/ é")))).await?;
    check_eq!(
        c.publish(0, 0, 0, &crate::raw10::Msg::text("via exchange").encode()?).await?.map(|s| format!("{s:?}")),
        Some("Accepted(Accepted)".to_owned()),
        "outcome"
    );
    c.attach_sender(0, 1, Some(&queue_addr(&q))).await?;
    check_eq!(
        c.publish(0, 1, 1, &crate::raw10::Msg::text("via queue").encode()?).await?.map(|s| format!("{s:?}")),
        Some("Accepted(Accepted)".to_owned()),
        "outcome"
    );
    c.attach_receiver(0, 2, &queue_addr(&q)).await?;
    c.credit(0, 2, 10, false).await?;
    let a = crate::raw10::Received::parse(&c.recv(0, WAIT).await?.payload)?.text();
    let b = crate::raw10::Received::parse(&c.recv(0, WAIT).await?.payload)?.text();
    check_eq!((a.as_str(), b.as_str()), ("via exchange", "via queue"), "bodies");
    let _ = ch.exchange_delete(x.as_str().into(), Default::default()).await;
    c.close().await
}

async fn detach_echoed(ctx: Ctx) -> CaseResult {
    let q = queue(&ctx).await?;
    let mut c = session(&ctx).await?;
    c.attach_receiver(0, 0, &queue_addr(&q)).await?;
    c.detach(0, 0).await?;
    let r = c.expect_refusal(0, 0).await?;
    check_eq!(r, Refusal::Detach(true, String::new(), None), "detach answer");
    c.attach_sender(0, 0, Some(&queue_addr(&q))).await?;
    c.close().await
}

async fn queue_deleted(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    let mut c = session(&ctx).await?;
    c.attach_receiver(0, 0, &queue_addr(&q)).await?;
    c.credit(0, 0, 10, false).await?;
    ch.queue_delete(q.as_str().into(), Default::default()).await?;
    let r = c.expect_refusal(0, 0).await?;
    check_eq!(r, Refusal::Detach(true, "amqp:resource-deleted".to_owned(), None), "detach after queue.delete");
    // Only the link is gone: the session still works.
    c.attach_sender(0, 1, Some("/exchanges/amq.fanout")).await?;
    c.close().await
}

async fn exchange_deleted(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let x = ctx.exchange("x");
    ch.exchange_declare(x.as_str().into(), lapin::ExchangeKind::Fanout, Default::default(), FieldTable::default())
        .await?;
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, Some(&exchange_addr(&x, None))).await?;
    ch.exchange_delete(x.as_str().into(), Default::default()).await?;
    let body = crate::raw10::Msg::text("m").encode()?;
    c.transfer(0, 0, 0, false, &body).await?;
    let d = c.expect_disposition(0, 0).await?;
    check_eq!(format!("{:?}", d.state), "Some(Released(Released))", "outcome");
    let r = c.expect_refusal(0, 0).await?;
    check_eq!(
        r,
        Refusal::Detach(true, "amqp:not-found".to_owned(), Some(format!("no exchange '{x}' in vhost '/'"))),
        "detach"
    );
    check!(true, "");
    c.close().await
}
