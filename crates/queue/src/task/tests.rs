#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

//! The queue task on a current-thread runtime, whose one worker is the test's thread: every
//! file read or write noted there ([`probe`]) would be I/O on a runtime worker. The blocking
//! pool has one thread, which a test can hold ([`Gate`]) to keep a read from finishing.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use charon_model::{Body, Message, Properties, Routing, Table};
use charon_store::segment_log::{LogOptions, MessageLog, Record, RecoveredQueue};
use tokio::sync::oneshot;

use super::super::command::QueueCmd;
use super::super::paging::IDLE_RESIDENT_MESSAGES;
use super::super::paging::probe;
use super::super::{ConfirmTo, Enqueue, QueueConfig, QueueLinks, QueueRef, QueueSettings, QueueType};
use crate::dead_letter::{DeadLetterSink, DropReason, Router};
use crate::session::{Owner, SessionEvent, SessionSink};

/// Dead letters go nowhere.
struct NoRoutes;

impl Router for NoRoutes {
    fn route(&self, _exchange: &str, _routing: &Routing, _headers: &Table) -> Option<Vec<QueueRef>> {
        None
    }
}

impl DeadLetterSink for NoRoutes {
    fn dropped(&self, _queue: &str, _reason: DropReason) -> Option<QueueRef> {
        None
    }
}

pub(super) const OWNER: Owner = Owner { session: 1, channel: 1 };
/// Messages behind the head, on disk.
const PAGED: usize = 3_000;

pub(super) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().max_blocking_threads(1).build().unwrap()
}

fn message(i: usize) -> Message {
    let mut m = Message::new(Routing::default(), Body::Data(format!("message {i}").into()));
    m.origin = charon_model::Origin::Amqp091;
    m.set_properties(Properties { delivery_mode: Some(2), ..Properties::default() });
    m
}

pub(super) fn body(got: &super::super::GetOk) -> String {
    String::from_utf8(got.delivery.message.body.bytes().to_vec()).unwrap()
}

pub(super) fn store(dir: &std::path::Path) -> (Arc<MessageLog>, std::collections::HashMap<u64, RecoveredQueue>) {
    let (log, recovery) = MessageLog::open(&dir.join("log"), LogOptions::default()).unwrap();
    (Arc::new(log), recovery.queues)
}

pub(super) fn spawn(id: u64, settings: QueueSettings, store: &Arc<MessageLog>, restored: RecoveredQueue) -> QueueRef {
    let config = QueueConfig {
        name: format!("q{id}"),
        vhost: "/".into(),
        durable: true,
        auto_delete: false,
        exclusive_owner: None,
        arguments: Table::new(),
        queue_type: QueueType::Classic,
    };
    let links = QueueLinks {
        log: Some(Arc::clone(store)),
        dead_letters: Arc::new(NoRoutes),
        on_self_delete: Box::new(|_| {}),
        replica: None,
    };
    super::super::spawn(id, config, settings, links, restored)
}

/// Publishes `range` as persistent messages and waits for their confirmation: the log has
/// then placed them, and the queue takes the places at its next command.
pub(super) async fn publish(queue: &QueueRef, range: std::ops::Range<usize>) {
    let (session, mut events) = SessionSink::new(1, 0);
    let items: Vec<Enqueue> =
        range.clone().map(|i| Enqueue { message: Arc::new(message(i)), confirm: Some(i as u64) }).collect();
    assert!(queue.publish(items, Some(ConfirmTo { session, channel: 1 })).await);
    let mut confirmed = 0;
    while confirmed < range.len() {
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv()).await.unwrap().unwrap();
        if let SessionEvent::Confirms { accepted, .. } = event {
            confirmed += accepted.len();
        }
    }
}

/// Holds the blocking pool's one thread until opened: reads off the task wait behind it.
struct Gate(std::sync::mpsc::Sender<()>);

impl Gate {
    fn close() -> Self {
        let (open, wait) = std::sync::mpsc::channel();
        drop(tokio::task::spawn_blocking(move || wait.recv()));
        Self(open)
    }

    fn open(self) {
        self.0.send(()).unwrap();
    }
}

/// Sends a command without waiting for its answer.
async fn send(queue: &QueueRef, command: QueueCmd) {
    queue.tx.send(command).await.ok().unwrap();
}

