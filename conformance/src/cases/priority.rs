//! Priority queues: `x-max-priority` on classic queues (validated, one level per priority, the
//! highest first then FIFO, capped at the maximum), what drop-head, requeues and dead lettering
//! do with priorities, a quorum queue's two weighted levels, and AMQP 1.0's `header.priority`.

use std::time::Duration;

use amqprs::FieldValue;
use amqprs::channel::QueueDeclareArguments;
use lapin::BasicProperties;
use lapin::options::{BasicGetOptions, BasicNackOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};

use super::amqp10_attach::session;
use crate::{
    Case, CaseError, CaseResult, Ctx,
    amqprs_kit::{self as ak, s, table},
    case, case10, check_eq,
    fe2o3_kit::queue_addr,
    lapin_kit as lk,
    raw10::{Msg, link::outcome, message::hdr},
};
use fe2o3_amqp_types::primitives::Value;

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "priority.max_priority_validation",
            "x-max-priority 256, -1 and a string are refused with RabbitMQ's texts; a quorum queue \
             refuses the argument",
            ["amqprs"],
            validation
        ),
        case!(
            "priority.highest_first_then_fifo",
            "priorities 1, 9, 5, none, 0, 20, 9, 1 in an x-max-priority 10 queue come back 20, 9, 9, 5, \
             1, 1, none, 0: highest first, FIFO within a priority, above the maximum counts as it",
            highest_first
        ),
        case!(
            "priority.max_priority_one_and_zero",
            "x-max-priority 1 has two levels (every priority above 0 is 1); 0 is a plain FIFO queue",
            one_and_zero
        ),
        case!(
            "priority.drop_head_drops_the_next_delivery",
            "max-length 3 with drop-head drops the message that would be delivered next: the highest \
             priority's oldest",
            drop_head
        ),
        case!(
            "priority.requeue_keeps_priority_order",
            "two messages of the highest priority taken and nacked in reverse order come back first, in \
             their order",
            requeue
        ),
        case!(
            "priority.consumer_gets_backlog_in_priority_order",
            "a consumer that arrives after the publishes gets them highest priority first",
            consumer_order
        ),
        case!(
            "priority.dead_letters_keep_their_priority",
            "messages that expire into a priority dead-letter queue are ordered there by their priority",
            dead_letters
        ),
        case!(
            "priority.quorum_two_levels",
            "a quorum queue hands out two messages of priority above 4 for each normal one, a returned \
             message first",
            quorum
        ),
        case10!(
            "amqp10.priority.header_priority",
            "AMQP 1.0 header.priority orders messages in a priority queue as 0.9.1's priority does",
            amqp10_header
        ),
    ]
}

/// `x-max-priority` as an integer argument.
fn max_priority(max: i64) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-max-priority".into(), AMQPValue::LongLongInt(max));
    args
}

/// Declares a queue for this case with `args`.
async fn declare(ctx: &Ctx, ch: &lapin::Channel, what: &str, args: FieldTable) -> Result<String, CaseError> {
    let q = ctx.queue(what);
    ch.queue_declare(q.as_str().into(), QueueDeclareOptions::default(), args).await?;
    Ok(q)
}

/// The body `m{i}-p{priority}` of the `i`-th message.
fn label(i: usize, priority: Option<u8>) -> String {
    priority.map_or_else(|| format!("m{i}-pNone"), |p| format!("m{i}-p{p}"))
}

/// Publishes one message per priority (confirmed), bodies from [`label`].
async fn publish(ch: &lapin::Channel, exchange: &str, key: &str, priorities: &[Option<u8>]) -> CaseResult {
    for (i, &priority) in priorities.iter().enumerate() {
        let mut props = BasicProperties::default();
        if let Some(p) = priority {
            props = props.with_priority(p);
        }
        lk::publish_props(ch, exchange, key, label(i, priority).as_bytes(), props).await?;
    }
    Ok(())
}

async fn confirmed_channel(ctx: &Ctx) -> Result<(lapin::Connection, lapin::Channel), CaseError> {
    let (conn, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    Ok((conn, ch))
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|&s| s.to_owned()).collect()
}

