//! Dead-lettering configuration (rabbitmq-dlx.md §2, `dead_lettering_SUITE` #21–23): policies
//! applied to existing queues, argument-versus-policy precedence, policy priority and apply-to,
//! the policy HTTP API with its validation answers, the queue counters of the HTTP API, and
//! the 406 texts of invalid dead-lettering arguments (reference-observations "Dead lettering"
//! 16; the inequivalent `x-max-length` case lives in `queues.rs`).
//!
//! The cases live in one child module per idea: [`target`] (which dead-letter exchange a policy
//! or an argument sends to, policy priority and apply-to), [`limits`] (argument against policy for
//! TTL, length, overflow and delivery limit), [`http`] (the policy HTTP API and queue counters)
//! and [`args`] (invalid dead-lettering arguments); [`kit`] holds what they share.

use super::dlx_settle::CONSUME091_BOTH_QUEUES;
use crate::{Case, QueueKind, Variant, case, case_v};

mod args;
mod http;
mod kit;
mod limits;
mod target;

const CLASSIC_ONLY: [Variant; 1] = [Variant::AMQP091.on(QueueKind::Classic)];
const QUORUM_ONLY: [Variant; 1] = [Variant::AMQP091.on(QueueKind::Quorum)];

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case_v!(
            "dlx.policy.applies_to_existing_queue",
            "a dead-letter-exchange policy set after the queue exists applies to it; rejections before it were dropped (#21)",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx", "policy"],
            target::policy_applies
        ),
        case_v!(
            "dlx.policy.argument_beats_policy",
            "x-dead-letter-exchange and -routing-key arguments win over a policy set before the declare (#22)",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx", "policy"],
            target::argument_beats_policy
        ),
        case_v!(
            "dlx.policy.later_policy_ignored",
            "a policy set after a queue declared with DLX arguments does not change where dead letters go (#23)",
            &Variant::MATRIX_BOTH_QUEUES,
            ["dlx", "policy"],
            target::later_policy_ignored
        ),
        case_v!(
            "dlx.policy.message_ttl_min",
            "x-message-ttl and policy message-ttl: the smaller one applies, whichever it is",
            &CONSUME091_BOTH_QUEUES,
            ["dlx", "policy"],
            limits::ttl_min
        ),
        case_v!(
            "dlx.policy.max_length_min",
            "x-max-length and policy max-length: the smaller one applies, whichever it is",
            &CONSUME091_BOTH_QUEUES,
            ["dlx", "policy"],
            limits::max_length_min
        ),
        case_v!(
            "dlx.policy.overflow_precedence",
            "x-overflow reject-publish vs policy overflow drop-head: the argument wins on classic, the policy on quorum",
            &CONSUME091_BOTH_QUEUES,
            ["dlx", "policy"],
            limits::overflow_precedence
        ),
        case_v!(
            "dlx.policy.delivery_limit_existing_quorum",
            "a delivery-limit 0 policy applies to an existing quorum queue: the first requeue dead-letters",
            &Variant::MATRIX_QUORUM,
            ["dlx", "policy"],
            limits::delivery_limit_policy
        ),
        case_v!(
            "dlx.policy.removal_restores_argument",
            "deleting a max-length policy lower than x-max-length restores the argument's limit",
            &CONSUME091_BOTH_QUEUES,
            ["dlx", "policy"],
            limits::removal_restores
        ),
        case_v!(
            "dlx.policy.priority",
            "of two matching policies the one with the higher priority applies",
            &CONSUME091_BOTH_QUEUES,
            ["dlx", "policy"],
            target::priority
        ),
        case_v!(
            "dlx.policy.apply_to_queue_type",
            "apply-to classic_queues / quorum_queues: a policy for the other type does not apply, whatever its priority",
            &CONSUME091_BOTH_QUEUES,
            ["dlx", "policy"],
            target::apply_to
        ),
        case!(
            "dlx.policy.http_lifecycle",
            "PUT 201 then 204, GET shape, DELETE 204 then 404, GET 404 with RabbitMQ's body",
            ["dlx", "policy"],
            http::http_lifecycle
        ),
        case!(
            "dlx.policy.http_invalid_400",
            "invalid policies: 400 with RabbitMQ's 'Validation failed' reason; nothing is created or changed",
            ["dlx", "policy"],
            http::http_invalid
        ),
        case_v!(
            "dlx.policy.http_queue_counts",
            "GET /api/queues/{vhost}/{name}: messages, ready, unacknowledged after rejecting 1 of 3 unacked; the policy shown",
            &CONSUME091_BOTH_QUEUES,
            ["dlx", "policy"],
            http::http_queue_counts
        ),
        case_v!(
            "dlx.args.routing_key_without_dlx_406",
            "x-dead-letter-routing-key without x-dead-letter-exchange: 406 routing_key_but_no_dlx_defined",
            &Variant::BOTH_QUEUES,
            ["dlx"],
            args::dlrk_without_dlx
        ),
        case_v!(
            "dlx.args.message_ttl_invalid_406",
            "x-message-ttl -1 / 'abc' / 10 years + 1: 406 {value_negative,-1}, \"expected integer, got longstr\", {value_too_large,...}",
            &Variant::BOTH_QUEUES,
            ["dlx"],
            args::ttl_invalid
        ),
        case_v!(
            "dlx.args.max_length_negative_406",
            "x-max-length / x-max-length-bytes -1: 406 {value_negative,-1}",
            &Variant::BOTH_QUEUES,
            ["dlx"],
            args::max_length_negative
        ),
        case_v!(
            "dlx.args.overflow_invalid_406",
            "x-overflow 'bogus': 406 invalid_overflow",
            &Variant::BOTH_QUEUES,
            ["dlx"],
            args::overflow_invalid
        ),
        case_v!(
            "dlx.args.dlx_strategy_invalid_406",
            "quorum x-dead-letter-strategy 'bogus': 406 invalid_dlx_strategy",
            &QUORUM_ONLY,
            ["dlx"],
            args::strategy_invalid
        ),
        case_v!(
            "dlx.args.dlx_not_string_406",
            "a signedint x-dead-letter-exchange: 406 invalid type 'signedint' for arg (checked before the other arguments)",
            &Variant::BOTH_QUEUES,
            ["dlx"],
            args::dlx_not_string
        ),
        case_v!(
            "dlx.args.dlrk_not_string_406",
            "a signedint x-dead-letter-routing-key: 406 {unacceptable_type,signedint}",
            &Variant::BOTH_QUEUES,
            ["dlx"],
            args::dlrk_not_string
        ),
        case_v!(
            "dlx.args.classic_quorum_only_args_406",
            "classic x-delivery-limit / x-dead-letter-strategy: 406 ... of queue type rabbit_classic_queue",
            &CLASSIC_ONLY,
            ["dlx"],
            args::classic_refuses
        ),
        case_v!(
            "dlx.args.inequivalent_dlx_406",
            "redeclaring with another or without x-dead-letter-exchange: 406 inequivalent arg with both values",
            &Variant::BOTH_QUEUES,
            ["dlx"],
            args::inequivalent_dlx
        ),
        case_v!(
            "dlx.args.quorum_delivery_limit_not_validated",
            "quorum x-delivery-limit 'abc' is accepted (no validator) and is never reached (4.0.5): 25 returns, still delivered",
            &QUORUM_ONLY,
            ["dlx"],
            args::delivery_limit_text
        ),
    ]
}
