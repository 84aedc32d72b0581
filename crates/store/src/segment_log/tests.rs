#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::sync::atomic::AtomicBool;

use bytes::Bytes;

use super::replay::{segment_files, segment_path, unsynced_mark_path};
use super::*;

pub(super) fn enqueue(queue: u64, seq: u64, body: &'static [u8]) -> Record {
    Record::Enqueue {
        queue,
        seq,
        expires_at: None,
        size: 0,
        priority: 0,
        not_before: None,
        replaces: None,
        payload: Bytes::from_static(body),
    }
}

/// Appends and waits until the records are durable.
pub(super) fn append_synced(log: &MessageLog, records: Vec<Record>) {
    let (tx, rx) = mpsc::channel();
    log.append(records, Some(Box::new(move |r| tx.send(r.is_ok()).unwrap())));
    assert!(rx.recv_timeout(Duration::from_secs(10)).unwrap());
}

use std::time::Duration;

/// Returns once the writer has finished everything it was handed before, deletions and
/// compaction included: it takes commands in order and does that work before the next one,
/// but for a compaction's read, which runs off its thread and is committed on a later batch.
fn writer_idle(log: &MessageLog) {
    append_synced(log, Vec::new());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while log.compacting() {
        assert!(std::time::Instant::now() < deadline, "a compaction that never ends");
        std::thread::sleep(Duration::from_millis(1));
        append_synced(log, Vec::new());
    }
}

/// Idles the writer through enough batches for compaction to judge the oldest segment: the
/// rest of a window already begun, and a whole one.
fn writer_idle_until_settled(log: &MessageLog) {
    for _ in 0..=2 * compact::WATCH_BATCHES {
        writer_idle(log);
    }
}

fn open(dir: &Path) -> (MessageLog, Recovery) {
    MessageLog::open(dir, LogOptions::default()).unwrap()
}

/// The messages read back from where replay found them.
fn payloads(log: &MessageLog, messages: &RecoveredQueue) -> Vec<String> {
    let places: Vec<Place> = messages.iter().map(|m| m.place).collect();
    log.reader().read(&places).into_iter().map(|r| String::from_utf8(r.unwrap().to_vec()).unwrap()).collect()
}

pub(super) fn seqs(recovery: &Recovery, queue: u64) -> Vec<u64> {
    recovery.queues.get(&queue).map(|m| m.iter().map(|m| m.seq).collect()).unwrap_or_default()
}

#[test]
fn every_record_kind_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (log, recovery) = open(dir.path());
        assert!(recovery.queues.is_empty());
        append_synced(
            &log,
            vec![
                Record::Enqueue {
                    queue: 1,
                    seq: 10,
                    expires_at: Some(-5),
                    size: 7,
                    priority: 9,
                    not_before: Some(77),
                    replaces: None,
                    payload: Bytes::from_static(b"a"),
                },
                enqueue(1, 11, b"b"),
                enqueue(1, 12, b"c"),
                enqueue(2, 1, b"other queue"),
                Record::Delivered { queue: 1, seq: 11, returned: 2, failed: 1 },
                Record::Remove { queue: 1, seq: 12 },
                enqueue(3, 1, b"dropped"),
                Record::DropQueue { queue: 3 },
                Record::DeadLettered { queue: 2, seq: 1, reason: 3 },
            ],
        );
        log.close().unwrap();
    }
    let (log, recovery) = open(dir.path());
    let q1 = &recovery.queues[&1];
    assert_eq!(
        q1.iter()
            .map(|m| (m.seq, m.expires_at, m.size, m.priority, m.not_before, m.delivered, m.returned, m.failed))
            .collect::<Vec<_>>(),
        vec![(10, Some(-5), 7, 9, Some(77), false, 0, 0), (11, None, 0, 0, None, true, 2, 1)]
    );
    assert_eq!(payloads(&log, q1), ["a", "b"]);
    assert_eq!(seqs(&recovery, 2), vec![1]);
    assert_eq!(recovery.queues[&2].iter().next().unwrap().dead_lettered, Some(3));
    assert!(q1.iter().all(|m| m.dead_lettered.is_none()));
    assert!(!recovery.queues.contains_key(&3));
    assert_eq!(recovery.records, 9);
}

