//! AMQP 1.0 consuming: credit, drain, settlement outcomes and redelivery counts.

use super::amqp10_attach::session;
use crate::{
    Case, CaseError, CaseResult, Ctx, case10, check, check_eq,
    fe2o3_kit::queue_addr,
    lapin_kit::{self as lk, QUIET},
    raw10::{Conn10, Delivery, Received, WAIT, codec, message::hdr},
};
use fe2o3_amqp_types::{
    definitions::SenderSettleMode,
    messaging::{Accepted, DeliveryState, Modified, Rejected, Released},
    performatives::{Flow, Performative},
    primitives::Value,
};
use lapin::{
    options::QueueDeclareOptions,
    types::{AMQPValue, FieldTable},
};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case10!(
            "amqp10.consume.credit_limits_deliveries",
            "with 2 credits only 2 of 5 waiting messages arrive; 1 more credit brings exactly 1 more",
            credit_limits
        ),
        case10!("amqp10.consume.no_credit_no_delivery", "a receiver attached without credit gets nothing", no_credit),
        case10!(
            "amqp10.consume.drain_with_message_waiting",
            "credit 1 + drain in one flow with a message waiting: the message arrives, then a flow with delivery-count advanced and credit 0",
            drain_one
        ),
        case10!(
            "amqp10.consume.drain_more_credit_than_messages",
            "credit 5 + drain with 2 messages: 2 transfers, then a flow advancing delivery-count by 5 with credit 0",
            drain_more
        ),
        case10!(
            "amqp10.consume.drain_nothing_waiting",
            "credit 3 + drain on an empty queue: an immediate flow, delivery-count +3, credit 0",
            drain_empty
        ),
        case10!("amqp10.consume.fifo_order", "messages arrive in publish order with consecutive delivery-ids", fifo),
        case10!(
            "amqp10.consume.first_delivery_header",
            "a first delivery has first-acquirer true and delivery-count 0 in its header",
            first_header
        ),
        case10!("amqp10.consume.accepted_removes", "accepted removes the message from the queue", accepted),
        case10!("amqp10.consume.rejected_drops_without_dlx", "rejected without a DLX drops the message", rejected),
        case10!(
            "amqp10.consume.released_requeues",
            "released requeues: redelivered with delivery-count unchanged (0) and first-acquirer false",
            released
        ),
        case10!(
            "amqp10.consume.modified_failed_requeues_classic",
            "modified{delivery-failed} requeues; a classic queue keeps delivery-count 0",
            modified_failed
        ),
        case10!(
            "amqp10.consume.modified_failed_requeues_quorum",
            "modified{delivery-failed} requeues; a quorum queue counts delivery-count 1, 2",
            modified_failed_quorum
        ),
        case10!(
            "amqp10.consume.released_requeues_quorum",
            "released on a quorum queue requeues with delivery-count still 0",
            released_quorum
        ),
        case10!(
            "amqp10.consume.modified_undeliverable_drops",
            "modified{undeliverable-here} dead-letters as rejected: without a DLX the message is dropped",
            modified_undeliverable
        ),
        case10!(
            "amqp10.consume.modified_annotations_classic_ignored",
            "modified with x- annotations on a classic queue requeues without them",
            modified_ann_classic
        ),
        case10!(
            "amqp10.consume.modified_annotations_quorum_kept",
            "modified with x- annotations on a quorum queue: the redelivery carries them",
            modified_ann_quorum
        ),
        case10!(
            "amqp10.consume.redelivery_after_detach",
            "unsettled messages return when the link detaches; the redelivery has first-acquirer false, delivery-count 0",
            after_detach
        ),
        case10!(
            "amqp10.consume.redelivery_after_connection_loss",
            "unsettled messages return when the TCP connection drops; delivery-count 0, first-acquirer false",
            after_drop
        ),
        case10!(
            "amqp10.consume.presettled_link",
            "a receiver with snd-settle-mode settled gets pre-settled transfers and the queue empties",
            presettled
        ),
        case10!(
            "amqp10.consume.settle_range",
            "one disposition first..last accepts a range of deliveries",
            settle_range
        ),
        case10!(
            "amqp10.consume.multi_frame_delivery",
            "with max-frame-size 4096 a 20000-byte message arrives in several transfer frames, reassembled exactly",
            multi_frame
        ),
        case10!(
            "amqp10.consume.credit_after_publish",
            "a message published while the link has no credit waits; granting 1 credit delivers it",
            credit_after_publish
        ),
        case10!(
            "amqp10.consume.drain_leaves_no_credit",
            "after a drain on an empty queue a new message is not delivered until credit is granted again",
            drain_leaves_no_credit
        ),
        case10!(
            "amqp10.consume.echo_flow",
            "a flow with echo set is answered with the link's flow state (delivery-count, credit, available)",
            echo_flow
        ),
        case10!(
            "amqp10.consume.unsettled_disposition_answered",
            "a receiver's disposition with settled=false is answered with a settled sender disposition",
            unsettled_disposition
        ),
        case10!(
            "amqp10.consume.release_range",
            "one released disposition over three deliveries requeues all three, redelivered in order",
            release_range
        ),
        case10!(
            "amqp10.consume.released_to_other_link",
            "a message released on one link is redelivered to another link with credit, first-acquirer false",
            released_other_link
        ),
        case10!(
            "amqp10.consume.undeliverable_not_to_other_link",
            "modified{undeliverable-here} drops the message: another link with credit never gets it",
            undeliverable_other_link
        ),
        case10!(
            "amqp10.consume.detach_returns_only_unsettled",
            "after a detach only the unsettled deliveries come back; an accepted one does not",
            detach_only_unsettled
        ),
        case10!(
            "amqp10.consume.redelivery_after_detach_quorum",
            "a quorum queue returns unsettled messages on detach: redelivered with first-acquirer false, delivery-count 0",
            after_detach_quorum
        ),
        case10!(
            "amqp10.consume.redelivery_after_connection_loss_quorum",
            "a quorum queue returns unsettled messages when the TCP connection drops, with delivery-count 1",
            after_drop_quorum
        ),
        case10!(
            "amqp10.consume.small_max_frame_size",
            "with max-frame-size 512 a 3000-byte message arrives in frames with more=true on all but the last",
            small_frames
        ),
        case10!(
            "amqp10.consume.body_from_091",
            "a 0.9.1-published body with every byte value arrives over 1.0 as one data section, byte-identical",
            body_from_091
        ),
        case10!(
            "amqp10.consume.body_to_091",
            "a 1.0-published data section with every byte value arrives over 0.9.1 byte-identical",
            body_to_091
        ),
    ]
}

