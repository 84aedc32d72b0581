#![allow(clippy::unwrap_used)]
//! The queue's operations across its parts: publish, consume, settle, get, dispatch, credit,
//! limits, expiry and the journal, as a client sees their effects.

use charon_model::{Body, Properties, Routing, Table};
use tokio::sync::mpsc;

use super::super::args::QueueType;
use super::super::handle::QueueHandle;
use super::super::requests::QueueConfig;
use super::*;
use crate::gate::Gate;
use crate::session::{SessionEvent, SessionSink};
use crate::settings::Overflow;

fn queue(queue_type: QueueType, durable: bool, id: u64) -> QueueRef {
    queue_named("q", queue_type, durable, id, Table::new())
}

/// Queue `name` (in vhost `/`) with `arguments`; its handle's mailbox goes nowhere.
pub(super) fn queue_named(name: &str, queue_type: QueueType, durable: bool, id: u64, arguments: Table) -> QueueRef {
    let (tx, _rx) = mpsc::channel(1);
    let config = QueueConfig {
        name: name.into(),
        vhost: "/".into(),
        durable,
        auto_delete: false,
        exclusive_owner: None,
        arguments,
        queue_type,
    };
    Arc::new(QueueHandle::new(id, config, tx))
}

fn handle() -> QueueRef {
    queue(QueueType::Classic, false, 1)
}

fn msg(n: u8) -> Enqueue {
    Enqueue { message: Arc::new(Message::new(Routing::default(), Body::Data(vec![n].into()))), confirm: None }
}

fn consumer(id: u64, session: &SessionSink, prefetch: u32) -> ConsumeSpec {
    ConsumeSpec {
        id,
        tag: format!("ctag-{id}"),
        owner: Owner { session: session.id, channel: 1 },
        session: session.clone(),
        no_ack: false,
        prefetch,
        link_credit: None,
        channel_limit: None,
        exclusive: false,
        arguments: Table::new(),
    }
}

fn delivered(state: &mut QueueState) -> Vec<(u64, Vec<u64>, bool)> {
    state
        .take_outbox()
        .into_iter()
        .filter_map(|(_, e)| match e {
            SessionEvent::Deliveries { consumer, items, .. } => {
                Some((consumer, items.iter().map(|d| d.seq).collect(), items.iter().any(|d| d.redelivered)))
            }
            _ => None,
        })
        .collect()
}

fn state(queue_type: QueueType, settings: QueueSettings) -> QueueState {
    QueueState::new(queue(queue_type, true, 1), settings, 1_000)
}

fn ttl_msg(body: &str, ttl: Option<u64>, confirm: u64) -> Enqueue {
    let mut m = Message::new(Routing::default(), Body::Data(body.to_owned().into()));
    m.set_properties(Properties { ttl, ..Properties::default() });
    Enqueue { message: Arc::new(m), confirm: Some(confirm) }
}

fn bodies(state: &QueueState) -> Vec<String> {
    state.ready().head_entries().map(|e| String::from_utf8_lossy(e.message.body.bytes()).into_owned()).collect()
}

fn discarded(state: &mut QueueState) -> Vec<(String, DeathReason)> {
    state
        .take_discarded()
        .into_iter()
        .map(|d| (String::from_utf8_lossy(d.message.body.bytes()).into_owned(), d.reason))
        .collect()
}

/// Publishes each message in its own batch, returning (accepted, refused) confirm numbers.
fn publish(state: &mut QueueState, items: Vec<Enqueue>) -> (Vec<u64>, Vec<u64>) {
    let (session, _rx) = SessionSink::new(1, 0);
    let (mut ok, mut no) = (Vec::new(), Vec::new());
    for item in items {
        state.publish(vec![item], Some(ConfirmTo { session: session.clone(), channel: 1 }));
        for (_, event) in state.take_outbox() {
            if let SessionEvent::Confirms { accepted, refused, .. } = event {
                ok.extend(accepted);
                no.extend(refused);
            }
        }
    }
    (ok, no)
}

fn limited(max_length: u64, overflow: Overflow) -> QueueSettings {
    QueueSettings { max_length: Some(max_length), overflow, ..QueueSettings::default() }
}