#[test]
fn concurrent_appends_share_syncs_and_complete_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = open(dir.path());
    let log = Arc::new(log);
    let (tx, rx) = mpsc::channel();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (log, tx) = (Arc::clone(&log), tx.clone());
            std::thread::spawn(move || {
                for i in 0..250u64 {
                    let tx = tx.clone();
                    log.append(
                        vec![enqueue(t, i, b"0123456789abcdef")],
                        Some(Box::new(move |r| tx.send((t, i, r.is_ok())).unwrap())),
                    );
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let done: Vec<(u64, u64, bool)> = (0..1000).map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap()).collect();
    assert!(done.iter().all(|(_, _, ok)| *ok));
    for t in 0..4 {
        let order: Vec<u64> = done.iter().filter(|(q, _, _)| *q == t).map(|(_, i, _)| *i).collect();
        assert_eq!(order, (0..250).collect::<Vec<_>>(), "completions in append order");
    }
    assert!(log.syncs() < 1000, "group commit: {} syncs for 1000 appends", log.syncs());
    log.close().unwrap();
    let (_log, recovery) = open(dir.path());
    assert_eq!((0..4).map(|q| seqs(&recovery, q).len()).sum::<usize>(), 1000);
}

#[test]
fn a_torn_tail_is_cut_off_at_every_offset_and_earlier_records_stay() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (log, _) = open(dir.path());
        append_synced(&log, vec![enqueue(1, 1, b"kept"), enqueue(1, 2, b"kept too")]);
        append_synced(&log, vec![enqueue(1, 3, b"the torn one")]);
        log.close().unwrap();
    }
    let (_, path) = segment_files(dir.path()).unwrap().pop().unwrap();
    let whole = std::fs::read(&path).unwrap();
    let last_record_len = 8 + 1 + 8 + 8 + 4 + 1 + b"the torn one".len();
    let start = whole.len() - last_record_len;
    for cut in start..whole.len() {
        std::fs::write(&path, &whole[..cut]).unwrap();
        let (log, recovery) = open(dir.path());
        assert_eq!(seqs(&recovery, 1), vec![1, 2], "cut at {cut}");
        assert_eq!(recovery.truncated_bytes, (cut - start) as u64);
        log.close().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), start as u64);
    }
    // A flipped byte in the last record's payload is a torn write too.
    let mut flipped = whole.clone();
    *flipped.last_mut().unwrap() ^= 1;
    std::fs::write(&path, &flipped).unwrap();
    let (_log, recovery) = open(dir.path());
    assert_eq!(seqs(&recovery, 1), vec![1, 2]);
}

#[test]
fn corruption_before_the_tail_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let options = LogOptions { segment_bytes: 64, fault: None };
        let (log, _) = MessageLog::open(dir.path(), options).unwrap();
        for seq in 0..4 {
            append_synced(&log, vec![enqueue(1, seq, b"a payload that fills a segment")]);
        }
        log.close().unwrap();
    }
    let segments = segment_files(dir.path()).unwrap();
    assert!(segments.len() >= 3, "{segments:?}");
    let (number, path) = &segments[0];
    let mut bytes = std::fs::read(path).unwrap();
    *bytes.last_mut().unwrap() ^= 0xff;
    std::fs::write(path, bytes).unwrap();
    let error = MessageLog::open(dir.path(), LogOptions::default()).unwrap_err();
    assert!(matches!(error, LogError::Corrupt { segment, .. } if segment == *number), "{error}");
}

/// A segment sealed with spills written after its last sync is not synced but marked: a
/// power loss that tears that tail (spills, never recovered anyway) does not stop the start,
/// and what the segment holds before the tail and what later segments hold are there. A tear
/// before the tail is corruption still, as in a segment without the mark (the test above).
#[test]
fn a_torn_tail_of_unsynced_spills_in_a_sealed_segment_does_not_stop_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions { segment_bytes: 1024, fault: None };
    let spill = |seq| Record::Spill { queue: 2, seq, payload: Bytes::from_static(b"spilled spilled spilled spilled") };
    let synced_until;
    {
        let (log, _) = MessageLog::open(dir.path(), options.clone()).unwrap();
        let durable = append_placed(&log, vec![enqueue(1, 0, b"durable before the spills")]);
        synced_until = durable[0].place.offset + u64::from(durable[0].place.len);
        let syncs = log.syncs();
        let mut seq = 0;
        while append_placed(&log, vec![spill(seq)])[0].place.segment == 1 {
            seq += 1;
        }
        assert_eq!(log.syncs(), syncs, "spills are not synced, and sealing their segment syncs nothing");
        append_synced(&log, vec![enqueue(1, 1, b"durable after")]);
        log.close().unwrap();
    }
    let mark = std::fs::read_to_string(unsynced_mark_path(dir.path(), 1)).unwrap();
    assert_eq!(mark, synced_until.to_string(), "the unsynced tail begins after the enqueue");
    let first = segment_path(dir.path(), 1);
    let whole = std::fs::read(&first).unwrap();
    let tear = |at: usize| {
        let mut bytes = whole.clone();
        bytes[at..at + 8].fill(0xa5);
        std::fs::write(&first, &bytes).unwrap();
    };

    tear(whole.len() / 2 + 100);
    let (log, recovery) = MessageLog::open(dir.path(), options.clone()).unwrap();
    assert_eq!(seqs(&recovery, 1), vec![0, 1]);
    assert!(seqs(&recovery, 2).is_empty(), "spills are never recovered");
    drop(log);

    tear(usize::try_from(synced_until).unwrap() - 12);
    let error = MessageLog::open(dir.path(), options).unwrap_err();
    assert!(matches!(error, LogError::Corrupt { segment: 1, .. }), "{error}");
}