/// Declares a queue (with `args`) and publishes `bodies` to it over 0.9.1 with confirms.
async fn filled(
    ctx: &Ctx,
    args: FieldTable,
    bodies: &[&str],
) -> Result<(lapin::Connection, lapin::Channel, String), CaseError> {
    let (conn, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = ctx.queue("q");
    let durable = args.inner().contains_key("x-queue-type");
    ch.queue_declare(q.as_str().into(), QueueDeclareOptions { durable, ..Default::default() }, args).await?;
    for b in bodies {
        lk::publish(&ch, "", &q, b.as_bytes()).await?;
    }
    Ok((conn, ch, q))
}

/// A raw session with receiving link 0 attached to `q` (no credit yet).
async fn receiver(ctx: &Ctx, q: &str) -> Result<Conn10, CaseError> {
    let mut c = session(ctx).await?;
    c.attach_receiver(0, 0, &queue_addr(q)).await?;
    Ok(c)
}

fn body(d: &Delivery) -> Result<String, CaseError> {
    Ok(Received::parse(&d.payload)?.text())
}

async fn take(c: &mut Conn10, n: usize) -> Result<Vec<Delivery>, CaseError> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(c.recv(0, WAIT).await?);
    }
    Ok(out)
}

async fn link_flow(c: &mut Conn10) -> Result<Flow, CaseError> {
    c.expect("flow on handle 0", WAIT, |ch, p, _| match p {
        Performative::Flow(f) if ch == 0 && f.handle.as_ref().map(|h| h.0) == Some(0) => Some(f.clone()),
        _ => None,
    })
    .await
}