async fn get_all(queue: &QueueRef) -> Vec<String> {
    let mut got = Vec::new();
    while let Some(ok) = queue.get(OWNER, true).await.unwrap() {
        got.push(body(&ok));
    }
    got
}

fn bodies(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("message {i}")).collect()
}

#[test]
fn a_durable_queue_restores_off_the_runtime_thread_and_its_first_get_sees_every_message_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let total = 1_024 + PAGED;
    {
        let (log, _) = MessageLog::open(&dir.path().join("log"), LogOptions::default()).unwrap();
        let records = (0..total)
            .map(|i| {
                let mut payload = BytesMut::new();
                charon_store::codec::encode_message(&message(i), &mut payload);
                let size = u32::try_from(format!("message {i}").len()).unwrap();
                Record::Enqueue {
                    queue: 7,
                    seq: i as u64 + 1,
                    expires_at: None,
                    size,
                    priority: 0,
                    not_before: None,
                    replaces: None,
                    payload: payload.freeze(),
                }
            })
            .collect();
        let (tx, rx) = std::sync::mpsc::channel();
        log.append(records, Some(Box::new(move |r| tx.send(r.is_ok()).unwrap())));
        assert!(rx.recv_timeout(Duration::from_secs(10)).unwrap());
        log.close().unwrap();
    }
    let (store, mut recovered) = store(dir.path());
    let restored = recovered.remove(&7).unwrap();
    assert_eq!(restored.len(), total);
    runtime().block_on(async {
        let before = probe::io_on_this_thread();
        let queue = spawn(7, QueueSettings::default(), &store, restored);
        assert_eq!(queue.stats().await.unwrap().ready, u32::try_from(total).unwrap(), "all there at the first command");
        assert_eq!(get_all(&queue).await, bodies(0..total), "every message once, in order");
        assert_eq!(probe::io_on_this_thread(), before, "no file I/O on the runtime thread");
    });
}

#[test]
fn a_get_that_needs_the_page_being_read_waits_for_it_and_the_next_command_waits_behind_it() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = store(dir.path());
    let total = IDLE_RESIDENT_MESSAGES + PAGED;
    runtime().block_on(async {
        let queue = spawn(8, QueueSettings::default(), &store, RecoveredQueue::default());
        publish(&queue, 0..total).await;
        let before = probe::io_on_this_thread();
        let gate = Gate::close();
        // The head is served; the next page's read waits behind the gate.
        for i in 0..IDLE_RESIDENT_MESSAGES {
            let got = queue.get(OWNER, true).await.unwrap().unwrap();
            assert_eq!(body(&got), format!("message {i}"));
        }
        let (reply, mut got) = oneshot::channel();
        send(&queue, QueueCmd::Get { owner: OWNER, no_ack: true, reply }).await;
        let (reply, mut stats) = oneshot::channel();
        send(&queue, QueueCmd::Stats(reply)).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(got.try_recv().is_err(), "the get is not answered (nor answered empty) before the read is done");
        assert!(stats.try_recv().is_err(), "nor does the next command overtake it");
        gate.open();
        let got = got.await.unwrap().expect("the next message, not get-empty");
        assert_eq!(body(&got), format!("message {IDLE_RESIDENT_MESSAGES}"));
        assert_eq!(stats.await.unwrap().ready, u32::try_from(total - IDLE_RESIDENT_MESSAGES - 1).unwrap());
        assert_eq!(get_all(&queue).await, bodies(IDLE_RESIDENT_MESSAGES + 1..total));
        assert_eq!(probe::io_on_this_thread(), before, "no file I/O on the runtime thread");
    });
}

