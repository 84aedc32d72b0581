//! Starting the real `charon` binary for end-to-end tests.
#![allow(dead_code, unreachable_pub, clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

pub mod http;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A running broker on an ephemeral port, killed when dropped.
pub struct Charon {
    child: Child,
    /// A data directory of its own (removed when dropped), unless started on a given one.
    _data: Option<tempfile::TempDir>,
    /// The AMQP port it listens on.
    pub port: u16,
    /// The HTTP management API port.
    pub http_port: u16,
    /// The Prometheus port.
    pub prometheus_port: u16,
    /// The first amqps port, when TLS is configured.
    pub amqps_port: Option<u16>,
    /// The HTTPS management API port, when TLS is configured.
    pub https_port: Option<u16>,
    /// The Zaqar gateway's port, when it is on.
    pub zaqar_port: Option<u16>,
    /// Everything it wrote on stderr so far.
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Charon {
    /// Starts `charon` on ephemeral ports (AMQP, HTTP API, Prometheus) and a fresh data
    /// directory, with extra arguments.
    pub fn start_with(args: &[&str]) -> Self {
        let data = tempfile::tempdir().expect("data directory");
        let mut charon = Self::start_on(data.path(), args);
        charon._data = Some(data);
        charon
    }

    /// Starts `charon` on the data directory `data_dir` (which outlives it: restart tests).
    pub fn start_on(data_dir: &std::path::Path, args: &[&str]) -> Self {
        Self::start_on_with_env(data_dir, args, &[])
    }

    /// Starts `charon` on `data_dir` with extra environment variables.
    pub fn start_on_with_env(data_dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::try_start(data_dir, args, env).expect("charon did not report its ports")
    }

    /// Starts `charon` on `data_dir`; `Err` with what it printed on stderr when it exits
    /// before listening.
    pub fn try_start_on(data_dir: &std::path::Path, args: &[&str]) -> Result<Self, String> {
        Self::try_start(data_dir, args, &[])
    }

    fn try_start(data_dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Result<Self, String> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_charon"))
            .envs(env.iter().copied())
            .args(["--listen", "127.0.0.1:0", "--log-level", "warn"])
            .arg("--data-dir")
            .arg(data_dir)
            .args([
                "--http-listen",
                "127.0.0.1:0",
                "--prometheus-listen",
                "127.0.0.1:0",
                "--zaqar-listen",
                "127.0.0.1:0",
            ])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn charon");
        let stderr = child.stderr.take().expect("stderr");
        // Forwards the broker's stderr and keeps it, for the error of a start that fails and
        // for tests of the log lines.
        let kept = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let keeping = std::sync::Arc::clone(&kept);
        let stderr_reader = std::thread::spawn(move || {
            let mut seen = String::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("{line}");
                seen.push_str(&line);
                seen.push('\n');
                let mut kept = keeping.lock().unwrap();
                kept.push_str(&line);
                kept.push('\n');
            }
            seen
        });
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                for what in ["amqp", "amqps", "http", "https", "prometheus", "zaqar"] {
                    if let Some(addr) = line.strip_prefix(&format!("charon: {what} listening on ")) {
                        let port: u16 = addr.rsplit(':').next().and_then(|p| p.parse().ok()).expect("port");
                        let _ = tx.send((what, port));
                    }
                }
            }
        });
        let mut ports = std::collections::HashMap::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !["amqp", "http", "prometheus"].iter().all(|what| ports.contains_key(what)) {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok((what, port)) => {
                    ports.insert(what, port);
                }
                Err(_) if matches!(child.try_wait(), Ok(Some(_))) || std::time::Instant::now() > deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    // The pipe closes with the process: everything it printed is read.
                    return Err(stderr_reader.join().unwrap_or_default());
                }
                Err(_) => {}
            }
        }
        Ok(Self {
            child,
            _data: None,
            port: ports["amqp"],
            http_port: ports["http"],
            prometheus_port: ports["prometheus"],
            amqps_port: ports.get("amqps").copied(),
            https_port: ports.get("https").copied(),
            zaqar_port: ports.get("zaqar").copied(),
            stderr: kept,
        })
    }

    /// What it wrote on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Kills the process with SIGKILL (no shutdown work at all) and waits for it.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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

    /// An AMQP 1.0 connection (fe2o3) as `guest` (SASL PLAIN) to vhost `/`, with container id
    /// `container`.
    pub async fn open_amqp10(&self, container: &str) -> fe2o3_amqp::connection::ConnectionHandle<()> {
        fe2o3_amqp::Connection::builder()
            .container_id(container)
            .hostname("vhost:/")
            .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Plain {
                username: "guest".into(),
                password: "guest".into(),
            })
            .open(format!("amqp://127.0.0.1:{}", self.port).as_str())
            .await
            .expect("1.0 open")
    }

    /// The process's resident memory (`VmRSS`), in bytes.
    pub fn rss_bytes(&self) -> u64 {
        rss_of(self.child.id())
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
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

/// A 0.9.1 field table from `(key, value)` pairs, in order.
pub fn field_table(args: &[(&str, lapin::types::AMQPValue)]) -> lapin::types::FieldTable {
    let mut table = lapin::types::FieldTable::default();
    for (key, value) in args {
        table.insert(lapin::types::ShortString::from(*key), value.clone());
    }
    table
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

/// The resident memory (`VmRSS`) of process `pid`, in bytes (0 once it has exited).
pub fn rss_of(pid: u32) -> u64 {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return 0 };
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    let kib: u64 = line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("VmRSS value");
    kib * 1024
}

/// A tmpfs of a given size mounted on a fresh directory, unmounted when dropped: a small disk
/// that really fills. Needs root, as the test command runs (CI included).
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`mount -o size=`, e.g. `80m`).
    pub fn mount(size: &str) -> Self {
        let dir = tempfile::tempdir().expect("mount point");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(status.success(), "mounting a {size} tmpfs failed: these tests run as root");
        Self { dir }
    }

    /// Where it is mounted.
    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

/// RabbitMQ's `rabbitmqadmin` v2: `CHARON_RABBITMQADMIN`, else where scripts/test.sh installs
/// it (the user's cache); `None` when it is not there.
pub fn rabbitmqadmin() -> Option<PathBuf> {
    let path = match std::env::var_os("CHARON_RABBITMQADMIN") {
        Some(path) => PathBuf::from(path),
        None => {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
            cache.join("charon-tests/rabbitmqadmin/bin/rabbitmqadmin")
        }
    };
    path.is_file().then_some(path)
}