async fn credit_limits(ctx: Ctx) -> CaseResult {
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

async fn no_credit(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, q) = filled(&ctx, FieldTable::default(), &["1"]).await?;
    let mut c = receiver(&ctx, &q).await?;
    c.no_transfer(0, QUIET).await?;
    c.close().await
}

async fn drain_one(ctx: Ctx) -> CaseResult {
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

async fn drain_more(ctx: Ctx) -> CaseResult {
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

async fn drain_empty(ctx: Ctx) -> CaseResult {
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

async fn fifo(ctx: Ctx) -> CaseResult {
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

/// `(first-acquirer, delivery-count)` of a delivery's header (absent fields as defaults).
fn acq(d: &Delivery) -> Result<(bool, u32), CaseError> {
    let m = Received::parse(&d.payload)?;
    let fa = matches!(m.header(hdr::FIRST_ACQUIRER), Some(Value::Bool(true)));
    let dc = match m.header(hdr::DELIVERY_COUNT) {
        Some(Value::Uint(n)) => n,
        None => 0,
        Some(other) => return Err(CaseError::new(format!("delivery-count of type {other:?}"))),
    };
    Ok((fa, dc))
}

async fn first_header(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, q) = filled(&ctx, FieldTable::default(), &["x"]).await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 1, false).await?;
    let d = c.recv(0, WAIT).await?;
    check_eq!(acq(&d)?, (true, 0), "(first-acquirer, delivery-count)");
    check_eq!(d.settled(), false, "settled flag on an unsettled link");
    c.close().await
}

async fn settle_one(
    ctx: &Ctx,
    state: DeliveryState,
    args: FieldTable,
) -> Result<(Conn10, lapin::Connection, String), CaseError> {
    let (conn, _ch, q) = filled(ctx, args, &["m"]).await?;
    let mut c = receiver(ctx, &q).await?;
    c.credit(0, 0, 10, false).await?;
    let d = c.recv(0, WAIT).await?;
    check_eq!(acq(&d)?, (true, 0), "first delivery header");
    c.settle(0, d.id(), d.id(), state).await?;
    Ok((c, conn, q))
}

async fn accepted(ctx: Ctx) -> CaseResult {
    let (mut c, conn, q) = settle_one(&ctx, DeliveryState::Accepted(Accepted {}), FieldTable::default()).await?;
    c.no_transfer(0, QUIET).await?;
    check_eq!(lk::message_count(&conn, &q).await?, 0, "messages left");
    c.close().await
}

async fn rejected(ctx: Ctx) -> CaseResult {
    let (mut c, conn, q) =
        settle_one(&ctx, DeliveryState::Rejected(Rejected { error: None }), FieldTable::default()).await?;
    c.no_transfer(0, QUIET).await?;
    check_eq!(lk::message_count(&conn, &q).await?, 0, "messages left");
    c.close().await
}

async fn released(ctx: Ctx) -> CaseResult {
    let (mut c, _conn, _q) = settle_one(&ctx, DeliveryState::Released(Released {}), FieldTable::default()).await?;
    let d = c.recv(0, WAIT).await?;
    check_eq!(body(&d)?, "m", "redelivered body");
    check_eq!(acq(&d)?, (false, 0), "(first-acquirer, delivery-count) after released");
    c.close().await
}

fn modified(failed: Option<bool>, undeliverable: Option<bool>, ann: Option<(&str, Value)>) -> DeliveryState {
    DeliveryState::Modified(Modified {
        delivery_failed: failed,
        undeliverable_here: undeliverable,
        message_annotations: ann.map(|(k, v)| [(k.into(), v)].into_iter().collect()),
    })
}

fn quorum() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    args
}

/// Settles with modified{delivery-failed} twice and checks the delivery-counts seen.
async fn failed_twice(ctx: &Ctx, args: FieldTable, counts: (u32, u32)) -> CaseResult {
    let (mut c, _conn, _q) = settle_one(ctx, modified(Some(true), None, None), args).await?;
    let d = c.recv(0, WAIT).await?;
    check_eq!(acq(&d)?, (false, counts.0), "(first-acquirer, delivery-count) after modified{{delivery-failed}}");
    c.settle(0, d.id(), d.id(), modified(Some(true), Some(false), None)).await?;
    let d = c.recv(0, WAIT).await?;
    check_eq!(acq(&d)?, (false, counts.1), "after a second modified{{delivery-failed}}");
    c.close().await
}

async fn modified_failed(ctx: Ctx) -> CaseResult {
    failed_twice(&ctx, FieldTable::default(), (0, 0)).await
}

async fn modified_failed_quorum(ctx: Ctx) -> CaseResult {
    failed_twice(&ctx, quorum(), (1, 2)).await
}

async fn released_quorum(ctx: Ctx) -> CaseResult {
    let (mut c, _conn, _q) = settle_one(&ctx, DeliveryState::Released(Released {}), quorum()).await?;
    let d = c.recv(0, WAIT).await?;
    check_eq!(acq(&d)?, (false, 0), "(first-acquirer, delivery-count) after released (quorum)");
    c.close().await
}

async fn modified_undeliverable(ctx: Ctx) -> CaseResult {
    let (mut c, conn, q) = settle_one(&ctx, modified(None, Some(true), None), FieldTable::default()).await?;
    c.no_transfer(0, QUIET).await?;
    check_eq!(lk::message_count(&conn, &q).await?, 0, "messages left");
    c.close().await
}

async fn modified_ann_classic(ctx: Ctx) -> CaseResult {
    let ann = Some(("x-opt-reason", Value::String("retry".into())));
    let (mut c, _conn, _q) = settle_one(&ctx, modified(Some(false), Some(false), ann), FieldTable::default()).await?;
    let d = c.recv(0, WAIT).await?;
    let m = Received::parse(&d.payload)?;
    check_eq!(m.ann("x-opt-reason"), None, "annotation on the classic-queue redelivery");
    c.close().await
}

async fn modified_ann_quorum(ctx: Ctx) -> CaseResult {
    let ann = Some(("x-opt-reason", Value::String("retry".into())));
    let (mut c, _conn, _q) = settle_one(&ctx, modified(Some(false), Some(false), ann), quorum()).await?;
    let d = c.recv(0, WAIT).await?;
    let m = Received::parse(&d.payload)?;
    check_eq!(m.ann("x-opt-reason"), Some(Value::String("retry".into())), "annotation on the quorum-queue redelivery");
    c.close().await
}

async fn after_detach(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, q) = filled(&ctx, FieldTable::default(), &["a", "b"]).await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 10, false).await?;
    let _ = take(&mut c, 2).await?;
    c.detach(0, 0).await?;
    c.expect_refusal(0, 0).await?;
    c.attach_receiver(0, 1, &queue_addr(&q)).await?;
    c.credit(0, 1, 10, false).await?;
    let again = take(&mut c, 2).await?;
    check_eq!(
        again.iter().map(body).collect::<Result<Vec<_>, _>>()?,
        vec!["a".to_owned(), "b".to_owned()],
        "redelivered in order"
    );
    check_eq!(
        acq(again.first().ok_or_else(|| CaseError::new("none"))?)?,
        (false, 0),
        "(first-acquirer, delivery-count)"
    );
    c.close().await
}

