#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use charon_model::{DeathReason, Properties, Table};
use charon_store::segment_log::{LogOptions, MessageLog, Record};

use super::*;
use crate::browse::BrowseRequest;
use crate::log_fixture::{Fixture, fixture, fixture_with, queue_state};
use crate::requests::ConsumeSpec;
use crate::session::{Owner, SessionSink};
use crate::settings::QueueSettings;
use crate::state::QueueState;

fn bodies(range: std::ops::Range<usize>) -> impl Iterator<Item = String> {
    range.map(|i| format!("message {i}"))
}

fn count(records: &[Record], kind: fn(&Record) -> bool) -> usize {
    records.iter().filter(|r| kind(r)).count()
}

const OVER: usize = 5_000;

#[test]
fn a_long_queue_spills_what_does_not_fit_and_gives_everything_back_in_order() {
    let mut f = fixture(false, QueueSettings::default());
    f.publish(bodies(0..IDLE_RESIDENT_MESSAGES + OVER), 1, None);
    assert_eq!(f.runs(), (IDLE_RESIDENT_MESSAGES, 0, OVER), "the head is full; the rest waits for the log");
    let records = f.flush();
    assert_eq!(count(&records, |r| matches!(r, Record::Spill { .. })), OVER, "transient ones are spilled");
    assert_eq!(records.len(), OVER);
    assert_eq!(f.runs(), (IDLE_RESIDENT_MESSAGES, OVER, 0), "placed: they left memory");
    assert_eq!(f.state.stats().ready, u32::try_from(IDLE_RESIDENT_MESSAGES + OVER).unwrap());
    // New messages queue behind the paged ones, never before them.
    f.publish(bodies(IDLE_RESIDENT_MESSAGES + OVER..IDLE_RESIDENT_MESSAGES + OVER + 10), 1, None);
    assert_eq!(f.runs(), (IDLE_RESIDENT_MESSAGES, OVER, 10));
    let got = f.get_all();
    assert_eq!(got, bodies(0..IDLE_RESIDENT_MESSAGES + OVER + 10).collect::<Vec<_>>());
    let (records, _) = f.state.take_journal();
    assert_eq!(count(&records, |r| matches!(r, Record::Released { .. })), OVER + 10, "every spill released");
    assert_eq!(count(&records, |r| matches!(r, Record::Spill { .. })), 10);
    assert_eq!(f.state.stats().ready, 0);
    assert_eq!(f.state.ready().bytes(), 0);
}

#[test]
fn a_queue_with_a_consumer_keeps_a_longer_head_than_one_nobody_consumes_from() {
    let mut f = fixture(false, QueueSettings::default());
    let (session, _rx) = SessionSink::new(1, 0);
    let spec = ConsumeSpec {
        id: 1,
        tag: "ctag".into(),
        owner: Owner { session: session.id, channel: 1 },
        session,
        no_ack: false,
        prefetch: 1,
        link_credit: None,
        channel_limit: None,
        exclusive: false,
        arguments: Table::new(),
    };
    f.state.consume(spec).unwrap();
    f.publish(bodies(0..RESIDENT_MESSAGES + 10), 1, None);
    assert_eq!(f.runs(), (RESIDENT_MESSAGES, 0, 10));
    f.state.cancel_all_consumers();
    f.flush();
    f.publish(bodies(RESIDENT_MESSAGES + 10..RESIDENT_MESSAGES + 20), 1, None);
    assert_eq!(f.runs(), (RESIDENT_MESSAGES, 10, 10), "behind the paged run either way");
    let mut idle = fixture(false, QueueSettings::default());
    idle.publish(bodies(0..RESIDENT_MESSAGES + 10), 1, None);
    assert_eq!(idle.runs(), (IDLE_RESIDENT_MESSAGES, 0, RESIDENT_MESSAGES + 10 - IDLE_RESIDENT_MESSAGES));
}

