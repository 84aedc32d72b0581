#![allow(clippy::unwrap_used)]
//! The queue machine is deterministic: time comes in as an input (`set_now`) and nothing inside
//! draws randomness, so the same commands at the same times give every machine the same state
//! and the same effects — what Raft members need to apply one log alike
//! (../shared/spec/clustering-design.md §2). One random command sequence is applied to two
//! machines, each made from scratch, and what each produced after every command is compared.

use charon_model::{Body, DeathReason, Properties, Routing, Table};
use proptest::prelude::*;

use super::super::args::QueueType;
use super::super::settings::Overflow;
use super::tests::queue_named;
use super::*;
use crate::session::{SessionEvent, SessionSink};

/// One command to the machine.
#[derive(Clone, Debug)]
enum Op {
    /// Publish `count` messages, each with a TTL (ms) when given.
    Publish { count: u8, ttl: Option<u16> },
    /// A consumer with this prefetch (0: unlimited).
    Consume { prefetch: u8 },
    /// Cancel the oldest consumer.
    Cancel,
    /// A `basic.get`.
    Get { no_ack: bool },
    /// Settle the `which`-th unsettled delivery (modulo their number) as `how` says.
    Settle { which: u8, how: u8 },
    /// The clock moves on.
    Advance { ms: u16 },
    /// Expire what is due (as the task does on its timer).
    Expire,
    /// Purge the ready messages.
    Purge,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1..6_u8, proptest::option::of(1..400_u16)).prop_map(|(count, ttl)| Op::Publish { count, ttl }),
        1 => (0..4_u8).prop_map(|prefetch| Op::Consume { prefetch }),
        1 => Just(Op::Cancel),
        1 => any::<bool>().prop_map(|no_ack| Op::Get { no_ack }),
        4 => (any::<u8>(), 0..5_u8).prop_map(|(which, how)| Op::Settle { which, how }),
        2 => (1..300_u16).prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Expire),
        1 => Just(Op::Purge),
    ]
}

/// The settings a sequence runs under: TTL, length limits with either overflow, a delivery
/// limit, always a dead-letter exchange (so deaths show as dead letters).
fn settings() -> impl Strategy<Value = (QueueType, QueueSettings)> {
    (
        prop_oneof![Just(QueueType::Classic), Just(QueueType::Quorum)],
        proptest::option::of(50..500_u64),
        proptest::option::of(1..12_u64),
        any::<bool>(),
        proptest::option::of(0..3_u64),
    )
        .prop_map(|(queue_type, message_ttl, max_length, reject, delivery_limit)| {
            let settings = QueueSettings {
                dead_letter_exchange: Some("dlx".into()),
                message_ttl,
                max_length,
                overflow: if reject { Overflow::RejectPublish } else { Overflow::DropHead },
                delivery_limit: delivery_limit.filter(|_| queue_type == QueueType::Quorum),
                ..QueueSettings::default()
            };
            (queue_type, settings)
        })
}

fn message(n: usize, ttl: Option<u16>) -> Enqueue {
    let mut message = Message::new(Routing::default(), Body::Data(format!("m{n}").into()));
    message.set_properties(Properties { ttl: ttl.map(u64::from), ..Properties::default() });
    Enqueue { message: Arc::new(message), confirm: None }
}

