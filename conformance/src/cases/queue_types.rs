//! `x-queue-type`: classic and quorum queues, and the properties quorum queues refuse.

use crate::{
    Case, CaseResult, Ctx,
    amqprs_kit::{self as ak, s, table},
    case, check_eq,
};
use amqprs::channel::{ConfirmSelectArguments, QueueDeclareArguments};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!("queue.type.classic_explicit", "x-queue-type=classic declares a working classic queue", classic),
        case!(
            "queue.type.quorum_roundtrip",
            "a durable quorum queue accepts, confirms and delivers messages",
            quorum_roundtrip
        ),
        case!("queue.type.quorum_non_durable_406", "a non-durable quorum queue is refused", quorum_non_durable),
        case!("queue.type.quorum_exclusive_406", "an exclusive quorum queue is refused", quorum_exclusive),
        case!("queue.type.quorum_auto_delete_406", "an auto-delete quorum queue is refused", quorum_auto_delete),
        case!(
            "queue.type.inequivalent_406",
            "redeclaring a classic queue as quorum gives 406 inequivalent arg 'x-queue-type'",
            inequivalent
        ),
        case!("queue.type.unknown_406", "an unknown x-queue-type is refused", unknown_type),
    ]
}

fn typed(q: &str, kind: &str) -> QueueDeclareArguments {
    QueueDeclareArguments::new(q).arguments(table(vec![("x-queue-type", s(kind))])).finish()
}

async fn classic(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let q = ctx.queue("classic");
    ch.queue_declare(typed(&q, "classic")).await?;
    ch.confirm_select(ConfirmSelectArguments::new(false)).await?;
    ak::publish(&ch, "", &q, amqprs::BasicProperties::default(), b"c".to_vec()).await?;
    ak::wait_acks(&mut ev, 1).await?;
    check_eq!(ak::drain(&ch, &q).await?, vec!["c".to_owned()], "bodies");
    Ok(())
}

async fn quorum_roundtrip(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let q = ctx.queue("quorum");
    let mut args = typed(&q, "quorum");
    args.durable(true);
    let ok = ch.queue_declare(args).await?;
    check_eq!(ok, Some((q.clone(), 0, 0)), "declare-ok");
    ch.confirm_select(ConfirmSelectArguments::new(false)).await?;
    for b in ["q1", "q2"] {
        ak::publish(&ch, "", &q, amqprs::BasicProperties::default(), b.as_bytes().to_vec()).await?;
    }
    ak::wait_acks(&mut ev, 2).await?;
    check_eq!(ak::drain(&ch, &q).await?, vec!["q1".to_owned(), "q2".to_owned()], "bodies");
    Ok(())
}

async fn quorum_refused(ctx: &Ctx, tweak: fn(&mut QueueDeclareArguments), code: u16, text: &str) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let q = ctx.name("quorum");
    ctx.track_queue(&q);
    let mut args = typed(&q, "quorum");
    tweak(&mut args);
    let text = text.replace("{q}", &q);
    ak::expect_call_close(ch.queue_declare(args), &mut ev, code, &text, 50, 10).await
}

async fn quorum_non_durable(ctx: Ctx) -> CaseResult {
    quorum_refused(
        &ctx,
        |_| {},
        406,
        "PRECONDITION_FAILED - invalid property 'non-durable' for queue '{q}' in vhost '/'",
    )
    .await
}

async fn quorum_exclusive(ctx: Ctx) -> CaseResult {
    quorum_refused(
        &ctx,
        |a| {
            a.durable(true).exclusive(true);
        },
        406,
        "PRECONDITION_FAILED - invalid property 'exclusive-owner' for queue '{q}' in vhost '/'",
    )
    .await
}

async fn quorum_auto_delete(ctx: Ctx) -> CaseResult {
    quorum_refused(
        &ctx,
        |a| {
            a.durable(true).auto_delete(true);
        },
        406,
        "PRECONDITION_FAILED - invalid property 'auto-delete' for queue '{q}' in vhost '/'",
    )
    .await
}

async fn inequivalent(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let q = ctx.queue("q");
    let mut first = typed(&q, "classic");
    first.durable(true);
    ch.queue_declare(first).await?;
    let mut second = typed(&q, "quorum");
    second.durable(true);
    let text = format!(
        "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue '{q}' in vhost '/': received 'quorum' but current is 'classic'"
    );
    ak::expect_call_close(ch.queue_declare(second), &mut ev, 406, &text, 50, 10).await
}

async fn unknown_type(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let q = ctx.queue("q");
    let text = "PRECONDITION_FAILED - invalid arg 'x-queue-type' for queue '{q}' in vhost '/': \"unsupported queue type 'bogus'\"".replace("{q}", &q);
    ak::expect_call_close(ch.queue_declare(typed(&q, "bogus")), &mut ev, 406, &text, 50, 10).await
}
