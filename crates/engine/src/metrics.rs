//! Dead-lettering counters with RabbitMQ's Prometheus names, labels and help texts
//! (`rabbit_global_counters.erl`), plus a per-queue counter of Charon's own.
//!
//! The counters go through the `metrics` facade; the binary installs the Prometheus exporter.
//! [`register`] creates every series RabbitMQ exports at start-up, at zero.

use charon_model::DeathReason;
use metrics::{Unit, counter, describe_counter};

use crate::queue::QueueType;

/// Per-queue counter: `charon_queue_messages_dead_lettered_total{vhost,queue,reason}`.
pub const QUEUE_DEAD_LETTERED: &str = "charon_queue_messages_dead_lettered_total";

/// The `dead_letter_strategy` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadLetterStrategy {
    /// No dead-letter exchange configured, or it does not exist: the message was dropped.
    Disabled,
    /// Dead-lettered without confirmation.
    AtMostOnce,
}

impl DeadLetterStrategy {
    fn label(self) -> &'static str {
        match self {
            Self::Disabled => "disabled",
            Self::AtMostOnce => "at_most_once",
        }
    }
}

fn global_name(reason: DeathReason) -> &'static str {
    match reason {
        DeathReason::Maxlen => "rabbitmq_global_messages_dead_lettered_maxlen_total",
        DeathReason::Expired => "rabbitmq_global_messages_dead_lettered_expired_total",
        DeathReason::Rejected => "rabbitmq_global_messages_dead_lettered_rejected_total",
        DeathReason::DeliveryLimit => "rabbitmq_global_messages_dead_lettered_delivery_limit_total",
    }
}

/// Counts one message dead-lettered (or dropped) by a queue.
pub fn count_dead_letter(
    queue_type: QueueType,
    strategy: DeadLetterStrategy,
    reason: DeathReason,
    vhost: &str,
    queue: &str,
) {
    counter!(global_name(reason), "queue_type" => queue_type.module(), "dead_letter_strategy" => strategy.label())
        .increment(1);
    counter!(QUEUE_DEAD_LETTERED, "vhost" => vhost.to_owned(), "queue" => queue.to_owned(), "reason" => reason.as_str())
        .increment(1);
}

/// Describes the counters and creates, at zero, every global series RabbitMQ 4.0.5 exports at
/// start-up (at-least-once series included, though Charon does not implement that strategy yet).
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
        "rabbitmq_global_messages_dead_lettered_confirmed_total",
        Unit::Count,
        "Total number of messages dead-lettered and confirmed by target queues"
    );
    describe_counter!(QUEUE_DEAD_LETTERED, Unit::Count, "Messages dead-lettered (or dropped) per queue and reason");
    let classic = "rabbit_classic_queue";
    let quorum = "rabbit_quorum_queue";
    let mut series: Vec<(&'static str, &'static str, &'static str)> = Vec::new();
    for reason in [DeathReason::Maxlen, DeathReason::Expired, DeathReason::Rejected] {
        for strategy in ["at_most_once", "disabled"] {
            series.push((global_name(reason), classic, strategy));
        }
    }
    for reason in [DeathReason::Maxlen, DeathReason::Expired, DeathReason::Rejected, DeathReason::DeliveryLimit] {
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
