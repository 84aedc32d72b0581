//! The case registry: one module per area, each exposing `cases()`.

use crate::case::Case;

mod access;
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
mod close_ordering;
mod confirms;
mod consume;
mod consumer_timeout;
mod dlx_at_least_once;
mod dlx_basic;
mod dlx_fallback;
mod dlx_guarantee;
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
mod management_definitions;
mod management_objects;
mod management_operator_policies;
mod management_runtime;
mod nesting;
mod prefetch;
mod priority;
mod prometheus;
mod properties;
mod queue_types;
mod queues;
mod reply_to;
mod returns;
mod routing_basic;
mod routing_headers;
mod routing_topic;
mod single_active;
mod tx;

/// Every case, grouped by area: `(area, cases)`, where the area is the module (the file under
/// `cases/`) that defines them. A test harness prints it beside each case's name and filters on
/// it, so `dlx_routing` selects the cases of `dlx_routing.rs`.
pub(crate) fn by_area() -> Vec<(&'static str, Vec<Case>)> {
    macro_rules! areas {
        ($($area:ident),* $(,)?) => {
            vec![$((stringify!($area), $area::cases())),*]
        };
    }
    areas![
        exchanges,
        routing_basic,
        routing_topic,
        routing_headers,
        queues,
        queue_types,
        consume,
        prefetch,
        acks,
        consumer_timeout,
        confirms,
        priority,
        single_active,
        returns,
        reply_to,
        properties,
        large_bodies,
        management_runtime,
        errors_connection,
        nesting,
        handshake,
        access,
        heartbeats,
        close_ordering,
        amqp10_connection,
        amqp10_attach,
        amqp10_publish,
        amqp10_consume,
        amqp10_errors,
        amqp10_message,
        amqp10_framing,
        fidelity_to10,
        fidelity_to091,
        amqp10_management,
        amqp10_fe2o3,
        amqp10_management_more,
        management_objects,
        dlx_basic,
        dlx_routing,
        dlx_history,
        dlx_settle,
        dlx_limits,
        dlx_policy,
        dlx_metrics,
        dlx_at_least_once,
        dlx_fallback,
        dlx_guarantee,
        tx,
        prometheus,
        management_definitions,
        management_operator_policies,
    ]
}
