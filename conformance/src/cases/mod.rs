//! The case registry: one module per area, each exposing `cases()`.

use crate::case::Case;

mod acks;
mod amqp10_attach;
mod amqp10_connection;
mod amqp10_consume;
mod amqp10_errors;
mod amqp10_fe2o3;
mod amqp10_framing;
mod amqp10_management;
mod amqp10_management_more;
mod amqp10_message;
mod amqp10_publish;
mod confirms;
mod consume;
mod dlx_basic;
mod dlx_history;
mod dlx_limits;
mod dlx_metrics;
mod dlx_policy;
mod dlx_routing;
mod dlx_settle;
mod errors_connection;
mod exchanges;
mod fidelity_to091;
mod fidelity_to10;
mod handshake;
mod heartbeats;
mod large_bodies;
mod nesting;
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
        nesting::cases(),
        handshake::cases(),
        heartbeats::cases(),
        amqp10_connection::cases(),
        amqp10_attach::cases(),
        amqp10_publish::cases(),
        amqp10_consume::cases(),
        amqp10_errors::cases(),
        amqp10_message::cases(),
        amqp10_framing::cases(),
        fidelity_to10::cases(),
        fidelity_to091::cases(),
        amqp10_management::cases(),
        amqp10_fe2o3::cases(),
        amqp10_management_more::cases(),
        dlx_basic::cases(),
        dlx_routing::cases(),
        dlx_history::cases(),
        dlx_settle::cases(),
        dlx_limits::cases(),
        dlx_policy::cases(),
        dlx_metrics::cases(),
    ]
    .concat()
}