async fn after_drop(ctx: Ctx) -> CaseResult {
    let (conn, _ch, q) = filled(&ctx, FieldTable::default(), &["a"]).await?;
    {
        let mut c = receiver(&ctx, &q).await?;
        c.credit(0, 0, 10, false).await?;
        let _ = c.recv(0, WAIT).await?;
        // Dropping the raw connection closes the socket without close frames.
    }
    lk::eventually(WAIT, "message back in the queue", || async { Ok(lk::message_count(&conn, &q).await? == 1) })
        .await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 10, false).await?;
    let d = c.recv(0, WAIT).await?;
    check_eq!(acq(&d)?, (false, 0), "(first-acquirer, delivery-count) after connection loss");
    c.close().await
}

async fn presettled(ctx: Ctx) -> CaseResult {
    let (conn, _ch, q) = filled(&ctx, FieldTable::default(), &["a", "b"]).await?;
    let mut c = session(&ctx).await?;
    c.send_attach_receiver(0, 0, "r", Some(&queue_addr(&q)), SenderSettleMode::Settled).await?;
    let a = c.expect_attach(0, 0).await?;
    check_eq!(a.snd_settle_mode, SenderSettleMode::Settled, "snd-settle-mode echoed");
    c.credit(0, 0, 10, false).await?;
    let got = take(&mut c, 2).await?;
    check!(got.iter().all(Delivery::settled), "transfers must be pre-settled");
    check_eq!(lk::message_count(&conn, &q).await?, 0, "messages left");
    c.close().await
}

