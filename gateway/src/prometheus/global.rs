//! RabbitMQ's `rabbitmq_global_*` families (`rabbit_global_counters`), per protocol and, for
//! deliveries, per queue type: the same series on every endpoint, O(1) in queues.

use charon_engine::metrics::{Counter, MessageCounts, Protocol, QUEUE_TYPES, TypedCounter, global};

use super::family::{Family, PLAIN};

const CONSUMERS: Family = Family::new("global_consumers", "gauge", "Current number of consumers");
const PUBLISHERS: Family = Family::new("global_publishers", "gauge", "Current number of publishers");

/// What a typed family reads: one counter, or every delivery.
#[derive(Clone, Copy)]
enum Read {
    Delivered,
    One(TypedCounter),
}

const TYPED: [(Family, Read); 8] = [
    (
        Family::new("global_messages_delivered_total", "counter", "Total number of messages delivered to consumers"),
        Read::Delivered,
    ),
    (
        Family::new(
            "global_messages_delivered_consume_manual_ack_total",
            "counter",
            "Total number of messages delivered to consumers using basic.consume with manual acknowledgment",
        ),
        Read::One(TypedCounter::ConsumeManualAck),
    ),
    (
        Family::new(
            "global_messages_delivered_consume_auto_ack_total",
            "counter",
            "Total number of messages delivered to consumers using basic.consume with automatic acknowledgment",
        ),
        Read::One(TypedCounter::ConsumeAutoAck),
    ),
    (
        Family::new(
            "global_messages_delivered_get_manual_ack_total",
            "counter",
            "Total number of messages delivered to consumers using basic.get with manual acknowledgment",
        ),
        Read::One(TypedCounter::GetManualAck),
    ),
    (
        Family::new(
            "global_messages_delivered_get_auto_ack_total",
            "counter",
            "Total number of messages delivered to consumers using basic.get with automatic acknowledgment",
        ),
        Read::One(TypedCounter::GetAutoAck),
    ),
    (
        Family::new(
            "global_messages_get_empty_total",
            "counter",
            "Total number of times basic.get operations fetched no message",
        ),
        Read::One(TypedCounter::GetEmpty),
    ),
    (
        Family::new(
            "global_messages_redelivered_total",
            "counter",
            "Total number of messages redelivered to consumers",
        ),
        Read::One(TypedCounter::Redelivered),
    ),
    (
        Family::new(
            "global_messages_acknowledged_total",
            "counter",
            "Total number of messages acknowledged by consumers",
        ),
        Read::One(TypedCounter::Acknowledged),
    ),
];

const PLAIN_COUNTERS: [(Family, Counter); 6] = [
    (
        Family::new("global_messages_received_total", "counter", "Total number of messages received from publishers"),
        Counter::Received,
    ),
    (
        Family::new(
            "global_messages_received_confirm_total",
            "counter",
            "Total number of messages received from publishers expecting confirmations",
        ),
        Counter::ReceivedConfirm,
    ),
    (
        Family::new("global_messages_routed_total", "counter", "Total number of messages routed to queues or streams"),
        Counter::Routed,
    ),
    (
        Family::new(
            "global_messages_unroutable_dropped_total",
            "counter",
            "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
        ),
        Counter::UnroutableDropped,
    ),
    (
        Family::new(
            "global_messages_unroutable_returned_total",
            "counter",
            "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable",
        ),
        Counter::UnroutableReturned,
    ),
    (
        Family::new("global_messages_confirmed_total", "counter", "Total number of messages confirmed to publishers"),
        Counter::Confirmed,
    ),
];

/// Every `rabbitmq_global_*` family Charon counts (the dead-letter ones come from the
/// `metrics` facade), in 4.0.5's order.
pub(crate) fn render(out: &mut String) {
    let counts: Vec<(Protocol, MessageCounts)> = Protocol::ALL.into_iter().map(|p| (p, global().snapshot(p))).collect();
    CONSUMERS.header(PLAIN, out);
    for (protocol, c) in &counts {
        CONSUMERS.labelled(PLAIN, &format!("protocol=\"{}\"", protocol.label()), c.consumers, out);
    }
    for (family, read) in TYPED {
        family.header(PLAIN, out);
        for (protocol, c) in &counts {
            for (index, queue_type) in QUEUE_TYPES.iter().enumerate() {
                let value = match read {
                    Read::Delivered => c.delivered(index),
                    Read::One(counter) => c.typed(index, counter),
                };
                let labels = format!("protocol=\"{}\",queue_type=\"{queue_type}\"", protocol.label());
                family.labelled(PLAIN, &labels, value, out);
            }
        }
    }
    for (family, counter) in PLAIN_COUNTERS {
        family.header(PLAIN, out);
        for (protocol, c) in &counts {
            family.labelled(PLAIN, &format!("protocol=\"{}\"", protocol.label()), c.get(counter), out);
        }
    }
    PUBLISHERS.header(PLAIN, out);
    for (protocol, c) in &counts {
        PUBLISHERS.labelled(PLAIN, &format!("protocol=\"{}\"", protocol.label()), c.publishers, out);
    }
}