#[test]
fn drops_that_need_the_page_being_read_hold_the_confirmation_and_the_next_commands_until_it_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = store(dir.path());
    let total = IDLE_RESIDENT_MESSAGES + PAGED;
    runtime().block_on(async {
        let queue = spawn(9, QueueSettings::default(), &store, RecoveredQueue::default());
        publish(&queue, 0..total).await;
        let before = probe::io_on_this_thread();
        let gate = Gate::close();
        for _ in 0..IDLE_RESIDENT_MESSAGES {
            queue.get(OWNER, true).await.unwrap().unwrap();
        }
        // A policy lowers the limit below what is on disk: drop-head must drop paged messages.
        let limit = 100;
        queue.apply_settings(QueueSettings { max_length: Some(limit), ..QueueSettings::default() }).await;
        let (session, mut events) = SessionSink::new(1, 0);
        let item = Enqueue { message: Arc::new(message(total)), confirm: Some(1) };
        assert!(queue.publish(vec![item], Some(ConfirmTo { session, channel: 1 })).await);
        let (reply, mut stats) = oneshot::channel();
        send(&queue, QueueCmd::Stats(reply)).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(events.try_recv().is_err(), "no confirmation while the queue is over its limit");
        assert!(stats.try_recv().is_err(), "the next command waits for the drops");
        gate.open();
        assert_eq!(stats.await.unwrap().ready, u32::try_from(limit).unwrap());
        let confirmed = tokio::time::timeout(Duration::from_secs(10), events.recv()).await.unwrap().unwrap();
        assert!(matches!(confirmed, SessionEvent::Confirms { accepted, .. } if accepted == [1]));
        // The newest messages are kept, in order.
        let mut expected = bodies(total + 1 - usize::try_from(limit).unwrap()..total);
        expected.push(format!("message {total}"));
        assert_eq!(get_all(&queue).await, expected);
        assert_eq!(probe::io_on_this_thread(), before, "no file I/O on the runtime thread");
    });
}

/// Dead letters go to one queue whose mailbox the test holds: it sees the copies and decides
/// when they are confirmed. Routed there, or (`routed` false) routed nowhere and kept there as
/// the fallback queue.
struct ToHeldQueue {
    queue: QueueRef,
    routed: bool,
}

impl Router for ToHeldQueue {
    fn route(&self, _exchange: &str, _routing: &Routing, _headers: &Table) -> Option<Vec<QueueRef>> {
        Some(if self.routed { vec![Arc::clone(&self.queue)] } else { Vec::new() })
    }
}

impl DeadLetterSink for ToHeldQueue {
    fn dropped(&self, _queue: &str, reason: DropReason) -> Option<QueueRef> {
        assert_eq!(reason, DropReason::Unroutable);
        (!self.routed).then(|| Arc::clone(&self.queue))
    }
}

/// The sequence numbers of queue `id` that a restart would recover from the log as it is now
/// (read from a copy, so the running log is left alone).
fn recoverable(dir: &std::path::Path, id: u64) -> Vec<u64> {
    let copy = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(dir.join("log")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), copy.path().join(entry.file_name())).unwrap();
    }
    let (log, recovery) = MessageLog::open(copy.path(), LogOptions::default()).unwrap();
    drop(log);
    recovery.queues.get(&id).map(|q| q.iter().map(|m| m.seq).collect()).unwrap_or_default()
}

#[test]
fn a_dead_lettered_message_stays_in_the_log_until_its_target_confirmed_the_copy() {
    stays_in_the_log_until_confirmed(true);
}

#[test]
fn an_unroutable_dead_letter_stays_in_the_log_until_the_fallback_queue_confirmed_the_copy() {
    stays_in_the_log_until_confirmed(false);
}

