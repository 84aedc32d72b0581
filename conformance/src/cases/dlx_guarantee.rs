//! Charon's dead-letter guarantee (a deliberate difference): with the policy key
//! `charon-dead-letter-guarantee: at-least-once` a classic queue keeps a dead letter it cannot
//! route — `messages` 1, not ready — and forwards it once a binding gives it a route. RabbitMQ
//! 4.0.5 does not know the key (400 on the policy) and drops the letter.

use lapin::types::FieldTable;

use crate::dlx_kit::{self as dk, text};
use crate::lapin_kit as lk;
use crate::{Case, CaseResult, Ctx, case, check_eq};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "dlx.guarantee.classic_keeps_unroutable",
            "classic queue under the charon-dead-letter-guarantee policy: a rejected message with no route waits in the source (messages 1, ready 0) and reaches the DLQ once it is bound",
            ["dlx"],
            classic_keeps_unroutable
        )
        .deliberate(
            "Charon's own policy key: RabbitMQ 4.0.5 refuses it (400, not a recognised policy setting) and drops \
             a classic queue's unroutable dead letter",
        ),
    ]
}

async fn classic_keeps_unroutable(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    let dlx = ctx.exchange("dlx");
    let options = lapin::options::ExchangeDeclareOptions::default();
    ch.exchange_declare(dlx.as_str().into(), lapin::ExchangeKind::Direct, options, FieldTable::default()).await?;
    let (source, dlq) = (ctx.queue("src"), ctx.queue("dlq"));
    ctx.set_policy(&format!("^{source}$"), "queues", 0, r#"{"charon-dead-letter-guarantee":"at-least-once"}"#).await?;
    lk::declare_queue(&ch, &dlq).await?;
    let arguments = dk::args(&[("x-dead-letter-exchange", text(&dlx))]);
    ch.queue_declare(source.as_str().into(), lapin::options::QueueDeclareOptions::default(), arguments).await?;
    lk::publish(&ch, "", &source, b"kept").await?;
    let got = ch.basic_get(source.as_str().into(), lapin::options::BasicGetOptions { no_ack: false }).await?;
    let got = got.ok_or_else(|| crate::CaseError::new("the message"))?;
    got.delivery.reject(lapin::options::BasicRejectOptions { requeue: false }).await?;
    ctx.expect_queue_counts(&source, (1, 0, 0)).await?;
    check_eq!(lk::get(&ch, &source).await?.is_none(), true, "the waiting letter is never delivered");
    lk::bind(&ch, &dlq, &dlx, &source, FieldTable::default()).await?;
    dk::eventually_ready(&ch, &dlq, 1).await?;
    ctx.expect_queue_counts(&source, (0, 0, 0)).await?;
    check_eq!(lk::drain(&ch, &dlq).await?, vec!["kept".to_owned()], "the dead letter");
    Ok(())
}