/// A spill only lets a transient message leave memory. A publisher's confirmation of one waits
/// until the log wrote it (it paces a flood into a long queue); a queue's own dead letter's
/// does not (its at-least-once source frees the letter on the confirmation).
#[test]
fn a_spilled_message_paces_its_publisher_but_not_a_dead_letters_source() {
    let spilled = |number: u64| {
        let mut f = fixture(false, QueueSettings::default());
        f.publish(bodies(0..IDLE_RESIDENT_MESSAGES), 1, None);
        let (session, _events) = SessionSink::new(1, 0);
        let to = crate::requests::ConfirmTo { session, channel: 1 };
        let mut message = Message::new(charon_model::Routing::default(), charon_model::Body::Data("spilled".into()));
        message.set_properties(Properties { delivery_mode: Some(1), ..Properties::default() });
        let item = crate::requests::Enqueue { message: Arc::new(message), confirm: Some(number) };
        f.state.publish(vec![item], Some(to));
        let sent = f.state.take_outbox().len();
        let (records, held) = f.state.take_journal();
        (count(&records, |r| matches!(r, Record::Spill { .. })), sent, held.len())
    };
    assert_eq!(spilled(7), (1, 0, 1), "a publisher's: held for the log");
    assert_eq!(spilled(7 | crate::dlx_pending::NUMBER_BIT), (1, 1, 0), "a dead letter's: at once");
}

#[test]
fn a_durable_queue_pages_persistent_messages_through_their_enqueue_records() {
    let mut f = fixture(true, QueueSettings::default());
    f.publish(bodies(0..IDLE_RESIDENT_MESSAGES + OVER), 2, None);
    let records = f.flush();
    assert_eq!(count(&records, |r| matches!(r, Record::Enqueue { .. })), IDLE_RESIDENT_MESSAGES + OVER);
    assert_eq!(count(&records, |r| matches!(r, Record::Spill { .. })), 0, "written once, not spilled again");
    assert_eq!(f.runs(), (IDLE_RESIDENT_MESSAGES, OVER, 0));
    assert_eq!(f.get_all().len(), IDLE_RESIDENT_MESSAGES + OVER);
    let (records, _) = f.state.take_journal();
    assert_eq!(count(&records, |r| matches!(r, Record::Remove { .. })), IDLE_RESIDENT_MESSAGES + OVER);
}

#[test]
fn length_limits_purge_and_requeues_see_the_paged_messages() {
    let settings = QueueSettings {
        max_length: Some(u64::try_from(IDLE_RESIDENT_MESSAGES + 100).unwrap()),
        ..QueueSettings::default()
    };
    let mut f = fixture(false, settings);
    f.publish(bodies(0..IDLE_RESIDENT_MESSAGES + 300), 1, None);
    f.flush();
    // drop-head dropped the 200 oldest, from the head.
    assert_eq!(f.state.stats().ready, u32::try_from(IDLE_RESIDENT_MESSAGES + 100).unwrap());
    let dropped = f.state.take_discarded();
    assert_eq!(dropped.len(), 200);
    assert!(dropped.iter().all(|d| d.reason == DeathReason::Maxlen));
    // A requeued message goes back before the paged ones.
    let owner = Owner { session: 1, channel: 1 };
    let first = f.state.get(owner, false).unwrap();
    assert_eq!(first.delivery.message.body.bytes(), &b"message 200"[..]);
    f.state.settle(&[first.delivery.seq], crate::Settle::Requeue);
    let got = f.get_all();
    assert_eq!(got.first().map(String::as_str), Some("message 200"));
    assert_eq!(got.last().map(String::as_str), Some(format!("message {}", IDLE_RESIDENT_MESSAGES + 299).as_str()));
    assert_eq!(got.len(), IDLE_RESIDENT_MESSAGES + 100);
    // Purge counts and releases the paged run without reading it.
    f.publish(bodies(0..IDLE_RESIDENT_MESSAGES + 50), 1, None);
    f.flush();
    assert_eq!(f.runs(), (IDLE_RESIDENT_MESSAGES, 50, 0));
    assert_eq!(f.state.purge(), u32::try_from(IDLE_RESIDENT_MESSAGES + 50).unwrap());
    let (records, _) = f.state.take_journal();
    assert_eq!(count(&records, |r| matches!(r, Record::Released { .. })), 50);
    assert_eq!(f.runs(), (0, 0, 0));
}

