//! A clean stop closes the log only once the dead letters on their way have reached their
//! targets and been removed from their sources: the next start finds each rejected message
//! once, in the dead-letter queue, and none back in the queue it died in.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use charon_engine::{Enqueue, QueueRef, Settle};
use charon_model::Value;
use support::{OWNER, declare, message, open_stored, table};

const MESSAGES: usize = 2_000;

/// How many messages `queue` holds, taken.
async fn drain(queue: &QueueRef) -> usize {
    let mut found = 0;
    while queue.get(OWNER, true).await.unwrap().is_some() {
        found += 1;
    }
    found
}

#[test]
fn a_clean_stop_waits_for_the_dead_letters_on_their_way() {
    let dir = tempfile::tempdir().unwrap();
    let quorum = || table(&[("x-queue-type", Value::long_str("quorum"))]);
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let (broker, vhost, persistence) = open_stored(dir.path());
        vhost.declare_queue(&declare("dlq", quorum()), 1).await.unwrap();
        let mut arguments = quorum();
        arguments.insert("x-dead-letter-exchange", Value::long_str(""));
        arguments.insert("x-dead-letter-routing-key", Value::long_str("dlq"));
        vhost.declare_queue(&declare("src", arguments), 1).await.unwrap();
        let source = vhost.queue("src", 1).unwrap();
        let items = (0..MESSAGES).map(|i| Enqueue { message: message("src", &format!("m{i}")), confirm: None });
        assert!(source.publish(items.collect(), None).await);
        let mut seqs = Vec::new();
        while let Some(got) = source.get(OWNER, false).await.unwrap() {
            seqs.push(got.delivery.seq);
        }
        assert_eq!(seqs.len(), MESSAGES);
        // Rejected, and at once the stop: what a clean stop does after its connections closed.
        source.settle(seqs, Settle::Discard).await;
        broker.flush_queues().await;
        persistence.log.close().unwrap();
    });
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let (_broker, vhost, _persistence) = open_stored(dir.path());
        assert_eq!(drain(&vhost.queue("src", 1).unwrap()).await, 0, "none back where it died");
        assert_eq!(drain(&vhost.queue("dlq", 1).unwrap()).await, MESSAGES, "each in the dead-letter queue");
    });
}