#[test]
fn spent_segments_are_deleted_oldest_first_and_live_records_never() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions { segment_bytes: 64, fault: None };
    let (log, _) = MessageLog::open(dir.path(), options.clone()).unwrap();
    for seq in 0..6 {
        append_synced(&log, vec![enqueue(1, seq, b"a payload that fills a segment")]);
    }
    let numbers = |dir: &Path| segment_files(dir).unwrap().into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    let before = numbers(dir.path());
    assert!(before.len() >= 6, "{before:?}");
    // Removing 1..=5 frees nothing while 0, in the oldest segment, is live.
    append_synced(&log, (1..6).map(|seq| Record::Remove { queue: 1, seq }).collect());
    let still = numbers(dir.path());
    assert!(before.iter().all(|n| still.contains(n)), "{before:?} -> {still:?}");
    append_synced(&log, vec![Record::Remove { queue: 1, seq: 0 }, enqueue(2, 0, b"new")]);
    // Deletion follows the completions (which are not held up by it).
    writer_idle(&log);
    let after = segment_files(dir.path()).unwrap();
    assert!(after.len() <= 2, "spent segments deleted: {after:?}");
    log.close().unwrap();
    let (_log, recovery) = MessageLog::open(dir.path(), options).unwrap();
    assert!(!recovery.queues.contains_key(&1));
    assert_eq!(seqs(&recovery, 2), vec![0]);
}

#[test]
fn failing_writes_hold_completions_and_report_health_until_they_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let broken = Arc::new(AtomicBool::new(false));
    let fault_flag = Arc::clone(&broken);
    let fault: FaultHook =
        Arc::new(move || fault_flag.load(Ordering::SeqCst).then(|| std::io::Error::from_raw_os_error(28)));
    let options = LogOptions { segment_bytes: 1 << 20, fault: Some(fault) };
    let (log, _) = MessageLog::open(dir.path(), options).unwrap();
    let (health_tx, health_rx) = mpsc::channel();
    log.set_health_listener(Box::new(move |failing| health_tx.send(failing).unwrap()));
    append_synced(&log, vec![enqueue(1, 1, b"before")]);
    broken.store(true, Ordering::SeqCst);
    let (tx, rx) = mpsc::channel();
    for seq in 2..5 {
        let tx = tx.clone();
        log.append(vec![enqueue(1, seq, b"held")], Some(Box::new(move |r| tx.send((seq, r.is_ok())).unwrap())));
    }
    assert!(health_rx.recv_timeout(Duration::from_secs(5)).unwrap());
    assert!(log.is_failing());
    assert!(rx.recv_timeout(Duration::from_millis(800)).is_err(), "nothing completes while writes fail");
    broken.store(false, Ordering::SeqCst);
    let done: Vec<_> = (0..3).map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap()).collect();
    assert_eq!(done, vec![(2, true), (3, true), (4, true)]);
    assert!(!health_rx.recv_timeout(Duration::from_secs(5)).unwrap());
    log.close().unwrap();
    let (_log, recovery) = open(dir.path());
    assert_eq!(seqs(&recovery, 1), vec![1, 2, 3, 4]);
}

#[test]
fn appends_after_close_fail_their_completion() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = open(dir.path());
    log.close().unwrap();
    let (tx, rx) = mpsc::channel();
    log.append(vec![enqueue(1, 1, b"late")], Some(Box::new(move |r| tx.send(r.is_ok()).unwrap())));
    assert!(!rx.recv().unwrap());
}

#[test]
fn a_few_long_lived_messages_do_not_pin_old_segments() {
    let dir = tempfile::tempdir().unwrap();
    // Segments of about eight messages: compaction weighs live against written messages.
    let options = LogOptions { segment_bytes: 1024, fault: None };
    let (log, _) = MessageLog::open(dir.path(), options.clone()).unwrap();
    // Message 0 is delivered (with quorum counts) and never acknowledged; 1..200 come and go.
    append_synced(
        &log,
        vec![enqueue(1, 0, b"the long-lived one"), Record::Delivered { queue: 1, seq: 0, returned: 3, failed: 1 }],
    );
    for seq in 1..200 {
        let churn = b"a payload that fills a segment quickly, so that the long-lived one is mostly alone there";
        append_synced(&log, vec![enqueue(1, seq, churn)]);
        append_synced(&log, vec![Record::Remove { queue: 1, seq }]);
    }
    writer_idle_until_settled(&log);
    let segments = segment_files(dir.path()).unwrap();
    assert!(segments.len() <= 3, "the pinned segments were compacted away: {segments:?}");
    assert!(segments.iter().all(|(n, _)| *n > 1), "segment 1 is gone: {segments:?}");
    log.close().unwrap();
    let (log, recovery) = MessageLog::open(dir.path(), options).unwrap();
    let q1 = &recovery.queues[&1];
    assert_eq!(
        q1.iter().map(|m| (m.seq, m.delivered, m.returned, m.failed)).collect::<Vec<_>>(),
        vec![(0, true, 3, 1)],
        "moved with its delivery state, once"
    );
    assert_eq!(payloads(&log, q1), ["the long-lived one"]);
}

#[test]
fn a_crash_between_compaction_and_deletion_keeps_one_copy_with_its_state() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (log, _) = open(dir.path());
        // What a compaction leaves when the old segment was not deleted yet: the enqueue, its
        // state, traffic, then the enqueue again with its state.
        append_synced(
            &log,
            vec![
                enqueue(1, 0, b"moved"),
                Record::Delivered { queue: 1, seq: 0, returned: 2, failed: 2 },
                enqueue(1, 1, b"other"),
                enqueue(1, 0, b"moved"),
                Record::Delivered { queue: 1, seq: 0, returned: 2, failed: 2 },
            ],
        );
        log.close().unwrap();
    }
    let (_log, recovery) = open(dir.path());
    let q = &recovery.queues[&1];
    assert_eq!(
        q.iter().map(|m| (m.seq, m.delivered, m.returned)).collect::<Vec<_>>(),
        vec![(0, true, 2), (1, false, 0)]
    );
}