fn durable_queue() -> QueueState {
    let mut state = QueueState::new(queue(QueueType::Classic, true, 7), QueueSettings::default(), 1_000);
    state.enable_journal(RecoveredQueue::default());
    state
}

fn persistent_msg(delivery_mode: u8) -> Arc<Message> {
    let mut m = Message::new(Routing::default(), Body::Data("m".into()));
    m.origin = charon_model::Origin::Amqp091;
    m.set_properties(Properties { delivery_mode: Some(delivery_mode), ..Properties::default() });
    Arc::new(m)
}

fn kinds(records: &[Record]) -> Vec<&'static str> {
    records
        .iter()
        .map(|r| match r {
            Record::Enqueue { .. } => "enqueue",
            Record::Remove { .. } => "remove",
            Record::Delivered { .. } => "delivered",
            Record::DropQueue { .. } => "drop",
            Record::Spill { .. } => "spill",
            Record::Released { .. } => "released",
            Record::DeadLettered { .. } => "dead-lettered",
        })
        .collect()
}

#[test]
fn round_robin_one_message_at_a_time() {
    let (session, _rx) = SessionSink::new(1, 0);
    let mut s = QueueState::new(handle(), QueueSettings::default(), 0);
    s.consume(consumer(10, &session, 0)).unwrap();
    s.consume(consumer(11, &session, 0)).unwrap();
    s.publish((0..4).map(msg).collect(), None);
    s.dispatch();
    assert_eq!(delivered(&mut s), [(10, vec![1, 3], false), (11, vec![2, 4], false)]);
}

#[test]
fn prefetch_limits_unacked_and_ack_frees_room() {
    let (session, _rx) = SessionSink::new(1, 0);
    let mut s = QueueState::new(handle(), QueueSettings::default(), 0);
    s.consume(consumer(10, &session, 2)).unwrap();
    s.publish((0..3).map(msg).collect(), None);
    s.dispatch();
    assert_eq!(delivered(&mut s), [(10, vec![1, 2], false)]);
    s.settle(&[1], Settle::Ack);
    s.dispatch();
    assert_eq!(delivered(&mut s), [(10, vec![3], false)]);
}

#[test]
fn consumer_utilisation_falls_while_messages_wait_for_a_blocked_consumer() {
    let (session, _rx) = SessionSink::new(1, 0);
    let mut s = QueueState::new(handle(), QueueSettings::default(), 0);
    s.publish((0..3).map(msg).collect(), None);
    s.note_utilisation();
    assert_eq!(s.stats().consumer_utilisation, 0.0, "no consumers: 0, as 4.0.5 shows");
    s.consume(consumer(10, &session, 1)).unwrap();
    s.dispatch();
    s.note_utilisation();
    // Two messages wait behind a prefetch of 1 for a second (one half-life): from 1 to 0.5.
    s.set_now(1_000);
    assert!((s.stats().consumer_utilisation - 0.5).abs() < 1e-9, "{}", s.stats().consumer_utilisation);
    s.settle(&[1, 2, 3], Settle::Ack);
    for _ in 0..2 {
        s.dispatch();
        let seqs: Vec<u64> = delivered(&mut s).into_iter().flat_map(|(_, seqs, _)| seqs).collect();
        s.settle(&seqs, Settle::Ack);
    }
    s.note_utilisation();
    s.set_now(2_000);
    assert!((s.stats().consumer_utilisation - 0.75).abs() < 1e-9, "keeping up again for a second");
    let quorum = QueueState::new(queue(QueueType::Quorum, true, 2), QueueSettings::default(), 0);
    assert_eq!(quorum.stats().consumer_utilisation, 0.0);
}

#[test]
fn memory_estimate_counts_whole_messages_and_their_bodies() {
    let mut s = QueueState::new(handle(), QueueSettings::default(), 0);
    assert_eq!(s.stats().memory, 0);
    s.publish((0..3).map(msg).collect(), None);
    let whole = (std::mem::size_of::<Entry>() + std::mem::size_of::<Message>()) as u64;
    assert_eq!(s.stats().memory, 3 * (whole + 1), "three resident one-byte messages");
    let owner = Owner { session: 1, channel: 1 };
    let got = s.get(owner, false).unwrap();
    assert_eq!(s.stats().memory, 3 * (whole + 1), "an unacked message is still held");
    s.settle(&[got.delivery.seq], Settle::Ack);
    assert_eq!(s.stats().memory, 2 * (whole + 1));
}

