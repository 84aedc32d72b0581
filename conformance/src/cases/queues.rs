//! Queue declaration, exclusivity, auto-delete, deletion, purge and redeclare equivalence.

use crate::{
    Case, CaseError, CaseResult, Ctx,
    amqprs_kit::{self as ak, s, table},
    case, check, check_eq,
    error::wire_text,
    lapin_kit::{self as lk, confirm, eventually, publish},
};
use amqprs::channel::{
    BasicConsumeArguments, BasicPublishArguments, QueueDeclareArguments, QueueDeleteArguments, QueuePurgeArguments,
};
use lapin::{
    options::{BasicCancelOptions, BasicQosOptions, QueueDeclareOptions},
    types::FieldTable,
};
use std::time::Duration;

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!("queue.declare.server_named", "an empty queue name gets a server-generated amq.gen- name", server_named),
        case!("queue.declare.amq_prefix_403", "declaring a queue named amq.* is refused with 403", amq_prefix),
        case!(
            "queue.declare.existing_server_named_403",
            "redeclaring an existing server-named amq.gen- queue by its name (not passively) is refused with 403; a passive declare finds it",
            redeclare_server_named
        ),
        case!(
            "queue.passive.missing_404",
            "passive declare of a missing queue closes the channel with 404",
            passive_missing
        ),
        case!("queue.declare_ok.counts", "declare-ok reports ready messages and consumers", declare_ok_counts),
        case!(
            "queue.exclusive.other_connection_405",
            "another connection using an exclusive queue gets 405 RESOURCE_LOCKED",
            exclusive_other_conn
        ),
        case!(
            "queue.exclusive.deleted_on_close",
            "an exclusive queue is deleted when its connection closes",
            exclusive_deleted
        ),
        case!(
            "queue.auto_delete.after_last_consumer",
            "an auto-delete queue goes when its last consumer cancels, not before",
            auto_delete_after_last
        ),
        case!(
            "queue.auto_delete.not_before_first_consumer",
            "an auto-delete queue that never had a consumer stays",
            auto_delete_never_consumed
        ),
        case!(
            "queue.delete.if_unused_406",
            "delete if-unused with a consumer closes the channel with 406",
            delete_if_unused
        ),
        case!(
            "queue.delete.if_empty_406",
            "delete if-empty with messages closes the channel with 406",
            delete_if_empty
        ),
        case!("queue.delete.returns_message_count", "delete-ok carries the number of messages deleted", delete_count),
        case!("queue.delete.missing_ok", "deleting a missing queue answers delete-ok with 0", delete_missing),
        case!(
            "queue.purge.count_leaves_unacked",
            "purge returns the ready count and leaves unacked messages alone",
            purge
        ),
        case!(
            "queue.redeclare.durable_406",
            "redeclaring with other durability gives 406 inequivalent arg 'durable'",
            redeclare_durable
        ),
        case!(
            "queue.redeclare.auto_delete_406",
            "redeclaring with other auto_delete gives 406 inequivalent arg 'auto_delete'",
            redeclare_auto_delete
        ),
        case!(
            "queue.redeclare.exclusive_405",
            "redeclaring a shared queue as exclusive gives 405 RESOURCE_LOCKED",
            redeclare_exclusive
        ),
        case!(
            "queue.redeclare.arguments_406",
            "redeclaring with another x-max-length gives 406 with both values and types",
            redeclare_args
        ),
        case!(
            "queue.error_text.truncated_to_255_bytes",
            "a reply text longer than 255 bytes is cut to 252 bytes plus '...'",
            long_text
        ),
        case!("queue.redeclare.same_ok", "an identical redeclare succeeds and reports counts", redeclare_same),
    ]
}

fn passive(name: &str) -> QueueDeclareArguments {
    QueueDeclareArguments::new(name).passive(true).finish()
}

async fn server_named(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, _ev) = ak::channel(&conn).await?;
    let (name, messages, consumers) = ch
        .queue_declare(QueueDeclareArguments::exclusive_server_named())
        .await?
        .ok_or_else(|| CaseError::new("no declare-ok"))?;
    ctx.track_queue(&name);
    check!(name.starts_with("amq.gen-"), "server-named queue {name:?} should start with amq.gen-");
    check_eq!((messages, consumers), (0, 0), "counts of a new queue");
    // A second one gets a different name.
    let (other, _, _) = ch
        .queue_declare(QueueDeclareArguments::exclusive_server_named())
        .await?
        .ok_or_else(|| CaseError::new("no declare-ok"))?;
    ctx.track_queue(&other);
    check!(other != name, "two server-named queues got the same name {name}");
    Ok(())
}

