//! Interop with Python's pika (a non-Rust 0.9.1 client), installed by `scripts/test.sh`.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::path::PathBuf;
use std::process::Command;

/// The Python interpreter with pika: `CHARON_PYTHON`, else the repository's `.venv`.
fn python() -> PathBuf {
    if let Ok(path) = std::env::var("CHARON_PYTHON") {
        return PathBuf::from(path);
    }
    support::workspace_root().join(".venv/bin/python")
}

#[test]
fn pika_publishes_and_consumes_through_charon() {
    let python = python();
    assert!(
        python.exists(),
        "{} is missing: run scripts/test.sh (it creates .venv with tests/python/requirements.txt)",
        python.display()
    );
    let charon = support::Charon::start();
    let script = support::workspace_root().join("tests/python/pika_roundtrip.py");
    let output = Command::new(&python)
        .arg(&script)
        .arg(charon.port.to_string())
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "pika script failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("pika interop ok"), "{stdout}");
}
