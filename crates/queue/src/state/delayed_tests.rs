#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
//! Delayed messages (a "not before" time, Zaqar's `delay`): kept out of the ready messages
//! until due, then delivered in due order; counted in `messages` and against the limits, never
//! as ready; purged, removed, browsed, expired and restored after a restart.

use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use charon_model::{Body, Properties, Routing, Table};
use charon_store::segment_log::{LogOptions, MessageLog};

use super::super::args::QueueType;
use super::super::delayed::MAX_MESSAGES;
use super::super::paging::IDLE_RESIDENT_MESSAGES;
use super::super::settings::Overflow;
use super::tests::queue_named;
use super::*;
use crate::session::SessionSink;

const OWNER: Owner = Owner { session: 1, channel: 1 };
const START: i64 = 1_000;

/// A message with body `body`, due at `not_before` (none: not delayed) and a TTL in ms.
fn message(body: &str, not_before: Option<i64>, ttl: Option<u64>) -> Arc<Message> {
    let mut m = Message::new(Routing::default(), Body::Data(body.to_owned().into()));
    m.origin = charon_model::Origin::Amqp091;
    m.set_properties(Properties { delivery_mode: Some(2), ttl, ..Properties::default() });
    m.broker.not_before = not_before;
    Arc::new(m)
}

fn state(queue_type: QueueType, settings: QueueSettings) -> QueueState {
    QueueState::new(queue_named("d", queue_type, true, 1, Table::new()), settings, START)
}

/// Publishes one message per batch; returns the confirm numbers refused.
fn publish(state: &mut QueueState, messages: Vec<Arc<Message>>) -> Vec<u64> {
    let (session, _rx) = SessionSink::new(1, 0);
    let mut refused = Vec::new();
    for (n, message) in (1u64..).zip(messages) {
        state.publish(
            vec![Enqueue { message, confirm: Some(n) }],
            Some(ConfirmTo { session: session.clone(), channel: 1 }),
        );
        for (_, event) in state.take_outbox() {
            if let crate::session::SessionEvent::Confirms { refused: no, .. } = event {
                refused.extend(no);
            }
        }
    }
    refused
}

fn get_all(state: &mut QueueState) -> Vec<String> {
    std::iter::from_fn(|| state.get(OWNER, true))
        .map(|got| String::from_utf8(got.delivery.message.body.bytes().to_vec()).unwrap())
        .collect()
}

/// Moves the clock to `now` and runs what a pass runs before dispatch.
fn at(state: &mut QueueState, now: i64) {
    state.set_now(now);
    state.release_due();
}

fn counts(state: &QueueState) -> (u32, u32) {
    let stats = state.stats();
    (stats.ready, stats.delayed)
}

#[test]
fn delayed_messages_wait_until_due_then_go_in_due_order() {
    for queue_type in [QueueType::Quorum, QueueType::Classic] {
        let mut s = state(queue_type, QueueSettings::default());
        publish(
            &mut s,
            vec![message("late", Some(5_000), None), message("early", Some(3_000), None), message("now", None, None)],
        );
        assert_eq!(counts(&s), (1, 2), "{queue_type:?}: delayed messages are not ready");
        assert_eq!(s.stats().message_bytes_delayed, 9);
        let gauges = s.gauges();
        assert_eq!((gauges.messages(), gauges.delayed, gauges.bytes()), (3, 2, 12), "the depth counts them");
        assert_eq!(s.next_deadline(), Some(3_000), "the timer wakes the queue for the earliest");
        assert_eq!(get_all(&mut s), ["now"]);
        at(&mut s, 2_999);
        assert_eq!(get_all(&mut s), Vec::<String>::new(), "not a millisecond early");
        at(&mut s, 3_000);
        assert_eq!(counts(&s), (1, 1));
        at(&mut s, 6_000);
        assert_eq!(counts(&s), (2, 0));
        assert_eq!(s.next_deadline(), None);
        // Due in sequence order among the ready messages: "late" was posted first.
        assert_eq!(get_all(&mut s), ["late", "early"], "{queue_type:?}");
    }
}

#[test]
fn a_consumer_gets_a_delayed_message_only_once_it_is_due() {
    let mut s = state(QueueType::Quorum, QueueSettings::default());
    let (session, _rx) = SessionSink::new(9, 0);
    let spec = ConsumeSpec {
        id: 1,
        tag: "c".into(),
        owner: Owner { session: 9, channel: 1 },
        session,
        no_ack: false,
        prefetch: 10,
        link_credit: None,
        channel_limit: None,
        exclusive: false,
        arguments: Table::new(),
    };
    s.consume(spec).unwrap();
    publish(&mut s, vec![message("d", Some(2_000), None), message("r", None, None)]);
    s.dispatch();
    let delivered = |s: &mut QueueState| -> Vec<u64> {
        s.take_outbox()
            .into_iter()
            .filter_map(|(_, e)| match e {
                crate::session::SessionEvent::Deliveries { items, .. } => {
                    Some(items.iter().map(|d| d.seq).collect::<Vec<u64>>())
                }
                _ => None,
            })
            .flatten()
            .collect()
    };
    assert_eq!(delivered(&mut s), [2], "only the message without delay");
    at(&mut s, 2_000);
    s.dispatch();
    assert_eq!(delivered(&mut s), [1]);
    assert_eq!(counts(&s), (0, 0));
    assert_eq!(s.stats().unacked, 2);
}

