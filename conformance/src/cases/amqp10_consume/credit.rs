//! Link credit on a 1.0 receiver: credit limits what arrives, drain uses it up and answers with
//! a flow, an echo flow reports the link state; plus the order and header of plain deliveries.

use super::kit::{acq, body, filled, receiver, take};
use crate::{
    CaseError, CaseResult, Ctx, check_eq,
    lapin_kit::{self as lk, QUIET},
    raw10::{Conn10, Delivery, WAIT},
};
use fe2o3_amqp_types::performatives::{Flow, Performative};
use lapin::types::FieldTable;

async fn link_flow(c: &mut Conn10) -> Result<Flow, CaseError> {
    c.expect("flow on handle 0", WAIT, |ch, p, _| match p {
        Performative::Flow(f) if ch == 0 && f.handle.as_ref().map(|h| h.0) == Some(0) => Some(f.clone()),
        _ => None,
    })
    .await
}

pub(super) async fn credit_limits(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, q) = filled(&ctx, FieldTable::default(), &["1", "2", "3", "4", "5"]).await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 2, false).await?;
    let got = take(&mut c, 2).await?;
    check_eq!(got.iter().map(body).collect::<Result<Vec<_>, _>>()?, vec!["1".to_owned(), "2".to_owned()], "first two");
    c.no_transfer(0, QUIET).await?;
    c.credit(0, 0, 1, false).await?;
    check_eq!(body(&c.recv(0, WAIT).await?)?, "3", "after one more credit");
    c.no_transfer(0, QUIET).await?;
    c.close().await
}

pub(super) async fn no_credit(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, q) = filled(&ctx, FieldTable::default(), &["1"]).await?;
    let mut c = receiver(&ctx, &q).await?;
    c.no_transfer(0, QUIET).await?;
    c.close().await
}

pub(super) async fn drain_one(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, q) = filled(&ctx, FieldTable::default(), &["only"]).await?;
    let mut c = receiver(&ctx, &q).await?;
    let dc0 = c.delivery_count(0, 0);
    c.credit(0, 0, 1, true).await?;
    check_eq!(body(&c.recv(0, WAIT).await?)?, "only", "drained message");
    let f = link_flow(&mut c).await?;
    check_eq!(
        (f.delivery_count, f.link_credit, f.drain),
        (Some(dc0.wrapping_add(1)), Some(0), true),
        "flow after the drain (delivery-count, credit, drain)"
    );
    c.close().await
}

pub(super) async fn drain_more(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, q) = filled(&ctx, FieldTable::default(), &["a", "b"]).await?;
    let mut c = receiver(&ctx, &q).await?;
    let dc0 = c.delivery_count(0, 0);
    c.credit(0, 0, 5, true).await?;
    let got = take(&mut c, 2).await?;
    check_eq!(got.iter().map(body).collect::<Result<Vec<_>, _>>()?, vec!["a".to_owned(), "b".to_owned()], "bodies");
    let f = link_flow(&mut c).await?;
    check_eq!(
        (f.delivery_count, f.link_credit, f.drain),
        (Some(dc0.wrapping_add(5)), Some(0), true),
        "flow after the drain"
    );
    c.no_transfer(0, QUIET).await?;
    c.close().await
}

pub(super) async fn drain_empty(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, q) = filled(&ctx, FieldTable::default(), &[]).await?;
    let mut c = receiver(&ctx, &q).await?;
    let dc0 = c.delivery_count(0, 0);
    c.credit(0, 0, 3, true).await?;
    let f = link_flow(&mut c).await?;
    check_eq!(
        (f.delivery_count, f.link_credit, f.drain),
        (Some(dc0.wrapping_add(3)), Some(0), true),
        "flow answering the drain"
    );
    c.no_transfer(0, QUIET).await?;
    c.close().await
}

pub(super) async fn fifo(ctx: Ctx) -> CaseResult {
    let bodies: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    let refs: Vec<&str> = bodies.iter().map(String::as_str).collect();
    let (_conn, _ch, q) = filled(&ctx, FieldTable::default(), &refs).await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 100, false).await?;
    let got = take(&mut c, 10).await?;
    check_eq!(got.iter().map(body).collect::<Result<Vec<_>, _>>()?, bodies, "order");
    let ids: Vec<u32> = got.iter().map(Delivery::id).collect();
    let first = ids.first().copied().unwrap_or_default();
    let expected: Vec<u32> = (0..10).map(|i| first.wrapping_add(i)).collect();
    check_eq!(ids, expected, "delivery-ids are consecutive");
    c.close().await
}

pub(super) async fn first_header(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, q) = filled(&ctx, FieldTable::default(), &["x"]).await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 1, false).await?;
    let d = c.recv(0, WAIT).await?;
    check_eq!(acq(&d)?, (true, 0), "(first-acquirer, delivery-count)");
    check_eq!(d.settled(), false, "settled flag on an unsettled link");
    c.close().await
}

