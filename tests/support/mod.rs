//! Starting the real `charon` binary for end-to-end tests.
#![allow(dead_code, unreachable_pub, clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A running broker on an ephemeral port, killed when dropped.
pub struct Charon {
    child: Child,
    /// The AMQP port it listens on.
    pub port: u16,
    /// The HTTP management API port.
    pub http_port: u16,
    /// The Prometheus port.
    pub prometheus_port: u16,
}

impl Charon {
    /// Starts `charon` on ephemeral ports (AMQP, HTTP API, Prometheus) with extra arguments.
    pub fn start_with(args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_charon"))
            .args(["--listen", "127.0.0.1:0", "--log-level", "warn"])
            .args(["--http-listen", "127.0.0.1:0", "--prometheus-listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn charon");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                for what in ["amqp", "http", "prometheus"] {
                    if let Some(addr) = line.strip_prefix(&format!("charon: {what} listening on ")) {
                        let port: u16 = addr.rsplit(':').next().and_then(|p| p.parse().ok()).expect("port");
                        let _ = tx.send((what, port));
                    }
                }
            }
        });
        let mut ports = std::collections::HashMap::new();
        while ports.len() < 3 {
            let (what, port) = rx.recv_timeout(Duration::from_secs(20)).expect("charon did not report its ports");
            ports.insert(what, port);
        }
        Self { child, port: ports["amqp"], http_port: ports["http"], prometheus_port: ports["prometheus"] }
    }

    /// Starts with the defaults.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// An `amqp://` URL for `guest` on vhost `/` (spelled `%2f`: lapin reads a bare `/` path as
    /// the empty vhost).
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("kill");
        assert!(status.success());
    }

    /// Waits for the process to exit, returning whether it exited successfully.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<bool> {
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status.success());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Charon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}
