//! Interop with Node.js clients, installed into `tests/node/node_modules` by `scripts/test.sh`
//! (`npm ci` from the committed package-lock.json): amqplib (AMQP 0.9.1) and rhea (AMQP 1.0).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::path::PathBuf;
use std::process::Command;

/// The `node` binary: `CHARON_NODE`, else `node` on the `PATH`.
fn node() -> PathBuf {
    if let Ok(path) = std::env::var("CHARON_NODE") {
        return PathBuf::from(path);
    }
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|dir| dir.join("node")).find(|path| path.is_file()))
        .expect("node is not on the PATH (set CHARON_NODE to its path)")
}

/// Runs `tests/node/<script>` against a fresh broker and checks its last line (`require`
/// resolves from the script's directory, so it finds the modules `npm ci` installed there).
fn run_script(script: &str, expected_line: &str) {
    let dir = support::workspace_root().join("tests/node");
    assert!(
        dir.join("node_modules").is_dir(),
        "{} is missing: run scripts/test.sh (it runs npm ci in tests/node)",
        dir.join("node_modules").display()
    );
    let charon = support::Charon::start();
    let output = Command::new(node()).arg(dir.join(script)).arg(charon.port.to_string()).output().expect("run node");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{script} failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(stdout.lines().last(), Some(expected_line), "{stdout}");
}

#[test]
fn amqplib_rpc_priority_queue_single_active_consumer_and_consumer_priorities() {
    run_script("amqplib_features.js", "amqplib features ok");
}

#[test]
fn rhea_sends_and_receives_with_its_default_credit() {
    run_script("rhea_roundtrip.js", "rhea roundtrip ok");
}

#[test]
fn amqplib_closes_under_load_without_errors() {
    run_script("amqplib_close_under_load.js", "amqplib close under load ok");
}

#[test]
fn rhea_logs_in_anonymously_and_its_modified_annotations_reach_the_dead_letter() {
    run_script("rhea_client_paths.js", "rhea client paths ok");
}