#[test]
fn requeue_restores_original_position_with_redelivered() {
    let (session, _rx) = SessionSink::new(1, 0);
    let mut s = QueueState::new(handle(), QueueSettings::default(), 0);
    s.publish((0..4).map(msg).collect(), None);
    let owner = Owner { session: 1, channel: 1 };
    let a = s.get(owner, false).unwrap();
    let b = s.get(owner, false).unwrap();
    assert_eq!((a.delivery.seq, b.delivery.seq, b.remaining), (1, 2, 2));
    s.settle(&[2], Settle::Requeue);
    s.owner_closed(owner);
    s.consume(consumer(10, &session, 0)).unwrap();
    s.dispatch();
    let out = delivered(&mut s);
    assert_eq!(out.first().map(|(_, seqs, _)| seqs.clone()), Some(vec![1, 2, 3, 4]));
}

#[test]
fn discard_goes_through_the_dead_letter_seam() {
    let mut s = QueueState::new(handle(), QueueSettings::default(), 0);
    s.publish(vec![msg(1)], None);
    let owner = Owner { session: 1, channel: 1 };
    let got = s.get(owner, false).unwrap();
    s.settle(&[got.delivery.seq], Settle::Discard);
    assert_eq!(s.take_discarded().iter().map(|d| d.reason).collect::<Vec<_>>(), [DeathReason::Rejected]);
    // Only the counts of what happened remain.
    let counters = crate::MessageCounters { published: 1, delivered: 1, ..Default::default() };
    assert_eq!(s.stats(), QueueStats { counters, ..QueueStats::default() });
}

#[test]
fn message_counters_count_publishes_deliveries_redeliveries_and_acks() {
    let (session, _rx) = SessionSink::new(1, 0);
    let mut s = QueueState::new(handle(), QueueSettings::default(), 0);
    s.publish((0..3).map(msg).collect(), None);
    let owner = Owner { session: 1, channel: 1 };
    let got = s.get(owner, false).unwrap();
    s.settle(&[got.delivery.seq], Settle::Requeue);
    s.consume(consumer(10, &session, 0)).unwrap();
    s.dispatch();
    let seqs: Vec<u64> = delivered(&mut s).into_iter().flat_map(|(_, seqs, _)| seqs).collect();
    s.settle(&seqs, Settle::Ack);
    let counters = s.stats().counters;
    assert_eq!(
        (counters.published, counters.delivered, counters.redelivered, counters.acked),
        (3, 4, 1, 3),
        "one get, then three dispatched of which the requeued one again"
    );
    assert_eq!(s.stats().message_bytes_unacknowledged, 0);
}

#[test]
fn credit_limits_deliveries_and_drain_delivers_before_advancing() {
    let (session, _rx) = SessionSink::new(1, 0);
    let mut s = QueueState::new(handle(), QueueSettings::default(), 0);
    let mut c = consumer(10, &session, 0);
    c.link_credit = Some(100);
    s.consume(c).unwrap();
    s.publish((0..3).map(msg).collect(), None);
    s.dispatch();
    assert!(delivered(&mut s).is_empty(), "no credit, no delivery");
    let grant = CreditGrant { consumer: 10, delivery_count: 100, link_credit: 2, drain: false, echo: false };
    s.credit(grant);
    assert_eq!(delivered(&mut s), [(10, vec![1, 2], false)]);
    // One credit with drain while a message waits: it is delivered, nothing is left to drain.
    s.credit(CreditGrant { consumer: 10, delivery_count: 102, link_credit: 1, drain: true, echo: false });
    let out = s.take_outbox();
    assert!(matches!(out.first(), Some((_, SessionEvent::Deliveries { items, .. })) if items.len() == 1));
    assert!(matches!(
        out.get(1),
        Some((_, SessionEvent::CreditState { delivery_count: 103, credit: 0, available: 0, drain: true, .. }))
    ));
    // Drain with credit and nothing waiting advances the delivery-count.
    s.credit(CreditGrant { consumer: 10, delivery_count: 103, link_credit: 5, drain: true, echo: false });
    let out = s.take_outbox();
    assert!(matches!(out.as_slice(), [(_, SessionEvent::CreditState { delivery_count: 108, credit: 0, .. })]));
}

