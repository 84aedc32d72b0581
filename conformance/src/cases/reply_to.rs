//! Direct reply-to: the `amq.rabbitmq.reply-to` pseudo-queue of AMQP 0.9.1 (RabbitMQ 4.0.5).

use crate::{
    Case, CaseError, CaseResult, Ctx,
    amqprs_kit::{self as ak, ChanEvent},
    case, check, check_eq, lapin_kit as lk,
};
use amqprs::{
    BasicProperties,
    channel::{
        BasicCancelArguments, BasicConsumeArguments, BasicPublishArguments, Channel, ConfirmSelectArguments,
        ConsumerMessage, QueueDeclareArguments,
    },
};
use tokio::sync::mpsc::UnboundedReceiver;

const PSEUDO: &str = "amq.rabbitmq.reply-to";
const PREFIX: &str = "amq.rabbitmq.reply-to.";

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "reply_to.rpc_round_trip",
            "a client consumes amq.rabbitmq.reply-to, a server on another connection replies to the rewritten reply_to; the reply arrives with no queue, stamped with the channel's next delivery tag (not taken)",
            ["amqprs"],
            rpc_round_trip
        ),
        case!(
            "reply_to.consume_with_ack_refused",
            "consuming amq.rabbitmq.reply-to with acknowledgements closes the channel with 406 reply consumer cannot acknowledge",
            ["amqprs"],
            consume_with_ack
        ),
        case!(
            "reply_to.second_consumer_refused",
            "a second reply consumer on one channel closes it with 406 reply consumer already set",
            ["amqprs"],
            second_consumer
        ),
        case!(
            "reply_to.publish_without_consumer_refused",
            "publishing with reply_to amq.rabbitmq.reply-to on a channel without a reply consumer closes it with 406 fast reply consumer does not exist",
            ["amqprs"],
            publish_without_consumer
        ),
        case!(
            "reply_to.vanished_consumer",
            "a reply to a cancelled consumer is dropped and confirmed; mandatory, it comes back as 312 NO_ROUTE, then the ack",
            ["amqprs"],
            vanished_consumer
        ),
        case!(
            "reply_to.mandatory_live_returned",
            "a mandatory reply to a live consumer is delivered and also returned 312 NO_ROUTE (no queue routed it), then acked",
            ["amqprs"],
            mandatory_live
        ),
        case!(
            "reply_to.declare_pseudo_and_address",
            "queue.declare of amq.rabbitmq.reply-to and of a live address answers 0 messages, 1 consumer; a dead address is 404",
            ["amqprs"],
            declare_pseudo_and_address
        ),
    ]
}

/// A channel with a reply consumer (broker-chosen tag) on it.
struct Requester {
    ch: Channel,
    tag: String,
    replies: UnboundedReceiver<ConsumerMessage>,
}

async fn requester(conn: &amqprs::connection::Connection) -> Result<(Requester, ak::Events), CaseError> {
    let (ch, ev) = ak::channel(conn).await?;
    let (tag, replies) = ch.basic_consume_rx(BasicConsumeArguments::new(PSEUDO, "").manual_ack(false).finish()).await?;
    Ok((Requester { ch, tag, replies }, ev))
}

