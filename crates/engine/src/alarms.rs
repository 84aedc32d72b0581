//! RabbitMQ's resource alarms: memory (resident memory above the high watermark) and disk
//! (free space below `disk_free_limit`, or the store unable to write). While either is on,
//! connections that publish are blocked and consumers go on, so the backlog drains; each
//! alarm clears by itself once its resource is back.
//!
//! In a cluster, an alarm of any node blocks the publishers of every node, as RabbitMQ's
//! alarms do: [`Resources::alarms`] is this node's and the other running nodes' together,
//! [`Resources::local_alarms`] this node's own.
//!
//! The engine only holds the state: the binary's resource monitor measures and raises.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::watch;

/// Which alarms are on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Alarms {
    /// Resident memory is above the high watermark.
    pub memory: bool,
    /// Free disk space is below the limit, or the store cannot write.
    pub disk: bool,
    /// Not an alarm: the store's writer is behind (more message bytes waiting for it than its
    /// backlog bound). Publishes are held, without `connection.blocked`, until it catches up —
    /// as RabbitMQ's credit flow holds a publisher faster than its queues and store.
    pub store_behind: bool,
}

impl Alarms {
    /// Whether an alarm is on (publishers are told with `connection.blocked`).
    #[must_use]
    pub fn any(self) -> bool {
        self.memory || self.disk
    }

    /// Whether publishes must wait: an alarm, or the store behind.
    #[must_use]
    pub fn hold_publishes(self) -> bool {
        self.any() || self.store_behind
    }

    /// The `connection.blocked` reason RabbitMQ 4.0.5 sends for these alarms (disk first when
    /// both are on, as observed).
    #[must_use]
    pub fn blocked_reason(self) -> &'static str {
        match (self.memory, self.disk) {
            (true, true) => "low on disk & memory",
            (true, false) => "low on memory",
            _ => "low on disk",
        }
    }

    /// The resources in alarm as RabbitMQ 4.0.5's health checks name them, in its order
    /// (`disk space`, then `memory`).
    #[must_use]
    pub fn resources(self) -> Vec<&'static str> {
        let mut on = Vec::new();
        if self.disk {
            on.push("disk space");
        }
        if self.memory {
            on.push("memory");
        }
        on
    }
}

/// The alarms and the measurements behind them, shared by the monitor that sets them and the
/// connections, metrics and health checks that read them.
#[derive(Debug)]
pub struct Resources {
    /// This node's alarms and the other nodes', together: what connections follow.
    alarms: watch::Sender<Alarms>,
    /// This node's own.
    local: parking_lot::Mutex<Alarms>,
    /// The other running nodes in alarm, by name.
    elsewhere: parking_lot::Mutex<Vec<(String, Alarms)>>,
    /// The store's writes are failing (disk full, I/O errors).
    log_failing: AtomicBool,
    /// Free space is below the limit.
    disk_low: AtomicBool,
    /// Resident memory, bytes.
    pub resident_bytes: AtomicU64,
    /// The memory high watermark, bytes.
    pub memory_limit_bytes: AtomicU64,
    /// Free space on the data directory's file system, bytes.
    pub disk_free_bytes: AtomicU64,
    /// `disk_free_limit`, bytes.
    pub disk_free_limit_bytes: AtomicU64,
    /// Open file descriptors (0: the system does not say).
    pub fd_used: AtomicU64,
    /// Their soft limit (0: the system does not say).
    pub fd_total: AtomicU64,
}

impl Default for Resources {
    fn default() -> Self {
        Self {
            alarms: watch::Sender::new(Alarms::default()),
            local: parking_lot::Mutex::default(),
            elsewhere: parking_lot::Mutex::default(),
            log_failing: AtomicBool::new(false),
            disk_low: AtomicBool::new(false),
            resident_bytes: AtomicU64::new(0),
            memory_limit_bytes: AtomicU64::new(0),
            disk_free_bytes: AtomicU64::new(0),
            disk_free_limit_bytes: AtomicU64::new(0),
            fd_used: AtomicU64::new(0),
            fd_total: AtomicU64::new(0),
        }
    }
}

impl Resources {
    /// Follows the alarms.
    #[must_use]
    pub fn watch(&self) -> watch::Receiver<Alarms> {
        self.alarms.subscribe()
    }

    /// The alarms now, this node's and the other nodes' together.
    #[must_use]
    pub fn alarms(&self) -> Alarms {
        *self.alarms.borrow()
    }

