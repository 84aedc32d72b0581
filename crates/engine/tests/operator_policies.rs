//! Operator policies in the engine: applied to existing queues alongside the user policy, the
//! stricter limit winning; removal restores the user policy's; kept across a restart.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use charon_engine::{BrokerConfig, Enqueue, Policy, QueueRef};
use charon_model::{Table, Value};
use support::{declare, message, table};

fn max_length(n: i64) -> Table {
    table(&[("max-length", Value::I64(n))])
}

async fn publish(queue: &QueueRef, count: usize) {
    for i in 0..count {
        let enqueue = Enqueue { message: message(queue.name(), &format!("m{i}")), confirm: None };
        assert!(queue.publish(vec![enqueue], None).await);
    }
}

async fn ready(queue: &QueueRef) -> u32 {
    queue.stats().await.unwrap().ready
}

#[tokio::test]
async fn the_lower_max_length_wins_and_removing_the_operator_policy_restores_the_users() {
    let (_broker, vhost) = support::broker(BrokerConfig::default());
    vhost.set_policy(Policy::new("user", "^q", "queues", 0, max_length(10)).unwrap()).await.unwrap();
    vhost.declare_queue(&declare("q1", Table::new()), 1).await.unwrap();
    let queue = vhost.queue("q1", 1).unwrap();
    publish(&queue, 5).await;
    assert_eq!(ready(&queue).await, 5);

    // Set on a queue that exists: applied at once, the head dropped down to the new limit.
    let created = vhost.set_policy(Policy::operator("cap", "^q", "queues", 0, max_length(3)).unwrap()).await.unwrap();
    assert!(created);
    assert_eq!(ready(&queue).await, 3);
    publish(&queue, 4).await;
    assert_eq!(ready(&queue).await, 3, "the operator's 3, not the user's 10");

    let applied = vhost.queue_policies(&queue);
    assert_eq!(applied.policy.as_ref().map(|p| p.name.as_str()), Some("user"));
    assert_eq!(applied.operator_policy.as_ref().map(|p| p.name.as_str()), Some("cap"));
    assert_eq!(applied.effective_definition(), Some(max_length(3)));
    // The same name in the other namespace is another policy.
    assert!(vhost.policy("cap").is_none() && vhost.operator_policy("user").is_none());

    assert!(vhost.delete_operator_policy("cap").await.unwrap());
    assert!(!vhost.delete_operator_policy("cap").await.unwrap());
    publish(&queue, 10).await;
    assert_eq!(ready(&queue).await, 10, "the user policy's limit again");
    assert_eq!(vhost.queue_policies(&queue).effective_definition(), Some(max_length(10)));
}

#[tokio::test]
async fn an_operator_policy_alone_applies_and_a_higher_user_limit_does_not_loosen_it() {
    let (_broker, vhost) = support::broker(BrokerConfig::default());
    vhost.set_policy(Policy::operator("cap", "^q", "all", 0, max_length(2)).unwrap()).await.unwrap();
    let args = table(&[("x-max-length", Value::I64(50))]);
    vhost.declare_queue(&declare("q2", args), 1).await.unwrap();
    let queue = vhost.queue("q2", 1).unwrap();
    publish(&queue, 5).await;
    assert_eq!(ready(&queue).await, 2);
    let applied = vhost.queue_policies(&queue);
    assert!(applied.policy.is_none());
    assert_eq!(applied.effective_definition(), Some(max_length(2)));
}

#[test]
fn operator_policies_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let (_broker, vhost, persistence) = support::open_stored(dir.path());
            let policy = Policy::operator("cap", "^q", "queues", 3, max_length(2)).unwrap();
            vhost.set_policy(policy).await.unwrap();
            // A user policy of the same name, and an operator policy set then deleted.
            vhost.set_policy(Policy::new("cap", "^q", "queues", 0, max_length(10)).unwrap()).await.unwrap();
            vhost.set_policy(Policy::operator("gone", "^q", "all", 9, max_length(1)).unwrap()).await.unwrap();
            assert!(vhost.delete_operator_policy("gone").await.unwrap());
            vhost.declare_queue(&declare("q3", Table::new()), 1).await.unwrap();
            persistence.log.close().unwrap();
        });
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (_broker, vhost, _persistence) = support::open_stored(dir.path());
        let names: Vec<String> = vhost.operator_policies().into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["cap"]);
        let restored = vhost.operator_policy("cap").unwrap();
        assert_eq!((restored.priority, restored.apply_to.as_str()), (3, "queues"));
        assert_eq!(restored.definition, max_length(2));
        assert_eq!(vhost.policy("cap").unwrap().definition, max_length(10));
        let queue = vhost.queue("q3", 1).unwrap();
        publish(&queue, 5).await;
        assert_eq!(ready(&queue).await, 2, "the restored operator policy limits the restored queue");
    });
}