#[test]
fn paged_messages_expire_at_the_head_in_order() {
    let mut f = fixture(false, QueueSettings::default());
    f.publish(bodies(0..IDLE_RESIDENT_MESSAGES + OVER), 1, Some(10_000));
    f.flush();
    assert_eq!(f.runs(), (IDLE_RESIDENT_MESSAGES, OVER, 0), "paged");
    assert_eq!(f.state.next_deadline(), Some(11_000));
    f.state.set_now(11_001);
    f.state.expire(false);
    let expired = f.state.take_discarded();
    assert_eq!(expired.len(), IDLE_RESIDENT_MESSAGES + OVER);
    let last = expired.last().map(|d| String::from_utf8(d.message.body.bytes().to_vec()).unwrap());
    assert_eq!(last, Some(format!("message {}", IDLE_RESIDENT_MESSAGES + OVER - 1)));
    assert!(expired.iter().all(|d| d.reason == DeathReason::Expired));
    assert_eq!(f.state.stats().ready, 0);
}

/// A message that expires within a second stays whole in memory (up to a bound) even while
/// nobody consumes: written out, it would be read back at its expiry anyway.
#[test]
fn messages_about_to_expire_stay_in_memory_up_to_their_own_bound() {
    let mut f = fixture(false, QueueSettings::default());
    f.publish(bodies(0..SHORT_LIVED_RESIDENT_MESSAGES + 10), 1, Some(1_000));
    assert_eq!(f.runs(), (SHORT_LIVED_RESIDENT_MESSAGES, 0, 10));
    assert_eq!(f.flush().len(), 10, "only those beyond the bound are spilled");
    f.state.set_now(2_001);
    f.state.expire(false);
    assert_eq!(f.state.take_discarded().len(), SHORT_LIVED_RESIDENT_MESSAGES + 10);
    // A longer TTL pages as before.
    let mut longer = fixture(false, QueueSettings::default());
    longer.publish(bodies(0..IDLE_RESIDENT_MESSAGES + 10), 1, Some(1_001));
    assert_eq!(longer.runs(), (IDLE_RESIDENT_MESSAGES, 0, 10));
}

#[test]
fn a_paged_message_whose_segment_is_gone_waits_for_its_new_place() {
    let mut f = fixture(false, QueueSettings::default());
    f.publish(bodies(0..IDLE_RESIDENT_MESSAGES + 1), 1, None);
    let records = f.flush();
    let Some(Record::Spill { seq, payload, .. }) = records.first().cloned() else { panic!("{records:?}") };
    // Pretend compaction moved it: the queue's place points into a segment that is gone.
    let stale = Place { segment: 99, offset: 16, len: 100 };
    f.state.placed(vec![Placed { queue: 3, seq, place: stale }]);
    let owner = Owner { session: 1, channel: 1 };
    for _ in 0..IDLE_RESIDENT_MESSAGES {
        f.state.get(owner, true).unwrap();
    }
    assert!(f.state.get(owner, true).is_none(), "not readable now");
    assert_eq!(f.state.stats().ready, 1, "but not lost");
    assert_eq!(f.state.next_deadline(), Some(1_000 + RETRY_MS), "tried again soon");
    // The new place arrives (written here by the test as compaction would).
    let (tx, rx) = std_mpsc::channel();
    let moved = Record::Spill { queue: 3, seq, payload };
    f.log.append(vec![moved], Some(Box::new(move |r| tx.send(r.unwrap()).unwrap())));
    f.state.placed(rx.recv_timeout(Duration::from_secs(10)).unwrap());
    let got = f.state.get(owner, true).unwrap();
    assert_eq!(got.delivery.message.body.bytes(), format!("message {IDLE_RESIDENT_MESSAGES}").as_bytes());
    assert_eq!(f.state.next_deadline(), None, "nothing left to retry");
}

#[test]
fn a_failed_read_is_retried_after_a_pause_and_then_forgotten() {
    let mut f = fixture(false, QueueSettings::default());
    f.publish(bodies(0..IDLE_RESIDENT_MESSAGES + 1), 1, None);
    let (_, placed) = f.flush_placed();
    let real = placed.first().copied().unwrap();
    // The segment cannot be opened for now (as after an I/O error).
    let missing = Place { segment: 42, ..real.place };
    f.state.placed(vec![Placed { place: missing, ..real }]);
    let owner = Owner { session: 1, channel: 1 };
    for _ in 0..IDLE_RESIDENT_MESSAGES {
        f.state.get(owner, true).unwrap();
    }
    assert!(f.state.get(owner, true).is_none());
    assert_eq!(f.state.next_deadline(), Some(1_000 + RETRY_MS));
    f.state.set_now(1_000 + RETRY_MS / 2);
    assert!(f.state.get(owner, true).is_none(), "no new attempt before the pause is over");
    // The file is readable again, with no new place: the retry reads it.
    let dir = f._dir.path();
    std::fs::copy(dir.join(format!("{:016}.seg", real.place.segment)), dir.join(format!("{:016}.seg", 42))).unwrap();
    f.state.set_now(1_000 + RETRY_MS);
    let got = f.state.get(owner, true).unwrap();
    assert_eq!(got.delivery.message.body.bytes(), format!("message {IDLE_RESIDENT_MESSAGES}").as_bytes());
    assert_eq!(f.state.next_deadline(), None, "an empty queue has no timer left");
}