/// Appends and waits until the records are written; returns their places.
fn append_placed(log: &MessageLog, records: Vec<Record>) -> Vec<Placed> {
    let (tx, rx) = mpsc::channel();
    log.append(records, Some(Box::new(move |r| tx.send(r.unwrap()).unwrap())));
    rx.recv_timeout(Duration::from_secs(10)).unwrap()
}

fn text(read: Result<Bytes, ReadError>) -> String {
    String::from_utf8(read.unwrap().to_vec()).unwrap()
}

#[test]
fn completions_carry_the_places_that_read_the_messages_back() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions { segment_bytes: 4096, fault: None };
    let (log, _) = MessageLog::open(dir.path(), options).unwrap();
    let mut placed = Vec::new();
    for round in 0..20u64 {
        let records = (0..10).map(|i| round * 10 + i).map(|seq| {
            let payload = Bytes::from(format!("message {seq}"));
            if seq % 3 == 0 { Record::Spill { queue: 1, seq, payload } } else { enqueue_owned(1, seq, payload) }
        });
        let mut records: Vec<Record> = records.collect();
        records.push(Record::Delivered { queue: 1, seq: round * 10, returned: 0, failed: 0 });
        placed.extend(append_placed(&log, records));
    }
    assert_eq!(placed.iter().map(|p| p.seq).collect::<Vec<_>>(), (0..200).collect::<Vec<_>>(), "one place per message");
    assert!(placed.iter().all(|p| p.queue == 1));
    let segments: std::collections::BTreeSet<u64> = placed.iter().map(|p| p.place.segment).collect();
    assert!(segments.len() > 1, "the messages span segments: {segments:?}");
    // One call reads them all back, across segments, in order.
    let places: Vec<Place> = placed.iter().map(|p| p.place).collect();
    let read: Vec<String> = log.reader().read(&places).into_iter().map(text).collect();
    assert_eq!(read, (0..200).map(|seq| format!("message {seq}")).collect::<Vec<_>>());
    // Out of order and with gaps too.
    let some = [places[150], places[3], places[4], places[199]];
    let read: Vec<String> = log.reader().read(&some).into_iter().map(text).collect();
    assert_eq!(read, ["message 150", "message 3", "message 4", "message 199"]);
    // A place that is not a message record is an error, not a wrong message.
    let mut wrong = places[5];
    wrong.offset += 1;
    assert!(matches!(log.reader().read(&[wrong]).pop().unwrap(), Err(ReadError::Corrupt { .. })));
}

fn enqueue_owned(queue: u64, seq: u64, payload: Bytes) -> Record {
    Record::Enqueue { queue, seq, expires_at: None, size: 0, priority: 0, not_before: None, replaces: None, payload }
}

#[test]
fn spills_are_not_synced_nor_recovered_and_released_ones_free_their_segments() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions { segment_bytes: 256, fault: None };
    {
        let (log, _) = MessageLog::open(dir.path(), options.clone()).unwrap();
        let syncs = log.syncs();
        let spill = |seq| Record::Spill { queue: 2, seq, payload: Bytes::from_static(b"a transient message, spilled") };
        let placed: Vec<Placed> = (0..20).flat_map(|seq| append_placed(&log, vec![spill(seq)])).collect();
        assert_eq!(log.syncs(), syncs, "spilling alone never syncs");
        let places: Vec<Place> = placed.iter().map(|p| p.place).collect();
        assert!(log.reader().read(&places).into_iter().all(|r| r.is_ok()));
        let before = segment_files(dir.path()).unwrap().len();
        assert!(before >= 3, "{before}");
        append_placed(&log, (0..20).map(|seq| Record::Released { queue: 2, seq }).collect());
        writer_idle(&log);
        assert_eq!(segment_files(dir.path()).unwrap().len(), 1, "released spills free their segments");
        // A spill never released is not recovered either.
        append_placed(&log, vec![spill(20), enqueue(3, 1, b"durable")]);
        log.close().unwrap();
    }
    let (_log, recovery) = MessageLog::open(dir.path(), options).unwrap();
    assert!(!recovery.queues.contains_key(&2), "{:?}", recovery.queues.keys());
    assert_eq!(seqs(&recovery, 3), vec![1]);
}