fn stays_in_the_log_until_confirmed(routed: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = store(dir.path());
    runtime().block_on(async {
        let (target_tx, mut target_rx) = tokio::sync::mpsc::channel(8);
        let target_config = QueueConfig {
            name: "dlq".into(),
            vhost: "/".into(),
            durable: true,
            auto_delete: false,
            exclusive_owner: None,
            arguments: Table::new(),
            queue_type: QueueType::Classic,
        };
        let target = Arc::new(super::super::QueueHandle::new(20, target_config, target_tx));
        let config = QueueConfig {
            name: "src".into(),
            vhost: "/".into(),
            durable: true,
            auto_delete: false,
            exclusive_owner: None,
            arguments: Table::new(),
            queue_type: QueueType::Classic,
        };
        let links = QueueLinks {
            log: Some(Arc::clone(&store)),
            dead_letters: Arc::new(ToHeldQueue { queue: target, routed }),
            on_self_delete: Box::new(|_| {}),
            replica: None,
        };
        let settings = QueueSettings { dead_letter_exchange: Some("dlx".into()), ..QueueSettings::default() };
        let source = super::super::spawn(21, config, settings, links, RecoveredQueue::default());
        publish(&source, 0..1).await;
        let seq = source.get(OWNER, false).await.unwrap().unwrap().delivery.seq;
        source.settle(vec![seq], super::super::Settle::Discard).await;
        let Some(QueueCmd::Publish { items, confirm_to: Some(confirm_to) }) = target_rx.recv().await else {
            panic!("the copy goes to the target with a confirm request");
        };
        let number = items[0].confirm.expect("the copy carries its confirm number");
        let drop_reason = items[0].message.headers.get(crate::dead_letter::DROP_REASON_HEADER).cloned();
        assert_eq!(drop_reason, (!routed).then(|| charon_model::Value::long_str("unroutable")));
        // Everything the source wrote for the discard is in the log once a later publish is
        // confirmed: the message is still recoverable there.
        publish(&source, 1..2).await;
        assert!(recoverable(dir.path(), 21).contains(&seq), "removed before the target had the copy");
        confirm_to.session.send(SessionEvent::Confirms { channel: 0, accepted: vec![number], refused: vec![] });
        publish(&source, 2..3).await;
        let left = recoverable(dir.path(), 21);
        assert!(!left.contains(&seq), "removed once the target confirmed: {left:?}");
        assert_eq!(left.len(), 2, "the two later messages");
    });
}

#[test]
fn a_purge_of_a_run_several_chunks_long_waits_for_its_reads_off_the_runtime_thread_and_removes_every_message() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = store(dir.path());
    // Over five chunks of paged index (1024 entries each) behind the head.
    let total = IDLE_RESIDENT_MESSAGES + 5 * 1_024 + 300;
    runtime().block_on(async {
        let queue = spawn(10, QueueSettings::default(), &store, RecoveredQueue::default());
        let before = probe::io_on_this_thread();
        publish(&queue, 0..total).await;
        // The queue takes the places (and writes its index chunks) at its next command.
        assert_eq!(queue.stats().await.unwrap().ready, u32::try_from(total).unwrap());
        tokio::time::sleep(Duration::from_millis(100)).await;
        let gate = Gate::close();
        let (reply, mut purged) = oneshot::channel();
        send(&queue, QueueCmd::Purge(reply)).await;
        let (reply, mut stats) = oneshot::channel();
        send(&queue, QueueCmd::Stats(reply)).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(purged.try_recv().is_err(), "the purge waits for the index chunks on disk");
        assert!(stats.try_recv().is_err(), "and the next command waits behind it");
        gate.open();
        assert_eq!(purged.await.unwrap(), u32::try_from(total).unwrap(), "every message counted once");
        assert_eq!(stats.await.unwrap().ready, 0);
        // Every purged message left the log; the queue works on.
        publish(&queue, total..total + 3).await;
        assert_eq!(recoverable(dir.path(), 10).len(), 3, "only the three published after the purge");
        assert_eq!(get_all(&queue).await, bodies(total..total + 3));
        assert_eq!(probe::io_on_this_thread(), before, "no file I/O on the runtime thread");
    });
}

#[test]
fn gets_read_a_run_several_chunks_long_back_in_order_off_the_runtime_thread() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = store(dir.path());
    let total = IDLE_RESIDENT_MESSAGES + 4 * 1_024 + 77;
    runtime().block_on(async {
        let queue = spawn(11, QueueSettings::default(), &store, RecoveredQueue::default());
        let before = probe::io_on_this_thread();
        publish(&queue, 0..total).await;
        assert_eq!(get_all(&queue).await, bodies(0..total), "every message once, in order");
        assert_eq!(probe::io_on_this_thread(), before, "no file I/O on the runtime thread");
    });
}

