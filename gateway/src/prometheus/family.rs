//! RabbitMQ's Prometheus families as data: name (without its `rabbitmq_` or
//! `rabbitmq_detailed_` prefix), type and HELP text, copied from 4.0.5's `/metrics` output.

use std::fmt::Write as _;

use charon_engine::queue::GaugeValues;

/// One family.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
}

impl Family {
    pub(crate) const fn new(name: &'static str, kind: &'static str, help: &'static str) -> Self {
        Self { name, kind, help }
    }

    /// `# TYPE` then `# HELP`, RabbitMQ's order.
    pub(crate) fn header(&self, prefix: &str, out: &mut String) {
        let name = self.name;
        let _ = writeln!(out, "# TYPE {prefix}{name} {}\n# HELP {prefix}{name} {}", self.kind, self.help);
    }

    /// A sample without labels.
    pub(crate) fn sample(&self, prefix: &str, value: u64, out: &mut String) {
        let _ = writeln!(out, "{prefix}{} {value}", self.name);
    }

    /// A sample with `labels` (already rendered, without braces).
    pub(crate) fn labelled(&self, prefix: &str, labels: &str, value: u64, out: &mut String) {
        let _ = writeln!(out, "{prefix}{}{{{labels}}} {value}", self.name);
    }
}

/// Prefix of the aggregated and per-object families.
pub(crate) const PLAIN: &str = "rabbitmq_";
/// Prefix of the `/metrics/detailed` families.
pub(crate) const DETAILED: &str = "rabbitmq_detailed_";

/// `connection_churn_metrics`, in the order of [`charon_engine::metrics::Churn::ALL`].
pub(crate) const CHURN: [Family; 7] = [
    Family::new("connections_opened_total", "counter", "Total number of connections opened"),
    Family::new("connections_closed_total", "counter", "Total number of connections closed or terminated"),
    Family::new("channels_opened_total", "counter", "Total number of channels opened"),
    Family::new("channels_closed_total", "counter", "Total number of channels closed"),
    Family::new("queues_declared_total", "counter", "Total number of queues declared"),
    Family::new("queues_created_total", "counter", "Total number of queues created"),
    Family::new("queues_deleted_total", "counter", "Total number of queues deleted"),
];

/// A per-queue gauge: its family and how it reads a queue's figures.
pub(crate) type QueueFamily = (Family, fn(&GaugeValues) -> u64);

/// `queue_coarse_metrics` (without `queue_process_reductions_total`: Charon's queues are no
/// Erlang processes).
pub(crate) const QUEUE_COARSE: [QueueFamily; 3] = [
    (Family::new("queue_messages_ready", "gauge", "Messages ready to be delivered to consumers"), |g| g.ready),
    (Family::new("queue_messages_unacked", "gauge", "Messages delivered to consumers but not yet acknowledged"), |g| {
        g.unacked
    }),
    (
        Family::new("queue_messages", "gauge", "Sum of ready and unacknowledged messages - total queue depth"),
        GaugeValues::messages,
    ),
];

/// `queue_consumer_count`.
pub(crate) const QUEUE_CONSUMERS: [QueueFamily; 1] =
    [(Family::new("queue_consumers", "gauge", "Consumers on a queue"), |g| g.consumers)];

/// The byte gauges of `queue_metrics` Charon keeps (it has no RAM/paged-out split: its
/// figures are the body bytes of the queue's messages).
pub(crate) const QUEUE_BYTES: [QueueFamily; 3] = [
    (
        Family::new("queue_messages_bytes", "gauge", "Size in bytes of ready and unacknowledged messages"),
        GaugeValues::bytes,
    ),
    (Family::new("queue_messages_ready_bytes", "gauge", "Size in bytes of ready messages"), |g| g.ready_bytes),
    (Family::new("queue_messages_unacked_bytes", "gauge", "Size in bytes of all unacknowledged messages"), |g| {
        g.unacked_bytes
    }),
];

/// The node's object counts (aggregated and per-object endpoints only).
pub(crate) const CONNECTIONS: Family = Family::new("connections", "gauge", "Connections currently open");
pub(crate) const CHANNELS: Family = Family::new("channels", "gauge", "Channels currently open");
pub(crate) const CONSUMERS: Family = Family::new("consumers", "gauge", "Consumers currently connected");
pub(crate) const QUEUES: Family = Family::new("queues", "gauge", "Queues available");

/// Always present, on every endpoint.
pub(crate) const BUILD_INFO: Family = Family::new("build_info", "untyped", "RabbitMQ & Erlang/OTP version info");
pub(crate) const IDENTITY_INFO: Family =
    Family::new("identity_info", "untyped", "RabbitMQ node & cluster identity info");
