//! Bad AMQP 1.0 input: malformed performatives and frame headers, frames over the limit,
//! unknown or reused channels and handles, out-of-sequence deliveries. Each case records what
//! RabbitMQ 4.0.5 answers (condition and description) and checks that a 0.9.1 connection and
//! an AMQP 1.0 publisher opened beforehand keep working.
//!
//! The cases live in one child module per idea: [`frames`] (malformed frames and performatives,
//! the frame size limit, a second open), [`sessions`] (channels and link handles: begin, attach,
//! detach, flow) and [`deliveries`] (dispositions and transfers that do not fit the session);
//! [`kit`] holds the bystanders and the reading of the broker's reaction they share.

use crate::{Case, case10};

mod deliveries;
mod frames;
pub(super) mod kit;
mod sessions;

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case10!(
            "amqp10.errors.performative_not_a_list",
            "a flow descriptor followed by a string instead of a field list: close amqp:internal-error Reader error",
            frames::not_a_list
        ),
        case10!(
            "amqp10.errors.performative_truncated",
            "a flow whose field list runs past the end of the frame: close amqp:internal-error Reader error",
            frames::truncated
        ),
        case10!(
            "amqp10.errors.performative_wrong_field_type",
            "a flow whose handle is a string ends the session with amqp:internal-error (the connection survives)",
            frames::wrong_field_type
        ),
        case10!(
            "amqp10.errors.frame_size_below_header",
            "a frame header announcing fewer than 8 bytes: the socket is dropped without a close",
            frames::size_below_8
        ),
        case10!(
            "amqp10.errors.frame_doff_past_end",
            "a frame whose data offset points past its end: the socket is dropped without a close",
            frames::doff_past_end
        ),
        case10!(
            "amqp10.errors.frame_unknown_type",
            "an AMQP frame of type 5 after the open: the socket is dropped without a close",
            frames::unknown_type
        ),
        case10!(
            "amqp10.errors.frame_at_max_size_accepted",
            "a transfer frame of exactly max-frame-size (131072) bytes is accepted",
            frames::at_max_size
        ),
        case10!(
            "amqp10.errors.frame_one_byte_over_max",
            "a 131073-byte transfer frame closes with amqp:connection:framing-error",
            frames::one_over_max
        ),
        case10!(
            "amqp10.errors.flow_after_detach",
            "a flow for a handle the client detached ends the session with amqp:session:unattached-handle",
            sessions::flow_after_detach
        ),
        case10!(
            "amqp10.errors.detach_unknown_handle",
            "a detach for a handle that was never attached is echoed; the session stays usable",
            sessions::detach_unknown
        ),
        case10!(
            "amqp10.errors.disposition_unknown_delivery",
            "a disposition for deliveries never sent is ignored; the session stays usable",
            deliveries::disposition_unknown
        ),
        case10!(
            "amqp10.errors.disposition_role_sender",
            "a client disposition with role sender when nothing is unsettled ends the session with amqp:internal-error",
            deliveries::disposition_sender
        ),
        case10!(
            "amqp10.errors.disposition_settled_absent",
            "a receiver disposition without the settled field (default false) is answered like settled=false",
            deliveries::settled_absent
        )
        .deliberate(
            "RabbitMQ 4.0.5 ends the session with amqp:internal-error {case_clause,undefined}: it reads an absent \
             settled field as neither true nor false. The field defaults to false (AMQP 1.0 2.7.6) and clients \
             such as fe2o3-amqp leave it out, so Charon answers as for settled=false",
        ),
        case10!(
            "amqp10.errors.begin_channel_in_use",
            "a begin on a channel whose session is running ends that session with amqp:internal-error",
            sessions::begin_in_use
        ),
        case10!(
            "amqp10.errors.begin_channel_over_max",
            "a begin on a channel above channel-max closes with amqp:connection:framing-error",
            sessions::begin_over_max
        ),
        case10!(
            "amqp10.errors.attach_handle_in_use",
            "an attach reusing the handle of an attached link",
            sessions::attach_in_use
        ),
        case10!(
            "amqp10.errors.attach_handle_over_max",
            "an attach with a handle above handle-max closes with amqp:connection:framing-error",
            sessions::attach_over_max
        ),
        case10!(
            "amqp10.errors.attach_no_session_ignored",
            "an attach on a channel without a session is ignored",
            sessions::attach_no_session
        ),
        case10!(
            "amqp10.errors.transfer_delivery_id_gap",
            "a transfer whose delivery-id skips ahead of the session's sequence",
            deliveries::delivery_id_gap
        ),
        case10!(
            "amqp10.errors.transfer_without_delivery_id",
            "the first transfer of a delivery without a delivery-id",
            deliveries::no_delivery_id
        ),
        case10!(
            "amqp10.errors.transfer_on_receiving_link",
            "a transfer on the handle of a link the broker sends on ends the session with amqp:session:unattached-handle",
            deliveries::transfer_on_receiver
        ),
        case10!(
            "amqp10.errors.second_open",
            "an open on an open connection closes with amqp:internal-error Reader error",
            frames::second_open
        ),
        case10!(
            "amqp10.errors.close_after_error_answered",
            "after closing with an error the broker still answers the client's close with a close",
            frames::close_after_error
        ),
    ]
}
