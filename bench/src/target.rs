//! The broker under test: where it listens and, when its pid is given, what it costs — CPU
//! seconds from `/proc/PID/stat` and resident memory sampled from `/proc/PID/status`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Result, anyhow};
use lapin::uri::AMQPUri;

/// Clock ticks per second in `/proc/PID/stat` (USER_HZ, 100 on every Linux build we run on).
const TICKS_PER_SECOND: f64 = 100.0;

/// A broker URL and, optionally, its process id.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    /// AMQP URL, e.g. `amqp://guest:guest@127.0.0.1:5672/%2f`.
    pub(crate) url: String,
    /// The broker's process, for CPU and memory.
    pub(crate) pid: Option<u32>,
    /// Its management API, when given.
    pub(crate) api: Option<crate::api_poll::ApiUrl>,
    /// Its Zaqar gateway (`host:port`), when given.
    pub(crate) zaqar: Option<String>,
    /// Where S1's queue is declared, when not through `url` (another node of its cluster).
    pub(crate) home: Option<String>,
}

impl Target {
    /// The URL's parts (host, port, credentials, the vhost percent-decoded), for the clients
    /// that do not take a URL: fe2o3 for AMQP 1.0, and amqprs, whose own parser leaves `%2f`
    /// in the vhost.
    pub(crate) fn uri(&self) -> Result<AMQPUri> {
        parse_uri(&self.url)
    }

    /// CPU seconds the broker has used so far (user + system).
    pub(crate) fn cpu_seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid?)).ok()?;
        // Fields after the command name (which may hold spaces) start at field 3.
        let after = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = after.split_whitespace().collect();
        let utime: f64 = fields.get(11)?.parse().ok()?;
        let stime: f64 = fields.get(12)?.parse().ok()?;
        Some((utime + stime) / TICKS_PER_SECOND)
    }

    /// Resident memory now, bytes.
    pub(crate) fn rss(&self) -> Option<u64> {
        rss_of(self.pid?)
    }

    /// Samples resident memory every 50 ms until the returned guard is finished.
    pub(crate) fn watch_rss(&self) -> RssWatch {
        let peak = Arc::new(AtomicU64::new(self.rss().unwrap_or(0)));
        let stop = Arc::new(AtomicBool::new(false));
        if let Some(pid) = self.pid {
            let (peak, stop) = (Arc::clone(&peak), Arc::clone(&stop));
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(rss) = rss_of(pid) {
                        peak.fetch_max(rss, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            });
        }
        RssWatch { peak, stop }
    }
}

/// See [`Target::uri`].
pub(crate) fn parse_uri(url: &str) -> Result<AMQPUri> {
    url.parse().map_err(|error| anyhow!("{url}: {error}"))
}

fn rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The peak of sampled resident memory.
pub(crate) struct RssWatch {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl RssWatch {
    /// Stops sampling; the peak seen, bytes.
    pub(crate) fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.peak.load(Ordering::Relaxed)
    }
}
