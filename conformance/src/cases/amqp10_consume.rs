//! AMQP 1.0 consuming: credit, drain, settlement outcomes and redelivery counts.
//!
//! The cases live in one child module per idea: [`credit`] (credit, drain, echo and the plain
//! delivery), [`outcomes`] (what each settlement does to the message), [`redelivery`] (what comes
//! back after a detach, a dropped connection or a release, and to which link) and [`frames`]
//! (multi-frame deliveries and byte-exact bodies across protocols); [`kit`] holds what they share.

use crate::{Case, case10};

mod credit;
mod frames;
mod kit;
mod outcomes;
mod redelivery;

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case10!(
            "amqp10.consume.credit_limits_deliveries",
            "with 2 credits only 2 of 5 waiting messages arrive; 1 more credit brings exactly 1 more",
            credit::credit_limits
        ),
        case10!(
            "amqp10.consume.credit_in_serial_number_arithmetic",
            "a flow's delivery-count other than the broker's (0 as rhea sends, 2^32-3, behind) gives credit delivery-count + link-credit - the broker's count, wrapping at 2^32 (RFC 1982): 7, 4, none",
            credit::serial_number_credit
        ),
        case10!(
            "amqp10.consume.no_credit_no_delivery",
            "a receiver attached without credit gets nothing",
            credit::no_credit
        ),
        case10!(
            "amqp10.consume.drain_with_message_waiting",
            "credit 1 + drain in one flow with a message waiting: the message arrives, then a flow with delivery-count advanced and credit 0",
            credit::drain_one
        ),
        case10!(
            "amqp10.consume.drain_more_credit_than_messages",
            "credit 5 + drain with 2 messages: 2 transfers, then a flow advancing delivery-count by 5 with credit 0",
            credit::drain_more
        ),
        case10!(
            "amqp10.consume.drain_nothing_waiting",
            "credit 3 + drain on an empty queue: an immediate flow, delivery-count +3, credit 0",
            credit::drain_empty
        ),
        case10!(
            "amqp10.consume.fifo_order",
            "messages arrive in publish order with consecutive delivery-ids",
            credit::fifo
        ),
        case10!(
            "amqp10.consume.first_delivery_header",
            "a first delivery has first-acquirer true and delivery-count 0 in its header",
            credit::first_header
        ),
        case10!("amqp10.consume.accepted_removes", "accepted removes the message from the queue", outcomes::accepted),
        case10!(
            "amqp10.consume.rejected_drops_without_dlx",
            "rejected without a DLX drops the message",
            outcomes::rejected
        ),
        case10!(
            "amqp10.consume.released_requeues",
            "released requeues: redelivered with delivery-count unchanged (0) and first-acquirer false",
            outcomes::released
        ),
        case10!(
            "amqp10.consume.modified_failed_requeues_classic",
            "modified{delivery-failed} requeues; a classic queue keeps delivery-count 0",
            outcomes::modified_failed
        ),
        case10!(
            "amqp10.consume.modified_failed_requeues_quorum",
            "modified{delivery-failed} requeues; a quorum queue counts delivery-count 1, 2",
            outcomes::modified_failed_quorum
        ),
        case10!(
            "amqp10.consume.released_requeues_quorum",
            "released on a quorum queue requeues with delivery-count still 0",
            outcomes::released_quorum
        ),
        case10!(
            "amqp10.consume.modified_undeliverable_drops",
            "modified{undeliverable-here} dead-letters as rejected: without a DLX the message is dropped",
            outcomes::modified_undeliverable
        ),
        case10!(
            "amqp10.consume.modified_annotations_classic_ignored",
            "modified with x- annotations on a classic queue requeues without them",
            outcomes::modified_ann_classic
        ),
        case10!(
            "amqp10.consume.modified_annotations_quorum_kept",
            "modified with x- annotations on a quorum queue: the redelivery carries them",
            outcomes::modified_ann_quorum
        ),
        case10!(
            "amqp10.consume.redelivery_after_detach",
            "unsettled messages return when the link detaches; the redelivery has first-acquirer false, delivery-count 0",
            redelivery::after_detach
        ),
        case10!(
            "amqp10.consume.redelivery_after_connection_loss",
            "unsettled messages return when the TCP connection drops; delivery-count 0, first-acquirer false",
            redelivery::after_drop
        ),
        case10!(
            "amqp10.consume.presettled_link",
            "a receiver with snd-settle-mode settled gets pre-settled transfers and the queue empties",
            outcomes::presettled
        ),
        case10!(
            "amqp10.consume.settle_range",
            "one disposition first..last accepts a range of deliveries",
            outcomes::settle_range
        ),
        case10!(
            "amqp10.consume.multi_frame_delivery",
            "with max-frame-size 4096 a 20000-byte message arrives in several transfer frames, reassembled exactly",
            frames::multi_frame
        ),
        case10!(
            "amqp10.consume.credit_after_publish",
            "a message published while the link has no credit waits; granting 1 credit delivers it",
            credit::credit_after_publish
        ),
        case10!(
            "amqp10.consume.drain_leaves_no_credit",
            "after a drain on an empty queue a new message is not delivered until credit is granted again",
            credit::drain_leaves_no_credit
        ),
        case10!(
            "amqp10.consume.echo_flow",
            "a flow with echo set is answered with the link's flow state (delivery-count, credit, available)",
            credit::echo_flow
        ),
        case10!(
            "amqp10.consume.unsettled_disposition_answered",
            "a receiver's disposition with settled=false is answered with a settled sender disposition",
            outcomes::unsettled_disposition
        ),
        case10!(
            "amqp10.consume.release_range",
            "one released disposition over three deliveries requeues all three, redelivered in order",
            outcomes::release_range
        ),
        case10!(
            "amqp10.consume.released_to_other_link",
            "a message released on one link is redelivered to another link with credit, first-acquirer false",
            redelivery::released_other_link
        ),
        case10!(
            "amqp10.consume.undeliverable_not_to_other_link",
            "modified{undeliverable-here} drops the message: another link with credit never gets it",
            redelivery::undeliverable_other_link
        ),
        case10!(
            "amqp10.consume.detach_returns_only_unsettled",
            "after a detach only the unsettled deliveries come back; an accepted one does not",
            redelivery::detach_only_unsettled
        ),
        case10!(
            "amqp10.consume.redelivery_after_detach_quorum",
            "a quorum queue returns unsettled messages on detach: redelivered with first-acquirer false, delivery-count 0",
            redelivery::after_detach_quorum
        ),
        case10!(
            "amqp10.consume.redelivery_after_connection_loss_quorum",
            "a quorum queue returns unsettled messages when the TCP connection drops, with delivery-count 1",
            redelivery::after_drop_quorum
        ),
        case10!(
            "amqp10.consume.small_max_frame_size",
            "with max-frame-size 512 a 3000-byte message arrives in frames with more=true on all but the last",
            frames::small_frames
        ),
        case10!(
            "amqp10.consume.body_from_091",
            "a 0.9.1-published body with every byte value arrives over 1.0 as one data section, byte-identical",
            frames::body_from_091
        ),
        case10!(
            "amqp10.consume.body_to_091",
            "a 1.0-published data section with every byte value arrives over 0.9.1 byte-identical",
            frames::body_to_091
        ),
    ]
}