async fn settle_range(ctx: Ctx) -> CaseResult {
    let (conn, _ch, q) = filled(&ctx, FieldTable::default(), &["a", "b", "c"]).await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 10, false).await?;
    let got = take(&mut c, 3).await?;
    let first = got.first().map(Delivery::id).unwrap_or_default();
    let last = got.last().map(Delivery::id).unwrap_or_default();
    c.settle(0, first, last, DeliveryState::Accepted(Accepted {})).await?;
    lk::eventually(WAIT, "queue empty", || async { Ok(lk::message_count(&conn, &q).await? == 0) }).await?;
    c.close().await
}

async fn multi_frame(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    let data: Vec<u8> = (0..20_000u32).map(|i| (i % 239) as u8).collect();
    lk::publish(&ch, "", &q, &data).await?;
    let mut open = crate::raw10::conn::default_open(ctx.broker());
    open.max_frame_size = fe2o3_amqp_types::performatives::MaxFrameSize(4096);
    let mut c = Conn10::open_with(ctx.broker(), open).await?;
    c.begin(0).await?;
    c.attach_receiver(0, 0, &queue_addr(&q)).await?;
    c.credit(0, 0, 1, false).await?;
    let d = c.recv(0, WAIT).await?;
    check!(d.frames >= 5, "expected at least 5 transfer frames, got {}", d.frames);
    check_eq!(Received::parse(&d.payload)?.data(), Some(data), "reassembled body");
    c.close().await
}

async fn credit_after_publish(ctx: Ctx) -> CaseResult {
    let (_conn, ch, q) = filled(&ctx, FieldTable::default(), &[]).await?;
    let mut c = receiver(&ctx, &q).await?;
    lk::publish(&ch, "", &q, b"late").await?;
    c.no_transfer(0, QUIET).await?;
    c.credit(0, 0, 1, false).await?;
    check_eq!(body(&c.recv(0, WAIT).await?)?, "late", "delivered once credit arrives");
    c.close().await
}

async fn drain_leaves_no_credit(ctx: Ctx) -> CaseResult {
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

async fn echo_flow(ctx: Ctx) -> CaseResult {
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

async fn unsettled_disposition(ctx: Ctx) -> CaseResult {
    let (conn, _ch, q) = filled(&ctx, FieldTable::default(), &["m"]).await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 1, false).await?;
    let d = c.recv(0, WAIT).await?;
    // Encoded by hand: serde_amqp leaves out `settled = false` (the default), and RabbitMQ
    // 4.0.5 needs it present (see amqp10.errors.disposition_settled_absent).
    let fields = vec![
        Value::Bool(true),
        Value::Uint(d.id()),
        Value::Null,
        Value::Bool(false),
        codec::described(0x24, Value::List(vec![])),
    ];
    let bytes = codec::encode(&codec::described(0x15, Value::List(fields)))?;
    c.send(&codec::frame(codec::TYPE_AMQP, 0, &bytes)).await?;
    let answer = c.expect_disposition(0, d.id()).await?;
    check_eq!(
        (answer.role, answer.first, answer.last, answer.settled, crate::raw10::link::outcome(&answer.state)),
        (fe2o3_amqp_types::definitions::Role::Sender, d.id(), None, true, "accepted".to_owned()),
        "the broker's disposition (role, first, last, settled, state)"
    );
    lk::eventually(WAIT, "queue empty", || async { Ok(lk::message_count(&conn, &q).await? == 0) }).await?;
    c.close().await
}

async fn release_range(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, q) = filled(&ctx, FieldTable::default(), &["a", "b", "c"]).await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 3, false).await?;
    let got = take(&mut c, 3).await?;
    let first = got.first().map(Delivery::id).unwrap_or_default();
    let last = got.last().map(Delivery::id).unwrap_or_default();
    c.settle(0, first, last, DeliveryState::Released(Released {})).await?;
    c.credit(0, 0, 3, false).await?;
    let again = take(&mut c, 3).await?;
    check_eq!(
        again.iter().map(body).collect::<Result<Vec<_>, _>>()?,
        vec!["a".to_owned(), "b".to_owned(), "c".to_owned()],
        "redelivered in order"
    );
    check_eq!(again.iter().map(acq).collect::<Result<Vec<_>, _>>()?, vec![(false, 0); 3], "headers");
    c.close().await
}

