//! Charon's own families beside RabbitMQ's: per-queue dead-letter counts and gauges, the
//! per-vhost drops, and RabbitMQ's alarm and resource families. The engine keeps the figures
//! (on each queue's handle, each vhost and the broker's resources); this renders them at
//! scrape time, so a deleted queue's series disappear with it.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;

use charon_engine::metrics::{
    DEAD_LETTER_EVENTS_DROPPED, DEAD_LETTERS_DROPPED, QUEUE_DEAD_LETTERED, QUEUE_DEAD_LETTERS_PENDING,
    QUEUE_OLDEST_MESSAGE_AGE,
};
use charon_engine::{Broker, QueueRef};

/// Every live queue, by vhost and then by name: the order of the per-queue series.
pub(crate) fn sorted_queues(broker: &Broker) -> Vec<QueueRef> {
    let mut all = Vec::new();
    for vhost in broker.vhosts() {
        let mut queues = vhost.local_queues();
        queues.sort_by(|a, b| a.name().cmp(b.name()));
        all.extend(queues);
    }
    all
}

/// Charon's per-queue families, rendered a slice of queues at a time so that a scrape of many
/// queues can be streamed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QueueSeries {
    /// [`QUEUE_DEAD_LETTERED`]: one line per reason and strategy that counted a message.
    DeadLettered,
    /// [`QUEUE_DEAD_LETTERS_PENDING`].
    Pending,
    /// [`QUEUE_OLDEST_MESSAGE_AGE`].
    OldestAge,
}

impl QueueSeries {
    /// In exposition order.
    pub(crate) const ALL: [Self; 3] = [Self::DeadLettered, Self::Pending, Self::OldestAge];

    /// The family's `# HELP` and `# TYPE` lines.
    pub(crate) fn header(self) -> &'static str {
        match self {
            Self::DeadLettered => concat!(
                "# HELP charon_queue_messages_dead_lettered_total Messages dead-lettered (or dropped) per queue and reason\n",
                "# TYPE charon_queue_messages_dead_lettered_total counter\n"
            ),
            Self::Pending => concat!(
                "# HELP charon_queue_dead_letters_pending At-least-once dead letters waiting in the queue for their targets\n",
                "# TYPE charon_queue_dead_letters_pending gauge\n"
            ),
            Self::OldestAge => concat!(
                "# HELP charon_queue_oldest_message_age_seconds Age of the oldest ready message in the queue\n",
                "# TYPE charon_queue_oldest_message_age_seconds gauge\n"
            ),
        }
    }

    /// The family's lines for `queues` (`now`: ms since epoch, for the ages).
    pub(crate) fn rows(self, queues: &[QueueRef], now: i64, out: &mut String) {
        for queue in queues {
            let (vhost, name) = (escape_label(&queue.config.vhost), escape_label(queue.name()));
            match self {
                Self::DeadLettered => {
                    for (reason, strategy, count) in queue.dead_lettered.counted() {
                        let _ = writeln!(
                            out,
                            "{QUEUE_DEAD_LETTERED}{{vhost=\"{vhost}\",queue=\"{name}\",reason=\"{}\",strategy=\"{}\"}} {count}",
                            reason.as_str(),
                            strategy.label()
                        );
                    }
                }
                Self::Pending => {
                    let waiting = queue.dead_letters_pending.load(Relaxed);
                    let _ =
                        writeln!(out, "{QUEUE_DEAD_LETTERS_PENDING}{{vhost=\"{vhost}\",queue=\"{name}\"}} {waiting}");
                }
                Self::OldestAge => {
                    let arrived = queue.oldest_ready_at.load(Relaxed);
                    let age = if arrived == 0 { 0.0 } else { now.saturating_sub(arrived).max(0) as f64 / 1000.0 };
                    let _ = writeln!(out, "{QUEUE_OLDEST_MESSAGE_AGE}{{vhost=\"{vhost}\",queue=\"{name}\"}} {age}");
                }
            }
        }
    }
}

