//! Users, vhosts and permissions changed at runtime with `charon ctl`, enforced at once, and
//! durable: a restart keeps them, and the configuration seeds only the first start.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::process::Command;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};

/// Runs `charon ctl <args>` against `charon`; stdout, or stderr on failure.
fn ctl(charon: &support::Charon, args: &[&str]) -> Result<String, String> {
    let url = format!("http://127.0.0.1:{}", charon.http_port);
    let output = Command::new(env!("CARGO_BIN_EXE_charon"))
        .args(["ctl", "--url", &url])
        .args(args)
        .output()
        .expect("run charon ctl");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    if output.status.success() { Ok(text(&output.stdout)) } else { Err(text(&output.stderr)) }
}

async fn connect(charon: &support::Charon, user: &str, password: &str, vhost: &str) -> lapin::Result<Connection> {
    let url = format!("amqp://{user}:{password}@127.0.0.1:{}/{vhost}", charon.port);
    Connection::connect(&url, ConnectionProperties::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctl_changes_apply_at_once_and_survive_a_restart() {
    let data = tempfile::tempdir().expect("data dir");
    let mut charon = support::Charon::start_on(data.path(), &[]);
    ctl(&charon, &["add_user", "app", "s3cret"]).expect("add_user");
    assert_eq!(ctl(&charon, &["add_user", "app", "x"]).unwrap_err().trim(), "Error: user_already_exists: app");
    ctl(&charon, &["add_vhost", "dev"]).expect("add_vhost");
    // A user without permissions in a vhost cannot open it.
    let refused = connect(&charon, "app", "s3cret", "dev").await.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(refused.contains("access to vhost 'dev' refused for user 'app'"), "{refused}");
    ctl(&charon, &["set_permissions", "-p", "dev", "app", "^app-", ".*", ".*"]).expect("set_permissions");
    ctl(&charon, &["set_user_tags", "app", "management", "custom"]).expect("set_user_tags");
    let users = ctl(&charon, &["list_users"]).expect("list_users");
    assert!(users.contains("app\t[management, custom]\n") && users.contains("guest\t[administrator]\n"), "{users}");
    let permissions = ctl(&charon, &["list_permissions", "-p", "dev"]).expect("list_permissions");
    assert!(permissions.contains("app\t^app-\t.*\t.*\n"), "{permissions}");
    assert!(ctl(&charon, &["list_vhosts"]).expect("list_vhosts").contains("\ndev\n"));

    // Tags kept the password; the permissions hold at once.
    let app = connect(&charon, "app", "s3cret", "dev").await.expect("app connects to dev");
    let channel = app.create_channel().await.expect("channel");
    let durable = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
    channel.queue_declare("app-q".into(), durable, FieldTable::default()).await.expect("declare app-q");
    // Confirmed before the kill below: an unconfirmed message may be lost by kill -9 (it failed
    // that way once under load).
    channel.confirm_select(ConfirmSelectOptions::default()).await.expect("confirm.select");
    let confirm = channel
        .basic_publish(
            "".into(),
            "app-q".into(),
            BasicPublishOptions::default(),
            b"kept",
            BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .expect("publish");
    assert!(confirm.await.expect("confirm").is_ack());
    let refused = channel.queue_declare("other".into(), QueueDeclareOptions::default(), FieldTable::default()).await;
    let text = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(text.contains("configure access to queue 'other' in vhost 'dev' refused for user 'app'"), "{text}");
    drop(app);

    // Restarted with another configured user: the store wins, the configuration seeds only once.
    charon.kill9();
    let charon = support::Charon::start_on(data.path(), &["--user", "admin:admin"]);
    assert!(connect(&charon, "admin", "admin", "%2f").await.is_err(), "the configuration no longer seeds");
    let app = connect(&charon, "app", "s3cret", "dev").await.expect("app survives the restart");
    let channel = app.create_channel().await.expect("channel");
    let passive = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
    let queue = channel.queue_declare("app-q".into(), passive, FieldTable::default()).await.expect("app-q survives");
    assert_eq!(queue.message_count(), 1);
    drop(app);

    ctl(&charon, &["change_password", "app", "n3w"]).expect("change_password");
    assert!(connect(&charon, "app", "s3cret", "dev").await.is_err(), "the old password is gone");
    assert!(connect(&charon, "app", "n3w", "dev").await.is_ok());
    ctl(&charon, &["clear_permissions", "-p", "dev", "app"]).expect("clear_permissions");
    assert!(connect(&charon, "app", "n3w", "dev").await.is_err(), "no permissions, no vhost");
    ctl(&charon, &["delete_vhost", "dev"]).expect("delete_vhost");
    ctl(&charon, &["delete_user", "app"]).expect("delete_user");
    assert_eq!(ctl(&charon, &["delete_user", "app"]).unwrap_err().trim(), "Error: no_such_user: app");

    // Deleted vhosts and users stay deleted across a restart, with their queues.
    drop(charon);
    let charon = support::Charon::start_on(data.path(), &[]);
    assert!(!ctl(&charon, &["list_vhosts"]).expect("list_vhosts").contains("\ndev\n"));
    assert!(!ctl(&charon, &["list_users"]).expect("list_users").contains("app\t"));
    ctl(&charon, &["add_vhost", "dev"]).expect("add_vhost again");
    let guest = connect(&charon, "guest", "guest", "dev").await.expect("guest got permissions creating it");
    let channel = guest.create_channel().await.expect("channel");
    let gone = channel.queue_declare("app-q".into(), passive, FieldTable::default()).await;
    assert!(gone.is_err(), "the deleted vhost's queue went with it");
}