#[test]
fn exclusive_consumer_blocks_others() {
    let (session, _rx) = SessionSink::new(1, 0);
    let mut s = QueueState::new(handle(), QueueSettings::default(), 0);
    let mut c = consumer(10, &session, 0);
    c.exclusive = true;
    s.consume(c).unwrap();
    let err = s.consume(consumer(11, &session, 0)).unwrap_err();
    assert_eq!(err.to_string(), "queue 'q' in vhost '/' in exclusive use");
}

#[test]
fn full_outbound_gate_stops_dispatch_until_released() {
    let (session, _rx) = SessionSink::new(1, 2);
    let mut s = QueueState::new(handle(), QueueSettings::default(), 0);
    let mut c = consumer(10, &session, 0);
    c.no_ack = true;
    s.consume(c).unwrap();
    s.publish((0..5).map(msg).collect(), None);
    s.dispatch();
    assert_eq!(delivered(&mut s), [(10, vec![1, 2], false)]);
    assert_eq!(s.stats().ready, 3);
    session.outbound.release(2);
    s.dispatch();
    assert_eq!(delivered(&mut s), [(10, vec![3, 4], false)]);
}

#[test]
fn channel_gate_is_shared_and_released_by_owner() {
    let (session, _rx) = SessionSink::new(1, 0);
    let gate = Gate::new(1);
    let mut s = QueueState::new(handle(), QueueSettings::default(), 0);
    let mut c = consumer(10, &session, 0);
    c.channel_limit = Some(Arc::clone(&gate));
    s.consume(c).unwrap();
    s.publish((0..2).map(msg).collect(), None);
    s.dispatch();
    assert_eq!(delivered(&mut s), [(10, vec![1], false)]);
    gate.release(1);
    s.dispatch();
    assert_eq!(delivered(&mut s), [(10, vec![2], false)]);
}

#[test]
fn drop_head_keeps_the_newest_and_dead_letters_the_oldest_in_order() {
    let mut s = state(QueueType::Classic, limited(1, Overflow::DropHead));
    let (ok, no) = publish(&mut s, vec![ttl_msg("p1", None, 1), ttl_msg("p2", None, 2), ttl_msg("p3", None, 3)]);
    assert_eq!((ok, no), (vec![1, 2, 3], vec![]));
    assert_eq!(bodies(&s), ["p3"]);
    assert_eq!(discarded(&mut s), [("p1".into(), DeathReason::Maxlen), ("p2".into(), DeathReason::Maxlen)]);
}

#[test]
fn classic_reject_publish_refuses_and_reject_publish_dlx_also_dead_letters() {
    let mut s = state(QueueType::Classic, limited(1, Overflow::RejectPublish));
    let (ok, no) = publish(&mut s, vec![ttl_msg("p1", None, 1), ttl_msg("p2", None, 2)]);
    assert_eq!((ok, no), (vec![1], vec![2]));
    assert!(discarded(&mut s).is_empty());
    let mut s = state(QueueType::Classic, limited(1, Overflow::RejectPublishDlx));
    let (ok, no) = publish(&mut s, vec![ttl_msg("p1", None, 1), ttl_msg("p2", None, 2), ttl_msg("p3", None, 3)]);
    assert_eq!((ok, no), (vec![1], vec![2, 3]));
    assert_eq!(bodies(&s), ["p1"]);
    assert_eq!(discarded(&mut s), [("p2".into(), DeathReason::Maxlen), ("p3".into(), DeathReason::Maxlen)]);
}