async fn amq_prefix(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let q = format!("amq.{}", ctx.name("q"));
    ctx.track_queue(&q);
    ak::expect_call_close(
        ch.queue_declare(QueueDeclareArguments::new(&q)),
        &mut ev,
        403,
        &format!("ACCESS_REFUSED - queue name '{q}' contains reserved prefix 'amq.*'"),
        50,
        10,
    )
    .await
}

async fn redeclare_server_named(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, _ev) = ak::channel(&conn).await?;
    let (name, _, _) = ch
        .queue_declare(QueueDeclareArguments::exclusive_server_named())
        .await?
        .ok_or_else(|| CaseError::new("no declare-ok"))?;
    ctx.track_queue(&name);
    let found = ch.queue_declare(passive(&name)).await?.ok_or_else(|| CaseError::new("no declare-ok"))?;
    check_eq!(&found.0, &name, "the passive declare names the queue");
    let (ch2, mut ev2) = ak::channel(&conn).await?;
    ak::expect_call_close(
        ch2.queue_declare(QueueDeclareArguments::new(&name).exclusive(true).finish()),
        &mut ev2,
        403,
        &format!("ACCESS_REFUSED - queue name '{name}' contains reserved prefix 'amq.*'"),
        50,
        10,
    )
    .await
}

async fn passive_missing(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let q = ctx.name("missing");
    ak::expect_call_close(
        ch.queue_declare(passive(&q)),
        &mut ev,
        404,
        &format!("NOT_FOUND - no queue '{q}' in vhost '/'"),
        50,
        10,
    )
    .await
}

