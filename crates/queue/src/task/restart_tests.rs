#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

//! What a restart brings back redelivered, as RabbitMQ 4.0.5's classic queues do: after a
//! crash every recovered message (they keep no delivery marks), after a clean stop only those
//! that came back from a consumer, the unsettled messages of closed connections included.

use super::super::paging::IDLE_RESIDENT_MESSAGES;
use super::super::{BrowseRequest, QueueSettings, Settle};
use super::tests::{OWNER, body, publish, runtime, spawn, store};
use charon_store::segment_log::RecoveredQueue;

/// More than the queue keeps in memory: the rest is paged when the broker stops.
const TOTAL: usize = IDLE_RESIDENT_MESSAGES + 500;

/// Publishes [`TOTAL`] persistent messages; message 0 is held unsettled when its owner goes
/// away, message 1 was taken and requeued. Then the broker stops: cleanly (the queue flushed,
/// the log closed) or by crashing (the log dropped unclosed). Returns what a restart delivers
/// from the queue, as (body, redelivered), and whether a message published after the restart
/// comes redelivered.
fn after_restart(clean: bool) -> (Vec<(String, bool)>, bool) {
    let dir = tempfile::tempdir().unwrap();
    {
        let (store, _) = store(dir.path());
        runtime().block_on(async {
            let queue = spawn(9, QueueSettings::default(), &store, RecoveredQueue::default());
            publish(&queue, 0..TOTAL).await;
            let held = queue.get(OWNER, false).await.unwrap().unwrap();
            assert_eq!(body(&held), "message 0");
            let returned = queue.get(OWNER, false).await.unwrap().unwrap();
            queue.settle(vec![returned.delivery.seq], Settle::Requeue).await;
            // What a closing connection tells its queues.
            queue.owner_closed(OWNER).await;
            if clean {
                queue.flush().await.unwrap();
                store.close().unwrap();
            }
        });
        // Unless closed above, the log is dropped unclosed with its last owner here.
    }
    let (store, mut recovered) = store(dir.path());
    let restored = recovered.remove(&9).unwrap();
    assert_eq!(restored.after_crash(), !clean);
    runtime().block_on(async {
        let queue = spawn(9, QueueSettings::default(), &store, restored);
        let browsed = queue.browse(BrowseRequest::oldest(TOTAL)).await.unwrap();
        let mut got = Vec::new();
        while let Some(ok) = queue.get(OWNER, true).await.unwrap() {
            got.push((body(&ok), ok.delivery.redelivered));
        }
        let shown: Vec<(u64, bool)> = browsed.items.iter().map(|m| (m.seq, m.redelivered)).collect();
        assert_eq!(shown.len(), TOTAL);
        assert!(
            shown.iter().zip(&got).all(|((_, shown), (_, delivered))| shown == delivered),
            "browsing shows the flag a delivery carries"
        );
        publish(&queue, TOTAL..TOTAL + 1).await;
        let fresh = queue.get(OWNER, true).await.unwrap().unwrap();
        assert_eq!(body(&fresh), format!("message {TOTAL}"));
        (got, fresh.delivery.redelivered)
    })
}

#[test]
fn after_a_crash_every_recovered_message_of_a_classic_queue_is_redelivered() {
    let (got, fresh) = after_restart(false);
    assert_eq!(got.len(), TOTAL);
    assert!(got.iter().all(|(_, redelivered)| *redelivered), "in memory and paged alike");
    assert!(!fresh, "a message of the new run was never delivered");
}

#[test]
fn after_a_clean_stop_only_the_messages_that_came_back_are_redelivered() {
    let (got, fresh) = after_restart(true);
    let redelivered: Vec<&str> = got.iter().filter(|(_, r)| *r).map(|(b, _)| b.as_str()).collect();
    assert_eq!(redelivered, ["message 0", "message 1"]);
    assert_eq!(got.len(), TOTAL);
    assert!(!fresh);
}