#[test]
fn purge_delete_remove_and_browse_see_delayed_messages() {
    let mut s = state(QueueType::Quorum, QueueSettings::default());
    publish(&mut s, vec![message("a", Some(9_000), None), message("b", None, None), message("c", Some(8_000), None)]);
    assert!(matches!(s.check_delete(false, true), Err(EngineError::NotEmpty(_))));
    assert_eq!(s.check_delete(false, false).unwrap(), 3, "a delete reports the delayed messages it takes");
    let browse = |s: &QueueState, include_delayed: bool| -> Vec<(u64, bool)> {
        let request = BrowseRequest { include_delayed, ..BrowseRequest::oldest(10) };
        s.browse(request).resolve().items.iter().map(|i| (i.seq, i.delayed)).collect()
    };
    assert_eq!(browse(&s, false), [(2, false)]);
    assert_eq!(browse(&s, true), [(1, true), (2, false), (3, true)]);
    let newest = BrowseRequest { newest_first: true, include_delayed: true, ..BrowseRequest::oldest(2) };
    let page = s.browse(newest).resolve();
    assert_eq!((page.items.iter().map(|i| i.seq).collect::<Vec<_>>(), page.has_more), (vec![3, 2], true));
    let removed = s.remove(&[3]);
    assert_eq!(removed.seqs, [3]);
    assert_eq!(counts(&s), (1, 1));
    assert_eq!(s.purge(), 2, "the ready one and the delayed one");
    assert_eq!(counts(&s), (0, 0));
    at(&mut s, 10_000);
    assert_eq!(get_all(&mut s), Vec::<String>::new(), "nothing comes back after the purge");
    assert!(s.check_delete(false, true).is_ok());
}

#[test]
fn length_limits_count_delayed_messages_and_drop_them_last() {
    // reject-publish on a classic queue: two delayed messages fill a queue of two.
    let settings = QueueSettings { max_length: Some(2), overflow: Overflow::RejectPublish, ..QueueSettings::default() };
    let mut s = state(QueueType::Classic, settings);
    let s_refused = publish(
        &mut s,
        vec![message("d1", Some(5_000), None), message("d2", Some(5_000), None), message("r", None, None)],
    );
    assert_eq!(s_refused, [3]);
    // drop-head: the ready message goes first, then the oldest delayed one.
    let mut s = state(
        QueueType::Classic,
        QueueSettings { max_length: Some(1), overflow: Overflow::DropHead, ..QueueSettings::default() },
    );
    publish(&mut s, vec![message("d1", Some(5_000), None), message("r", None, None)]);
    assert_eq!(counts(&s), (0, 1));
    assert_eq!(discarded(&mut s), [("r".to_owned(), DeathReason::Maxlen, None)]);
    publish(&mut s, vec![message("d2", Some(6_000), None)]);
    assert_eq!(counts(&s), (0, 1));
    // The dropped delayed message's dead letter is not delayed in its targets.
    assert_eq!(discarded(&mut s), [("d1".to_owned(), DeathReason::Maxlen, None)]);
    at(&mut s, 6_000);
    assert_eq!(get_all(&mut s), ["d2"]);
}

#[test]
fn a_delayed_message_whose_ttl_runs_out_first_expires_without_being_ready() {
    let mut s = state(QueueType::Quorum, QueueSettings::default());
    publish(&mut s, vec![message("x", Some(9_000), Some(2_000))]);
    assert_eq!(s.next_deadline(), Some(START + 2_000), "its TTL counts from the publish");
    at(&mut s, START + 2_000);
    assert_eq!(counts(&s), (0, 0));
    assert_eq!(discarded(&mut s), [("x".to_owned(), DeathReason::Expired, None)]);
}

