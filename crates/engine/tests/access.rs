//! Access control in the engine (issue 17): the checks a declare makes as it goes — configure
//! on the generated name of a server-named queue, the dead-letter rule only for a queue the
//! declare creates — and a deleted vhost, which takes its queues with their messages and
//! refuses further declares from connections that still hold it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use charon_engine::{
    Account, BrokerConfig, EngineError, PasswordHash, Permission, Principal, QueueDeclare, Tags, VhostInfo,
};
use charon_model::Value;
use support::{declare, message, table};

#[tokio::test]
async fn a_server_named_queue_is_checked_under_its_generated_name() {
    let (broker, vhost) = support::broker(BrokerConfig::default());
    let account = Account::new("app".into(), Some(PasswordHash::new("pw")), Tags::default());
    broker.access().put_user(account).await.unwrap();
    broker.access().set_permission("/", "app", Permission::new("^amq\\.gen-", ".*", ".*").unwrap()).await.unwrap();
    let app = broker.user("app").unwrap();
    let by = Some(Principal::new(broker.access(), &app));
    let server_named = QueueDeclare { exclusive: true, ..QueueDeclare::default() };
    let ok = vhost.declare_queue_as(&server_named, 7, by).await.unwrap();
    assert!(ok.name.starts_with("amq.gen-"), "{}", ok.name);
    let named = QueueDeclare { name: "named".into(), ..QueueDeclare::default() };
    let refused = vhost.declare_queue_as(&named, 7, by).await.unwrap_err();
    assert_eq!(refused.to_string(), "configure access to queue 'named' in vhost '/' refused for user 'app'");
    assert!(vhost.queue("named", 7).is_err(), "nothing was created");
}

#[tokio::test]
async fn the_dead_letter_rule_applies_to_new_queues_only() {
    let (broker, vhost) = support::broker(BrokerConfig::default());
    let account = Account::new("app".into(), Some(PasswordHash::new("pw")), Tags::default());
    broker.access().put_user(account).await.unwrap();
    broker.access().set_permission("/", "app", Permission::new(".*", "^q$", ".*").unwrap()).await.unwrap();
    let app = broker.user("app").unwrap();
    let by = Some(Principal::new(broker.access(), &app));
    let with_dlx = declare("q", table(&[("x-dead-letter-exchange", Value::long_str("dlx"))]));
    let refused = vhost.declare_queue_as(&with_dlx, 7, by).await.unwrap_err();
    assert_eq!(refused.to_string(), "write access to exchange 'dlx' in vhost '/' refused for user 'app'");
    // A non-string DLX is the declare's own 406, not a permission check.
    let bad = declare("q", table(&[("x-dead-letter-exchange", Value::I64(1))]));
    assert!(matches!(vhost.declare_queue_as(&bad, 7, by).await, Err(EngineError::Precondition(_))));
    vhost.declare_queue(&with_dlx, 7).await.unwrap();
    let again = vhost.declare_queue_as(&with_dlx, 7, by).await.unwrap();
    assert!(!again.created, "an existing queue is only checked for configure and equivalence");
}

#[tokio::test]
async fn a_deleted_vhost_takes_its_queues_and_refuses_its_stale_holders() {
    let (broker, _) = support::broker(BrokerConfig::default());
    assert!(broker.add_vhost("dev", VhostInfo::default()).await.unwrap());
    broker.access().set_permission("dev", "guest", Permission::full()).await.unwrap();
    let dev = broker.open_vhost(&broker.user("guest").unwrap(), "dev").unwrap();
    dev.declare_queue(&declare("q", table(&[])), 7).await.unwrap();
    let queue = dev.queue("q", 7).unwrap();
    assert!(queue.publish(vec![charon_engine::Enqueue { message: message("q", "m"), confirm: None }], None).await);
    broker.delete_vhost("dev").await.unwrap();
    assert!(broker.vhosts().iter().all(|v| v.name() != "dev"));
    assert!(dev.queue("q", 7).is_err(), "its queues went with it");
    let stale = dev.declare_queue(&declare("late", table(&[])), 7).await.unwrap_err();
    assert_eq!(stale, EngineError::VhostNotFound("dev".into()));
    assert!(broker.open_vhost(&broker.user("guest").unwrap(), "dev").is_err());
    assert!(!broker.access().has_vhost("dev"));
}