/// The address the requester's channel gets: a request published through a queue, read back.
async fn address_of(ctx: &Ctx, requester: &Requester) -> Result<String, CaseError> {
    let q = ctx.queue("requests");
    requester.ch.queue_declare(QueueDeclareArguments::new(&q)).await?;
    let props = BasicProperties::default().with_reply_to(PSEUDO).finish();
    ak::publish(&requester.ch, "", &q, props, b"request".to_vec()).await?;
    let mut get = amqprs::channel::BasicGetArguments::new(&q);
    get.no_ack = true;
    for _ in 0..100 {
        if let Some((_, props, _)) = requester.ch.basic_get(get.clone()).await? {
            return props.reply_to().cloned().ok_or_else(|| CaseError::new("the request lost its reply_to"));
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    Err(CaseError::new("the request never reached its queue"))
}

fn mandatory(key: &str) -> BasicPublishArguments {
    let mut a = BasicPublishArguments::new("", key);
    a.mandatory = true;
    a
}

async fn rpc_round_trip(ctx: Ctx) -> CaseResult {
    let client = ctx.amqprs().await?;
    let server = ctx.amqprs().await?;
    let (mut requester, _cev) = requester(&client).await?;
    check!(requester.tag.starts_with("amq.ctag-"), "broker-chosen tag {:?}", requester.tag);
    let q = ctx.queue("rpc");
    let (sch, mut sev) = ak::channel(&server).await?;
    sch.queue_declare(QueueDeclareArguments::new(&q)).await?;
    sch.confirm_select(ConfirmSelectArguments::new(false)).await?;
    let (_t, mut requests) =
        sch.basic_consume_rx(BasicConsumeArguments::new(&q, "").manual_ack(false).finish()).await?;
    let props = BasicProperties::default().with_reply_to(PSEUDO).with_correlation_id("c-1").finish();
    ak::publish(&requester.ch, "", &q, props, b"2+2".to_vec()).await?;
    let request = ak::recv(&mut requests, lk::ARRIVE).await?;
    let rprops = request.basic_properties.ok_or_else(|| CaseError::new("request without properties"))?;
    let address = rprops.reply_to().cloned().ok_or_else(|| CaseError::new("request without reply_to"))?;
    check!(address.starts_with(PREFIX) && address.len() > PREFIX.len(), "rewritten reply_to {address:?}");
    check_eq!(rprops.correlation_id().map(String::as_str), Some("c-1"), "request correlation_id");
    let reply = BasicProperties::default().with_correlation_id("c-1").finish();
    ak::publish(&sch, "", &address, reply, b"4".to_vec()).await?;
    ak::wait_acks(&mut sev, 1).await?;
    let got = ak::recv(&mut requester.replies, lk::ARRIVE).await?;
    let deliver = got.deliver.ok_or_else(|| CaseError::new("reply without deliver"))?;
    check_eq!(deliver.consumer_tag().as_str(), requester.tag.as_str(), "reply consumer tag");
    check_eq!(
        (deliver.exchange().as_str(), deliver.routing_key().as_str(), deliver.redelivered()),
        ("", address.as_str(), false),
        "reply exchange, routing key, redelivered"
    );
    let props = got.basic_properties.ok_or_else(|| CaseError::new("reply without properties"))?;
    check_eq!(props.correlation_id().map(String::as_str), Some("c-1"), "reply correlation_id");
    check_eq!(got.content.as_deref(), Some(&b"4"[..]), "reply body");
    // RabbitMQ stamps replies with the channel's next delivery tag without taking it.
    ak::publish(&sch, "", &address, BasicProperties::default(), b"again".to_vec()).await?;
    let again = ak::recv(&mut requester.replies, lk::ARRIVE).await?;
    let tags = (deliver.delivery_tag(), again.deliver.map(|d| d.delivery_tag()));
    check_eq!(tags, (1, Some(1)), "delivery tags of two replies on a fresh channel");
    Ok(())
}

async fn consume_with_ack(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    ak::expect_call_close(
        ch.basic_consume_rx(BasicConsumeArguments::new(PSEUDO, "").manual_ack(true).finish()),
        &mut ev,
        406,
        "PRECONDITION_FAILED - reply consumer cannot acknowledge",
        60,
        20,
    )
    .await
}

async fn second_consumer(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (requester, mut ev) = requester(&conn).await?;
    ak::expect_call_close(
        requester.ch.basic_consume_rx(BasicConsumeArguments::new(PSEUDO, "").manual_ack(false).finish()),
        &mut ev,
        406,
        "PRECONDITION_FAILED - reply consumer already set",
        60,
        20,
    )
    .await
}

async fn publish_without_consumer(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    // A reply consumer on another channel of the same connection does not count.
    let (_requester, _rev) = requester(&conn).await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let q = ctx.queue("requests");
    ch.queue_declare(QueueDeclareArguments::new(&q)).await?;
    let props = BasicProperties::default().with_reply_to(PSEUDO).finish();
    ak::publish(&ch, "", &q, props, b"request".to_vec()).await?;
    ev.expect_close().await?.expect(406, "PRECONDITION_FAILED - fast reply consumer does not exist", 60, 40)
}

async fn vanished_consumer(ctx: Ctx) -> CaseResult {
    let client = ctx.amqprs().await?;
    let server = ctx.amqprs().await?;
    let (mut requester, _rev) = requester(&client).await?;
    let address = address_of(&ctx, &requester).await?;
    requester.ch.basic_cancel(BasicCancelArguments::new(&requester.tag)).await?;
    let (sch, mut sev) = ak::channel(&server).await?;
    sch.confirm_select(ConfirmSelectArguments::new(false)).await?;
    ak::publish(&sch, "", &address, BasicProperties::default(), b"lost".to_vec()).await?;
    match sev.next(lk::ARRIVE).await? {
        ChanEvent::Ack(1, _) => {}
        other => return Err(CaseError::new(format!("expected the ack of tag 1, got {other:?}"))),
    }
    sch.basic_publish(BasicProperties::default(), b"back".to_vec(), mandatory(&address)).await?;
    match sev.next(lk::ARRIVE).await? {
        ChanEvent::Return { code, text, exchange, routing_key, body, .. } => {
            check_eq!(
                (code, text.as_str(), exchange.as_str(), routing_key.as_str(), body.as_slice()),
                (312, "NO_ROUTE", "", address.as_str(), &b"back"[..]),
                "return"
            );
        }
        other => return Err(CaseError::new(format!("expected basic.return, got {other:?}"))),
    }
    match sev.next(lk::ARRIVE).await? {
        ChanEvent::Ack(2, false) => {}
        other => return Err(CaseError::new(format!("expected the ack of tag 2, got {other:?}"))),
    }
    if let Ok(Some(m)) = tokio::time::timeout(lk::QUIET, requester.replies.recv()).await {
        return Err(CaseError::new(format!("a cancelled reply consumer got {:?}", m.content)));
    }
    Ok(())
}

async fn mandatory_live(ctx: Ctx) -> CaseResult {
    let client = ctx.amqprs().await?;
    let server = ctx.amqprs().await?;
    let (mut requester, _rev) = requester(&client).await?;
    let address = address_of(&ctx, &requester).await?;
    let (sch, mut sev) = ak::channel(&server).await?;
    sch.confirm_select(ConfirmSelectArguments::new(false)).await?;
    sch.basic_publish(BasicProperties::default(), b"both".to_vec(), mandatory(&address)).await?;
    match sev.next(lk::ARRIVE).await? {
        ChanEvent::Return { code: 312, routing_key, .. } if routing_key == address => {}
        other => return Err(CaseError::new(format!("expected basic.return 312, got {other:?}"))),
    }
    match sev.next(lk::ARRIVE).await? {
        ChanEvent::Ack(1, false) => {}
        other => return Err(CaseError::new(format!("expected the ack of tag 1, got {other:?}"))),
    }
    let got = ak::recv(&mut requester.replies, lk::ARRIVE).await?;
    check_eq!(got.content.as_deref(), Some(&b"both"[..]), "reply body");
    Ok(())
}

async fn declare_pseudo_and_address(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, _ev) = ak::channel(&conn).await?;
    let mut passive = QueueDeclareArguments::new(PSEUDO);
    passive.passive(true);
    let found = ch.queue_declare(passive.finish()).await?;
    check_eq!(found, Some((PSEUDO.to_owned(), 0, 1)), "passive declare of the pseudo-queue, before any consumer");
    let (requester, _rev) = requester(&conn).await?;
    let address = address_of(&ctx, &requester).await?;
    let mut live = QueueDeclareArguments::new(&address);
    live.passive(true);
    let found = ch.queue_declare(live.finish()).await?;
    check_eq!(found, Some((address.clone(), 0, 1)), "passive declare of a live address");
    requester.ch.basic_cancel(BasicCancelArguments::new(&requester.tag)).await?;
    let (ch2, mut ev2) = ak::channel(&conn).await?;
    let mut dead = QueueDeclareArguments::new(&address);
    dead.passive(true);
    ak::expect_call_close(
        ch2.queue_declare(dead.finish()),
        &mut ev2,
        404,
        &format!("NOT_FOUND - no queue '{address}' in vhost '/'"),
        50,
        10,
    )
    .await
}