#[test]
fn compaction_tells_where_it_moved_each_message() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions { segment_bytes: 1024, fault: None };
    let (log, _) = MessageLog::open(dir.path(), options).unwrap();
    let (tx, rx) = mpsc::channel();
    log.set_relocation_listener(Box::new(move |placed| tx.send(placed).unwrap()));
    let first = append_placed(
        &log,
        vec![enqueue(1, 0, b"pinned"), Record::Spill { queue: 2, seq: 0, payload: Bytes::from_static(b"spilled") }],
    );
    for seq in 1..200 {
        append_placed(&log, vec![enqueue(1, seq, b"churn churn churn churn churn churn churn churn churn churn")]);
        append_placed(&log, vec![Record::Remove { queue: 1, seq }]);
    }
    writer_idle_until_settled(&log);
    let moved: Vec<Placed> = rx.try_iter().flatten().collect();
    let find = |queue: u64| moved.iter().rfind(|p| p.queue == queue && p.seq == 0).copied().unwrap();
    let (durable, spilled) = (find(1), find(2));
    assert!(durable.place.segment > first[0].place.segment, "{durable:?}");
    assert_eq!(text(log.reader().read(&[durable.place]).pop().unwrap()), "pinned");
    assert_eq!(text(log.reader().read(&[spilled.place]).pop().unwrap()), "spilled");
    let old = log.reader().read(&[first[0].place]).pop().unwrap();
    assert!(matches!(old, Err(ReadError::Gone { segment: 1 })), "{old:?}");
}

/// The read of the segment being compacted runs off the writer's thread: here it cannot end
/// (the sealed segment was swapped for a FIFO nobody writes to yet), and appends are still
/// written and synced meanwhile. On the writer's thread the read blocked every append behind
/// it. Once the FIFO gives the segment's bytes, the pinned message is moved as before.
#[test]
fn appends_go_on_while_a_compaction_reads_its_segment() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions { segment_bytes: 1024, fault: None };
    let (log, _) = MessageLog::open(dir.path(), options).unwrap();
    let (tx, rx) = mpsc::channel();
    log.set_relocation_listener(Box::new(move |placed| tx.send(placed).unwrap()));
    let pinned = append_placed(&log, vec![enqueue(1, 0, b"pinned")]);
    let churn: &'static [u8] = b"churn churn churn churn churn churn churn churn churn churn";
    let mut seq = 1;
    // Until segment 1 is sealed.
    while append_placed(&log, vec![enqueue(2, seq, churn)])[0].place.segment == 1 {
        append_synced(&log, vec![Record::Remove { queue: 2, seq }]);
        seq += 1;
    }
    let sealed = segment_path(dir.path(), 1);
    let bytes = std::fs::read(&sealed).unwrap();
    std::fs::remove_file(&sealed).unwrap();
    let made = std::process::Command::new("mkfifo").arg(&sealed).status().unwrap();
    assert!(made.success());
    let started = std::time::Instant::now();
    while !log.compacting() {
        append_synced(&log, vec![Record::Remove { queue: 2, seq }]);
        seq += 1;
        append_placed(&log, vec![enqueue(2, seq, churn)]);
        assert!(started.elapsed() < Duration::from_secs(10), "no compaction began");
    }
    for _ in 0..100 {
        append_synced(&log, vec![Record::Remove { queue: 2, seq }]);
        seq += 1;
        append_placed(&log, vec![enqueue(2, seq, churn)]);
    }
    assert!(log.compacting(), "the read waits for the FIFO");
    assert!(rx.try_iter().flatten().all(|p| p.queue != 1), "nothing moved yet");
    std::fs::write(&sealed, &bytes).unwrap();
    writer_idle(&log);
    let moved: Vec<Placed> = rx.try_iter().flatten().collect();
    let to = moved.iter().rfind(|p| p.queue == 1 && p.seq == 0).expect("the pinned message moved");
    assert!(to.place.segment > pinned[0].place.segment, "{to:?}");
    assert_eq!(text(log.reader().read(&[to.place]).pop().unwrap()), "pinned");
}

#[test]
fn a_segment_that_its_queue_is_draining_is_left_to_empty_rather_than_compacted() {
    let dir = tempfile::tempdir().unwrap();
    // Segments of a few hundred messages: the oldest stays three quarters garbage for many
    // compaction windows while its queue drains it.
    let options = LogOptions { segment_bytes: 16 * 1024, fault: None };
    let (log, _) = MessageLog::open(dir.path(), options).unwrap();
    let (tx, rx) = mpsc::channel();
    log.set_relocation_listener(Box::new(move |placed| tx.send(placed).unwrap()));
    // A backlog over several segments, then consumed from its head one message per batch,
    // while another queue takes and drops a message of the same size in each batch too.
    let total = 1200;
    for seq in 0..total {
        append_synced(&log, vec![enqueue(1, seq, b"b")]);
    }
    for seq in 0..total {
        let churn = vec![Record::Remove { queue: 1, seq }, enqueue(2, seq, b"c"), Record::Remove { queue: 2, seq }];
        append_synced(&log, churn);
    }
    writer_idle_until_settled(&log);
    let moved: Vec<Placed> = rx.try_iter().flatten().collect();
    assert!(moved.is_empty(), "nothing was rewritten: {moved:?}");
    assert_eq!(segment_files(dir.path()).unwrap().len(), 1, "every spent segment is gone but the current one");
}

