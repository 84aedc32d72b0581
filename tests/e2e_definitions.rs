//! Definitions exported from the live RabbitMQ 4.0.5 (the fixture in
//! `crates/management/tests/fixtures`: users with passwords, a vhost with a queue limit, permissions,
//! a topic permission, a policy, a quorum queue with a dead-letter exchange, a headers, a topic
//! and an internal fanout exchange, and bindings between them) loaded at start with
//! `--definitions`: no default `/` vhost is seeded, as RabbitMQ seeds none then; the users log in over AMQP with their RabbitMQ passwords and the objects
//! route, dead-letter and refuse as on RabbitMQ; a restart loads the file again without harm;
//! a file that does not import stops the start.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::time::Duration;

use lapin::options::{BasicGetOptions, BasicNackOptions, BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

fn fixture() -> std::path::PathBuf {
    support::workspace_root().join("crates/management/tests/fixtures/rabbitmq-4.0.5-definitions.json")
}

async fn connect(charon: &support::Charon, user: &str, password: &str) -> lapin::Result<Connection> {
    let url = format!("amqp://{user}:{password}@127.0.0.1:{}/defs-fixture", charon.port);
    Connection::connect(&url, ConnectionProperties::default()).await
}

async fn confirmed_channel(connection: &Connection) -> Channel {
    let channel = connection.create_channel().await.expect("channel");
    channel.confirm_select(ConfirmSelectOptions::default()).await.expect("confirm.select");
    channel
}

async fn publish(channel: &Channel, exchange: &str, key: &str, body: &[u8], headers: FieldTable) -> lapin::Result<()> {
    let properties = BasicProperties::default().with_headers(headers);
    channel.basic_publish(exchange.into(), key.into(), BasicPublishOptions::default(), body, properties).await?.await?;
    Ok(())
}

/// The next message of `queue` (waiting up to 5 s), acknowledged or not.
async fn get(channel: &Channel, queue: &str, no_ack: bool) -> lapin::message::BasicGetMessage {
    for _ in 0..100 {
        if let Some(message) = channel.basic_get(queue.into(), BasicGetOptions { no_ack }).await.expect("get") {
            return message;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("nothing arrived in {queue}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rabbitmq_export_loaded_at_start_works_over_amqp_and_again_after_a_restart() {
    let data = tempfile::tempdir().expect("data dir");
    let definitions = fixture();
    let args = ["--definitions", definitions.to_str().unwrap()];
    let mut charon = support::Charon::start_on(data.path(), &args);

    // As RabbitMQ with definitions to load, no default vhost was seeded; guest comes from the
    // file, with RabbitMQ's hash of its password.
    let url = format!("amqp://guest:guest@127.0.0.1:{}/%2f", charon.port);
    let refused = Connection::connect(&url, ConnectionProperties::default()).await.err().map(|e| e.to_string());
    assert!(refused.as_deref().unwrap_or_default().contains("NOT_ALLOWED"), "no / vhost was seeded: {refused:?}");
    connect(&charon, "guest", "guest").await.expect("guest logs in with the file's hash");
    let app = connect(&charon, "defs-app", "defs-app-pw").await.expect("defs-app logs in with its RabbitMQ password");
    assert!(connect(&charon, "defs-app", "wrong").await.is_err());
    let channel = confirmed_channel(&app).await;

    // app.topic -> app.orders (quorum, DLX app.dlx) -> rejected -> app.dlx -> app.dead.
    publish(&channel, "app.topic", "orders.new", b"order-1", FieldTable::default()).await.expect("publish an order");
    let order = get(&channel, "app.orders", false).await;
    assert_eq!(order.delivery.data, b"order-1");
    order.delivery.acker.nack(BasicNackOptions { multiple: false, requeue: false }).await.expect("reject");
    assert_eq!(get(&channel, "app.dead", true).await.delivery.data, b"order-1", "dead-lettered through app.dlx");

    // The topic permission: defs-app may publish to app.topic only with `orders.` keys.
    let refused = publish(&channel, "app.topic", "fan.x", b"no", FieldTable::default()).await.unwrap_err().to_string();
    assert!(
        refused.contains(
            "write access to topic 'fan.x' in exchange 'app.topic' in vhost 'defs-fixture' refused for user 'defs-app'"
        ),
        "{refused}"
    );
    drop(app);

    // app.topic -> app.fan (internal, an exchange-to-exchange binding) -> app.ttl.q; the headers
    // binding of app.events matches `type = audit` only.
    let admin = connect(&charon, "defs-admin", "defs-admin-pw").await.expect("defs-admin logs in");
    let channel = confirmed_channel(&admin).await;
    publish(&channel, "app.topic", "fan.x", b"fanned", FieldTable::default()).await.expect("publish to app.topic");
    assert_eq!(get(&channel, "app.ttl.q", true).await.delivery.data, b"fanned");
    let mut audit = FieldTable::default();
    audit.insert(ShortString::from("type"), AMQPValue::LongString("audit".into()));
    publish(&channel, "app.events", "", b"audited", audit).await.expect("publish an audit event");
    publish(&channel, "app.events", "", b"ignored", FieldTable::default()).await.expect("publish another event");
    assert_eq!(get(&channel, "app.events.q", true).await.delivery.data, b"audited");
    assert!(channel.basic_get("app.events.q".into(), BasicGetOptions { no_ack: true }).await.unwrap().is_none());
    publish(&channel, "app.topic", "orders.kept", b"kept", FieldTable::default()).await.expect("publish an order");
    drop(admin);

    // A restart imports the file again over the stored state: nothing changes, nothing is lost.
    charon.kill9();
    let charon = support::Charon::start_on(data.path(), &args);
    let admin = connect(&charon, "defs-admin", "defs-admin-pw").await.expect("defs-admin after the restart");
    let channel = admin.create_channel().await.expect("channel");
    assert_eq!(get(&channel, "app.orders", true).await.delivery.data, b"kept");
    let exported = http_get(&charon, "defs-admin:defs-admin-pw", "/api/definitions/defs-fixture");
    let exported: serde_json::Value = serde_json::from_str(&exported).unwrap();
    assert_eq!(exported["queues"].as_array().map(Vec::len), Some(4), "{exported}");
    assert_eq!(exported["bindings"].as_array().map(Vec::len), Some(5), "{exported}");
    assert_eq!(exported["limits"], serde_json::json!({"max-queues": 100}));
}

#[test]
fn a_definitions_file_that_does_not_import_stops_the_start() {
    let dir = tempfile::tempdir().expect("dir");
    let bad = dir.path().join("bad.json");
    let binding = r#"{"vhosts":[{"name":"v"}],"bindings":[{"source":"amq.direct","vhost":"v","destination":"nope","destination_type":"queue","routing_key":"k","arguments":{}}]}"#;
    std::fs::write(&bad, binding).unwrap();
    let data = tempfile::tempdir().expect("data dir");
    let error = support::Charon::try_start_on(data.path(), &["--definitions", bad.to_str().unwrap()])
        .err()
        .expect("the start fails");
    assert!(error.contains("importing definitions from") && error.contains("bad.json"), "{error}");
    assert!(error.contains(r#"{resources_missing,[{not_found,{resource,<<"v">>,queue,<<"nope">>}}]}"#), "{error}");

    std::fs::write(&bad, "not json").unwrap();
    let data = tempfile::tempdir().expect("data dir");
    let error = support::Charon::try_start_on(data.path(), &["--definitions", bad.to_str().unwrap()]).err().unwrap();
    assert!(error.contains("failed_to_parse_json"), "{error}");
    let missing = dir.path().join("missing.json");
    let error =
        support::Charon::try_start_on(data.path(), &["--definitions", missing.to_str().unwrap()]).err().unwrap();
    assert!(error.contains("reading the definitions file"), "{error}");
}

/// A GET on the management API, as `user:password`.
fn http_get(charon: &support::Charon, credentials: &str, path: &str) -> String {
    let (user, password) = credentials.split_once(':').expect("user:password");
    let reply = support::http::Call::new(charon.http_port, "GET", path).basic(user, password).send_blocking();
    assert_eq!(reply.status, 200, "{path}: {}", reply.body);
    reply.body
}
