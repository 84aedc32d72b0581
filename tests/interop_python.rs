//! Interop with non-Rust clients, installed into `.venv` by `scripts/test.sh`: Python pika and
//! aio-pika (AMQP 0.9.1), python-qpid-proton (AMQP 1.0) and RabbitMQ's official
//! rabbitmq-amqp-python-client (AMQP 1.0 with its management link pair).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::path::PathBuf;
use std::process::Command;

/// The Python interpreter with the clients: `CHARON_PYTHON`, else the repository's `.venv`.
fn python() -> PathBuf {
    if let Ok(path) = std::env::var("CHARON_PYTHON") {
        return PathBuf::from(path);
    }
    support::workspace_root().join(".venv/bin/python")
}

/// Runs `tests/python/<script>` against a fresh broker and checks its last line.
fn run_script(script: &str, expected_line: &str) {
    let python = python();
    assert!(
        python.exists(),
        "{} is missing: run scripts/test.sh (it creates .venv with tests/python/requirements.txt)",
        python.display()
    );
    let charon = support::Charon::start();
    let path = support::workspace_root().join("tests/python").join(script);
    let output = Command::new(&python).arg(&path).arg(charon.port.to_string()).output().expect("run python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{script} failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains(expected_line), "{stdout}");
}

#[test]
fn pika_publishes_and_consumes_through_charon() {
    run_script("pika_roundtrip.py", "pika interop ok");
}

#[test]
fn pika_commits_and_rolls_back_transactions() {
    run_script("pika_tx.py", "pika tx ok");
}

#[test]
fn pika_rpc_over_direct_reply_to() {
    run_script("pika_rpc_reply_to.py", "pika direct reply-to ok");
}

#[test]
fn aio_pika_rpc_priorities_single_active_consumer_and_transactions() {
    run_script("aio_pika_features.py", "aio-pika features ok");
}

#[test]
fn qpid_proton_publishes_and_consumes_over_amqp_1_0() {
    run_script("proton_roundtrip.py", "proton interop ok");
}

#[test]
fn rabbitmq_amqp_python_client_declares_publishes_and_consumes() {
    run_script("rabbitmq_amqp_client_roundtrip.py", "rabbitmq-amqp-python-client interop ok");
}