/// Takes the pass's deliveries: (sequence number, body).
fn deliveries(state: &mut QueueState) -> Vec<(u64, String)> {
    state
        .take_outbox()
        .into_iter()
        .flat_map(|(_, event)| match event {
            crate::session::SessionEvent::Deliveries { items, .. } => items,
            _ => Vec::new(),
        })
        .map(|d| (d.seq, String::from_utf8(d.message.body.bytes().to_vec()).unwrap()))
        .collect()
}

#[test]
fn with_a_runtime_the_next_page_is_read_ahead_off_the_task_and_order_is_kept() {
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let _inside = runtime.enter();
    let mut f = fixture(false, QueueSettings::default());
    let total = IDLE_RESIDENT_MESSAGES + OVER;
    f.publish(bodies(0..total), 1, None);
    f.flush();
    let (session, _rx) = SessionSink::new(1, 0);
    let spec = ConsumeSpec {
        id: 1,
        tag: "ctag".into(),
        owner: Owner { session: session.id, channel: 1 },
        session,
        no_ack: false,
        prefetch: 1,
        link_credit: None,
        channel_limit: None,
        exclusive: false,
        arguments: Table::new(),
    };
    f.state.consume(spec).unwrap();
    f.state.dispatch();
    let first = deliveries(&mut f.state);
    assert_eq!(first.iter().map(|(_, body)| body.as_str()).collect::<Vec<_>>(), ["message 0"]);
    // The head fell below the read-ahead mark: the next page is being read, off the task, and
    // its messages stay counted in the paged run until the queue takes them.
    assert!(f.state.ready().reading());
    assert_eq!(f.runs(), (IDLE_RESIDENT_MESSAGES - 1, OVER, 0));
    assert_eq!(f.state.stats().ready, u32::try_from(total - 1).unwrap());
    let mut seen: Vec<String> = first.iter().map(|(_, body)| body.clone()).collect();
    let mut unacked: Vec<u64> = first.iter().map(|(seq, _)| *seq).collect();
    let mut waits = 0;
    while seen.len() < total {
        f.state.settle(&unacked, crate::Settle::Ack);
        f.state.dispatch();
        let got = deliveries(&mut f.state);
        if got.is_empty() {
            // The head ran dry before the read was done: nothing is delivered out of order
            // meanwhile, and the read's completion brings the rest.
            waits += 1;
            assert!(waits < 2_000, "the read never completed");
            std::thread::sleep(Duration::from_millis(5));
        }
        unacked = got.iter().map(|(seq, _)| *seq).collect();
        seen.extend(got.into_iter().map(|(_, body)| body));
    }
    assert_eq!(seen, bodies(0..total).collect::<Vec<_>>(), "every message once, in order");
    assert_eq!(f.state.stats().ready, 0);
    assert!(!f.state.ready().reading());
}

#[test]
fn a_get_waits_for_the_page_being_read_and_a_purge_makes_it_stale() {
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let _inside = runtime.enter();
    let mut f = fixture(false, QueueSettings::default());
    f.publish(bodies(0..IDLE_RESIDENT_MESSAGES + OVER), 1, None);
    f.flush();
    let owner = Owner { session: 1, channel: 1 };
    // Gets take the head down past the read-ahead mark; the get that finds it empty waits
    // for the page rather than answering empty.
    let got = f.get_all();
    assert_eq!(got, bodies(0..IDLE_RESIDENT_MESSAGES + OVER).collect::<Vec<_>>());
    // A purge while a page is being read: what the read brings back is stale and dropped.
    f.publish(bodies(0..IDLE_RESIDENT_MESSAGES + OVER), 1, None);
    f.flush();
    f.state.get(owner, true).unwrap();
    assert!(f.state.ready().reading());
    assert_eq!(f.state.purge(), u32::try_from(IDLE_RESIDENT_MESSAGES + OVER - 1).unwrap());
    f.publish(bodies(100_000..100_003), 1, None);
    assert_eq!(f.get_all(), bodies(100_000..100_003).collect::<Vec<_>>());
    assert_eq!(f.state.stats().ready, 0);
}

