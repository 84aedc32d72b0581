#![allow(clippy::unwrap_used)]
//! The members of a replicated queue never diverge: one log applied on three machines gives
//! three equal states and snapshots, a snapshot and the log after it give the same state as the
//! whole log, and what a new home restores is what the records said.

use bytes::Bytes;
use charon_store::segment_log::{Place, Placed, Record, encode_batch};
use proptest::prelude::*;

use super::replica::{ReplicaAnswer, ReplicaCommand, ReplicaJournal};

/// One journal operation on message `seq % 16 + 1`.
#[derive(Clone, Debug)]
enum Op {
    Enqueue {
        seq: u8,
        size: u8,
        ttl: Option<u16>,
    },
    Remove {
        seq: u8,
    },
    Delivered {
        seq: u8,
        returned: u8,
        failed: u8,
    },
    DeadLettered {
        seq: u8,
        reason: u8,
    },
    Drop,
    TakeOver {
        home: u8,
    },
    /// The last journal batch is sent again (its answer was lost).
    Resend,
    /// A batch of an earlier epoch arrives late.
    Stale,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (any::<u8>(), any::<u8>(), proptest::option::of(any::<u16>()))
            .prop_map(|(seq, size, ttl)| Op::Enqueue { seq, size, ttl }),
        3 => any::<u8>().prop_map(|seq| Op::Remove { seq }),
        2 => (any::<u8>(), 0..4_u8, 0..4_u8).prop_map(|(seq, returned, failed)| Op::Delivered { seq, returned, failed }),
        1 => (any::<u8>(), 0..6_u8).prop_map(|(seq, reason)| Op::DeadLettered { seq, reason }),
        1 => Just(Op::Drop),
        1 => (0..3_u8).prop_map(|home| Op::TakeOver { home }),
        1 => Just(Op::Resend),
        1 => Just(Op::Stale),
    ]
}

fn record(op: &Op) -> Option<Record> {
    let seq = |s: &u8| u64::from(*s % 16) + 1;
    Some(match op {
        Op::Enqueue { seq: s, size, ttl } => Record::Enqueue {
            queue: 7,
            seq: seq(s),
            expires_at: ttl.map(i64::from),
            size: u32::from(*size),
            priority: 0,
            not_before: None,
            replaces: None,
            payload: Bytes::from(vec![*size; usize::from(*size % 8)]),
        },
        Op::Remove { seq: s } => Record::Remove { queue: 7, seq: seq(s) },
        Op::Delivered { seq: s, returned, failed } => {
            Record::Delivered { queue: 7, seq: seq(s), returned: u32::from(*returned), failed: u32::from(*failed) }
        }
        Op::DeadLettered { seq: s, reason } => Record::DeadLettered { queue: 7, seq: seq(s), reason: *reason },
        Op::Drop => Record::DropQueue { queue: 7 },
        _ => return None,
    })
}

/// The log a home writes for `ops`: each record its own batch, numbered within the epoch.
fn log_of(ops: &[Op]) -> Vec<Vec<u8>> {
    let (mut epoch, mut batch) = (0_u64, 0_u64);
    let mut last: Option<Vec<u8>> = None;
    let mut log = Vec::new();
    for op in ops {
        let command = match op {
            Op::TakeOver { home } => {
                epoch += 1;
                batch = 0;
                ReplicaCommand::TakeOver { home: format!("charon-{home}") }.encode()
            }
            Op::Resend => match &last {
                Some(again) => again.clone(),
                None => continue,
            },
            Op::Stale => ReplicaCommand::Journal {
                epoch: epoch.wrapping_sub(1),
                batch: batch + 1,
                records: encode_batch(&[Record::DropQueue { queue: 7 }]),
            }
            .encode(),
            other => {
                batch += 1;
                let records = encode_batch(&[record(other).unwrap()]);
                let command = ReplicaCommand::Journal { epoch, batch, records }.encode();
                last = Some(command.clone());
                command
            }
        };
        log.push(command);
    }
    log
}