pub(super) async fn credit_after_publish(ctx: Ctx) -> CaseResult {
    let (_conn, ch, q) = filled(&ctx, FieldTable::default(), &[]).await?;
    let mut c = receiver(&ctx, &q).await?;
    lk::publish(&ch, "", &q, b"late").await?;
    c.no_transfer(0, QUIET).await?;
    c.credit(0, 0, 1, false).await?;
    check_eq!(body(&c.recv(0, WAIT).await?)?, "late", "delivered once credit arrives");
    c.close().await
}

pub(super) async fn drain_leaves_no_credit(ctx: Ctx) -> CaseResult {
    let (_conn, ch, q) = filled(&ctx, FieldTable::default(), &[]).await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 5, true).await?;
    let f = link_flow(&mut c).await?;
    check_eq!(f.link_credit, Some(0), "credit after the drain");
    // The drain advanced the sender's delivery-count: new credit counts from there.
    if let Some(dc) = f.delivery_count {
        c.delivery_counts.insert((0, 0), dc);
    }
    lk::publish(&ch, "", &q, b"after drain").await?;
    c.no_transfer(0, QUIET).await?;
    c.credit(0, 0, 1, false).await?;
    check_eq!(body(&c.recv(0, WAIT).await?)?, "after drain", "delivered with new credit");
    c.close().await
}

pub(super) async fn echo_flow(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, q) = filled(&ctx, FieldTable::default(), &[]).await?;
    let mut c = receiver(&ctx, &q).await?;
    let dc = c.delivery_count(0, 0);
    let ids = c.sessions.get(&0).copied().unwrap_or_default();
    let f = Flow {
        next_incoming_id: Some(ids.next_incoming),
        incoming_window: 5000,
        next_outgoing_id: ids.next_outgoing,
        outgoing_window: 5000,
        handle: Some(fe2o3_amqp_types::definitions::Handle(0)),
        delivery_count: Some(dc),
        link_credit: Some(7),
        available: None,
        drain: false,
        echo: true,
        properties: None,
    };
    c.perf(0, &f).await?;
    let got = link_flow(&mut c).await?;
    check_eq!(
        (got.delivery_count, got.link_credit, got.available, got.drain, got.echo),
        (Some(dc), Some(7), Some(0), false, false),
        "echoed flow (delivery-count, credit, available, drain, echo)"
    );
    c.close().await
}

/// Receives every transfer that comes within the quiet period; returns how many.
async fn count_arriving(c: &mut Conn10) -> Result<usize, CaseError> {
    let mut n = 0;
    while c.recv(0, QUIET).await.is_ok() {
        n += 1;
    }
    Ok(n)
}

/// A receiver whose flow carries `delivery_count` (not the broker's) with 2 credits, on a
/// queue of 10: the broker computes link-credit-snd = delivery-count-rcv + link-credit-rcv -
/// delivery-count-snd in serial-number arithmetic (RFC 1982, wrapping at 2^32), as RabbitMQ
/// 4.0.5's `amqp10_util:link_credit_snd/3` does; a negative result is no credit.
async fn credit_from(ctx: &Ctx, delivery_count: impl Fn(u32) -> u32) -> Result<usize, CaseError> {
    let bodies: Vec<String> = (0..10).map(|n| n.to_string()).collect();
    let refs: Vec<&str> = bodies.iter().map(String::as_str).collect();
    let (_conn, _ch, q) = filled(ctx, FieldTable::default(), &refs).await?;
    let mut c = receiver(ctx, &q).await?;
    let broker = c.delivery_count(0, 0);
    c.flow(0, 0, delivery_count(broker), 2, false).await?;
    let n = count_arriving(&mut c).await?;
    c.close().await?;
    Ok(n)
}

pub(super) async fn serial_number_credit(ctx: Ctx) -> CaseResult {
    // The broker starts at 2^32 - 5. The receiver's own count: exactly the 2 granted.
    check_eq!(credit_from(&ctx, |broker| broker).await?, 2, "delivery-count as the broker's");
    // rhea as shipped sends 0: (0 + 2) - (2^32 - 5) wraps to 7.
    check_eq!(credit_from(&ctx, |_| 0).await?, 7, "delivery-count 0");
    // 2^32 - 3: (2^32 - 3 + 2) - (2^32 - 5) = 4, across no wrap of the sum but of the counts.
    check_eq!(credit_from(&ctx, |_| u32::MAX - 2).await?, 4, "delivery-count 2^32 - 3");
    // Behind the broker's count: (2^32 - 10 + 2) - (2^32 - 5) is negative, no credit.
    check_eq!(credit_from(&ctx, |broker| broker.wrapping_sub(5)).await?, 0, "delivery-count behind");
    Ok(())
}