/// A session with two receiving links on `q`: handle 0 with 1 credit, handle 1 without.
async fn two_receivers(ctx: &Ctx, q: &str) -> Result<Conn10, CaseError> {
    let mut c = receiver(ctx, q).await?;
    c.attach_receiver(0, 1, &queue_addr(q)).await?;
    c.credit(0, 0, 1, false).await?;
    Ok(c)
}

async fn released_other_link(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, q) = filled(&ctx, FieldTable::default(), &["m"]).await?;
    let mut c = two_receivers(&ctx, &q).await?;
    let d = c.recv(0, WAIT).await?;
    check_eq!(d.transfer.handle.0, 0, "first delivery on handle");
    c.credit(0, 1, 1, false).await?;
    c.no_transfer(0, QUIET).await?;
    c.settle(0, d.id(), d.id(), DeliveryState::Released(Released {})).await?;
    let again = c.recv(0, WAIT).await?;
    check_eq!((again.transfer.handle.0, body(&again)?), (1, "m".to_owned()), "redelivery (handle, body)");
    check_eq!(acq(&again)?, (false, 0), "(first-acquirer, delivery-count)");
    c.close().await
}

async fn undeliverable_other_link(ctx: Ctx) -> CaseResult {
    let (conn, _ch, q) = filled(&ctx, FieldTable::default(), &["m"]).await?;
    let mut c = two_receivers(&ctx, &q).await?;
    let d = c.recv(0, WAIT).await?;
    c.credit(0, 1, 1, false).await?;
    c.settle(0, d.id(), d.id(), modified(None, Some(true), None)).await?;
    c.no_transfer(0, QUIET).await?;
    check_eq!(lk::message_count(&conn, &q).await?, 0, "messages left");
    c.close().await
}

async fn detach_only_unsettled(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, q) = filled(&ctx, FieldTable::default(), &["a", "b"]).await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 2, false).await?;
    let got = take(&mut c, 2).await?;
    let first = got.first().map(Delivery::id).unwrap_or_default();
    c.settle(0, first, first, DeliveryState::Accepted(Accepted {})).await?;
    c.detach(0, 0).await?;
    c.expect_refusal(0, 0).await?;
    c.attach_receiver(0, 1, &queue_addr(&q)).await?;
    c.credit(0, 1, 10, false).await?;
    check_eq!(body(&c.recv(0, WAIT).await?)?, "b", "the unsettled one comes back");
    c.no_transfer(0, QUIET).await?;
    c.close().await
}

async fn after_detach_quorum(ctx: Ctx) -> CaseResult {
    let (_conn, _ch, q) = filled(&ctx, quorum(), &["a"]).await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 10, false).await?;
    let _ = c.recv(0, WAIT).await?;
    c.detach(0, 0).await?;
    c.expect_refusal(0, 0).await?;
    c.attach_receiver(0, 1, &queue_addr(&q)).await?;
    c.credit(0, 1, 10, false).await?;
    let d = c.recv(0, WAIT).await?;
    check_eq!(body(&d)?, "a", "redelivered body");
    check_eq!(acq(&d)?, (false, 0), "(first-acquirer, delivery-count) after detach (quorum)");
    c.close().await
}