/// Publishes left in the mailbox of a queue that stopped: a plain one is confirmed (as RabbitMQ
/// confirms messages whose queue went away normally), a move is refused so that the moved
/// message stays in its source, and so is a numbered one, whose caller hears no number.
#[test]
fn a_stopped_queue_confirms_the_publishes_left_in_its_mailbox_and_refuses_the_moves() {
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let (session, mut events) = SessionSink::new(1, 0);
    let to = ConfirmTo { session, channel: 3 };
    let item = |n: u64| Enqueue { message: Arc::new(message(0)), confirm: Some(n) };
    tx.try_send(QueueCmd::Publish { items: vec![item(1)], confirm_to: Some(to.clone()) }).unwrap();
    let from = super::super::MovedFrom { queue: 9, seqs: vec![5] };
    tx.try_send(QueueCmd::PublishMoved { items: vec![item(2)], from, confirm_to: to.clone() }).unwrap();
    let (numbers, mut numbered) = tokio::sync::oneshot::channel();
    tx.try_send(QueueCmd::PublishNumbered { items: vec![item(3)], confirm_to: to, numbers }).unwrap();
    super::drain_after_stop(&mut rx);
    assert!(numbered.try_recv().is_err(), "no numbers for a publish the queue never took");
    let mut answers = Vec::new();
    while let Ok(SessionEvent::Confirms { channel, accepted, refused }) = events.try_recv() {
        answers.push((channel, accepted, refused));
    }
    assert_eq!(answers, [(3, vec![1], vec![]), (3, vec![], vec![2]), (3, vec![], vec![3])]);
}

/// A replicated queue's group that commits only when the test says so: it hands each batch
/// to the test.
struct HeldGroup(tokio::sync::mpsc::UnboundedSender<(bytes::Bytes, super::super::Replicated)>);

impl super::super::Replicate for HeldGroup {
    fn replicate(&self, records: bytes::Bytes, done: super::super::Replicated) {
        let _ = self.0.send((records, done));
    }

    fn is_behind(&self) -> bool {
        false
    }

    fn take_over(&self, _queue: u64, _log: Arc<MessageLog>) -> super::super::TakingOver {
        Box::pin(async { Ok(RecoveredQueue::default()) })
    }
}

#[test]
fn a_replicated_queues_confirm_waits_for_its_group_and_is_a_nack_when_fenced() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = store(dir.path());
        let (batches, mut held) = tokio::sync::mpsc::unbounded_channel();
        let group = Arc::new(HeldGroup(batches));
        let config = QueueConfig {
            name: "qq".into(),
            vhost: "/".into(),
            durable: true,
            auto_delete: false,
            exclusive_owner: None,
            arguments: Table::new(),
            queue_type: QueueType::Quorum,
        };
        let links = QueueLinks {
            log: Some(Arc::clone(&store)),
            dead_letters: Arc::new(NoRoutes),
            on_self_delete: Box::new(|_| {}),
            replica: Some(group as Arc<dyn super::super::Replicate>),
        };
        let queue = super::super::spawn(31, config, QueueSettings::default(), links, RecoveredQueue::default());
        let (session, mut events) = SessionSink::new(1, 0);
        let publish = |n: u64| Enqueue { message: Arc::new(message(n as usize)), confirm: Some(n) };
        assert!(queue.publish(vec![publish(1)], Some(ConfirmTo { session: session.clone(), channel: 1 })).await);
        // The batch reaches the group, which does not commit it: no confirm.
        let batch = tokio::time::timeout(Duration::from_secs(10), held.recv()).await;
        let (records, done) = batch.expect("the batch reaches the group").unwrap();
        let early = tokio::time::timeout(Duration::from_millis(200), events.recv()).await;
        assert!(early.is_err(), "no confirm before the group committed: {early:?}");
        let records = charon_store::segment_log::decode_batch(&records).unwrap();
        assert!(matches!(records.as_slice(), [Record::Enqueue { queue: 31, seq: _, .. }]), "{records:?}");
        done(true);
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv()).await.unwrap().unwrap();
        assert!(matches!(event, SessionEvent::Confirms { ref accepted, ref refused, .. } if *accepted == [1] && refused.is_empty()), "{event:?}");
        // A batch the group will never commit (another node took the queue over) is a nack.
        assert!(queue.publish(vec![publish(2)], Some(ConfirmTo { session, channel: 1 })).await);
        let batch = tokio::time::timeout(Duration::from_secs(10), held.recv()).await;
        let (_, done) = batch.expect("the second batch reaches the group").unwrap();
        done(false);
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv()).await.unwrap().unwrap();
        assert!(matches!(event, SessionEvent::Confirms { ref accepted, ref refused, .. } if accepted.is_empty() && *refused == [2]), "{event:?}");
    });
}