fn max_priority(max: i64) -> Table {
    let mut arguments = Table::new();
    arguments.insert("x-max-priority", charon_model::Value::I64(max));
    arguments
}

fn prioritised(priority: u8, delivery_mode: u8) -> Properties {
    Properties { priority: Some(priority), delivery_mode: Some(delivery_mode), ..Properties::default() }
}

#[test]
fn each_priority_pages_its_own_run_and_they_come_back_highest_first() {
    let mut f = fixture_with(false, QueueSettings::default(), max_priority(9));
    let per_level = IDLE_RESIDENT_MESSAGES + OVER;
    for i in 0..per_level {
        f.publish_with([format!("low {i}")], prioritised(1, 1));
        f.publish_with([format!("high {i}")], prioritised(7, 1));
    }
    f.flush();
    assert_eq!(f.runs(), (2 * IDLE_RESIDENT_MESSAGES, 2 * OVER, 0), "both runs paged their tails");
    assert_eq!(f.state.stats().ready, u32::try_from(2 * per_level).unwrap());
    let got = f.get_all();
    let expected: Vec<String> =
        (0..per_level).map(|i| format!("high {i}")).chain((0..per_level).map(|i| format!("low {i}"))).collect();
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "priority order, then FIFO, across the paged runs");
    assert_eq!(f.state.ready().bytes(), 0);
}

#[test]
fn a_durable_priority_queue_recovers_each_message_into_its_priority() {
    let mut f = fixture_with(true, QueueSettings::default(), max_priority(5));
    let priorities = [0u8, 5, 3, 5, 0, 9, 1];
    for (i, &p) in priorities.iter().enumerate() {
        f.publish_with([format!("m{i}-p{p}")], prioritised(p, 2));
    }
    // Enough behind them that a restart leaves some paged.
    f.publish_with(bodies(0..3_000), prioritised(2, 2));
    f.flush();
    let Fixture { log, _dir: dir, .. } = f;
    log.close().unwrap();
    let (log, mut recovery) = MessageLog::open(dir.path(), LogOptions::default()).unwrap();
    let restored = recovery.queues.remove(&3).unwrap();
    assert_eq!(restored.len(), priorities.len() + 3_000);
    let mut f =
        Fixture { state: queue_state(&log, true, QueueSettings::default(), max_priority(5), restored), log, _dir: dir };
    let got = f.get_all();
    let expected: Vec<String> = ["m1-p5", "m3-p5", "m5-p9", "m2-p3"]
        .into_iter()
        .map(String::from)
        .chain(bodies(0..3_000))
        .chain(["m6-p1", "m0-p0", "m4-p0"].map(String::from))
        .collect();
    assert!(got == expected, "got {:?}…", got.get(..8));
}

/// Every page of the queue, `limit` at a time, in the order asked for, as the handle resolves
/// them (here on the test's thread).
fn browse_all(state: &QueueState, limit: usize, newest_first: bool) -> Vec<(u64, String)> {
    let mut cursor = None;
    let mut all = Vec::new();
    loop {
        let request = BrowseRequest {
            after: cursor.filter(|_| !newest_first),
            before: cursor.filter(|_| newest_first),
            newest_first,
            limit,
            include_unacked: false,
            include_delayed: false,
        };
        let page = state.browse(request).resolve();
        assert!(page.items.len() <= limit);
        for item in &page.items {
            all.push((item.seq, String::from_utf8(item.message.body.bytes().to_vec()).unwrap()));
        }
        cursor = page.items.last().map(|item| item.seq);
        if !page.has_more {
            return all;
        }
        assert!(!page.items.is_empty(), "a page with more after it is never empty");
    }
}