#[test]
fn a_numbered_publish_tells_each_message_its_sequence_number_and_none_where_it_was_not_kept() {
    let mut s = state(QueueType::Classic, limited(2, Overflow::RejectPublish));
    let (session, _rx) = SessionSink::new(1, 0);
    let to = || ConfirmTo { session: session.clone(), channel: 1 };
    let numbers = s.publish_numbered(vec![ttl_msg("p1", None, 1), ttl_msg("p2", None, 2)], to());
    assert_eq!(numbers, [Some(1), Some(2)]);
    let numbers = s.publish_numbered(vec![ttl_msg("p3", None, 3)], to());
    assert_eq!(numbers, [None], "refused: the queue is full");
    assert!(s.get(Owner { session: 1, channel: 1 }, true).is_some(), "p1 taken: room for one");
    let numbers = s.publish_numbered(vec![ttl_msg("p4", None, 4), ttl_msg("p5", None, 5)], to());
    assert_eq!(numbers, [Some(3), None], "the numbers go on where the last kept message left them");
    assert_eq!(bodies(&s), ["p2", "p4"]);
}

#[test]
fn max_length_bytes_counts_ready_body_bytes() {
    let settings =
        QueueSettings { max_length_bytes: Some(5), overflow: Overflow::RejectPublish, ..QueueSettings::default() };
    let mut s = state(QueueType::Classic, settings);
    let (ok, no) = publish(&mut s, vec![ttl_msg("abc", None, 1), ttl_msg("de", None, 2), ttl_msg("f", None, 3)]);
    assert_eq!((ok, no), (vec![1, 2], vec![3]));
}

#[test]
fn quorum_reject_publish_accepts_the_crossing_message_then_refuses_until_80_percent() {
    let mut s = state(QueueType::Quorum, limited(1, Overflow::RejectPublish));
    let (ok, no) = publish(&mut s, vec![ttl_msg("p1", None, 1), ttl_msg("p2", None, 2), ttl_msg("p3", None, 3)]);
    assert_eq!((ok, no), (vec![1, 2], vec![3]));
    // Below 80 % of 1 means empty.
    let owner = Owner { session: 1, channel: 1 };
    s.get(owner, true);
    s.refresh_refusing();
    assert!(s.limits().refusing());
    s.get(owner, true);
    s.refresh_refusing();
    assert!(!s.limits().refusing());
    // Quorum queues treat reject-publish-dlx as drop-head.
    let settings = QueueSettings::resolve(
        QueueType::Quorum,
        &[
            ("x-max-length".to_owned(), charon_model::Value::I64(1)),
            ("x-overflow".to_owned(), charon_model::Value::long_str("reject-publish-dlx")),
        ]
        .into_iter()
        .collect(),
        None,
        false,
    );
    assert_eq!(settings.overflow, Overflow::DropHead);
}

