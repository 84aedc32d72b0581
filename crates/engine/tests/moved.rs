//! Moving a message between queues in one log record (`QueueRef::publish_moved`, which Zaqar's
//! claim-count dead-letter queue uses): whatever moment a crash picks, the message is in
//! exactly one of the two queues afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use charon_engine::{ConfirmTo, Enqueue, MovedFrom, QueueRef, SessionEvent, SessionSink, Settle, VHost};
use charon_model::{Table, Value};
use support::{OWNER, declare, message, open_stored, table};

fn quorum() -> Table {
    table(&[("x-queue-type", Value::long_str("quorum"))])
}

async fn queues(vhost: &VHost) -> (QueueRef, QueueRef) {
    for name in ["src", "dlq"] {
        vhost.declare_queue(&declare(name, quorum()), 1).await.unwrap();
    }
    (vhost.queue("src", 1).unwrap(), vhost.queue("dlq", 1).unwrap())
}

/// The bodies left in `queue`, taken.
async fn bodies(queue: &QueueRef) -> Vec<String> {
    let mut found = Vec::new();
    while let Some(got) = queue.get(OWNER, true).await.unwrap() {
        found.push(String::from_utf8(got.delivery.message.body.bytes().to_vec()).unwrap());
    }
    found
}

/// Publishes "moved" and "stays" to `src`, takes "moved" unacknowledged and moves it into
/// `dlq`; returns its seq in `src` once `dlq` confirmed it (None if refused), without
/// acknowledging it in `src`.
async fn move_one(broker: &charon_engine::Broker, source: &QueueRef, target: &QueueRef) -> Option<u64> {
    let items = ["moved", "stays"].map(|body| Enqueue { message: message("src", body), confirm: None });
    assert!(source.publish(items.into(), None).await);
    let got = source.get(OWNER, false).await.unwrap().expect("the first message");
    let (session, mut events) = SessionSink::new(broker.next_id(), u32::MAX);
    let item = Enqueue { message: Arc::clone(&got.delivery.message), confirm: Some(1) };
    let from = MovedFrom { queue: source.id, seqs: vec![got.delivery.seq] };
    assert!(target.publish_moved(vec![item], from, ConfirmTo { session, channel: 1 }).await);
    loop {
        match events.recv().await {
            Some(SessionEvent::Confirms { accepted, refused, .. }) => {
                return (accepted == [1] && refused.is_empty()).then_some(got.delivery.seq);
            }
            Some(_) => {}
            None => return None,
        }
    }
}

/// Restarts on `dir` and takes what each queue holds.
fn after_restart(dir: &std::path::Path) -> (Vec<String>, Vec<String>) {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let (_broker, vhost, _persistence) = open_stored(dir);
        let (source, target) = (vhost.queue("src", 1).unwrap(), vhost.queue("dlq", 1).unwrap());
        (bodies(&source).await, bodies(&target).await)
    })
}

fn one(body: &str) -> Vec<String> {
    vec![body.to_owned()]
}

#[test]
fn a_moved_message_is_in_its_target_only_after_a_crash_before_its_source_acknowledged_it() {
    let dir = tempfile::tempdir().unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let (broker, vhost, persistence) = open_stored(dir.path());
        let (source, target) = queues(&vhost).await;
        assert!(move_one(&broker, &source, &target).await.is_some(), "the target confirmed the move");
        // The crash: the source never acknowledged its delivery.
        assert_eq!(source.stats().await.unwrap().unacked, 1);
        persistence.log.close().unwrap();
    });
    assert_eq!(after_restart(dir.path()), (one("stays"), one("moved")));
}

#[test]
fn the_sources_acknowledgement_after_a_move_changes_nothing_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let (broker, vhost, persistence) = open_stored(dir.path());
        let (source, target) = queues(&vhost).await;
        let seq = move_one(&broker, &source, &target).await.expect("confirmed");
        source.settle(vec![seq], Settle::Ack).await;
        assert_eq!(source.stats().await.unwrap().unacked, 0);
        persistence.log.close().unwrap();
    });
    assert_eq!(after_restart(dir.path()), (one("stays"), one("moved")));
}
