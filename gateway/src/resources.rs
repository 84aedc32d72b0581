//! The resource monitor behind RabbitMQ's memory and disk alarms, on a thread of its own (it
//! reads `/proc` and calls `statvfs`: no I/O on a runtime worker).
//!
//! Every 100 ms it compares the process's resident memory with the high watermark and the
//! free space of the data directory's file system with `disk_free_limit`, and raises or
//! clears the alarms. While free space is low the message log gives back spent segments
//! eagerly, so consumers draining the queues clear the disk alarm with no outside help.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use charon_engine::Resources;
use charon_engine::persist::Persistence;

use crate::config::MemoryWatermark;

/// How often resources are measured. RabbitMQ's memory monitor checks every 500 ms; a
/// publisher flooding 1 MiB messages moves hundreds of MB in that time.
const INTERVAL: Duration = Duration::from_millis(100);

/// Starts the monitor; it stops when the broker's resources are dropped.
pub(crate) fn start(
    resources: &Arc<Resources>,
    store: &Arc<Persistence>,
    data_dir: PathBuf,
    watermark: MemoryWatermark,
    disk_free_limit: u64,
) -> std::io::Result<()> {
    let memory_limit = match watermark {
        MemoryWatermark::Absolute(bytes) => bytes,
        MemoryWatermark::Relative(fraction) => (total_memory() as f64 * fraction) as u64,
    };
    tracing::info!(memory_limit, disk_free_limit, "memory high watermark and disk free limit");
    resources.memory_limit_bytes.store(memory_limit, Ordering::Relaxed);
    resources.disk_free_limit_bytes.store(disk_free_limit, Ordering::Relaxed);
    let resources = Arc::downgrade(resources);
    let store = Arc::downgrade(store);
    std::thread::Builder::new().name("charon-resources".into()).spawn(move || {
        let mut ticks = 0_u32;
        while let (Some(resources), Some(store)) = (resources.upgrade(), store.upgrade()) {
            check(&resources, &store, &data_dir, memory_limit, disk_free_limit);
            // Descriptors once a second: reading them costs one entry per open file.
            if ticks.is_multiple_of(10) {
                let (used, total) = file_descriptors();
                resources.fd_used.store(used, Ordering::Relaxed);
                resources.fd_total.store(total, Ordering::Relaxed);
            }
            ticks = ticks.wrapping_add(1);
            drop((resources, store));
            std::thread::sleep(INTERVAL);
        }
    })?;
    Ok(())
}

fn check(resources: &Resources, store: &Persistence, data_dir: &Path, memory_limit: u64, disk_free_limit: u64) {
    let resident = resident_bytes();
    resources.resident_bytes.store(resident, Ordering::Relaxed);
    let memory_alarm = resident > memory_limit;
    if memory_alarm != resources.local_alarms().memory {
        let node = charon_engine::broker::node_name();
        if memory_alarm {
            tracing::warn!(resident, memory_limit, "memory resource limit alarm set on node {node}.");
            tracing::warn!("*** Publishers will be blocked until this alarm clears ***");
        } else {
            tracing::warn!(resident, memory_limit, "memory resource limit alarm cleared on node {node}");
        }
        resources.set_memory_alarm(memory_alarm);
    }
    let Some(free) = free_disk_bytes(data_dir) else { return };
    resources.disk_free_bytes.store(free, Ordering::Relaxed);
    let low = free < disk_free_limit;
    store.log.set_disk_low(low);
    let was_low = resources.local_alarms().disk;
    let node = charon_engine::broker::node_name();
    if low && !was_low {
        tracing::warn!(free, disk_free_limit, "disk resource limit alarm set on node {node}.");
        tracing::warn!("*** Publishers will be blocked until this alarm clears ***");
    } else if !low && was_low && !store.log.is_failing() {
        tracing::warn!(free, disk_free_limit, "disk resource limit alarm cleared on node {node}");
    }
    resources.set_disk_low(low);
}

/// Open file descriptors and their soft limit, from `/proc` (0 where the system does not say).
fn file_descriptors() -> (u64, u64) {
    let used = std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count() as u64);
    let total = std::fs::read_to_string("/proc/self/limits").ok().and_then(|limits| {
        limits
            .lines()
            .find(|line| line.starts_with("Max open files"))
            .and_then(|line| line.split_whitespace().nth(3))
            .and_then(|soft| soft.parse().ok())
    });
    (used, total.unwrap_or(0))
}

/// Resident memory of this process (`/proc/self/statm`, in pages).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(0);
    pages * rustix::param::page_size() as u64
}

/// The memory the broker may count on: the machine's, or its cgroup's limit when lower.
fn total_memory() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let machine = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(u64::MAX, |kib| kib * 1024);
    let cgroup = ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .filter_map(|text| text.trim().parse::<u64>().ok())
        .min()
        .unwrap_or(u64::MAX);
    machine.min(cgroup)
}

/// Free space for unprivileged writers on the file system holding `dir`.
fn free_disk_bytes(dir: &Path) -> Option<u64> {
    let stat = rustix::fs::statvfs(dir).ok()?;
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}