    /// This node's own alarms.
    #[must_use]
    pub fn local_alarms(&self) -> Alarms {
        *self.local.lock()
    }

    /// Every node in alarm with its alarms, this node first.
    #[must_use]
    pub fn alarms_by_node(&self, me: &str) -> Vec<(String, Alarms)> {
        let local = self.local_alarms();
        let mine = local.any().then(|| (me.to_owned(), local));
        mine.into_iter().chain(self.elsewhere.lock().iter().cloned()).collect()
    }

    /// The other running nodes' alarms (their latest reports); those without one are dropped.
    pub fn set_remote_alarms(&self, nodes: Vec<(String, Alarms)>) {
        *self.elsewhere.lock() = nodes.into_iter().filter(|(_, alarms)| alarms.any()).collect();
        self.publish();
    }

    /// Raises or clears the memory alarm.
    pub fn set_memory_alarm(&self, on: bool) {
        self.local.lock().memory = on;
        self.publish();
    }

    /// The store's writer fell behind, or caught up.
    pub fn set_store_behind(&self, behind: bool) {
        self.local.lock().store_behind = behind;
        self.publish();
    }

    /// Publishes this node's alarms with the other nodes' to the connections that follow them.
    fn publish(&self) {
        let local = self.local_alarms();
        let (memory, disk) = self
            .elsewhere
            .lock()
            .iter()
            .fold((local.memory, local.disk), |(m, d), (_, a)| (m || a.memory, d || a.disk));
        let now = Alarms { memory, disk, store_behind: local.store_behind };
        self.alarms.send_if_modified(|alarms| std::mem::replace(alarms, now) != now);
    }

    /// The store's writes started or stopped failing.
    pub fn set_log_failing(&self, failing: bool) {
        self.log_failing.store(failing, Ordering::SeqCst);
        self.update_disk();
    }

    /// Free space fell below the limit or came back above it.
    pub fn set_disk_low(&self, low: bool) {
        self.disk_low.store(low, Ordering::SeqCst);
        self.update_disk();
    }

    fn update_disk(&self) {
        let on = self.log_failing.load(Ordering::SeqCst) || self.disk_low.load(Ordering::SeqCst);
        self.local.lock().disk = on;
        self.publish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disk_alarm_holds_while_either_of_its_causes_does() {
        let resources = Resources::default();
        let mut seen = resources.watch();
        resources.set_disk_low(true);
        resources.set_log_failing(true);
        resources.set_disk_low(false);
        assert_eq!(resources.alarms(), Alarms { memory: false, disk: true, store_behind: false });
        resources.set_log_failing(false);
        assert_eq!(resources.alarms(), Alarms::default());
        assert!(seen.has_changed().unwrap());
        resources.set_memory_alarm(true);
        assert_eq!(resources.alarms().blocked_reason(), "low on memory");
        resources.set_disk_low(true);
        assert_eq!(resources.alarms().resources(), ["disk space", "memory"]);
        assert_eq!(resources.alarms().blocked_reason(), "low on disk & memory");
        seen.mark_unchanged();
        resources.set_disk_low(true);
        assert!(!seen.has_changed().unwrap(), "no change, no wake-up");
        let behind = Alarms { store_behind: true, ..Alarms::default() };
        assert!(behind.hold_publishes() && !behind.any(), "held, but no alarm to report");
    }

    #[test]
    fn another_nodes_alarm_blocks_here_but_stays_its_own() {
        let resources = Resources::default();
        let seen = resources.watch();
        let memory = Alarms { memory: true, ..Alarms::default() };
        resources.set_remote_alarms(vec![("b".into(), memory), ("c".into(), Alarms::default())]);
        assert_eq!((resources.alarms(), resources.local_alarms()), (memory, Alarms::default()));
        assert!(seen.has_changed().unwrap());
        assert_eq!(resources.alarms_by_node("a"), vec![("b".to_owned(), memory)]);
        resources.set_disk_low(true);
        let both = Alarms { memory: true, disk: true, store_behind: false };
        assert_eq!(resources.alarms(), both);
        let disk = Alarms { disk: true, ..Alarms::default() };
        assert_eq!(resources.alarms_by_node("a"), vec![("a".to_owned(), disk), ("b".to_owned(), memory)]);
        // The other node cleared it (or went down): only this node's is left.
        resources.set_remote_alarms(Vec::new());
        assert_eq!(resources.alarms(), disk);
    }
}
