//! The async runtime's size comes from the configuration (`--worker-threads`, as Erlang's `+S`
//! for RabbitMQ), and a broker on one worker thread serves both protocols' clients.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use lapin::options::{BasicGetOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};

/// Threads of the process named as tokio names its threads (workers and the blocking pool).
fn tokio_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .filter(|name| name.trim_end() == "tokio-rt-worker")
        .count()
}

#[tokio::test]
async fn the_worker_threads_are_as_configured_and_one_serves_clients() {
    let one = support::Charon::start_with(&["--worker-threads", "1"]);
    let three = support::Charon::start_with(&["--worker-threads", "3"]);
    assert_eq!(tokio_threads(three.pid()) - tokio_threads(one.pid()), 2, "two more workers");
    let conn = Connection::connect(&one.url(), ConnectionProperties::default()).await.unwrap();
    let channel = conn.create_channel().await.unwrap();
    channel.queue_declare("one-worker".into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    let options = BasicPublishOptions::default();
    channel.basic_publish("".into(), "one-worker".into(), options, b"m", BasicProperties::default()).await.unwrap();
    let got = channel.basic_get("one-worker".into(), BasicGetOptions { no_ack: true }).await.unwrap();
    assert_eq!(got.map(|g| g.delivery.data), Some(b"m".to_vec()));
    let _ = conn.close(200, "bye".into()).await;
}
