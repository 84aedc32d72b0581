//! The case registry: one module per area, each exposing `cases()`.

use crate::case::Case;

mod acks;
mod amqp10_attach;
mod amqp10_connection;
mod amqp10_publish;
mod confirms;
mod consume;
mod errors_connection;
mod exchanges;
mod handshake;
mod heartbeats;
mod large_bodies;
mod prefetch;
mod properties;
mod queue_types;
mod queues;
mod returns;
mod routing_basic;
mod routing_headers;
mod routing_topic;

/// Every case, grouped by area.
pub(crate) fn all() -> Vec<Case> {
    [
        exchanges::cases(),
        routing_basic::cases(),
        routing_topic::cases(),
        routing_headers::cases(),
        queues::cases(),
        queue_types::cases(),
        consume::cases(),
        prefetch::cases(),
        acks::cases(),
        confirms::cases(),
        returns::cases(),
        properties::cases(),
        large_bodies::cases(),
        errors_connection::cases(),
        handshake::cases(),
        heartbeats::cases(),
        amqp10_connection::cases(),
        amqp10_attach::cases(),
        amqp10_publish::cases(),
    ]
    .concat()
}