#[test]
fn a_segment_drained_too_slowly_for_the_traffic_is_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions { segment_bytes: 4096, fault: None };
    let (log, _) = MessageLog::open(dir.path(), options.clone()).unwrap();
    let (tx, rx) = mpsc::channel();
    log.set_relocation_listener(Box::new(move |placed| tx.send(placed).unwrap()));
    // A backlog of small messages fills the first segment; a consumer takes one of them every
    // 16 batches (so its segment's live count never holds for a whole window), while other
    // traffic writes a segment every dozen batches.
    let backlog = 100;
    for seq in 0..backlog {
        append_synced(&log, vec![enqueue(1, seq, b"backlog")]);
    }
    let churn: &'static [u8] = &[b'c'; 300];
    let mut consumed = 0;
    for round in 0..1200u64 {
        append_synced(&log, vec![enqueue(2, round, churn)]);
        append_synced(&log, vec![Record::Remove { queue: 2, seq: round }]);
        if round % 8 == 7 && consumed < backlog {
            append_synced(&log, vec![Record::Remove { queue: 1, seq: consumed }]);
            consumed += 1;
        }
    }
    writer_idle(&log);
    let moved: Vec<Placed> = rx.try_iter().flatten().collect();
    assert!(moved.iter().any(|p| p.queue == 1), "the slowly drained backlog was moved: {moved:?}");
    log.close().unwrap();
    let (_, recovery) = MessageLog::open(dir.path(), options).unwrap();
    assert_eq!(seqs(&recovery, 1), (consumed..backlog).collect::<Vec<_>>(), "what is left of the backlog, once each");
}

#[test]
fn the_index_takes_a_few_bits_per_live_message() {
    let mut index = index::Index::default();
    let messages = 1_000_000u64;
    for seq in 0..messages {
        index.enqueued(7, 1_000_000_000 + seq, 1 + seq / 400_000);
    }
    let bytes = index.bitmap_bytes();
    assert!(bytes * 4 < messages, "{bytes} bytes for {messages} messages");
    // Sealed segments keep their runs in a few bytes each.
    for segment in 1..=messages.div_ceil(400_000) {
        index.seal(segment);
    }
    let sealed = index.bitmap_bytes();
    assert!(sealed * 1000 < messages, "{sealed} bytes for {messages} sealed messages");
    // The first segment empties as the queue drains from its head.
    for seq in 0..400_000 {
        index.removed(7, 1_000_000_000 + seq);
    }
    assert_eq!(index.segments.get(&1).map(|c| (c.live, c.written)), Some((0, 400_000)));
    assert_eq!(index.segment_of(7, 1_000_400_000), Some(2));
}

/// A disk smaller than one segment: once every message is removed, the segment being written
/// is given back while the disk is low (and only then: otherwise it stays until it is full).
#[test]
fn a_spent_current_segment_is_given_back_while_the_disk_is_low() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = open(dir.path());
    append_synced(&log, (0..100).map(|seq| enqueue(1, seq, b"some bytes")).collect());
    append_synced(&log, (0..100).map(|seq| Record::Remove { queue: 1, seq }).collect());
    writer_idle(&log);
    writer_idle(&log);
    let segments = |dir: &Path| segment_files(dir).unwrap().into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    assert_eq!(segments(dir.path()), [1], "kept while the disk is not low");

    log.set_disk_low(true);
    // Completions run before the batch's deletions: the second idle waits for the first's.
    writer_idle(&log);
    writer_idle(&log);
    assert_eq!(segments(dir.path()), [2], "rolled over and deleted");
    let len = std::fs::metadata(segment_path(dir.path(), 2)).unwrap().len();
    assert_eq!(len, record::HEADER_LEN as u64, "the new segment holds only its header");

    // Still low, and a live message keeps its segment.
    append_synced(&log, vec![enqueue(1, 100, b"live")]);
    writer_idle(&log);
    writer_idle(&log);
    assert_eq!(segments(dir.path()), [2]);
    drop(log);
    let (_log, recovery) = open(dir.path());
    assert_eq!(seqs(&recovery, 1), [100]);
}

/// Appends return at once; the bytes they hand the writer are counted until written, and the
/// listener hears when they pass the high mark and when they are back under the low one.
#[test]
fn the_writers_backlog_is_reported_past_its_marks() {
    let dir = tempfile::tempdir().unwrap();
    let broken = Arc::new(AtomicBool::new(true));
    let fault_flag = Arc::clone(&broken);
    let fault: FaultHook =
        Arc::new(move || fault_flag.load(Ordering::SeqCst).then(|| std::io::Error::from_raw_os_error(28)));
    let (log, _) = MessageLog::open(dir.path(), LogOptions { fault: Some(fault), ..LogOptions::default() }).unwrap();
    let (tx, rx) = mpsc::channel();
    log.set_backlog_listener(Box::new(move |on| tx.send(on).unwrap()));
    let mib = Bytes::from(vec![0u8; 1 << 20]);
    let spills = |from: u64, n: u64| {
        (from..from + n).map(|seq| Record::Spill { queue: 1, seq, payload: mib.clone() }).collect::<Vec<_>>()
    };
    log.append(spills(0, 63), None);
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err(), "63 MiB is under the high mark");
    log.append(spills(63, 1), None);
    assert!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), "64 MiB waiting: backlogged");
    broken.store(false, Ordering::SeqCst);
    assert!(!rx.recv_timeout(Duration::from_secs(10)).unwrap(), "written: no longer backlogged");
    writer_idle(&log);
    assert!(rx.try_recv().is_err(), "told once each way");
}