async fn refused(ctx: &Ctx, args: amqprs::FieldTable, durable: bool, text: &str) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let q = ctx.name("pq");
    ctx.track_queue(&q);
    let mut declare = QueueDeclareArguments::new(&q).arguments(args).finish();
    declare.durable(durable);
    let text = text.replace("{q}", &q);
    ak::expect_call_close(ch.queue_declare(declare), &mut ev, 406, &text, 50, 10).await
}

async fn validation(ctx: Ctx) -> CaseResult {
    let prefix = "PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue '{q}' in vhost '/'";
    refused(
        &ctx,
        table(vec![("x-max-priority", FieldValue::I(256))]),
        false,
        &format!("{prefix}: {{max_value_exceeded,256}}"),
    )
    .await?;
    refused(
        &ctx,
        table(vec![("x-max-priority", FieldValue::I(-1))]),
        false,
        &format!("{prefix}: {{value_negative,-1}}"),
    )
    .await?;
    refused(
        &ctx,
        table(vec![("x-max-priority", s("5"))]),
        false,
        &format!("{prefix}: \"expected integer, got longstr\""),
    )
    .await?;
    let args = table(vec![("x-max-priority", FieldValue::I(5)), ("x-queue-type", s("quorum"))]);
    refused(&ctx, args, true, &format!("{prefix} of queue type rabbit_quorum_queue")).await
}

async fn highest_first(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = confirmed_channel(&ctx).await?;
    let q = declare(&ctx, &ch, "pq", max_priority(10)).await?;
    publish(&ch, "", &q, &[Some(1), Some(9), Some(5), None, Some(0), Some(20), Some(9), Some(1)]).await?;
    check_eq!(
        lk::drain(&ch, &q).await?,
        strings(&["m5-p20", "m1-p9", "m6-p9", "m2-p5", "m0-p1", "m7-p1", "m3-pNone", "m4-p0"]),
        "delivery order"
    );
    Ok(())
}

async fn one_and_zero(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = confirmed_channel(&ctx).await?;
    let one = declare(&ctx, &ch, "one", max_priority(1)).await?;
    publish(&ch, "", &one, &[Some(0), Some(3), Some(1), Some(2), Some(0)]).await?;
    check_eq!(lk::drain(&ch, &one).await?, strings(&["m1-p3", "m2-p1", "m3-p2", "m0-p0", "m4-p0"]), "max 1");
    let zero = declare(&ctx, &ch, "zero", max_priority(0)).await?;
    publish(&ch, "", &zero, &[Some(1), Some(9), Some(5)]).await?;
    check_eq!(lk::drain(&ch, &zero).await?, strings(&["m0-p1", "m1-p9", "m2-p5"]), "max 0");
    Ok(())
}

async fn drop_head(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = confirmed_channel(&ctx).await?;
    let mut args = max_priority(10);
    args.insert("x-max-length".into(), AMQPValue::LongLongInt(3));
    let q = declare(&ctx, &ch, "pq", args).await?;
    publish(&ch, "", &q, &[Some(1), Some(9), Some(5), Some(2), Some(9), Some(0)]).await?;
    check_eq!(lk::drain(&ch, &q).await?, strings(&["m3-p2", "m0-p1", "m5-p0"]), "what is left");
    Ok(())
}

async fn requeue(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = confirmed_channel(&ctx).await?;
    let q = declare(&ctx, &ch, "pq", max_priority(10)).await?;
    publish(&ch, "", &q, &[Some(1), Some(9), Some(5), Some(9), Some(1)]).await?;
    let mut tags = Vec::new();
    for expected in ["m1-p9", "m3-p9"] {
        let got = ch.basic_get(q.as_str().into(), BasicGetOptions { no_ack: false }).await?;
        let got = got.ok_or_else(|| CaseError::new("basic.get found nothing"))?;
        check_eq!(String::from_utf8_lossy(&got.delivery.data).into_owned(), expected.to_owned(), "got");
        tags.push(got.delivery.delivery_tag);
    }
    for tag in tags.into_iter().rev() {
        ch.basic_nack(tag, BasicNackOptions { multiple: false, requeue: true }).await?;
    }
    check_eq!(lk::drain(&ch, &q).await?, strings(&["m1-p9", "m3-p9", "m2-p5", "m0-p1", "m4-p1"]), "after the requeue");
    Ok(())
}

