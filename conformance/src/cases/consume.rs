//! Consuming: order, basic.get, round-robin, no-ack, consumer tags, cancel, exclusivity.

use crate::{
    Case, CaseError, CaseResult, Ctx,
    amqprs_kit::{self as ak, ChanEvent},
    case, check, check_eq,
    lapin_kit::{self as lk, confirm, publish},
};
use amqprs::channel::{
    BasicCancelArguments, BasicConsumeArguments, BasicGetArguments, QueueDeclareArguments, QueueDeleteArguments,
};
use lapin::{
    options::{BasicAckOptions, BasicCancelOptions, BasicConsumeOptions},
    types::FieldTable,
};
use std::time::Duration;

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!("consume.order.fifo", "a consumer gets messages in publish order with tags 1..n", fifo),
        case!("consume.get.message_count", "get-ok carries the number of messages still ready", ["amqprs"], get_count),
        case!("consume.get.empty", "basic.get on an empty queue answers get-empty", ["amqprs"], get_empty),
        case!("consume.round_robin", "two consumers on one queue get messages alternately", round_robin),
        case!("consume.no_ack.removes_on_delivery", "no-ack deliveries are gone even if the channel closes", no_ack),
        case!(
            "consume.tag.server_generated",
            "an empty consumer tag gets a broker tag starting amq.ctag-",
            ["amqprs"],
            tag_server
        ),
        case!("consume.tag.client_chosen", "deliveries carry the client-chosen consumer tag", ["amqprs"], tag_client),
        case!(
            "consume.cancel.stops_deliveries",
            "after basic.cancel nothing more is delivered and messages stay queued",
            cancel_stops
        ),
        case!(
            "consume.cancel.unknown_tag_ok",
            "cancelling an unknown consumer tag answers cancel-ok",
            ["amqprs"],
            cancel_unknown
        ),
        case!(
            "consume.exclusive.second_consumer_403",
            "a consumer on a queue with an exclusive consumer gets 403",
            ["amqprs"],
            exclusive_second
        ),
        case!(
            "consume.exclusive.when_others_exist_403",
            "an exclusive consume on a queue that has consumers gets 403",
            ["amqprs"],
            exclusive_after
        ),
        case!(
            "consume.tag.duplicate_530",
            "reusing a consumer tag on one channel closes the connection with 530",
            ["amqprs"],
            duplicate_tag
        ),
        case!(
            "consume.server_cancel.queue_deleted",
            "deleting a queue sends basic.cancel to its consumers",
            ["amqprs"],
            server_cancel
        ),
        case!(
            "consume.missing_queue_404",
            "consuming from a missing queue closes the channel with 404",
            ["amqprs"],
            consume_missing
        ),
    ]
}

async fn filled(ctx: &Ctx, n: usize) -> Result<(lapin::Connection, lapin::Channel, String), CaseError> {
    let (conn, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    for i in 1..=n {
        publish(&ch, "", &q, format!("m{i}").as_bytes()).await?;
    }
    Ok((conn, ch, q))
}

async fn fifo(ctx: Ctx) -> CaseResult {
    let (conn, _ch, q) = filled(&ctx, 10).await?;
    let cch = conn.create_channel().await?;
    let mut c = lk::consume(&cch, &q).await?;
    let got = lk::take(&mut c, 10).await?;
    for (i, d) in got.iter().enumerate() {
        check_eq!(lk::text(d), format!("m{}", i + 1), "body of delivery {}", i + 1);
        check_eq!(d.delivery_tag, i as u64 + 1, "delivery tag of delivery {}", i + 1);
        check_eq!(d.redelivered, false, "redelivered flag");
        check_eq!((d.exchange.as_str(), d.routing_key.as_str()), ("", q.as_str()), "exchange and key");
    }
    lk::nothing(&mut c, lk::QUIET).await
}

async fn get_count(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, q) = filled(&ctx, 3).await?;
    let a = ctx.amqprs().await?;
    let (ch, _ev) = ak::channel(&a).await?;
    for (i, remaining) in [2u32, 1, 0].into_iter().enumerate() {
        let (ok, _props, body) = ch
            .basic_get(BasicGetArguments::new(&q))
            .await?
            .ok_or_else(|| CaseError::new(format!("get {} answered get-empty", i + 1)))?;
        check_eq!(ok.message_count(), remaining, "get-ok message_count on get {}", i + 1);
        check_eq!(ok.delivery_tag(), i as u64 + 1, "get-ok delivery tag");
        check_eq!(ok.redelivered(), false, "get-ok redelivered");
        check_eq!(body, format!("m{}", i + 1).into_bytes(), "body of get {}", i + 1);
    }
    Ok(())
}

