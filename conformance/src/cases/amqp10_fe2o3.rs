//! The same 1.0 flows through the third-party fe2o3-amqp client, as an application would use
//! it: attach, send, receive with auto credit, settle.

use super::amqp10_attach::queue;
use crate::{
    Case, CaseError, CaseResult, Ctx, case10, check_eq,
    fe2o3_kit::{self as fk, Amqp10, QUIET, publish_addr, queue_addr},
};
use fe2o3_amqp::types::{
    messaging::{Message, Outcome, Properties},
    primitives::Binary,
};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case10!(
            "amqp10.fe2o3.send_receive_accept",
            "fe2o3: send 3 to /queues/q, receive with auto credit, accept; nothing more arrives",
            send_receive
        ),
        case10!(
            "amqp10.fe2o3.unroutable_released",
            "fe2o3: a send to an unbound routing key returns Outcome::Released",
            unroutable
        ),
        case10!(
            "amqp10.fe2o3.release_redelivers",
            "fe2o3: a released delivery comes back with delivery-count 0",
            release
        ),
        case10!(
            "amqp10.fe2o3.anonymous_sender_to",
            "fe2o3: a sender on the null target routes by properties.to",
            anonymous
        ),
    ]
}

async fn send_receive(ctx: Ctx) -> CaseResult {
    let q = queue(&ctx).await?;
    let mut c = Amqp10::open(&ctx).await?;
    let mut s = c.sender(Some(&queue_addr(&q))).await?;
    for b in ["a", "b", "c"] {
        fk::send_accepted(&mut s, b.as_bytes()).await?;
    }
    let mut r = c.receiver(&queue_addr(&q), 10).await?;
    let mut got = Vec::new();
    for _ in 0..3 {
        let d = fk::recv(&mut r, fk::ARRIVE).await?;
        got.push(fk::text(&d));
        r.accept(&d).await.map_err(fk::err("accept"))?;
    }
    check_eq!(got, vec!["a".to_owned(), "b".to_owned(), "c".to_owned()], "bodies");
    fk::nothing(&mut r, QUIET).await?;
    let _ = s.close().await;
    let _ = r.close().await;
    c.close().await;
    Ok(())
}

async fn unroutable(ctx: Ctx) -> CaseResult {
    let mut c = Amqp10::open(&ctx).await?;
    let mut s = c.sender(Some(&publish_addr("amq.direct", &ctx.name("nobody")))).await?;
    let outcome = fk::send(&mut s, b"lost").await?;
    check_eq!(matches!(outcome, Outcome::Released(_)), true, "released outcome (got {outcome:?})");
    let _ = s.close().await;
    c.close().await;
    Ok(())
}

async fn release(ctx: Ctx) -> CaseResult {
    let q = queue(&ctx).await?;
    let mut c = Amqp10::open(&ctx).await?;
    let mut s = c.sender(Some(&queue_addr(&q))).await?;
    fk::send_accepted(&mut s, b"again").await?;
    let mut r = c.receiver(&queue_addr(&q), 1).await?;
    let d = fk::recv(&mut r, fk::ARRIVE).await?;
    r.release(&d).await.map_err(fk::err("release"))?;
    let d = fk::recv(&mut r, fk::ARRIVE).await?;
    check_eq!((fk::text(&d), fk::delivery_count(&d)), ("again".to_owned(), 0), "(body, delivery-count)");
    r.accept(&d).await.map_err(fk::err("accept"))?;
    let _ = r.close().await;
    c.close().await;
    Ok(())
}

async fn anonymous(ctx: Ctx) -> CaseResult {
    let q = queue(&ctx).await?;
    let mut c = Amqp10::open(&ctx).await?;
    let mut s = c.sender(None).await?;
    let props = Properties::builder().to(queue_addr(&q)).build();
    let m = Message::builder().properties(props).data(Binary::from(b"via to".to_vec())).build();
    let outcome = tokio::time::timeout(fk::ARRIVE, s.send(m))
        .await
        .map_err(|_| CaseError::new("no disposition"))?
        .map_err(fk::err("send"))?;
    check_eq!(matches!(outcome, Outcome::Accepted(_)), true, "accepted outcome (got {outcome:?})");
    let mut r = c.receiver(&queue_addr(&q), 1).await?;
    let d = fk::recv(&mut r, fk::ARRIVE).await?;
    check_eq!(fk::bytes(&d), Some(b"via to".to_vec()), "body");
    r.accept(&d).await.map_err(fk::err("accept"))?;
    c.close().await;
    Ok(())
}