async fn declare_ok_counts(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    for b in ["1", "2", "3"] {
        publish(&ch, "", &q, b.as_bytes()).await?;
    }
    let d = ch.queue_declare(q.as_str().into(), QueueDeclareOptions::default(), FieldTable::default()).await?;
    check_eq!((d.message_count(), d.consumer_count()), (3, 0), "(messages, consumers) after 3 publishes");
    let cch = conn.create_channel().await?;
    cch.basic_qos(1, BasicQosOptions::default()).await?;
    let mut consumer = lk::consume(&cch, &q).await?;
    lk::next(&mut consumer, lk::ARRIVE).await?;
    let d = ch
        .queue_declare(
            q.as_str().into(),
            QueueDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await?;
    check_eq!((d.message_count(), d.consumer_count()), (2, 1), "(messages, consumers) with one unacked delivery");
    Ok(())
}

async fn exclusive_other_conn(ctx: Ctx) -> CaseResult {
    let owner = ctx.amqprs().await?;
    let (och, _oev) = ak::channel(&owner).await?;
    let q = ctx.queue("excl");
    och.queue_declare(QueueDeclareArguments::new(&q).exclusive(true).finish()).await?;
    let other = ctx.amqprs().await?;
    let text = format!(
        "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{q}' in vhost '/'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration."
    );
    let (ch, mut ev) = ak::channel(&other).await?;
    ak::expect_call_close(ch.queue_declare(passive(&q)), &mut ev, 405, &text, 50, 10).await?;
    let (ch, mut ev) = ak::channel(&other).await?;
    ak::expect_call_close(ch.basic_consume_rx(BasicConsumeArguments::new(&q, "")), &mut ev, 405, &text, 60, 20).await?;
    // Publishing into it from elsewhere is allowed (exclusivity is about consuming/declaring).
    let (ch, _ev) = ak::channel(&other).await?;
    ch.basic_publish(amqprs::BasicProperties::default(), b"x".to_vec(), BasicPublishArguments::new("", &q)).await?;
    Ok(())
}

async fn exclusive_deleted(ctx: Ctx) -> CaseResult {
    let observer = ctx.lapin().await?;
    let q = ctx.queue("excl");
    {
        let (owner, ch) = ctx.lapin_channel().await?;
        ch.queue_declare(
            q.as_str().into(),
            QueueDeclareOptions { exclusive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await?;
        owner.close(200, "bye".into()).await?;
    }
    eventually(Duration::from_secs(5), "exclusive queue deletion", || async {
        Ok(!lk::queue_exists(&observer, &q).await?)
    })
    .await
}

async fn auto_delete_after_last(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    let q = ctx.queue("ad");
    ch.queue_declare(
        q.as_str().into(),
        QueueDeclareOptions { auto_delete: true, ..Default::default() },
        FieldTable::default(),
    )
    .await?;
    let c1 = lk::consume(&ch, &q).await?;
    let c2 = lk::consume(&ch, &q).await?;
    ch.basic_cancel(c1.tag(), BasicCancelOptions::default()).await?;
    tokio::time::sleep(lk::QUIET).await;
    check!(lk::queue_exists(&conn, &q).await?, "auto-delete queue vanished while a consumer remained");
    ch.basic_cancel(c2.tag(), BasicCancelOptions::default()).await?;
    eventually(Duration::from_secs(5), "auto-delete after last cancel", || async {
        Ok(!lk::queue_exists(&conn, &q).await?)
    })
    .await
}

async fn auto_delete_never_consumed(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let q = ctx.queue("ad");
    ch.queue_declare(
        q.as_str().into(),
        QueueDeclareOptions { auto_delete: true, ..Default::default() },
        FieldTable::default(),
    )
    .await?;
    publish(&ch, "", &q, b"kept").await?;
    tokio::time::sleep(lk::QUIET).await;
    check!(lk::queue_exists(&conn, &q).await?, "auto-delete queue without any consumer vanished");
    check_eq!(lk::drain(&ch, &q).await?, vec!["kept".to_owned()], "bodies");
    // basic.get is not a consumer: the queue is still there.
    check!(lk::queue_exists(&conn, &q).await?, "auto-delete queue vanished after basic.get");
    Ok(())
}

async fn delete_if_unused(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let q = ctx.queue("q");
    ch.queue_declare(QueueDeclareArguments::new(&q)).await?;
    let (_tag, _rx) = ch.basic_consume_rx(BasicConsumeArguments::new(&q, "")).await?;
    let (ch2, mut ev2) = ak::channel(&conn).await?;
    let mut del = QueueDeleteArguments::new(&q);
    del.if_unused = true;
    ak::expect_call_close(
        ch2.queue_delete(del),
        &mut ev2,
        406,
        &format!("PRECONDITION_FAILED - queue '{q}' in vhost '/' in use"),
        50,
        40,
    )
    .await?;
    ev.quiet(Duration::from_millis(100)).await
}

async fn delete_if_empty(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let q = ctx.queue("q");
    ch.queue_declare(QueueDeclareArguments::new(&q)).await?;
    ak::publish(&ch, "", &q, amqprs::BasicProperties::default(), b"m".to_vec()).await?;
    let mut del = QueueDeleteArguments::new(&q);
    del.if_empty = true;
    ak::expect_call_close(
        ch.queue_delete(del),
        &mut ev,
        406,
        &format!("PRECONDITION_FAILED - queue '{q}' in vhost '/' not empty"),
        50,
        40,
    )
    .await
}

async fn delete_count(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    for b in ["1", "2", "3"] {
        publish(&ch, "", &q, b.as_bytes()).await?;
    }
    let n = ch.queue_delete(q.as_str().into(), Default::default()).await?;
    check_eq!(n, 3, "delete-ok message count");
    Ok(())
}

async fn delete_missing(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let n = ch.queue_delete(QueueDeleteArguments::new(&ctx.name("never"))).await?;
    check_eq!(n, Some(0), "delete-ok message count for a missing queue");
    ev.quiet(Duration::from_millis(100)).await
}

async fn purge(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    for i in 1..=5 {
        publish(&ch, "", &q, format!("m{i}").as_bytes()).await?;
    }
    let cch = conn.create_channel().await?;
    cch.basic_qos(2, BasicQosOptions::default()).await?;
    let mut consumer = lk::consume(&cch, &q).await?;
    lk::take(&mut consumer, 2).await?;
    let purged = ch.queue_purge(q.as_str().into(), Default::default()).await?;
    check_eq!(purged, 3, "purge-ok message count (ready only)");
    cch.close(200, "requeue".into()).await?;
    let mut left = Vec::new();
    eventually(Duration::from_secs(5), "unacked messages back in the queue", || async {
        Ok(lk::message_count(&conn, &q).await? == 2)
    })
    .await?;
    left.extend(lk::drain(&ch, &q).await?);
    check_eq!(left, vec!["m1".to_owned(), "m2".to_owned()], "messages surviving the purge");
    // Purging an empty queue answers 0 (through amqprs for codec diversity).
    let a = ctx.amqprs().await?;
    let (ach, _ev) = ak::channel(&a).await?;
    check_eq!(ach.queue_purge(QueuePurgeArguments::new(&q)).await?, Some(0), "purge of an empty queue");
    Ok(())
}

async fn redeclare(
    ctx: &Ctx,
    first: QueueDeclareArguments,
    second: QueueDeclareArguments,
    code: u16,
    text: &str,
) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    ch.queue_declare(first).await?;
    ak::expect_call_close(ch.queue_declare(second), &mut ev, code, text, 50, 10).await
}

async fn redeclare_durable(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let text = format!(
        "PRECONDITION_FAILED - inequivalent arg 'durable' for queue '{q}' in vhost '/': received 'true' but current is 'false'"
    );
    redeclare(&ctx, QueueDeclareArguments::new(&q), QueueDeclareArguments::new(&q).durable(true).finish(), 406, &text)
        .await
}

async fn redeclare_auto_delete(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let text = format!(
        "PRECONDITION_FAILED - inequivalent arg 'auto_delete' for queue '{q}' in vhost '/': received 'true' but current is 'false'"
    );
    redeclare(
        &ctx,
        QueueDeclareArguments::new(&q),
        QueueDeclareArguments::new(&q).auto_delete(true).finish(),
        406,
        &text,
    )
    .await
}

async fn redeclare_exclusive(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let text = format!(
        "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{q}' in vhost '/'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration."
    );
    redeclare(&ctx, QueueDeclareArguments::new(&q), QueueDeclareArguments::new(&q).exclusive(true).finish(), 405, &text)
        .await
}

async fn redeclare_args(ctx: Ctx) -> CaseResult {
    let q = ctx.queue("q");
    let first =
        QueueDeclareArguments::new(&q).arguments(table(vec![("x-max-length", amqprs::FieldValue::I(10))])).finish();
    let second =
        QueueDeclareArguments::new(&q).arguments(table(vec![("x-max-length", amqprs::FieldValue::I(20))])).finish();
    let text = format!(
        "PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue '{q}' in vhost '/': received '20' but current is '10'"
    );
    redeclare(&ctx, first, second, 406, &text).await
}

async fn redeclare_same(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let q = ctx.queue("q");
    let args = || {
        QueueDeclareArguments::new(&q)
            .arguments(table(vec![("x-max-length", amqprs::FieldValue::I(10)), ("x-note", s("n"))]))
            .finish()
    };
    ch.queue_declare(args()).await?;
    ak::publish(&ch, "", &q, amqprs::BasicProperties::default(), b"m".to_vec()).await?;
    let mut got = None;
    for _ in 0..50 {
        got = ch.queue_declare(args()).await?;
        if matches!(got, Some((_, 1, _))) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check_eq!(got, Some((q.clone(), 1, 0)), "declare-ok of an identical redeclare");
    ev.quiet(Duration::from_millis(100)).await
}

async fn long_text(ctx: Ctx) -> CaseResult {
    let owner = ctx.amqprs().await?;
    let (och, _oev) = ak::channel(&owner).await?;
    let q = format!("{}-{}", ctx.name("long"), "x".repeat(180));
    ctx.track_queue(&q);
    och.queue_declare(QueueDeclareArguments::new(&q).exclusive(true).finish()).await?;
    let other = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&other).await?;
    let full = format!(
        "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{q}' in vhost '/'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration."
    );
    let text = wire_text(&full);
    check_eq!(text.len(), 255, "length of the expected wire text");
    ak::expect_call_close(ch.queue_declare(passive(&q)), &mut ev, 405, &text, 50, 10).await
}