/// The per-vhost families: dead letters dropped where RabbitMQ drops them silently, and the
/// dead-letter events dropped (every vhost, zero included). Bounded by the vhosts and the
/// queues that dropped, not by all queues.
pub(crate) fn render_vhost_counters(broker: &Broker) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP {DEAD_LETTERS_DROPPED} Dead letters RabbitMQ would drop silently, by the queue they died in and why\n\
         # TYPE {DEAD_LETTERS_DROPPED} counter"
    );
    for vhost in broker.vhosts() {
        for (queue, reason, count) in vhost.dropped_dead_letters() {
            let _ = writeln!(
                out,
                "{DEAD_LETTERS_DROPPED}{{vhost=\"{}\",queue=\"{}\",drop_reason=\"{}\"}} {count}",
                escape_label(vhost.name()),
                escape_label(&queue),
                reason.as_str()
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP {DEAD_LETTER_EVENTS_DROPPED} Dead-letter events dropped because the event buffer was full\n\
         # TYPE {DEAD_LETTER_EVENTS_DROPPED} counter"
    );
    for vhost in broker.vhosts() {
        let _ = writeln!(
            out,
            "{DEAD_LETTER_EVENTS_DROPPED}{{vhost=\"{}\"}} {}",
            escape_label(vhost.name()),
            vhost.dead_letter_events().dropped()
        );
    }
    out
}

/// Escapes a label value as the Prometheus text format requires (backslash, quote, newline).
pub(crate) fn escape_label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// RabbitMQ's alarm and resource families, with its names, types and HELP texts (4.0.5's
/// `/metrics`, observed: `# TYPE` before `# HELP`, alarms `untyped`). Charon raises no file
/// descriptor alarm: that family stays 0.
pub(crate) fn render_resources(broker: &Broker) -> String {
    let resources = broker.resources();
    // This node's, as RabbitMQ's per-node families are.
    let alarms = resources.local_alarms();
    let mut out = String::new();
    for (name, kind, help, value) in [
        (
            "rabbitmq_process_resident_memory_bytes",
            "gauge",
            "Memory used in bytes",
            resources.resident_bytes.load(Relaxed),
        ),
        (
            "rabbitmq_disk_space_available_bytes",
            "gauge",
            "Disk space available in bytes",
            resources.disk_free_bytes.load(Relaxed),
        ),
        (
            "rabbitmq_resident_memory_limit_bytes",
            "gauge",
            "Memory high watermark in bytes",
            resources.memory_limit_bytes.load(Relaxed),
        ),
        (
            "rabbitmq_disk_space_available_limit_bytes",
            "gauge",
            "Free disk space low watermark in bytes",
            resources.disk_free_limit_bytes.load(Relaxed),
        ),
        ("rabbitmq_alarms_file_descriptor_limit", "untyped", "is 1 if file descriptor limit alarm is in effect", 0),
        (
            "rabbitmq_alarms_free_disk_space_watermark",
            "untyped",
            "is 1 if free disk space watermark alarm is in effect",
            u64::from(alarms.disk),
        ),
        (
            "rabbitmq_alarms_memory_used_watermark",
            "untyped",
            "is 1 if VM memory watermark alarm is in effect",
            u64::from(alarms.memory),
        ),
    ] {
        let _ = writeln!(out, "# TYPE {name} {kind}\n# HELP {name} {help}\n{name} {value}");
    }
    out
}

/// The metadata group's Raft state on this node, in clustered mode only: RabbitMQ's
/// `rabbitmq_raft_*` names (which it gives its quorum queues' Ra clusters), labelled
/// `group="metadata"` instead of by queue.
pub(crate) fn render_raft(broker: &Broker) -> String {
    let mut out = String::new();
    let Some(cluster) = broker.cluster() else {
        return out;
    };
    let status = cluster.status();
    let families: [(&str, &str, &str, u64); 6] = [
        ("rabbitmq_raft_term_total", "counter", "Current Raft term number", status.term),
        ("rabbitmq_raft_log_commit_index", "gauge", "Raft log commit index", status.committed),
        (
            "rabbitmq_raft_log_last_applied_index",
            "gauge",
            "Raft index of the last entry applied to the state machine",
            status.applied,
        ),
        ("rabbitmq_raft_log_last_written_index", "gauge", "Raft log last written index", status.last_written),
        ("rabbitmq_raft_log_snapshot_index", "gauge", "Raft log snapshot index", status.snapshot),
        ("charon_raft_leader", "gauge", "1 when this node leads the Raft group", u64::from(status.leader)),
    ];
    for (name, kind, help, value) in families {
        let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{group=\"metadata\"}} {value}\n");
    }
    out
}
