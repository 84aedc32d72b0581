//! The binary's log lines as an operator reads them: no ANSI escape codes when stderr is not a
//! terminal, `--log-format json` lines that parse, and RabbitMQ's wording for a connection
//! accepted, a user granted access, a refused login and a connection closing.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::time::Duration;

use lapin::{Connection, ConnectionProperties};

/// Opens and closes one connection, and fails one login.
async fn connect_twice(charon: &support::Charon) {
    let bad = format!("amqp://guest:wrong@127.0.0.1:{}/%2f", charon.port);
    assert!(Connection::connect(&bad, ConnectionProperties::default()).await.is_err());
    let conn = Connection::connect(&charon.url(), ConnectionProperties::default()).await.expect("connect");
    conn.close(200, "bye".into()).await.expect("close");
}

/// Waits until stderr holds a line containing every one of `wanted`.
async fn wait_for_lines(charon: &support::Charon, wanted: &[&str]) -> String {
    for _ in 0..100 {
        let text = charon.stderr();
        if wanted.iter().all(|w| text.contains(w)) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("missing one of {wanted:?} in:\n{}", charon.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_logs_have_no_escape_codes_and_rabbitmq_wording() {
    let data = tempfile::tempdir().unwrap();
    let charon = support::Charon::start_on_with_env(data.path(), &[], &[("RUST_LOG", "info")]);
    connect_twice(&charon).await;
    let mut amqp10 = charon.open_amqp10("logs10").await;
    amqp10.close().await.expect("1.0 close");
    let port = charon.port;
    let text = wait_for_lines(
        &charon,
        &[
            "accepting AMQP connection 127.0.0.1:",
            &format!(" -> 127.0.0.1:{port}: user 'guest' authenticated and granted access to vhost '/'"),
            "PLAIN login refused: user 'guest' - invalid credentials",
            ", vhost: '/', user: 'guest', duration: '",
            "Connection from AMQP 1.0 container 'logs10': user 'guest' authenticated using SASL mechanism PLAIN and granted access to vhost '/'",
        ],
    )
    .await;
    assert!(!text.contains('\u{1b}'), "ANSI escape codes on a pipe:\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_per_line() {
    let data = tempfile::tempdir().unwrap();
    let charon = support::Charon::start_on_with_env(data.path(), &["--log-format", "json"], &[("RUST_LOG", "info")]);
    connect_twice(&charon).await;
    let text = wait_for_lines(&charon, &["closing AMQP connection (", "authenticated and granted access"]).await;
    let lines: Vec<serde_json::Value> =
        text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    let refused = lines
        .iter()
        .find(|l| l["fields"]["message"].as_str().is_some_and(|m| m.contains("login refused")))
        .expect("the refused login");
    assert_eq!(refused["level"], "ERROR");
    assert_eq!(refused["fields"]["user"], "guest");
    assert_eq!(refused["fields"]["mechanism"], "PLAIN");
    assert!(refused["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')));
    assert_eq!(refused["span"]["name"], "amqp091");
    let accepted = lines
        .iter()
        .find(|l| l["fields"]["message"].as_str().is_some_and(|m| m.starts_with("accepting AMQP connection")))
        .expect("the accepted connection");
    assert_eq!(accepted["level"], "INFO");
    assert_eq!(accepted["target"], "charon::listener");
}

#[test]
fn an_unknown_log_format_is_refused() {
    let data = tempfile::tempdir().unwrap();
    let error = match support::Charon::try_start_on(data.path(), &["--log-format", "xml"]) {
        Ok(_) => panic!("started with --log-format xml"),
        Err(error) => error,
    };
    assert!(error.contains("invalid value 'xml' for '--log-format <LOG_FORMAT>'"), "{error}");
    assert!(error.contains("[possible values: text, json]"), "{error}");
    let config = data.path().join("charon.toml");
    std::fs::write(&config, "log_format = \"xml\"\n").unwrap();
    let error = match support::Charon::try_start_on(data.path(), &["--config", config.to_str().unwrap()]) {
        Ok(_) => panic!("started with log_format = \"xml\""),
        Err(error) => error,
    };
    assert!(error.contains("unknown variant `xml`, expected `text` or `json`"), "{error}");
}
