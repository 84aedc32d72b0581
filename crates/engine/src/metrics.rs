//! Dead-lettering counters with RabbitMQ's Prometheus names, labels and help texts
//! (`rabbit_global_counters.erl`), plus a per-queue counter of Charon's own.
//!
//! The global counters go through the `metrics` facade; the binary installs the Prometheus
//! exporter. [`register`] creates every series RabbitMQ exports at start-up, at zero.
//!
//! The per-queue counts live on the queue's handle ([`DeadLetterCounts`]) and are rendered at
//! scrape time by [`render_queue_counters`], so a deleted queue's series disappear with it, as
//! RabbitMQ's per-object metrics do (the `metrics` facade cannot remove a series, and queue
//! churn would otherwise grow the exposition without bound).

use std::fmt::Write as _;

mod global;

pub use global::{
    Churn, Counter, GlobalCounters, LocalCounters, MessageCounts, Protocol, QUEUE_TYPES, TypedCounter, global,
};

use charon_model::DeathReason;
use metrics::{Unit, counter, describe_counter};

use crate::broker::Broker;
pub use crate::dead_letter::counts::{DeadLetterCounts, DeadLetterStrategy, count_dead_letter};
use crate::dead_letter::counts::{REASONS, STRATEGIES, global_name};
use crate::queue::QueueRef;

/// Per-queue counter: `charon_queue_messages_dead_lettered_total{vhost,queue,reason,strategy}`
/// (`strategy` as RabbitMQ's `dead_letter_strategy` label: `disabled` counts drops).
pub const QUEUE_DEAD_LETTERED: &str = "charon_queue_messages_dead_lettered_total";
/// Per-queue gauge: `charon_queue_dead_letters_pending{vhost,queue}`, the dead letters waiting
/// in the queue for their targets (RabbitMQ's at-least-once, Charon's guarantee).
pub const QUEUE_DEAD_LETTERS_PENDING: &str = "charon_queue_dead_letters_pending";
/// Per-queue gauge: `charon_queue_oldest_message_age_seconds{vhost,queue}`, how long the
/// oldest ready message has been in the queue (to within a second; 0 when none is ready;
/// after a restart counted from the restart).
pub const QUEUE_OLDEST_MESSAGE_AGE: &str = "charon_queue_oldest_message_age_seconds";
/// Per-vhost counter: `charon_dead_letter_events_dropped_total{vhost}`, dead-letter events
/// dropped because the vhost's event buffer was full.
pub const DEAD_LETTER_EVENTS_DROPPED: &str = "charon_dead_letter_events_dropped_total";

/// Messages redrive jobs handled: `charon_redrive_messages_total{vhost,source,destination,
/// outcome}`, `outcome` one of `moved`, `skipped`, `failed` (a global counter through the
/// facade, counted a batch at a time).
pub const REDRIVE_MESSAGES: &str = "charon_redrive_messages_total";

/// Dead letters dropped where RabbitMQ drops them silently (and kept in the fallback queue when
/// it is on): `charon_dead_letters_dropped_total{vhost,queue,drop_reason}`.
pub const DEAD_LETTERS_DROPPED: &str = "charon_dead_letters_dropped_total";

/// The per-queue series in Prometheus text format: one line per live queue and reason that
/// has counted at least one message (a series appears on its first count, as with the facade),
/// then each vhost's dropped dead-letter events (every vhost, zero included).
#[must_use]
pub fn render_queue_counters(broker: &Broker) -> String {
    let queues = sorted_queues(broker);
    let now = crate::clock::now_ms();
    let mut out = String::new();
    for series in QueueSeries::ALL {
        out.push_str(series.header());
        series.rows(&queues, now, &mut out);
    }
    out.push_str(&render_vhost_counters(broker));
    out
}

/// Every live queue, by vhost and then by name: the order of the per-queue series.
#[must_use]
pub fn sorted_queues(broker: &Broker) -> Vec<QueueRef> {
    let mut all = Vec::new();
    for vhost in broker.vhosts() {
        let mut queues = vhost.queues();
        queues.sort_by(|a, b| a.name().cmp(b.name()));
        all.extend(queues);
    }
    all
}

/// Charon's per-queue families, rendered a slice of queues at a time so that a scrape of many
/// queues can be streamed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueSeries {
    /// [`QUEUE_DEAD_LETTERED`].
    DeadLettered,
    /// [`QUEUE_DEAD_LETTERS_PENDING`].
    Pending,
    /// [`QUEUE_OLDEST_MESSAGE_AGE`].
    OldestAge,
}