async fn get_empty(ctx: Ctx) -> CaseResult {
    let a = ctx.amqprs().await?;
    let (ch, _ev) = ak::channel(&a).await?;
    let q = ctx.queue("q");
    ch.queue_declare(QueueDeclareArguments::new(&q)).await?;
    let got = ch.basic_get(BasicGetArguments::new(&q)).await?;
    check!(got.is_none(), "expected get-empty, got a message");
    Ok(())
}

async fn round_robin(ctx: Ctx) -> CaseResult {
    let (conn, ch, q) = filled(&ctx, 0).await?;
    let cch = conn.create_channel().await?;
    let mut c1 = lk::consume(&cch, &q).await?;
    let mut c2 = lk::consume(&cch, &q).await?;
    for i in 1..=6 {
        publish(&ch, "", &q, format!("m{i}").as_bytes()).await?;
    }
    let a: Vec<String> = lk::take(&mut c1, 3).await?.iter().map(lk::text).collect();
    let b: Vec<String> = lk::take(&mut c2, 3).await?.iter().map(lk::text).collect();
    check_eq!(
        (a, b),
        (
            vec!["m1".to_owned(), "m3".to_owned(), "m5".to_owned()],
            vec!["m2".to_owned(), "m4".to_owned(), "m6".to_owned()]
        ),
        "(first consumer, second consumer)"
    );
    Ok(())
}

async fn no_ack(ctx: Ctx) -> CaseResult {
    let (conn, _ch, q) = filled(&ctx, 3).await?;
    let cch = conn.create_channel().await?;
    let mut c = cch
        .basic_consume(
            q.as_str().into(),
            "".into(),
            BasicConsumeOptions { no_ack: true, ..Default::default() },
            FieldTable::default(),
        )
        .await?;
    let got: Vec<String> = lk::take(&mut c, 3).await?.iter().map(lk::text).collect();
    check_eq!(got, vec!["m1".to_owned(), "m2".to_owned(), "m3".to_owned()], "bodies");
    cch.close(200, "bye".into()).await?;
    check_eq!(lk::message_count(&conn, &q).await?, 0, "messages left after closing a no-ack consumer's channel");
    Ok(())
}

async fn tag_server(ctx: Ctx) -> CaseResult {
    let a = ctx.amqprs().await?;
    let (ch, _ev) = ak::channel(&a).await?;
    let q = ctx.queue("q");
    ch.queue_declare(QueueDeclareArguments::new(&q)).await?;
    let (tag, _rx) = ch.basic_consume_rx(BasicConsumeArguments::new(&q, "")).await?;
    check!(tag.starts_with("amq.ctag-"), "broker-generated consumer tag {tag:?} should start with amq.ctag-");
    let (tag2, _rx2) = ch.basic_consume_rx(BasicConsumeArguments::new(&q, "")).await?;
    check!(tag2 != tag, "two generated tags are equal: {tag}");
    Ok(())
}

async fn tag_client(ctx: Ctx) -> CaseResult {
    let a = ctx.amqprs().await?;
    let (ch, _ev) = ak::channel(&a).await?;
    let q = ctx.queue("q");
    ch.queue_declare(QueueDeclareArguments::new(&q)).await?;
    let chosen = "my-consumer ünïcode";
    let (tag, mut rx) = ch.basic_consume_rx(BasicConsumeArguments::new(&q, chosen)).await?;
    check_eq!(tag.as_str(), chosen, "consume-ok tag");
    ak::publish(&ch, "", &q, amqprs::BasicProperties::default(), b"x".to_vec()).await?;
    let m = ak::recv(&mut rx, lk::ARRIVE).await?;
    let d = m.deliver.ok_or_else(|| CaseError::new("delivery without deliver method"))?;
    check_eq!(d.consumer_tag().as_str(), chosen, "deliver consumer tag");
    Ok(())
}

