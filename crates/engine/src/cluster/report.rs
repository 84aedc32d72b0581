//! What a node tells its peers about itself, in the answer to each of their pings: its
//! measurements and alarms (its peers list it with them, and block their publishers while it is
//! in alarm) and its totals (their overview adds them up).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;

use serde::{Deserialize, Serialize};

use crate::alarms::Alarms;

/// One vhost's queues on one node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VhostTotals {
    /// Queues.
    pub queues: u64,
    /// Ready messages.
    pub ready: u64,
    /// Delivered, not yet settled.
    pub unacked: u64,
    /// Neither: delayed, or dead letters waiting for their targets.
    pub other: u64,
    /// Consumers.
    pub consumers: u64,
}

/// A node as it reports itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeReport {
    /// Its operating-system process id.
    pub os_pid: u32,
    /// CPUs it may use.
    pub processors: u64,
    /// Milliseconds since it started.
    pub uptime: u64,
    /// Resident memory, bytes.
    pub mem_used: u64,
    /// Its memory high watermark, bytes.
    pub mem_limit: u64,
    /// Its memory alarm.
    pub mem_alarm: bool,
    /// Free disk space, bytes.
    pub disk_free: u64,
    /// Its `disk_free_limit`, bytes.
    pub disk_free_limit: u64,
    /// Its disk alarm.
    pub disk_free_alarm: bool,
    /// Open file descriptors (`None`: the system does not say).
    pub fd_used: Option<u64>,
    /// Their limit.
    pub fd_total: Option<u64>,
    /// Its queues, by vhost (as of each queue's last pass).
    pub vhosts: BTreeMap<String, VhostTotals>,
    /// Its client connections, by user.
    pub connections: BTreeMap<String, u64>,
    /// Its open channels, by user.
    pub channels: BTreeMap<String, u64>,
    /// Its message counters (`message_stats`).
    pub message_stats: BTreeMap<String, u64>,
}

impl NodeReport {
    /// `broker` now: loads of what its monitor and its queues keep, nothing it must wait for
    /// (a ping's answer).
    #[must_use]
    pub fn of(broker: &crate::Broker) -> Self {
        let resources = broker.resources();
        let alarms = resources.local_alarms();
        let known = |value: u64| (value > 0).then_some(value);
        let mut vhosts = BTreeMap::new();
        for vhost in broker.vhosts() {
            let mut totals = VhostTotals::default();
            for queue in vhost.local_queues() {
                let gauges = queue.gauges.load();
                totals.queues += 1;
                totals.ready += gauges.ready;
                totals.unacked += gauges.unacked;
                totals.other += gauges.delayed + queue.dead_letters_pending.load(Relaxed);
                totals.consumers += gauges.consumers;
            }
            vhosts.insert(vhost.name().to_owned(), totals);
        }
        let mut connections: BTreeMap<String, u64> = BTreeMap::new();
        for listed in broker.connections().list() {
            *connections.entry(listed.info.user.clone()).or_default() += 1;
        }
        Self {
            os_pid: std::process::id(),
            processors: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
            uptime: u64::try_from(broker.uptime().as_millis()).unwrap_or(u64::MAX),
            mem_used: resources.resident_bytes.load(Relaxed),
            mem_limit: resources.memory_limit_bytes.load(Relaxed),
            mem_alarm: alarms.memory,
            disk_free: resources.disk_free_bytes.load(Relaxed),
            disk_free_limit: resources.disk_free_limit_bytes.load(Relaxed),
            disk_free_alarm: alarms.disk,
            fd_used: known(resources.fd_used.load(Relaxed)),
            fd_total: known(resources.fd_total.load(Relaxed)),
            vhosts,
            connections,
            channels: broker.limits().channels_by_user(),
            message_stats: crate::metrics::message_stats(),
        }
    }

    /// Its alarms.
    #[must_use]
    pub fn alarms(&self) -> Alarms {
        Alarms { memory: self.mem_alarm, disk: self.disk_free_alarm, store_behind: false }
    }
}