impl QueueSeries {
    /// In exposition order.
    pub const ALL: [Self; 3] = [Self::DeadLettered, Self::Pending, Self::OldestAge];

    /// The family's `# HELP` and `# TYPE` lines.
    #[must_use]
    pub fn header(self) -> &'static str {
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
    pub fn rows(self, queues: &[QueueRef], now: i64, out: &mut String) {
        use std::sync::atomic::Ordering::Relaxed;
        for queue in queues {
            let (vhost, name) = (escape_label(&queue.config.vhost), escape_label(queue.name()));
            match self {
                Self::DeadLettered => {
                    for reason in REASONS {
                        for strategy in STRATEGIES {
                            let count = queue.dead_lettered.get(strategy, reason);
                            if count > 0 {
                                let _ = writeln!(
                                    out,
                                    "{QUEUE_DEAD_LETTERED}{{vhost=\"{vhost}\",queue=\"{name}\",reason=\"{}\",strategy=\"{}\"}} {count}",
                                    reason.as_str(),
                                    strategy.label()
                                );
                            }
                        }
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
#[must_use]
pub fn render_vhost_counters(broker: &Broker) -> String {
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
pub fn escape_label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Describes the counters and creates, at zero, every global series RabbitMQ 4.0.5 exports at
/// start-up (at-least-once series included).
pub fn register() {
    let help = [
        (DeathReason::Maxlen, "Total number of messages dead-lettered due to overflow drop-head or reject-publish-dlx"),
        (DeathReason::Expired, "Total number of messages dead-lettered due to message TTL exceeded"),
        (DeathReason::Rejected, "Total number of messages dead-lettered due to basic.reject or basic.nack"),
        (DeathReason::DeliveryLimit, "Total number of messages dead-lettered due to delivery-limit exceeded"),
    ];
    for (reason, text) in help {
        describe_counter!(global_name(reason), Unit::Count, text);
    }
    describe_counter!(
        REDRIVE_MESSAGES,
        Unit::Count,
        "Messages redrive jobs moved, skipped (left by their filter) or failed to move"
    );
    describe_counter!(
        "rabbitmq_global_messages_dead_lettered_confirmed_total",
        Unit::Count,
        "Total number of messages dead-lettered and confirmed by target queues"
    );
    let classic = "rabbit_classic_queue";
    let quorum = "rabbit_quorum_queue";
    let mut series: Vec<(&'static str, &'static str, &'static str)> = Vec::new();
    for reason in [DeathReason::Maxlen, DeathReason::Expired, DeathReason::Rejected] {
        for strategy in ["at_most_once", "disabled"] {
            series.push((global_name(reason), classic, strategy));
        }
    }
    for reason in REASONS {
        for strategy in ["at_least_once", "at_most_once", "disabled"] {
            if reason == DeathReason::Maxlen && strategy == "at_least_once" {
                continue;
            }
            series.push((global_name(reason), quorum, strategy));
        }
    }
    series.push(("rabbitmq_global_messages_dead_lettered_confirmed_total", quorum, "at_least_once"));
    for (name, queue_type, strategy) in series {
        counter!(name, "queue_type" => queue_type, "dead_letter_strategy" => strategy).absolute(0);
    }
}

/// RabbitMQ's alarm and resource families, with its names, types and HELP texts (4.0.5's
/// `/metrics`, observed: `# TYPE` before `# HELP`, alarms `untyped`). Charon raises no file
/// descriptor alarm: that family stays 0.
#[must_use]
pub fn render_resources(broker: &Broker) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    let resources = broker.resources();
    let alarms = resources.alarms();
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

#[cfg(test)]
mod resource_tests {
    use super::*;
    use crate::BrokerConfig;

    #[tokio::test]
    async fn alarm_families_follow_the_alarms() {
        let broker = Broker::new(BrokerConfig::default());
        let text = render_resources(&broker);
        assert!(text.contains(
            "# TYPE rabbitmq_alarms_memory_used_watermark untyped\n\
             # HELP rabbitmq_alarms_memory_used_watermark is 1 if VM memory watermark alarm is in effect\n\
             rabbitmq_alarms_memory_used_watermark 0\n"
        ));
        broker.resources().set_memory_alarm(true);
        broker.resources().set_log_failing(true);
        let text = render_resources(&broker);
        assert!(text.contains("\nrabbitmq_alarms_memory_used_watermark 1\n"), "{text}");
        assert!(text.contains("\nrabbitmq_alarms_free_disk_space_watermark 1\n"), "{text}");
        assert!(text.contains("\nrabbitmq_alarms_file_descriptor_limit 0\n"), "{text}");
    }
}