#[test]
fn only_records_a_crash_may_not_lose_are_synced() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (log, _) = open(dir.path());
        append_synced(&log, vec![enqueue(1, 0, b"kept"), enqueue(1, 1, b"acked"), enqueue(1, 2, b"counted")]);
        let syncs = log.syncs();
        append_synced(&log, vec![Record::Remove { queue: 1, seq: 1 }]);
        append_synced(&log, vec![Record::Delivered { queue: 1, seq: 0, returned: 0, failed: 0 }]);
        assert_eq!(log.syncs(), syncs, "removals and plain delivery marks are written unsynced");
        append_synced(&log, vec![Record::Delivered { queue: 1, seq: 2, returned: 1, failed: 2 }]);
        assert_eq!(log.syncs(), syncs + 1, "quorum counts are synced");
        append_synced(&log, vec![Record::Remove { queue: 1, seq: 2 }]);
        assert_eq!(log.syncs(), syncs + 1);
        log.close().unwrap();
        assert_eq!(log.syncs(), syncs + 2, "closing syncs what was left unsynced");
    }
    let (log, recovery) = open(dir.path());
    assert_eq!(seqs(&recovery, 1), [0]);
    assert_eq!(payloads(&log, &recovery.queues[&1]), ["kept"]);
}

#[test]
fn a_segment_is_synced_whole_before_the_next_starts() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions { segment_bytes: 256, fault: None };
    let (log, _) = MessageLog::open(dir.path(), options).unwrap();
    append_synced(&log, vec![enqueue(1, 0, b"a message long enough to fill the segment quickly")]);
    let syncs = log.syncs();
    append_synced(&log, vec![Record::Remove { queue: 1, seq: 0 }]);
    assert_eq!(log.syncs(), syncs);
    let last_before = segment_files(dir.path()).unwrap().last().unwrap().0;
    append_synced(&log, vec![enqueue(1, 1, &[b'x'; 200])]);
    assert!(segment_files(dir.path()).unwrap().last().unwrap().0 > last_before, "the enqueue rolled over");
    assert_eq!(log.syncs(), syncs + 2, "the unsynced removal is synced at the roll, then the enqueue");
}

#[test]
fn compaction_keeps_a_waiting_dead_letter_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions { segment_bytes: 1024, fault: None };
    {
        let (log, _) = MessageLog::open(dir.path(), options.clone()).unwrap();
        log.set_relocation_listener(Box::new(|_| {}));
        append_placed(&log, vec![enqueue(1, 0, b"waits"), Record::DeadLettered { queue: 1, seq: 0, reason: 2 }]);
        // Churn through later segments so that compaction moves the first one's live message.
        for seq in 1..200 {
            append_placed(&log, vec![enqueue(1, seq, b"churn churn churn churn churn churn churn churn churn churn")]);
            append_placed(&log, vec![Record::Remove { queue: 1, seq }]);
        }
        writer_idle_until_settled(&log);
        let first = segment_files(dir.path()).unwrap().first().unwrap().0;
        assert!(first > 1, "compaction moved the waiting message out of segment 1");
        log.close().unwrap();
    }
    let (_log, recovery) = MessageLog::open(dir.path(), options).unwrap();
    assert_eq!(seqs(&recovery, 1), [0]);
    assert_eq!(recovery.queues[&1].iter().next().unwrap().dead_lettered, Some(2));
}

#[test]
fn a_dead_lettered_record_one_byte_short_is_invalid_not_misread() {
    use bytes::{BufMut, BytesMut};

    use super::record::{Next, next_record, put_record};
    let mut out = BytesMut::new();
    let record = Record::DeadLettered { queue: 7, seq: 9, reason: 2 };
    let len = put_record(&mut out, &record);
    assert_eq!(len, 8 + 1 + 8 + 8 + 1);
    assert!(matches!(next_record(&out.clone().freeze()), Next::Record(r, l) if r == record && l == len));
    // The same record without its reason byte, framed with a matching CRC.
    let payload = &out[8..len - 1];
    let mut short = BytesMut::new();
    short.put_u32_le(u32::try_from(payload.len()).unwrap());
    short.put_u32_le(crc32fast::hash(payload));
    short.put_slice(payload);
    assert!(matches!(next_record(&short.freeze()), Next::Invalid(_)));
}

/// A message moved from queue 1 (seq 0) to queue 2 by an enqueue that names it.
fn moved(queue: u64, seq: u64, from: (u64, u64), body: &'static [u8]) -> Record {
    let mut record = enqueue(queue, seq, body);
    if let Record::Enqueue { replaces, .. } = &mut record {
        *replaces = Some(from);
    }
    record
}