/// Removes `seqs` as the handle does: what is at hand at once, then what the index chunks hold,
/// read "off the task" here.
fn remove(state: &mut QueueState, seqs: &[u64]) -> Vec<u64> {
    let first = state.remove(seqs);
    let mut removed = first.seqs;
    for (run, check) in first.checks {
        let found = check.found();
        removed.extend(state.remove_checked(run, check.id, found).seqs);
    }
    removed.sort_unstable();
    removed
}

#[test]
fn browsing_pages_through_every_run_in_order_both_ways_and_takes_nothing() {
    let mut f = fixture(false, QueueSettings::default());
    f.publish(bodies(0..IDLE_RESIDENT_MESSAGES + OVER), 1, None);
    f.flush();
    f.publish(bodies(IDLE_RESIDENT_MESSAGES + OVER..IDLE_RESIDENT_MESSAGES + OVER + 10), 1, None);
    assert_eq!(f.runs(), (IDLE_RESIDENT_MESSAGES, OVER, 10), "head, paged (chunks in the index file), incoming");
    let total = IDLE_RESIDENT_MESSAGES + OVER + 10;
    let expected: Vec<String> = bodies(0..total).collect();

    let oldest = browse_all(&f.state, 700, false);
    assert_eq!(oldest.iter().map(|(_, body)| body.clone()).collect::<Vec<_>>(), expected);
    assert!(oldest.windows(2).all(|w| w[0].0 < w[1].0), "sequence numbers grow");
    let newest = browse_all(&f.state, 333, true);
    let mut reversed = expected.clone();
    reversed.reverse();
    assert_eq!(newest.iter().map(|(_, body)| body.clone()).collect::<Vec<_>>(), reversed);

    // A window in the middle of the paged run: exactly the messages after the cursor.
    let cursor = oldest[IDLE_RESIDENT_MESSAGES + 3_000].0;
    let request = BrowseRequest { after: Some(cursor), ..BrowseRequest::oldest(5) };
    let page = f.state.browse(request).resolve();
    let seqs: Vec<u64> = page.items.iter().map(|i| i.seq).collect();
    assert_eq!(
        seqs,
        oldest[IDLE_RESIDENT_MESSAGES + 3_001..IDLE_RESIDENT_MESSAGES + 3_006].iter().map(|i| i.0).collect::<Vec<_>>()
    );
    assert!(page.has_more);

    assert_eq!(f.state.stats().ready, u32::try_from(total).unwrap(), "browsing takes nothing");
    assert_eq!(f.get_all(), expected);
}

#[test]
fn removing_by_sequence_number_reaches_every_run_and_the_rest_comes_back_in_order() {
    let mut f = fixture(true, QueueSettings::default());
    f.publish(bodies(0..IDLE_RESIDENT_MESSAGES + OVER), 2, None);
    f.flush();
    f.publish(bodies(IDLE_RESIDENT_MESSAGES + OVER..IDLE_RESIDENT_MESSAGES + OVER + 10), 2, None);
    let total = IDLE_RESIDENT_MESSAGES + OVER + 10;
    let all = browse_all(&f.state, 1_000, false);
    let bytes_before = f.state.ready().bytes();
    // One in the head, one at the front of the paged run, three deep in its index file (one
    // chunk read for two of them), one at its back, one still waiting for its place.
    let picks = [
        3,
        IDLE_RESIDENT_MESSAGES + 1,
        IDLE_RESIDENT_MESSAGES + 2_500,
        IDLE_RESIDENT_MESSAGES + 2_501,
        IDLE_RESIDENT_MESSAGES + 3_900,
        IDLE_RESIDENT_MESSAGES + OVER - 2,
        total - 1,
    ];
    let deep = f.state.remove(&[all[IDLE_RESIDENT_MESSAGES + 2_500].0]);
    assert!(deep.seqs.is_empty() && deep.checks.len() == 1, "deep in the index file: to be checked off the task");
    let mut seqs: Vec<u64> = picks.iter().map(|&i| all[i].0).collect();
    seqs.push(u64::MAX - 1);
    let removed = remove(&mut f.state, &seqs);
    assert_eq!(removed, seqs[..picks.len()].to_vec(), "every pick, and not the unknown number");
    assert!(remove(&mut f.state, &seqs).is_empty(), "a second removal finds none of them");
    assert_eq!(f.state.stats().ready, u32::try_from(total - picks.len()).unwrap());
    let body_len = |i: usize| u64::try_from(all[i].1.len()).unwrap();
    assert_eq!(f.state.ready().bytes(), bytes_before - picks.iter().map(|&i| body_len(i)).sum::<u64>());
    let (records, _) = f.state.take_journal();
    let removes: Vec<u64> =
        records.iter().filter_map(|r| if let Record::Remove { seq, .. } = r { Some(*seq) } else { None }).collect();
    assert_eq!(removes.len(), picks.len(), "each exit is in the log: {removes:?}");

    let browsed: Vec<String> = browse_all(&f.state, 999, false).into_iter().map(|(_, body)| body).collect();
    let expected: Vec<String> = (0..total).filter(|i| !picks.contains(i)).map(|i| all[i].1.clone()).collect();
    assert_eq!(browsed, expected, "browsing leaves the removed ones out");
    assert_eq!(f.get_all(), expected, "and so does consuming");
    assert_eq!(f.state.ready().bytes(), 0);
}

