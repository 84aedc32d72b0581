//! Starting the real `charon` binary for end-to-end tests.
#![allow(dead_code, unreachable_pub, clippy::expect_used, clippy::unwrap_used)]

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
}

impl Charon {
    /// Starts `charon --listen 127.0.0.1:0` with extra arguments.
    pub fn start_with(args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_charon"))
            .args(["--listen", "127.0.0.1:0", "--log-level", "warn"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn charon");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("charon: amqp listening on ") {
                    let _ = tx.send(addr.to_owned());
                }
            }
        });
        let addr = rx.recv_timeout(Duration::from_secs(20)).expect("charon did not report its port");
        let port = addr.rsplit(':').next().and_then(|p| p.parse().ok()).expect("port");
        Self { child, port }
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