#[test]
fn an_enqueue_that_replaces_a_message_moves_it_in_one_record_whole_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (log, _) = open(dir.path());
        append_synced(&log, vec![enqueue(1, 0, b"moved"), enqueue(1, 1, b"stays")]);
        append_synced(&log, vec![moved(2, 7, (1, 0), b"moved")]);
        log.close().unwrap();
    }
    let (log, recovery) = open(dir.path());
    assert_eq!((seqs(&recovery, 1), seqs(&recovery, 2)), (vec![1], vec![7]), "in the target only");
    assert_eq!(payloads(&log, &recovery.queues[&2]), ["moved"]);
    // The source's own removal, written after the move, finds nothing and changes nothing.
    append_synced(&log, vec![Record::Remove { queue: 1, seq: 0 }]);
    log.close().unwrap();
    let (log, recovery) = open(dir.path());
    assert_eq!((seqs(&recovery, 1), seqs(&recovery, 2)), (vec![1], vec![7]));
    log.close().unwrap();
    // The move record torn anywhere: the message is in the source only.
    let (_, path) = segment_files(dir.path()).unwrap().pop().unwrap();
    let whole = std::fs::read(&path).unwrap();
    let remove_len = 8 + 1 + 16;
    let move_len = 8 + 1 + 8 + 8 + 4 + 1 + 16 + b"moved".len();
    let start = whole.len() - remove_len - move_len;
    for cut in [start + 1, start + 30, start + move_len - 1] {
        std::fs::write(&path, &whole[..cut]).unwrap();
        let (log, recovery) = open(dir.path());
        assert_eq!((seqs(&recovery, 1), seqs(&recovery, 2)), (vec![0, 1], vec![]), "cut at {cut}");
        log.close().unwrap();
    }
}

#[test]
fn the_source_of_a_moved_message_no_longer_pins_its_segment() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions { segment_bytes: 64, fault: None };
    let (log, _) = MessageLog::open(dir.path(), options).unwrap();
    append_synced(&log, vec![enqueue(1, 0, b"a payload that fills a segment")]);
    append_synced(&log, vec![moved(2, 0, (1, 0), b"a payload that fills a segment")]);
    append_synced(&log, vec![Record::Remove { queue: 2, seq: 0 }, enqueue(3, 0, b"new")]);
    writer_idle(&log);
    let segments = segment_files(dir.path()).unwrap();
    assert!(segments.iter().all(|(n, _)| *n > 2), "both spent segments deleted: {segments:?}");
}

#[test]
fn compaction_writes_a_moved_message_again_without_the_removal_it_carried() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions { segment_bytes: 1024, fault: None };
    let (log, _) = MessageLog::open(dir.path(), options.clone()).unwrap();
    // The long-lived message moved into queue 2; later queue 1 holds a message with the seq it
    // replaced (queues never reuse one, but replay must not depend on it).
    append_synced(&log, vec![enqueue(1, 5, b"source"), moved(2, 0, (1, 5), b"the long-lived one")]);
    let churn = b"a payload that fills a segment quickly, so that the long-lived one is mostly alone there";
    for seq in 1..20 {
        append_synced(&log, vec![enqueue(3, seq, churn), Record::Remove { queue: 3, seq }]);
    }
    // In a segment of live messages, which compaction leaves alone.
    let mut later = vec![enqueue(1, 5, b"a later one")];
    later.extend((0..8).map(|seq| enqueue(4, seq, churn)));
    append_synced(&log, later);
    for seq in 20..200 {
        append_synced(&log, vec![enqueue(3, seq, churn)]);
        append_synced(&log, vec![Record::Remove { queue: 3, seq }]);
    }
    writer_idle_until_settled(&log);
    assert!(segment_files(dir.path()).unwrap().iter().all(|(n, _)| *n > 1), "segment 1 compacted away");
    log.close().unwrap();
    let (log, recovery) = MessageLog::open(dir.path(), options).unwrap();
    assert_eq!((seqs(&recovery, 1), seqs(&recovery, 2)), (vec![5], vec![0]));
    assert_eq!(payloads(&log, &recovery.queues[&1]), ["a later one"]);
}

#[test]
fn a_move_written_ahead_of_its_sources_enqueue_still_leaves_the_message_in_its_target_only() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (log, _) = open(dir.path());
        append_synced(&log, vec![moved(2, 0, (1, 0), b"moved")]);
        append_synced(&log, vec![enqueue(1, 0, b"moved"), enqueue(1, 1, b"stays")]);
        log.close().unwrap();
    }
    let (log, recovery) = open(dir.path());
    assert_eq!((seqs(&recovery, 1), seqs(&recovery, 2)), (vec![1], vec![0]));
    assert_eq!(payloads(&log, &recovery.queues[&1]), ["stays"]);
}

#[test]
fn a_start_knows_whether_the_last_run_stopped_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let (log, recovery) = open(dir.path());
    assert!(!recovery.after_crash, "a new log follows no crash");
    append_synced(&log, vec![enqueue(1, 1, b"a")]);
    log.close().unwrap();

    let (log, recovery) = open(dir.path());
    assert!(!recovery.after_crash);
    assert!(!recovery.queues[&1].after_crash());
    // Dropped without a close: what it was given is synced, but the stop was not clean.
    drop(log);

    let (log, recovery) = open(dir.path());
    assert!(recovery.after_crash);
    assert!(recovery.queues[&1].after_crash());
    log.close_unclean().unwrap();
    let (log, recovery) = open(dir.path());
    assert!(recovery.after_crash, "an unclean close leaves no mark");
    log.close().unwrap();

    // The mark is taken at the start, before anything is appended: a crash of that run
    // (which runs no close at all) finds none.
    let (_log, recovery) = open(dir.path());
    assert!(!recovery.after_crash);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), segment_files(dir.path()).unwrap().len());
    assert_eq!(seqs(&recovery, 1), [1]);
}