#[test]
fn a_priority_queue_browses_in_arrival_order_and_unsettled_messages_only_when_asked() {
    let mut f = fixture_with(false, QueueSettings::default(), max_priority(9));
    for i in 0..3_000 {
        f.publish_with([format!("m{i}")], prioritised(if i % 2 == 0 { 1 } else { 7 }, 1));
    }
    f.flush();
    let all = browse_all(&f.state, 500, false);
    assert_eq!(
        all.iter().map(|(_, b)| b.clone()).collect::<Vec<_>>(),
        (0..3_000).map(|i| format!("m{i}")).collect::<Vec<_>>()
    );
    // Two gets without acknowledgement: the highest priority's first two are held.
    let owner = Owner { session: 1, channel: 1 };
    let held: Vec<u64> = (0..2).map(|_| f.state.get(owner, false).unwrap().delivery.seq).collect();
    let ready_only = f.state.browse(BrowseRequest::oldest(10_000)).resolve();
    assert_eq!(ready_only.items.len(), 2_998);
    assert!(ready_only.items.iter().all(|i| !held.contains(&i.seq) && !i.unacked));
    let with_held = f.state.browse(BrowseRequest { include_unacked: true, ..BrowseRequest::oldest(3) }).resolve();
    let first: Vec<(u64, bool)> = with_held.items.iter().map(|i| (i.seq, i.unacked)).collect();
    assert_eq!(first, vec![(all[0].0, false), (held[0], true), (all[2].0, false)], "m1 (priority 7) is held");
    assert!(remove(&mut f.state, &held).is_empty(), "a held message is its consumer's to settle");
}

/// S5 lost up to 79,168 of 200,000 messages this way: they stayed in their queue, expired,
/// and never reached the dead-letter queue.
#[test]
fn a_read_done_during_a_pass_without_expiry_room_still_gives_the_queue_its_deadline() {
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let _inside = runtime.enter();
    let mut f = fixture(false, QueueSettings::default());
    f.state.set_now(1_000);
    let total = IDLE_RESIDENT_MESSAGES + OVER;
    // Longer than the TTL that keeps messages resident (`resident_messages`).
    f.publish(bodies(0..total), 1, Some(5_000));
    f.flush();
    // All expired. A pass with room for the head empties it, and the next page is read.
    f.state.set_now(60_000);
    f.state.set_expiry_room(IDLE_RESIDENT_MESSAGES + 1);
    f.state.expire(false);
    assert!(f.state.ready().reading(), "{:?}", f.runs());
    // The head's 256, and one more when the read-ahead of the next page was done in time.
    let after_first = f.state.stats().ready;
    assert!(
        [total - IDLE_RESIDENT_MESSAGES, total - IDLE_RESIDENT_MESSAGES - 1]
            .contains(&usize::try_from(after_first).unwrap()),
        "{after_first}"
    );
    // The read is done and woke the queue, whose outbox was full: passes without room, until
    // one takes the read.
    let started = std::time::Instant::now();
    loop {
        f.state.set_expiry_room(0);
        f.state.expire(false);
        if !f.state.ready().reading() {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "no pass without room took the finished read");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The outbox emptied: the queue must not sleep without a deadline.
    f.state.set_expiry_room(100);
    assert!(f.state.next_deadline().is_some_and(|at| at < 60_000), "{:?}", f.state.next_deadline());
    f.state.expire(false);
    assert_eq!(f.state.stats().ready, after_first - 100);
}