async fn after_drop_quorum(ctx: Ctx) -> CaseResult {
    let (conn, _ch, q) = filled(&ctx, quorum(), &["a"]).await?;
    {
        let mut c = receiver(&ctx, &q).await?;
        c.credit(0, 0, 10, false).await?;
        let _ = c.recv(0, WAIT).await?;
    }
    lk::eventually(WAIT, "message back in the queue", || async { Ok(lk::message_count(&conn, &q).await? == 1) })
        .await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 10, false).await?;
    let d = c.recv(0, WAIT).await?;
    // Unlike a detach, a lost connection counts as a failed delivery in a quorum queue.
    check_eq!(acq(&d)?, (false, 1), "(first-acquirer, delivery-count) after connection loss (quorum)");
    c.close().await
}

/// Reads one delivery frame by frame: every transfer and its payload.
async fn frames_of_one(c: &mut Conn10) -> Result<Vec<(fe2o3_amqp_types::performatives::Transfer, Vec<u8>)>, CaseError> {
    let mut out = Vec::new();
    loop {
        let (t, p) = c
            .expect("transfer", WAIT, |ch, p, payload| match p {
                Performative::Transfer(t) if ch == 0 => Some((t.clone(), payload.to_vec())),
                _ => None,
            })
            .await?;
        let more = t.more;
        out.push((t, p));
        if !more {
            return Ok(out);
        }
    }
}

async fn small_frames(ctx: Ctx) -> CaseResult {
    let (_conn, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    let q = ctx.queue("q");
    lk::declare_queue(&ch, &q).await?;
    let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    lk::publish(&ch, "", &q, &data).await?;
    let mut open = crate::raw10::conn::default_open(ctx.broker());
    open.max_frame_size = fe2o3_amqp_types::performatives::MaxFrameSize(512);
    let mut c = Conn10::open_with(ctx.broker(), open).await?;
    c.begin(0).await?;
    c.attach_receiver(0, 0, &queue_addr(&q)).await?;
    c.credit(0, 0, 1, false).await?;
    let frames = frames_of_one(&mut c).await?;
    check!(frames.len() >= 7, "expected at least 7 transfer frames, got {}", frames.len());
    let mores: Vec<bool> = frames.iter().map(|(t, _)| t.more).collect();
    let mut expected = vec![true; frames.len() - 1];
    expected.push(false);
    check_eq!(mores, expected, "more flags");
    let first_id = frames.first().and_then(|(t, _)| t.delivery_id);
    check!(
        frames.iter().skip(1).all(|(t, _)| t.delivery_id.is_none() || t.delivery_id == first_id),
        "continuation transfers carry no other delivery-id"
    );
    check!(frames.iter().all(|(_, p)| p.len() < 512), "a payload does not fit in a 512-byte frame");
    let payload: Vec<u8> = frames.into_iter().flat_map(|(_, p)| p).collect();
    check_eq!(Received::parse(&payload)?.data(), Some(data), "reassembled body");
    c.close().await
}

/// Every byte value, twice, so the body is neither text nor short.
fn all_bytes() -> Vec<u8> {
    (0..512u32).map(|i| (i % 256) as u8).collect()
}

async fn body_from_091(ctx: Ctx) -> CaseResult {
    let (_conn, ch, q) = filled(&ctx, FieldTable::default(), &[]).await?;
    lk::publish(&ch, "", &q, &all_bytes()).await?;
    let mut c = receiver(&ctx, &q).await?;
    c.credit(0, 0, 1, false).await?;
    let m = Received::parse(&c.recv(0, WAIT).await?.payload)?;
    check_eq!(m.body().len(), 1, "body sections");
    check_eq!(m.data(), Some(all_bytes()), "data section");
    c.close().await
}

async fn body_to_091(ctx: Ctx) -> CaseResult {
    let (_conn, ch, q) = filled(&ctx, FieldTable::default(), &[]).await?;
    let mut c = session(&ctx).await?;
    c.attach_sender(0, 0, Some(&queue_addr(&q))).await?;
    let state = c.publish(0, 0, 0, &crate::raw10::Msg::new().data(&all_bytes()).encode()?).await?;
    check_eq!(crate::raw10::link::outcome(&state), "accepted", "publish outcome");
    let got = lk::get(&ch, &q).await?.ok_or_else(|| CaseError::new("queue empty"))?;
    check_eq!(got.delivery.data.clone(), all_bytes(), "0.9.1 body");
    c.close().await
}