async fn consumer_order(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = confirmed_channel(&ctx).await?;
    let q = declare(&ctx, &ch, "pq", max_priority(3)).await?;
    publish(&ch, "", &q, &[Some(1), Some(2), Some(3), Some(0), Some(3)]).await?;
    let mut consumer = lk::consume(&ch, &q).await?;
    let got: Vec<String> = lk::take(&mut consumer, 5).await?.iter().map(lk::text).collect();
    check_eq!(got, strings(&["m2-p3", "m4-p3", "m1-p2", "m0-p1", "m3-p0"]), "delivery order");
    Ok(())
}

async fn dead_letters(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = confirmed_channel(&ctx).await?;
    let dlq = declare(&ctx, &ch, "dlq", max_priority(5)).await?;
    let mut args = FieldTable::default();
    args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
    args.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString(dlq.as_str().into()));
    args.insert("x-message-ttl".into(), AMQPValue::LongLongInt(50));
    let source = declare(&ctx, &ch, "source", args).await?;
    publish(&ch, "", &source, &[Some(1), Some(5), None, Some(3), Some(5)]).await?;
    lk::eventually(Duration::from_secs(5), "five dead letters", || {
        let ch = ch.clone();
        let dlq = dlq.clone();
        async move {
            let ok = ch
                .queue_declare(
                    dlq.as_str().into(),
                    QueueDeclareOptions { passive: true, ..Default::default() },
                    FieldTable::default(),
                )
                .await?;
            Ok(ok.message_count() == 5)
        }
    })
    .await?;
    check_eq!(
        lk::drain(&ch, &dlq).await?,
        strings(&["m1-p5", "m4-p5", "m3-p3", "m0-p1", "m2-pNone"]),
        "dead letters by priority"
    );
    Ok(())
}

async fn quorum(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = confirmed_channel(&ctx).await?;
    let q = ctx.queue("quorum");
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    ch.queue_declare(q.as_str().into(), QueueDeclareOptions { durable: true, ..Default::default() }, args).await?;
    publish(&ch, "", &q, &[Some(1), Some(9), Some(5), None, Some(0), Some(4), Some(5), Some(20), Some(3)]).await?;
    let first = ch.basic_get(q.as_str().into(), BasicGetOptions { no_ack: false }).await?;
    let first = first.ok_or_else(|| CaseError::new("basic.get found nothing"))?;
    check_eq!(String::from_utf8_lossy(&first.delivery.data).into_owned(), "m1-p9".to_owned(), "first");
    ch.basic_nack(first.delivery.delivery_tag, BasicNackOptions { multiple: false, requeue: true }).await?;
    check_eq!(
        lk::drain(&ch, &q).await?,
        strings(&["m1-p9", "m2-p5", "m0-p1", "m6-p5", "m7-p20", "m3-pNone", "m4-p0", "m5-p4", "m8-p3"]),
        "two high, one normal; the return first"
    );
    Ok(())
}

async fn amqp10_header(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let q = declare(&ctx, &ch, "pq", max_priority(10)).await?;
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, Some(&queue_addr(&q))).await?;
    for (id, priority) in [(0u32, None), (1, Some(7u8)), (2, Some(2)), (3, Some(7))] {
        let mut msg = Msg::new();
        if let Some(p) = priority {
            msg = msg.header(hdr::PRIORITY, Value::Ubyte(p));
        }
        let sent = msg.data(label(usize::try_from(id).unwrap_or(0), priority).as_bytes()).encode()?;
        let state = c.publish(0, 0, id, &sent).await?;
        check_eq!(outcome(&state), "accepted", "publish outcome");
    }
    c.close().await?;
    check_eq!(lk::drain(&ch, &q).await?, strings(&["m1-p7", "m3-p7", "m2-p2", "m0-pNone"]), "delivery order");
    Ok(())
}