/// Applies `ops` to a new machine and returns what it showed after each: the events of the
/// pass, the messages that died (body and reason) and the queue's counters.
fn run(queue_type: QueueType, settings: &QueueSettings, ops: &[Op]) -> Vec<String> {
    let handle = queue_named("q", queue_type, false, 1, Table::new());
    let mut state = QueueState::new(handle, settings.clone(), 1_000);
    let (session, _events) = SessionSink::new(1, 1_000);
    let owner = Owner { session: 1, channel: 1 };
    let (mut now, mut published, mut consumers, mut next_consumer) = (1_000_i64, 0_usize, Vec::new(), 1_u64);
    let mut unsettled: Vec<u64> = Vec::new();
    let mut shown = Vec::new();
    for op in ops {
        let mut answer = String::new();
        match *op {
            Op::Publish { count, ttl } => {
                let items = (0..usize::from(count)).map(|i| message(published + i, ttl)).collect();
                published += usize::from(count);
                state.publish(items, None);
            }
            Op::Consume { prefetch } => {
                let spec = ConsumeSpec {
                    id: next_consumer,
                    tag: format!("c{next_consumer}"),
                    owner,
                    session: session.clone(),
                    no_ack: false,
                    prefetch: u32::from(prefetch),
                    link_credit: None,
                    channel_limit: None,
                    exclusive: false,
                    arguments: Table::new(),
                };
                answer = format!("{:?}", state.consume(spec).map_err(|e| e.to_string()));
                consumers.push(next_consumer);
                next_consumer += 1;
            }
            Op::Cancel => {
                if !consumers.is_empty() {
                    answer = format!("{}", state.cancel(consumers.remove(0)));
                }
            }
            Op::Get { no_ack } => {
                let got = state.get(owner, no_ack);
                if let Some(got) = &got
                    && !no_ack
                {
                    unsettled.push(got.delivery.seq);
                }
                answer = format!("{:?}", got.map(|g| (g.delivery.seq, g.delivery.redelivered, g.remaining)));
            }
            Op::Settle { which, how } => {
                if !unsettled.is_empty() {
                    let seq = unsettled.remove(usize::from(which) % unsettled.len());
                    let how = [
                        Settle::Ack,
                        Settle::Requeue,
                        Settle::RequeueFailed,
                        Settle::Discard,
                        Settle::DiscardUndeliverable,
                    ][usize::from(how)];
                    state.settle(&[seq], how);
                }
            }
            Op::Advance { ms } => {
                now += i64::from(ms);
                state.set_now(now);
            }
            Op::Expire => state.expire(true),
            Op::Purge => answer = state.purge().to_string(),
        }
        state.dispatch();
        let events = state.take_outbox();
        for (_, event) in &events {
            if let SessionEvent::Deliveries { items, .. } = event {
                unsettled.extend(items.iter().map(|d| d.seq));
            }
        }
        let died: Vec<(String, DeathReason)> = state
            .take_discarded()
            .iter()
            .map(|d| (String::from_utf8_lossy(d.message.body.bytes()).into_owned(), d.reason))
            .collect();
        let events: Vec<String> = events.iter().map(|(sink, event)| format!("{}: {event:?}", sink.id)).collect();
        shown.push(format!("{op:?} → {answer} | {events:?} | died {died:?} | {:?}", state.stats()));
    }
    shown
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn the_same_commands_give_two_machines_the_same_state((queue_type, settings) in settings(), ops in proptest::collection::vec(op(), 1..80)) {
        let first = run(queue_type, &settings, &ops);
        let second = run(queue_type, &settings, &ops);
        for (step, (a, b)) in first.iter().zip(&second).enumerate() {
            prop_assert_eq!(a, b, "the machines parted at step {}", step);
        }
    }
}

/// The comparison sees what it must: two machines given different times part at once.
#[test]
fn machines_given_different_times_part() {
    let settings =
        QueueSettings { message_ttl: Some(100), dead_letter_exchange: Some("dlx".into()), ..QueueSettings::default() };
    let ops = [Op::Publish { count: 2, ttl: None }, Op::Advance { ms: 150 }, Op::Expire];
    let slower = [Op::Publish { count: 2, ttl: None }, Op::Advance { ms: 50 }, Op::Expire];
    let first = run(QueueType::Classic, &settings, &ops);
    assert!(first[2].contains("died [(\"m0\", Expired), (\"m1\", Expired)]"), "{}", first[2]);
    assert_ne!(first[2], run(QueueType::Classic, &settings, &slower)[2]);
}
