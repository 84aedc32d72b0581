//! Parked dead letters on a real log: they leave memory, come back for each attempt in
//! batches with what rebuilds them exactly, and survive a restart parked.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use charon_model::Table;
use charon_store::segment_log::{LogOptions, MessageLog, Record};

use super::log_fixture::{Fixture, fixture, queue_state};
use super::requests::Settle;
use super::settings::QueueSettings;
use crate::session::Owner;

const LETTERS: usize = 5_000;

/// A classic queue under Charon's guarantee with a dead-letter exchange.
fn guaranteed() -> QueueSettings {
    QueueSettings { guaranteed: true, dead_letter_exchange: Some("dlx".into()), ..QueueSettings::default() }
}

/// Publishes `LETTERS` persistent messages and rejects them all: they wait as dead letters.
fn reject_all(f: &mut Fixture) {
    f.publish((0..LETTERS).map(|i| format!("letter {i}")), 2, None);
    f.flush();
    let owner = Owner { session: 1, channel: 1 };
    let seqs: Vec<u64> = std::iter::from_fn(|| f.state.get(owner, false)).map(|got| got.delivery.seq).collect();
    assert_eq!(seqs.len(), LETTERS);
    f.state.settle(&seqs, Settle::Discard);
}

/// One attempt for every due letter, none of them routable (the exchange has no binding), as
/// the task makes it; returns the bodies of the letters attempted.
fn attempt_unroutable(f: &mut Fixture) -> Vec<String> {
    let mut attempted = Vec::new();
    loop {
        let due = f.state.dlx_due();
        if due.is_empty() {
            return attempted;
        }
        for letter in due {
            attempted.push(String::from_utf8(letter.message.body.bytes().to_vec()).unwrap());
            f.state.dlx_unroutable(letter.id);
        }
        f.flush();
    }
}

#[test]
fn unroutable_letters_wait_parked_and_come_back_in_batches_in_order_for_each_retry() {
    let mut f = fixture(true, guaranteed());
    reject_all(&mut f);
    let expected: Vec<String> = (0..LETTERS).map(|i| format!("letter {i}")).collect();
    assert_eq!(attempt_unroutable(&mut f), expected, "the first attempt, from memory");
    let records = f.flush();
    let (whole, parked) = f.state.dlx_resident();
    assert_eq!((whole.count, parked), (0, LETTERS as u64), "all of them parked: nothing whole in memory");
    assert_eq!(f.state.stats().dead_letters_pending, LETTERS as u32, "still counted as waiting");
    assert!(records.is_empty() || records.iter().all(|r| matches!(r, Record::Spill { .. })));

    // A binding arrives: every parked letter is read back, a batch per pass.
    f.state.topology_changed();
    let first = f.state.dlx_due();
    assert!(!first.is_empty() && first.len() <= 1_024, "one batch: {}", first.len());
    for letter in &first {
        f.state.dlx_unroutable(letter.id);
    }
    f.flush();
    let mut again: Vec<String> =
        first.iter().map(|l| String::from_utf8(l.message.body.bytes().to_vec()).unwrap()).collect();
    again.extend(attempt_unroutable(&mut f));
    assert_eq!(again, expected, "every letter once, in the order they died");
    assert_eq!(f.state.dlx_resident().1, LETTERS as u64, "parked again, at their spills (no new writes)");
    assert!(f.flush().is_empty(), "a letter parks again at the spill it has");
}

#[test]
fn a_letter_comes_back_with_its_death_time_and_leaves_the_log_once_confirmed() {
    let mut f = fixture(true, guaranteed());
    reject_all(&mut f);
    // The first attempt goes to a target that refuses the copy made at t=777.
    let copy = std::sync::Arc::new(charon_model::Message::default());
    for letter in f.state.dlx_due() {
        assert_eq!(letter.copied_at, None);
        let number = f.state.dlx_sent(letter.id, &copy, 777, 42).unwrap();
        f.state.dlx_answered(number, false);
    }
    f.flush();
    f.flush();
    assert_eq!(f.state.dlx_resident().1, LETTERS as u64, "refused: parked");

    f.state.topology_changed();
    let mut confirmed = 0;
    loop {
        let due = f.state.dlx_due();
        if due.is_empty() {
            break;
        }
        for letter in due {
            assert_eq!(letter.copied_at, Some(777), "its copy is made again with the first death time");
            assert!(letter.copy.is_none(), "the copy itself was not kept");
            let number = f.state.dlx_sent(letter.id, &copy, 777, 42).unwrap();
            f.state.dlx_answered(number, true);
            confirmed += 1;
        }
        let records = f.flush();
        let removes = records.iter().filter(|r| matches!(r, Record::Remove { .. })).count();
        let released = records
            .iter()
            .filter(|r| matches!(r, Record::Released { queue, .. } if queue & super::LETTER_LOG_KEY != 0))
            .count();
        assert_eq!(removes, released, "each message leaves the log with its letter's spill");
    }
    assert_eq!(confirmed, LETTERS);
    assert_eq!(f.state.stats().dead_letters_pending, 0);
    assert_eq!(f.state.dlx_resident(), (Default::default(), 0));
}

#[test]
fn letters_recovered_after_a_restart_wait_parked_at_their_records() {
    let mut f = fixture(true, guaranteed());
    reject_all(&mut f);
    attempt_unroutable(&mut f);
    f.flush();
    let Fixture { log, _dir: dir, .. } = f;
    log.close().unwrap();
    let (log, mut recovery) = MessageLog::open(dir.path(), LogOptions::default()).unwrap();
    let restored = recovery.queues.remove(&3).unwrap();
    assert_eq!(restored.len(), LETTERS);
    let mut f = Fixture { state: queue_state(&log, true, guaranteed(), Table::new(), restored), log, _dir: dir };
    assert_eq!(f.state.dlx_resident().1, LETTERS as u64, "none read at the restart");
    assert_eq!(f.state.stats().dead_letters_pending, LETTERS as u32);
    let expected: Vec<String> = (0..LETTERS).map(|i| format!("letter {i}")).collect();
    assert_eq!(attempt_unroutable(&mut f), expected, "the first attempt after the restart reads them back");
}
