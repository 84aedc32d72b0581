//! More of the `/management` node (RabbitMQ 4's HTTP over AMQP 1.0): the attach replies of the
//! link pair, the exact AMQP types of response bodies, queue arguments, exchange-to-exchange
//! bindings and the 400/403/404/409 answers with RabbitMQ 4.0.5's texts.
//!
//! Requests go over a raw link pair so every field of every section can be checked:
//! `subject` = method, `to` = path, `reply-to` = `$me`, a message-id, an amqp-value body.

mod kit;
mod link;
mod queues;
mod topology;

use crate::{Case, case10};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case10!(
            "amqp10.management.queue_exclusive_keeps_durable",
            "an exclusive queue declared durable (the default) reports durable true, as declared",
            queues::queue_exclusive_durable
        ),
        case10!(
            "amqp10.management.attach_replies",
            "the pair's attach replies: request link role receiver (settled, paired echoed, credit granted); response link role sender with initial-delivery-count 2^32-5; responses are settled transfers with an empty tag",
            link::attach_replies
        ),
        case10!(
            "amqp10.management.queue_created_201_typed_body",
            "PUT /queues/<new>: 201 and the queue map with RabbitMQ's key order and AMQP types (message_count ulong, consumer_count uint, replicas array)",
            queues::queue_created
        ),
        case10!(
            "amqp10.management.queue_quorum_arguments",
            "PUT /queues/q with x-queue-type quorum and x-max-length: 201, type quorum, arguments echoed with 0.9.1 types",
            queues::queue_quorum
        ),
        case10!(
            "amqp10.management.queue_inequivalent_argument_409",
            "redeclaring with another x-max-length: 409 and the inequivalent-arg text",
            queues::queue_inequivalent_arg
        ),
        case10!(
            "amqp10.management.queue_get_consumers",
            "GET /queues/q counts ready messages and consumers",
            queues::queue_get_consumers
        ),
        case10!(
            "amqp10.management.queue_delete_purge_missing",
            "DELETE /queues/<missing>: 200 message_count 0; DELETE /queues/<missing>/messages: 400 no queue",
            queues::queue_missing
        ),
        case10!(
            "amqp10.management.queue_bad_names",
            "PUT /queues/ with an empty name or a line feed: 400 with RabbitMQ's texts",
            queues::queue_bad_names
        ),
        case10!(
            "amqp10.management.queue_exclusive",
            "an exclusive queue declared over /management belongs to the connection: another connection gets 400 locked",
            queues::queue_exclusive
        ),
        case10!(
            "amqp10.management.bad_property_400",
            "an unknown key in a queue, exchange or binding body: 400 bad ... property/field with the Erlang term",
            queues::bad_property
        ),
        case10!(
            "amqp10.management.invalid_argument",
            "a queue argument of the wrong type: 409 invalid arg; an argument keyed by a non-string: 400 unsupported argument",
            queues::invalid_argument
        ),
        case10!(
            "amqp10.management.exchange_properties",
            "PUT /exchanges/x with type, durable, auto_delete, internal and arguments: 204; another internal: 409; DELETE twice: 204",
            topology::exchange_properties
        ),
        case10!(
            "amqp10.management.exchange_refusals",
            "unknown exchange type: 400; the default exchange: 403; amq.* : 403",
            topology::exchange_refusals
        ),
        case10!(
            "amqp10.management.exchange_binding_with_args",
            "POST /bindings to an exchange with arguments: 204; GET lists it with its location; DELETE of that location unbinds",
            topology::exchange_binding
        ),
        case10!(
            "amqp10.management.binding_refusals",
            "binding a missing queue or from a missing exchange: 400; from the default exchange: 403; GET without dst: 400",
            topology::binding_refusals
        ),
        case10!(
            "amqp10.management.binding_delete_missing",
            "DELETE of a binding location that matches nothing: 204",
            topology::binding_delete_missing
        ),
        case10!(
            "amqp10.management.request_without_response_credit",
            "a request while the response link has no credit ends the session with amqp:precondition-failed, unexecuted",
            link::no_response_credit
        ),
        case10!(
            "amqp10.management.request_on_half_open_pair",
            "a request before the response link is attached ends the session with amqp:precondition-failed",
            link::half_open_pair
        ),
        case10!(
            "amqp10.management.sections_in_any_order",
            "a request whose amqp-value body comes before its properties (as rabbitmq-amqp-python-client sends a null body) is answered",
            link::sections_any_order
        ),
        case10!(
            "amqp10.management.pipelined_attach_and_flow",
            "both attaches and the response link's flow in one write (as Qpid Proton sends them): the pair works",
            link::pipelined
        ),
        case10!(
            "amqp10.management.attach_without_paired",
            "a /management link without the paired property ends the session with amqp:invalid-field",
            link::attach_without_paired
        ),
        case10!(
            "amqp10.management.bad_uri_400",
            "a request target that is no valid URI: 400 failed to normalize URI; dot segments and fragments are normalized away",
            link::bad_uri
        ),
        case10!(
            "amqp10.management.queue_type_refusals",
            "quorum + exclusive or auto_delete: 400 invalid property; a non-string x-dead-letter-exchange: 400; bad x-queue-type or x-expires: 409",
            queues::queue_type_refusals
        ),
        case10!(
            "amqp10.management.binding_segment_400",
            "DELETE /bindings/<segment> with an empty name, an unknown destination kind or a bad args hash: 400 bad binding path segment",
            topology::binding_segment_refusals
        ),
        case10!(
            "amqp10.management.unsupported_request_400",
            "an unknown method or path, a binding without destination, GET /bindings without dste/dstq: 400",
            link::unsupported_requests
        )
        .deliberate(
            "RabbitMQ 4.0.5 has no clause for these requests and ends the session with amqp:internal-error (function_clause); Charon answers 400"
        ),
    ]
}