proptest! {
    #[test]
    fn three_members_applying_one_log_have_one_state(ops in proptest::collection::vec(op(), 1..120), cut in any::<prop::sample::Index>()) {
        let log = log_of(&ops);
        let mut members = [ReplicaJournal::default(), ReplicaJournal::default(), ReplicaJournal::default()];
        let mut answers = [Vec::new(), Vec::new(), Vec::new()];
        for (member, answers) in members.iter_mut().zip(answers.iter_mut()) {
            for command in &log {
                answers.push(member.apply(command));
            }
        }
        prop_assert_eq!(&answers[0], &answers[1]);
        prop_assert_eq!(&answers[1], &answers[2]);
        let snapshot = members[0].snapshot();
        prop_assert_eq!(&snapshot, &members[1].snapshot());
        prop_assert_eq!(&snapshot, &members[2].snapshot());
        // A member given a snapshot part-way, then the rest of the log, ends where the
        // others did.
        let cut = cut.index(log.len() + 1);
        let mut early = ReplicaJournal::default();
        for command in &log[..cut] {
            early.apply(command);
        }
        let mut late = ReplicaJournal::from_snapshot(&early.snapshot()).unwrap();
        prop_assert_eq!(&late, &early);
        for command in &log[cut..] {
            late.apply(command);
        }
        prop_assert_eq!(late.snapshot(), snapshot);
    }
}

#[test]
fn a_batch_sent_again_is_applied_once_and_a_stale_epoch_is_fenced() {
    let mut journal = ReplicaJournal::default();
    assert_eq!(journal.apply(&ReplicaCommand::TakeOver { home: "charon-1".into() }.encode()), ReplicaAnswer::Home(1));
    let enqueue = |seq| Record::Enqueue {
        queue: 3,
        seq,
        expires_at: None,
        size: 2,
        priority: 0,
        not_before: None,
        replaces: None,
        payload: Bytes::from_static(b"hi"),
    };
    let first = ReplicaCommand::Journal { epoch: 1, batch: 1, records: encode_batch(&[enqueue(10)]) }.encode();
    assert_eq!(journal.apply(&first), ReplicaAnswer::Applied);
    let removal =
        ReplicaCommand::Journal { epoch: 1, batch: 2, records: encode_batch(&[Record::Remove { queue: 3, seq: 10 }]) };
    assert_eq!(journal.apply(&removal.encode()), ReplicaAnswer::Applied);
    // The first batch again (its answer was lost): the message it enqueued stays removed.
    assert_eq!(journal.apply(&first), ReplicaAnswer::Applied);
    assert_eq!(journal.len(), 0);
    let second = ReplicaCommand::Journal { epoch: 1, batch: 3, records: encode_batch(&[enqueue(11)]) }.encode();
    assert_eq!(journal.apply(&second), ReplicaAnswer::Applied);
    assert_eq!(journal.apply(&ReplicaCommand::TakeOver { home: "charon-2".into() }.encode()), ReplicaAnswer::Home(2));
    assert_eq!(journal.home(), "charon-2");
    // The old home, healed, writes on: refused, and nothing of it applied.
    let late = ReplicaCommand::Journal { epoch: 1, batch: 4, records: encode_batch(&[enqueue(12)]) }.encode();
    assert_eq!(journal.apply(&late), ReplicaAnswer::Fenced(2));
    assert_eq!(journal.len(), 1);
    // The new home restores the message, written at its own log's places.
    let place = Place { segment: 4, offset: 16, len: 40 };
    let restored = journal.recovered(&[Placed { queue: 9, seq: 11, place }]);
    let restored: Vec<_> = restored.into_iter().collect();
    assert_eq!(restored.len(), 1);
    assert_eq!((restored[0].seq, restored[0].size, restored[0].place), (11, 2, place));
    assert!(matches!(journal.records(9).as_slice(), [Record::Enqueue { queue: 9, seq: 11, .. }]));
}

#[test]
fn a_peers_garbage_is_refused_without_applying_anything() {
    let mut journal = ReplicaJournal::default();
    journal.apply(&ReplicaCommand::TakeOver { home: "charon-1".into() }.encode());
    let before = journal.clone();
    for garbage in
        [&b""[..], b"\x09", b"\x01\x01", b"\x01\x01\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\0\xff\xff\xff\xff\0\0\0\0\x01"]
    {
        assert_eq!(journal.apply(garbage), ReplicaAnswer::Refused);
    }
    // A batch whose second frame is torn applies none of it.
    let mut records = encode_batch(&[Record::DropQueue { queue: 1 }]).to_vec();
    records.extend_from_slice(&[5, 0, 0, 0, 1, 2, 3, 4, 9]);
    let torn = ReplicaCommand::Journal { epoch: 1, batch: 1, records: Bytes::from(records) };
    assert_eq!(journal.apply(&torn.encode()), ReplicaAnswer::Refused);
    assert_eq!(journal, before);
    assert!(ReplicaJournal::from_snapshot(b"\x01\x02").is_err());
    assert!(ReplicaJournal::from_snapshot(&[0; 17]).is_err());
}