async fn cancel_stops(ctx: Ctx) -> CaseResult {
    let (conn, ch, q) = filled(&ctx, 1).await?;
    let cch = conn.create_channel().await?;
    let mut c = lk::consume(&cch, &q).await?;
    let d = lk::next(&mut c, lk::ARRIVE).await?;
    cch.basic_ack(d.delivery_tag, BasicAckOptions::default()).await?;
    cch.basic_cancel(c.tag(), BasicCancelOptions::default()).await?;
    publish(&ch, "", &q, b"after").await?;
    lk::nothing(&mut c, lk::QUIET).await?;
    check_eq!(lk::message_count(&conn, &q).await?, 1, "messages ready after cancel");
    Ok(())
}

async fn cancel_unknown(ctx: Ctx) -> CaseResult {
    let a = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&a).await?;
    let tag = ch.basic_cancel(BasicCancelArguments::new("no-such-consumer")).await?;
    check_eq!(tag.as_str(), "no-such-consumer", "cancel-ok tag");
    ev.quiet(Duration::from_millis(100)).await
}

async fn exclusive_second(ctx: Ctx) -> CaseResult {
    let a = ctx.amqprs().await?;
    let (ch, _ev) = ak::channel(&a).await?;
    let q = ctx.queue("q");
    ch.queue_declare(QueueDeclareArguments::new(&q)).await?;
    let mut args = BasicConsumeArguments::new(&q, "");
    args.exclusive = true;
    let _first = ch.basic_consume_rx(args).await?;
    let b = ctx.amqprs().await?;
    let (ch2, mut ev2) = ak::channel(&b).await?;
    ak::expect_call_close(
        ch2.basic_consume_rx(BasicConsumeArguments::new(&q, "")),
        &mut ev2,
        403,
        &format!("ACCESS_REFUSED - queue '{q}' in vhost '/' in exclusive use"),
        60,
        20,
    )
    .await
}

async fn exclusive_after(ctx: Ctx) -> CaseResult {
    let a = ctx.amqprs().await?;
    let (ch, _ev) = ak::channel(&a).await?;
    let q = ctx.queue("q");
    ch.queue_declare(QueueDeclareArguments::new(&q)).await?;
    let _first = ch.basic_consume_rx(BasicConsumeArguments::new(&q, "")).await?;
    let (ch2, mut ev2) = ak::channel(&a).await?;
    let mut args = BasicConsumeArguments::new(&q, "");
    args.exclusive = true;
    ak::expect_call_close(
        ch2.basic_consume_rx(args),
        &mut ev2,
        403,
        &format!("ACCESS_REFUSED - queue '{q}' in vhost '/' in exclusive use"),
        60,
        20,
    )
    .await
}

async fn duplicate_tag(ctx: Ctx) -> CaseResult {
    let a = ctx.amqprs().await?;
    let mut cev = ak::connection_events(&a).await?;
    let (ch, _ev) = ak::channel(&a).await?;
    let q = ctx.queue("q");
    ch.queue_declare(QueueDeclareArguments::new(&q)).await?;
    let _first = ch.basic_consume_rx(BasicConsumeArguments::new(&q, "dup")).await?;
    ak::expect_call_close(
        ch.basic_consume_rx(BasicConsumeArguments::new(&q, "dup")),
        &mut cev,
        530,
        "NOT_ALLOWED - attempt to reuse consumer tag 'dup'",
        60,
        20,
    )
    .await
}

async fn server_cancel(ctx: Ctx) -> CaseResult {
    let a = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&a).await?;
    let q = ctx.queue("q");
    ch.queue_declare(QueueDeclareArguments::new(&q)).await?;
    let (tag, _rx) = ch.basic_consume_rx(BasicConsumeArguments::new(&q, "watcher")).await?;
    let (ch2, _ev2) = ak::channel(&a).await?;
    ch2.queue_delete(QueueDeleteArguments::new(&q)).await?;
    match ev.next(lk::ARRIVE).await? {
        ChanEvent::Cancel(t) => check_eq!(t, tag, "cancelled consumer tag"),
        other => {
            return Err(CaseError::new(format!("expected basic.cancel from the broker, got {other:?}")));
        }
    }
    // The channel itself stays open.
    ch.queue_declare(QueueDeclareArguments::new(&q)).await?;
    Ok(())
}

async fn consume_missing(ctx: Ctx) -> CaseResult {
    let a = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&a).await?;
    let q = ctx.name("missing");
    ak::expect_call_close(
        ch.basic_consume_rx(BasicConsumeArguments::new(&q, "")),
        &mut ev,
        404,
        &format!("NOT_FOUND - no queue '{q}' in vhost '/'"),
        60,
        20,
    )
    .await
}
