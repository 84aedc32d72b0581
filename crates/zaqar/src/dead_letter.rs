//! Zaqar's claim-count dead-letter queue, made crash-safe.
//!
//! Zaqar evaluates it at claim time: a message the claim picks that was already claimed
//! `_max_claim_count` times is moved to `_dead_letter_queue` instead of being returned. Zaqar's
//! own move (insert into the DLQ, then delete from the source) can leave a message in both or,
//! when the DLQ is missing, rewrite it and return nothing. Here the claim holds the message as
//! an unacknowledged delivery while its dead-lettered copy — a death with reason
//! `delivery_limit`, so AMQP consumers of the DLQ see `x-death` / `x-opt-deaths`, and the claim
//! count as its failed-delivery count (1.0 `header.delivery-count`) — is moved into the DLQ:
//! its log record there also removes the original from the source's log
//! ([`charon_engine::QueueRef::publish_moved`]), so whenever a crash comes, the message is in
//! exactly one of the two queues, never in both and never in neither. Once the DLQ confirmed
//! (synced) the move, the source's delivery is acknowledged. The DLQ is created when missing.
//!
//! In a cluster, a DLQ that lives on another node than its source cannot share its log: the
//! copies are published there with confirms, then acknowledged in the source — at least once
//! (a crash between the two leaves a message in both).
//!
//! A DLQ that is full (a length limit set by policy) refuses the move whatever its overflow
//! mode: the message stays in its source, and the claim returns the others it found. One
//! window is left: a move the DLQ does not confirm within 30 s (a stalled disk) is requeued in
//! its source, and should the DLQ's record still reach the disk afterwards, both queues serve
//! the message until a restart, which keeps the DLQ's copy only.

use std::sync::Arc;

use charon_engine::dead_letter::{DeadLetterStrategy, count_dead_letter, dead_lettered_copy};
use charon_engine::{Broker, Delivery, MovedFrom, QueueRef, Settle, VHost};
use charon_model::DeathReason;

use crate::engine;
use crate::error::ZaqarError;
use crate::reserved::DeadLetterSettings;

/// Moves `deliveries` (held by a claim in the making) from `source` to the dead-letter queue.
///
/// # Errors
/// 503 when the DLQ could not take them: they are requeued in `source`.
pub(crate) async fn move_to_dead_letter_queue(
    broker: &Broker,
    vhost: &VHost,
    source: &QueueRef,
    deliveries: Vec<Delivery>,
    settings: &DeadLetterSettings,
) -> Result<(), ZaqarError> {
    if deliveries.is_empty() {
        return Ok(());
    }
    let seqs: Vec<u64> = deliveries.iter().map(|d| d.seq).collect();
    let now = crate::message::now_ms();
    let copies: Vec<_> = deliveries
        .iter()
        .map(|d| {
            let claims = d.message.broker.acquired_count;
            let ttl = d.message.properties().ttl;
            let mut copy = dead_lettered_copy(
                &d.message,
                source.name(),
                DeathReason::DeliveryLimit,
                "",
                Some(&settings.queue),
                now,
            );
            copy.broker.delivery_count = claims;
            // `_dead_letter_queue_messages_ttl` replaces the TTL; else the message keeps its own
            // (the engine's copy drops it, as a dead letter's TTL goes into its death record).
            copy.properties_mut().ttl = settings.ttl.map(|s| s.unsigned_abs().saturating_mul(1000)).or(ttl);
            Arc::new(copy)
        })
        .collect();
    let moved = async {
        let (target, _) = engine::ensure_queue(vhost, &settings.queue).await?;
        let from = MovedFrom { queue: source.id, seqs: seqs.clone() };
        engine::move_confirmed(broker, &target, copies, from).await
    };
    if let Err(error) = moved.await {
        source.settle(seqs, Settle::Requeue).await;
        return Err(error);
    }
    let count = seqs.len();
    source.settle(seqs, Settle::Ack).await;
    for _ in 0..count {
        count_dead_letter(
            source.config.queue_type,
            DeadLetterStrategy::AtLeastOnce,
            DeathReason::DeliveryLimit,
            &source.dead_lettered,
        );
    }
    Ok(())
}
