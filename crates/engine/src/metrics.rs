//! Dead-lettering counters with RabbitMQ's Prometheus names, labels and help texts
//! (`rabbit_global_counters.erl`), plus a per-queue counter of Charon's own.
//!
//! The global counters go through the `metrics` facade; the binary installs the Prometheus
//! exporter. [`register`] creates every series RabbitMQ exports at start-up, at zero.
//!
//! The per-queue counts live on the queue's handle ([`DeadLetterCounts`]) and are rendered at
//! scrape time by the Prometheus endpoint (`gateway/src/prometheus/charon.rs`, with the names
//! below), so a deleted queue's series disappear with it, as RabbitMQ's per-object metrics do
//! (the `metrics` facade cannot remove a series, and queue churn would otherwise grow the
//! exposition without bound).

mod global;

pub use global::{
    Churn, Counter, GlobalCounters, LocalCounters, MessageCounts, Protocol, QUEUE_TYPES, TypedCounter, global,
};

use charon_model::DeathReason;
use metrics::{Unit, counter, describe_counter};

pub use crate::dead_letter::counts::{DeadLetterCounts, DeadLetterStrategy, count_dead_letter};
use crate::dead_letter::counts::{REASONS, global_name};

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

/// The node's message counters (both protocols summed) under the names of RabbitMQ's overview
/// `message_stats`: what the node's overview shows and what it reports to its peers, whose
/// overviews add them up.
#[must_use]
pub fn message_stats() -> std::collections::BTreeMap<String, u64> {
    let counts: Vec<MessageCounts> = Protocol::ALL.into_iter().map(|p| global().snapshot(p)).collect();
    let plain = |counter: Counter| counts.iter().map(|c| c.get(counter)).sum::<u64>();
    let typed = |counter: TypedCounter| counts.iter().map(|c| c.total(counter)).sum::<u64>();
    let (deliver, deliver_no_ack) = (typed(TypedCounter::ConsumeManualAck), typed(TypedCounter::ConsumeAutoAck));
    let (get, get_no_ack) = (typed(TypedCounter::GetManualAck), typed(TypedCounter::GetAutoAck));
    [
        ("publish", plain(Counter::Received)),
        ("confirm", plain(Counter::Confirmed)),
        ("return_unroutable", plain(Counter::UnroutableReturned)),
        ("drop_unroutable", plain(Counter::UnroutableDropped)),
        ("deliver", deliver),
        ("deliver_no_ack", deliver_no_ack),
        ("get", get),
        ("get_no_ack", get_no_ack),
        ("deliver_get", deliver + deliver_no_ack + get + get_no_ack),
        ("get_empty", typed(TypedCounter::GetEmpty)),
        ("redeliver", typed(TypedCounter::Redelivered)),
        ("ack", typed(TypedCounter::Acknowledged)),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    .collect()
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