#[test]
fn the_delayed_part_is_bounded_and_refuses_beyond_it() {
    let mut s = state(QueueType::Quorum, QueueSettings::default());
    let items: Vec<Enqueue> =
        (0..=MAX_MESSAGES).map(|_| Enqueue { message: message("", Some(9_000), None), confirm: Some(1) }).collect();
    let (session, _rx) = SessionSink::new(1, 0);
    s.publish(items, Some(ConfirmTo { session, channel: 1 }));
    let refused: Vec<u64> = s
        .take_outbox()
        .into_iter()
        .filter_map(|(_, e)| match e {
            crate::session::SessionEvent::Confirms { refused, .. } => Some(refused),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!((counts(&s), refused.len()), ((0, MAX_MESSAGES as u32), 1));
    // A message without delay still goes in.
    assert!(publish(&mut s, vec![message("r", None, None)]).is_empty());
}

/// What left the queue to be dead-lettered: body, reason, and the "not before" time of its
/// dead-lettered copy.
fn discarded(state: &mut QueueState) -> Vec<(String, DeathReason, Option<i64>)> {
    state
        .take_discarded()
        .into_iter()
        .map(|d| {
            let copy = crate::dead_letter::dead_lettered_copy(&d.message, "d", d.reason, "", None, START);
            (String::from_utf8_lossy(d.message.body.bytes()).into_owned(), d.reason, copy.broker.not_before)
        })
        .collect()
}

/// A durable quorum queue on `log`, restoring `restored`, its clock at `now`.
fn on_log(log: &MessageLog, restored: RecoveredQueue, now: i64) -> QueueState {
    let handle = queue_named("d", QueueType::Quorum, true, 3, Table::new());
    let mut state = QueueState::new(handle, QueueSettings::default(), now);
    state.enable_paging(log.reader().clone());
    state.enable_journal(restored);
    state
}

fn flush(state: &mut QueueState, log: &MessageLog) {
    let (records, _) = state.take_journal();
    let (tx, rx) = std_mpsc::channel();
    log.append(records, Some(Box::new(move |r| tx.send(r.unwrap()).unwrap())));
    let placed = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    state.placed(placed);
}

#[test]
fn delayed_messages_survive_a_restart_still_delayed_or_due_by_then() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (log, _) = MessageLog::open(dir.path(), LogOptions::default()).unwrap();
        let mut s = on_log(&log, RecoveredQueue::default(), START);
        publish(
            &mut s,
            vec![message("d", Some(10_000), None), message("r", None, None), message("e", Some(4_000), None)],
        );
        flush(&mut s, &log);
        log.close().unwrap();
    }
    // Restarted before either is due: both wait again, the ready one alone is ready.
    {
        let (log, mut recovery) = MessageLog::open(dir.path(), LogOptions::default()).unwrap();
        let restored = recovery.queues.remove(&3).unwrap();
        assert_eq!(restored.iter().map(|m| m.not_before).collect::<Vec<_>>(), [Some(10_000), None, Some(4_000)]);
        let mut s = on_log(&log, restored, 2_000);
        assert_eq!(counts(&s), (1, 2));
        assert_eq!(s.next_deadline(), Some(4_000));
        assert_eq!(get_all(&mut s), ["r"]);
        at(&mut s, 4_000);
        assert_eq!(get_all(&mut s), ["e"]);
        flush(&mut s, &log);
        log.close().unwrap();
    }
    // Restarted after the last one is due: it is ready at once.
    let (log, mut recovery) = MessageLog::open(dir.path(), LogOptions::default()).unwrap();
    let mut s = on_log(&log, recovery.queues.remove(&3).unwrap(), 20_000);
    assert_eq!(counts(&s), (1, 0));
    assert_eq!(get_all(&mut s), ["d"]);
}

/// `count` ready messages `r0`.., then one due at `due`, then one more ready.
fn long_queue_with_a_delayed_message(s: &mut QueueState, log: &MessageLog, count: usize, due: i64) {
    let mut messages: Vec<Arc<Message>> = (0..count).map(|i| message(&format!("r{i}"), None, None)).collect();
    messages.push(message("delayed", Some(due), None));
    messages.push(message("last", None, None));
    publish(s, messages);
    flush(s, log);
}

#[test]
fn in_a_long_quorum_queue_a_due_message_goes_out_before_older_paged_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = MessageLog::open(dir.path(), LogOptions::default()).unwrap();
    let mut s = on_log(&log, RecoveredQueue::default(), START);
    let count = IDLE_RESIDENT_MESSAGES + 50;
    long_queue_with_a_delayed_message(&mut s, &log, count, 5_000);
    assert!(s.ready().runs().1 + s.ready().runs().2 > 0, "older messages are paged");
    at(&mut s, 5_000);
    assert_eq!(counts(&s), (count as u32 + 2, 0));
    // It joins the returned run (as Zaqar hands out due messages in posting order, before the
    // later ones; the paged run cannot take it at its position).
    let got = get_all(&mut s);
    assert_eq!(got.first().map(String::as_str), Some("delayed"));
    assert_eq!(got.len(), count + 2);
    assert_eq!(got.last().map(String::as_str), Some("last"));
}

#[test]
fn in_a_long_classic_queue_a_due_message_waits_until_the_head_has_caught_up() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = MessageLog::open(dir.path(), LogOptions::default()).unwrap();
    let handle = queue_named("c", QueueType::Classic, true, 4, Table::new());
    let mut s = QueueState::new(handle, QueueSettings::default(), START);
    s.enable_paging(log.reader().clone());
    s.enable_journal(RecoveredQueue::default());
    let count = IDLE_RESIDENT_MESSAGES + 50;
    long_queue_with_a_delayed_message(&mut s, &log, count, 5_000);
    at(&mut s, 5_000);
    assert_eq!(counts(&s), (count as u32 + 1, 1), "older messages are paged: it cannot join in order yet");
    assert_eq!(s.next_deadline(), Some(5_000 + DUE_RETRY_MS));
    let got = get_all(&mut s);
    assert_eq!((got.len(), got.last().map(String::as_str)), (count + 1, Some("last")));
    at(&mut s, 5_000 + DUE_RETRY_MS);
    assert_eq!(get_all(&mut s), ["delayed"]);
}