#[test]
fn ttl_is_the_smaller_of_queue_and_message_and_expires_only_at_the_head() {
    let settings = QueueSettings { message_ttl: Some(100), ..QueueSettings::default() };
    let mut s = state(QueueType::Classic, settings);
    publish(&mut s, vec![ttl_msg("long", Some(500), 1), ttl_msg("short", Some(10), 2)]);
    assert_eq!(s.next_deadline(), Some(1_100));
    s.set_now(1_050);
    s.expire(true);
    // "short" has expired but waits behind "long".
    assert!(discarded(&mut s).is_empty());
    s.set_now(1_100);
    s.expire(true);
    assert_eq!(discarded(&mut s), [("long".into(), DeathReason::Expired), ("short".into(), DeathReason::Expired)]);
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn ttl_zero_survives_until_dispatch_then_expires() {
    let mut s = state(QueueType::Classic, QueueSettings::default());
    publish(&mut s, vec![ttl_msg("now-or-never", Some(0), 1)]);
    s.expire(false);
    assert_eq!(bodies(&s), ["now-or-never"]);
    s.expire(true);
    assert_eq!(discarded(&mut s), [("now-or-never".into(), DeathReason::Expired)]);
    // Quorum queues give TTL 0 one millisecond.
    let mut q = state(QueueType::Quorum, QueueSettings::default());
    publish(&mut q, vec![ttl_msg("m", Some(0), 1)]);
    assert_eq!(q.next_deadline(), Some(1_001));
}

#[test]
fn expiry_dead_letters_only_what_the_outbox_has_room_for_and_never_delivers_the_rest() {
    let settings = QueueSettings { message_ttl: Some(10), ..QueueSettings::default() };
    let mut s = state(QueueType::Classic, settings);
    publish(&mut s, vec![ttl_msg("a", None, 1), ttl_msg("b", None, 2), ttl_msg("c", None, 3)]);
    s.set_now(1_050);
    s.set_expiry_room(2);
    s.expire(false);
    assert_eq!(discarded(&mut s), [("a".into(), DeathReason::Expired), ("b".into(), DeathReason::Expired)]);
    // "c" is past its deadline: no get hands it out, and with no room left the queue does
    // not wake for it (its outbox's room does).
    assert!(s.head_expired());
    assert!(s.get(Owner { session: 1, channel: 1 }, true).is_none());
    s.set_expiry_room(0);
    assert_eq!(s.next_deadline(), None);
    assert_eq!(bodies(&s), ["c"]);
    s.set_expiry_room(1);
    assert_eq!(s.next_deadline(), Some(1_010));
    s.expire(false);
    assert_eq!(discarded(&mut s), [("c".into(), DeathReason::Expired)]);
}

#[test]
fn quorum_delivery_limit_dead_letters_on_the_return_past_the_limit() {
    let settings = QueueSettings { delivery_limit: Some(1), ..QueueSettings::default() };
    let mut s = state(QueueType::Quorum, settings);
    publish(&mut s, vec![ttl_msg("m", None, 1)]);
    let owner = Owner { session: 1, channel: 1 };
    let first = s.get(owner, false).unwrap();
    assert_eq!(first.delivery.delivery_count, 0);
    s.settle(&[first.delivery.seq], Settle::Requeue);
    let second = s.get(owner, false).unwrap();
    // A plain return counts towards the limit (4.0.5's acquired count) but is no failed
    // delivery, so the AMQP 1.0 delivery-count stays 0.
    assert_eq!((second.delivery.delivery_count, second.delivery.redelivered), (0, true));
    s.settle(&[second.delivery.seq], Settle::Requeue);
    assert_eq!(discarded(&mut s), [("m".into(), DeathReason::DeliveryLimit)]);
    assert_eq!(s.ready().len(), 0);
}

#[test]
fn quorum_delivery_count_counts_failed_returns_only() {
    let mut s = state(QueueType::Quorum, QueueSettings::default());
    publish(&mut s, vec![ttl_msg("m", None, 1)]);
    let owner = Owner { session: 1, channel: 1 };
    let first = s.get(owner, false).unwrap();
    s.settle(&[first.delivery.seq], Settle::RequeueFailed);
    let second = s.get(owner, false).unwrap();
    assert_eq!(second.delivery.delivery_count, 1);
    s.owner_closed(owner);
    let third = s.get(owner, false).unwrap();
    assert_eq!(third.delivery.delivery_count, 2);
    s.settle(&[third.delivery.seq], Settle::Requeue);
    assert_eq!(s.get(owner, false).unwrap().delivery.delivery_count, 2);
}

#[test]
fn a_refusal_travels_with_the_discarded_message_only() {
    let cause = Arc::new(DeathCause::new(Some("app:bad-payload".into()), None, None, None).unwrap());
    for queue_type in [QueueType::Classic, QueueType::Quorum] {
        let mut s = state(queue_type, QueueSettings::default());
        publish(&mut s, (1..=4).map(|n| ttl_msg(&format!("m{n}"), None, n)).collect());
        let owner = Owner { session: 1, channel: 1 };
        let seqs: Vec<u64> = (0..4).map(|_| s.get(owner, false).unwrap().delivery.seq).collect();
        s.settle_refused(&seqs[..2], Settle::Discard, &cause);
        s.settle_refused(&seqs[2..3], Settle::Requeue, &cause);
        s.settle(&seqs[3..], Settle::DiscardUndeliverable);
        let refusals: Vec<(String, bool)> = s
            .take_discarded()
            .iter()
            .map(|d| {
                (
                    String::from_utf8_lossy(d.message.body.bytes()).into_owned(),
                    d.message.broker.refusal == Some(Arc::clone(&cause)),
                )
            })
            .collect();
        assert_eq!(refusals, [("m1".into(), true), ("m2".into(), true), ("m4".into(), false)], "{queue_type:?}");
        // A requeue ignores the cause: the message comes back as it was.
        let again = s.get(owner, false).unwrap();
        assert_eq!((again.delivery.seq, again.delivery.message.broker.refusal.is_none()), (seqs[2], true));
    }
}

#[test]
fn a_quorum_discard_counts_a_failed_delivery_unless_only_undeliverable() {
    let mut s = state(QueueType::Quorum, QueueSettings::default());
    publish(&mut s, vec![ttl_msg("rejected", None, 1), ttl_msg("undeliverable", None, 2)]);
    let owner = Owner { session: 1, channel: 1 };
    let first = s.get(owner, false).unwrap();
    let second = s.get(owner, false).unwrap();
    s.settle(&[first.delivery.seq], Settle::Discard);
    s.settle(&[second.delivery.seq], Settle::DiscardUndeliverable);
    let counts: Vec<u32> = s.take_discarded().iter().map(|d| d.message.broker.delivery_count).collect();
    assert_eq!(counts, [1, 0]);
    // Classic queues keep no count.
    let mut c = state(QueueType::Classic, QueueSettings::default());
    publish(&mut c, vec![ttl_msg("m", None, 1)]);
    let got = c.get(owner, false).unwrap();
    c.settle(&[got.delivery.seq], Settle::Discard);
    assert_eq!(c.take_discarded().first().map(|d| d.message.broker.delivery_count), Some(0));
}

#[test]
fn x_expires_counts_from_the_last_use_while_there_is_no_consumer() {
    let settings = QueueSettings { expires: Some(1_000), ..QueueSettings::default() };
    let mut s = state(QueueType::Classic, settings);
    assert_eq!(s.next_deadline(), Some(2_000));
    s.set_now(1_500);
    s.touch();
    s.set_now(2_100);
    assert!(!s.has_expired());
    s.set_now(2_500);
    assert!(s.has_expired());
}

#[test]
fn a_declare_keeps_a_classic_queue_but_not_a_quorum_queue() {
    let settings = QueueSettings { expires: Some(1_000), ..QueueSettings::default() };
    let mut q = state(QueueType::Quorum, settings);
    q.set_now(1_900);
    q.touch();
    q.set_now(2_100);
    assert!(q.has_expired());
    // A get counts.
    q.set_now(1_900);
    q.get(Owner { session: 1, channel: 1 }, true);
    q.set_now(2_100);
    assert!(!q.has_expired());
}

#[test]
fn a_1_0_message_counts_its_bare_message_against_max_length_bytes() {
    let settings = QueueSettings { max_length_bytes: Some(14), ..QueueSettings::default() };
    let mut s = state(QueueType::Classic, settings);
    let items = ["aa", "bb", "cc"].map(|body| {
        let mut m = Message::new(Routing::default(), Body::Data(body.to_owned().into()));
        // One data section: 5 bytes of section header, then the 2 body bytes.
        let mut bare = vec![0x00, 0x53, 0x75, 0xa0, 0x02];
        bare.extend_from_slice(body.as_bytes());
        m.encoded = charon_model::Encoded::Amqp10Bare(bare.into());
        Enqueue { message: Arc::new(m), confirm: None }
    });
    s.publish(items.into_iter().collect(), None);
    assert_eq!(bodies(&s), ["bb", "cc"]);
    assert_eq!(discarded(&mut s), [("aa".into(), DeathReason::Maxlen)]);
}

#[test]
fn a_lowered_limit_drops_the_head_at_once() {
    let mut s = state(QueueType::Classic, QueueSettings::default());
    publish(&mut s, vec![ttl_msg("a", None, 1), ttl_msg("b", None, 2), ttl_msg("c", None, 3)]);
    s.apply_settings(limited(1, Overflow::DropHead));
    assert_eq!(bodies(&s), ["c"]);
    assert_eq!(discarded(&mut s).len(), 2);
}

#[test]
fn persistent_messages_are_journalled_and_their_confirms_wait_for_the_log() {
    let mut state = durable_queue();
    let (session, _events) = SessionSink::new(1, 0);
    let to = ConfirmTo { session: session.clone(), channel: 1 };
    // A transient message alone: nothing to write, confirmed at once.
    state.publish(vec![Enqueue { message: persistent_msg(1), confirm: Some(1) }], Some(to.clone()));
    assert_eq!(state.take_outbox().len(), 1);
    let (records, confirms) = state.take_journal();
    assert!(records.is_empty() && confirms.is_empty());
    // A persistent one: an Enqueue record, the confirmation held for it.
    state.publish(vec![Enqueue { message: persistent_msg(2), confirm: Some(2) }], Some(to));
    assert!(state.take_outbox().is_empty());
    let (records, confirms) = state.take_journal();
    assert_eq!(kinds(&records), ["enqueue"]);
    let Some(Record::Enqueue { queue, seq, .. }) = records.first() else { panic!("{records:?}") };
    assert_eq!(*queue, 7);
    assert!(*seq >= 1_000 << 20, "sequence numbers start above the clock floor: {seq}");
    assert_eq!(confirms.len(), 1);
    // Fetching both writes nothing: a classic queue, as RabbitMQ 4.0.5's, keeps no mark of a
    // delivery. Only the persistent one is marked when it comes back, and removed on ack.
    let owner = Owner { session: 1, channel: 1 };
    let transient = state.get(owner, false).unwrap();
    let persistent = state.get(owner, false).unwrap();
    assert!(state.take_journal().0.is_empty());
    state.settle(&[transient.delivery.seq, persistent.delivery.seq], Settle::Requeue);
    assert_eq!(kinds(&state.take_journal().0), ["delivered"]);
    let transient = state.get(owner, false).unwrap();
    let persistent = state.get(owner, false).unwrap();
    assert!(transient.delivery.redelivered && persistent.delivery.redelivered);
    assert!(state.take_journal().0.is_empty());
    state.settle(&[transient.delivery.seq, persistent.delivery.seq], Settle::Ack);
    assert_eq!(kinds(&state.take_journal().0), ["remove"]);
}

fn no_ack(mut spec: ConsumeSpec) -> ConsumeSpec {
    spec.no_ack = true;
    spec
}

/// Flow control: a queue holds its publishers while messages pile up behind a consumer that
/// only its connection's outbound window stops, and lets them go once the consumer caught up.
#[test]
fn a_consumer_waiting_on_its_connection_holds_the_publishers_back_until_the_backlog_drains() {
    use super::super::flow::{FLOW_HIGH, FLOW_LOW};
    let window = 100;
    let (session, _rx) = SessionSink::new(1, window);
    let mut s = QueueState::new(handle(), QueueSettings::default(), 0);
    s.consume(no_ack(consumer(10, &session, 0))).unwrap();
    let publish = |s: &mut QueueState, n: usize| s.publish((0..n).map(|i| msg(i as u8)).collect(), None);
    publish(&mut s, FLOW_HIGH);
    s.dispatch();
    s.refresh_flow();
    assert!(!s.held_for_flow(), "{} ready, not above the mark", FLOW_HIGH - 100);
    publish(&mut s, 101);
    s.dispatch();
    s.refresh_flow();
    assert!(s.held_for_flow(), "above the mark, the consumer waiting on its window");
    // The connection writes what it has; the queue hands out more, until the backlog is down
    // to the low mark.
    let mut ready = FLOW_HIGH + 1;
    while ready > FLOW_LOW {
        assert!(s.held_for_flow(), "held at {ready}");
        let _ = s.take_outbox();
        session.outbound.release(window);
        s.dispatch();
        s.refresh_flow();
        ready -= usize::try_from(window).unwrap();
    }
    assert!(!s.held_for_flow(), "let go at {ready}");
}

/// A slow application (its prefetch full) and a queue nobody consumes never hold publishers:
/// their backlog is what queues are for.
#[test]
fn a_consumer_held_by_its_prefetch_or_no_consumer_never_holds_the_publishers() {
    use super::super::flow::FLOW_HIGH;
    let (session, _rx) = SessionSink::new(1, 0);
    let mut s = QueueState::new(handle(), QueueSettings::default(), 0);
    s.publish((0..FLOW_HIGH * 2).map(|i| msg(i as u8)).collect(), None);
    s.dispatch();
    s.refresh_flow();
    assert!(!s.held_for_flow(), "no consumer");
    s.consume(consumer(10, &session, 10)).unwrap();
    s.dispatch();
    s.refresh_flow();
    assert_eq!(delivered(&mut s).first().map(|(_, seqs, _)| seqs.len()), Some(10));
    assert!(!s.held_for_flow(), "the consumer's prefetch stops it, not its connection");
}
