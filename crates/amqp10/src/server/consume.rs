//! Messages to clients: transfers on consumer links, and settlement by outcome (RabbitMQ's
//! `settle_op_from_outcome/1`).

use std::collections::HashMap;
use std::sync::Arc;

use charon_engine::metrics::{LocalCounters, TypedCounter};
use charon_engine::{Delivery, QueueRef, Settle};
use charon_model::{DeathCause, Table};
use fe2o3_amqp_types::messaging::DeliveryState;
use fe2o3_amqp_types::primitives::OrderedMap;
use serde_amqp::Value as Amqp;
use serde_amqp::primitives::Symbol;

use foldhash::HashMap as FastMap;

use super::frames::Disposition;
use super::settles::Settles;
use crate::mapping::{DeliveryFacts, render_for_consumer};
use crate::proto::Connection;

/// What an outcome does to the message (`rabbit_amqp_session:settle_op_from_outcome/1`):
/// `rejected` and `modified{undeliverable-here}` discard (dead-letter as `rejected`),
/// `released` and other `modified` requeue; `rejected` and `modified{delivery-failed}` count a
/// failed delivery.
fn settle_op(state: Option<&DeliveryState>) -> Settle {
    match state {
        Some(DeliveryState::Rejected(_)) => Settle::Discard,
        Some(DeliveryState::Released(_)) => Settle::Requeue,
        Some(DeliveryState::Modified(m)) if m.undeliverable_here == Some(true) => {
            if m.delivery_failed == Some(true) {
                Settle::Discard
            } else {
                Settle::DiscardUndeliverable
            }
        }
        Some(DeliveryState::Modified(m)) if m.delivery_failed == Some(true) => Settle::RequeueFailed,
        Some(DeliveryState::Modified(_)) => Settle::Requeue,
        _ => Settle::Ack,
    }
}

/// The `x-` message annotations of a `modified` outcome that requeues (RabbitMQ reserves the
/// other keys), for quorum queues to merge into the message.
fn modified_annotations(state: Option<&DeliveryState>) -> Option<Table> {
    let Some(DeliveryState::Modified(m)) = state else {
        return None;
    };
    let fields = m.message_annotations.as_ref().filter(|_| m.undeliverable_here != Some(true))?;
    let table = x_fields(fields);
    (!table.is_empty()).then_some(table)
}

/// The `x-` entries of 1.0 fields as a table.
fn x_fields(fields: &OrderedMap<Symbol, Amqp>) -> Table {
    fields
        .iter()
        .filter(|(key, _)| key.as_str().starts_with("x-"))
        .map(|(key, value)| (key.as_str().to_owned(), crate::codec::value::from_amqp(value)))
        .collect()
}

/// What a discarding outcome says about the message (Charon keeps it with the death, see
/// `charon_model::death_cause`): the `error` of `rejected` (condition, description, info) or
/// the `x-` message annotations of `modified{undeliverable-here}`. `None` — the common case,
/// nothing allocated — when the outcome says nothing or does not discard.
fn refusal_cause(state: Option<&DeliveryState>) -> Option<Arc<DeathCause>> {
    let cause = match state? {
        DeliveryState::Rejected(rejected) => {
            let error = rejected.error.as_ref()?;
            let condition = match serde_amqp::to_value(&error.condition) {
                Ok(Amqp::Symbol(symbol)) => Some(symbol.0),
                _ => None,
            };
            let info = error.info.as_deref().map(|fields| {
                fields.iter().map(|(k, v)| (k.as_str().to_owned(), crate::codec::value::from_amqp(v))).collect()
            });
            DeathCause::new(condition, error.description.clone(), info, None)
        }
        DeliveryState::Modified(modified) if modified.undeliverable_here == Some(true) => {
            let annotations = modified.message_annotations.as_ref().map(x_fields);
            DeathCause::new(None, None, None, annotations)
        }
        _ => None,
    };
    cause.map(Arc::new)
}

/// A delivery tag for a queue sequence number: 4 bytes while it fits, as RabbitMQ does
/// (the tag's bytes and their count, without allocating).
fn delivery_tag(seq: u64) -> ([u8; 8], usize) {
    match u32::try_from(seq) {
        Ok(small) => {
            let [a, b, c, d] = small.to_be_bytes();
            ([a, b, c, d, 0, 0, 0, 0], 4)
        }
        Err(_) => (seq.to_be_bytes(), 8),
    }
}

/// The longest render buffer a connection keeps between deliveries.
const RENDER_BUFFER_KEPT: usize = 64 * 1024;

/// A delivery sent on a consumer link and not settled yet: its queue, its seq there, and
/// the link's handle.
#[derive(Debug)]
pub(crate) struct Outgoing {
    queue: QueueRef,
    seq: u64,
    handle: u32,
}

/// What this connection sent on consumer links: the deliveries not settled yet (by session
/// channel and delivery id), the settlements made in this wake-up, and the buffer each
/// delivery is rendered into.
///
/// The map hashes with foldhash: its keys are the broker's own numbers, so SipHash's
/// flooding defence buys nothing there and cost about 7 % of the broker's time in S10.
#[derive(Debug, Default)]
pub(crate) struct Sent {
    unsettled: FastMap<(u16, u32), Outgoing>,
    settles: Settles,
    /// Reused for every delivery (kept at most [`RENDER_BUFFER_KEPT`] long).
    rendered: Vec<u8>,
}

impl Sent {
    /// Sends deliveries on the consumer link `(channel, handle)` of `queue` (`settled`: it
    /// settles at once); unsettled ones are settled later through that queue.
    pub(crate) fn deliver(
        &mut self,
        (channel, handle): (u16, u32),
        (queue, settled): (&QueueRef, bool),
        items: Vec<Delivery>,
        counters: &mut LocalCounters,
        conn: &mut Connection,
    ) {
        let queue_type = queue.config.queue_type;
        let how = if settled { TypedCounter::ConsumeAutoAck } else { TypedCounter::ConsumeManualAck };
        counters.add_typed(queue_type, how, u64::try_from(items.len()).unwrap_or(u64::MAX));
        for delivery in items {
            if delivery.redelivered {
                counters.add_typed(queue_type, TypedCounter::Redelivered, 1);
            }
            let facts = DeliveryFacts { redelivered: delivery.redelivered, delivery_count: delivery.delivery_count };
            self.rendered.clear();
            render_for_consumer(&mut self.rendered, &delivery.message, facts);
            let (tag, len) = if settled { ([0; 8], 0) } else { delivery_tag(delivery.seq) };
            let tag = tag.get(..len).unwrap_or_default();
            let Some(delivery_id) = conn.send_transfer(channel, handle, tag, settled, &self.rendered) else {
                break;
            };
            if !settled {
                self.unsettled
                    .insert((channel, delivery_id), Outgoing { queue: Arc::clone(queue), seq: delivery.seq, handle });
            }
        }
        if self.rendered.capacity() > RENDER_BUFFER_KEPT {
            self.rendered = Vec::new();
        }
    }

    /// Hands batched settlements to their queues, in the order they were made.
    pub(crate) async fn flush_settles(&mut self) {
        for (queue, how, seqs) in self.settles.drain() {
            queue.settle(seqs, how).await;
        }
    }

    /// The client settled (or changed the state of) deliveries we sent. Like RabbitMQ, a
    /// session with nothing unsettled ignores it; otherwise an unsettled disposition is
    /// answered, echoing `last` as the client gave it.
    pub(crate) async fn on_disposition(
        &mut self,
        disposition: Disposition,
        counters: &mut LocalCounters,
        conn: &mut Connection,
    ) {
        let Disposition { channel, first, last, last_given, settled, state } = disposition;
        // One delivery: what a client that settles each message sends, once per message. Its
        // entry says it all, without the id list and per-queue map of a range (three
        // allocations and a scan of every unsettled delivery per message in S10).
        if first == last
            && let Some(out) = self.unsettled.remove(&(channel, first))
        {
            self.settle_queue(out.queue, std::iter::once(out.seq), state.as_ref(), counters).await;
        } else {
            if !self.unsettled.keys().any(|(c, _)| *c == channel) {
                return;
            }
            for (queue, seqs) in self.take_range(channel, first, last) {
                self.settle_queue(queue, seqs, state.as_ref(), counters).await;
            }
        }
        if !settled {
            conn.settle_outgoing(channel, first, last_given.then_some(last), state);
        }
    }

    /// Forgets the unsettled deliveries of the link `(channel, handle)` (its queue requeues
    /// them as the consumer goes).
    pub(crate) fn forget_link(&mut self, channel: u16, handle: u32) {
        self.unsettled.retain(|(c, _), out| !(*c == channel && out.handle == handle));
    }

    /// A consumer link was detached: its unsettled deliveries go back to their queues as
    /// plain returns, after the settlements made before.
    pub(crate) async fn return_link(&mut self, channel: u16, handle: u32) {
        self.flush_settles().await;
        let mut by_queue: HashMap<u64, (QueueRef, Vec<u64>)> = HashMap::new();
        self.unsettled.retain(|(c, _), out| {
            let mine = *c == channel && out.handle == handle;
            if mine {
                by_queue.entry(out.queue.id).or_insert_with(|| (out.queue.clone(), Vec::new())).1.push(out.seq);
            }
            !mine
        });
        for (_, (queue, seqs)) in by_queue {
            queue.settle(seqs, Settle::Requeue).await;
        }
    }

    /// Takes the unsettled deliveries of `channel` from `first` to `last` (serial numbers),
    /// their sequence numbers grouped by queue, in the order of their ids.
    fn take_range(&mut self, channel: u16, first: u32, last: u32) -> Vec<(QueueRef, Vec<u64>)> {
        let span = u64::from(last.wrapping_sub(first)) + 1;
        let ids: Vec<u32> = if span <= self.unsettled.len() as u64 {
            (0..span).filter_map(|i| u32::try_from(i).ok()).map(|i| first.wrapping_add(i)).collect()
        } else {
            self.unsettled
                .keys()
                .filter(|(c, id)| *c == channel && id.wrapping_sub(first) <= last.wrapping_sub(first))
                .map(|(_, id)| *id)
                .collect()
        };
        let mut by_queue: HashMap<u64, (QueueRef, Vec<u64>)> = HashMap::new();
        let mut sorted = ids;
        sorted.sort_by_key(|id| id.wrapping_sub(first));
        for id in sorted {
            if let Some(out) = self.unsettled.remove(&(channel, id)) {
                by_queue.entry(out.queue.id).or_insert_with(|| (out.queue.clone(), Vec::new())).1.push(out.seq);
            }
        }
        by_queue.into_values().collect()
    }

    /// Settles `seqs` of `queue` with the outcome `state`: plain outcomes join the batch
    /// handed over at the end of the read, the others (which carry annotations or a cause)
    /// go at once, behind that batch.
    async fn settle_queue<I>(
        &mut self,
        queue: QueueRef,
        seqs: I,
        state: Option<&DeliveryState>,
        counters: &mut LocalCounters,
    ) where
        I: IntoIterator<Item = u64>,
        I::IntoIter: ExactSizeIterator,
    {
        let seqs = seqs.into_iter();
        let how = settle_op(state);
        if how == Settle::Ack {
            let acked = u64::try_from(seqs.len()).unwrap_or(u64::MAX);
            counters.add_typed(queue.config.queue_type, TypedCounter::Acknowledged, acked);
        }
        match (modified_annotations(state), refusal_cause(state)) {
            (Some(table), _) => {
                self.flush_settles().await;
                queue.settle_modified(seqs.collect(), how == Settle::RequeueFailed, table).await;
            }
            (None, Some(cause)) => {
                self.flush_settles().await;
                queue.settle_refused(seqs.collect(), how, cause).await;
            }
            (None, None) => self.settles.add(queue, how, seqs),
        }
    }
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp_types::messaging::{Accepted, Modified, Rejected, Released};

    use super::*;

    fn modified(failed: Option<bool>, undeliverable: Option<bool>) -> DeliveryState {
        DeliveryState::Modified(Modified {
            delivery_failed: failed,
            undeliverable_here: undeliverable,
            message_annotations: None,
        })
    }

    #[test]
    fn delivery_tags_take_four_bytes_while_the_sequence_fits() {
        assert_eq!(delivery_tag(7), ([0, 0, 0, 7, 0, 0, 0, 0], 4));
        assert_eq!(delivery_tag(1 << 32), ([0, 0, 0, 1, 0, 0, 0, 0], 8));
    }

    #[test]
    fn outcomes_map_to_rabbitmq_settle_ops() {
        let op = |s: DeliveryState| settle_op(Some(&s));
        assert_eq!(op(DeliveryState::Accepted(Accepted {})), Settle::Ack);
        assert_eq!(op(DeliveryState::Rejected(Rejected { error: None })), Settle::Discard);
        assert_eq!(op(DeliveryState::Released(Released {})), Settle::Requeue);
        assert_eq!(op(modified(Some(true), Some(true))), Settle::Discard);
        assert_eq!(op(modified(Some(false), Some(true))), Settle::DiscardUndeliverable);
        assert_eq!(op(modified(None, Some(true))), Settle::DiscardUndeliverable);
        assert_eq!(op(modified(Some(true), None)), Settle::RequeueFailed);
        assert_eq!(op(modified(None, None)), Settle::Requeue);
    }

    #[test]
    fn a_discarding_outcome_keeps_what_the_consumer_said() {
        use fe2o3_amqp_types::definitions::{AmqpError, Error, ErrorCondition};

        let cause = |s: DeliveryState| refusal_cause(Some(&s)).map(|c| c.as_ref().clone());
        let info: OrderedMap<Symbol, Amqp> = [(Symbol::from("attempt"), Amqp::Ulong(3))].into_iter().collect();
        let error = Error {
            condition: ErrorCondition::Custom(Symbol::from("app:bad-payload")),
            description: Some("schema v2 expected".into()),
            info: Some(Box::new(info)),
        };
        let expected_info: Table = [("attempt".to_owned(), charon_model::Value::U64(3))].into_iter().collect();
        assert_eq!(
            cause(DeliveryState::Rejected(Rejected { error: Some(error) })),
            DeathCause::new(
                Some("app:bad-payload".into()),
                Some("schema v2 expected".into()),
                Some(expected_info),
                None
            )
        );
        // A standard condition is kept by its symbol.
        let internal =
            Error { condition: ErrorCondition::AmqpError(AmqpError::InternalError), description: None, info: None };
        let kept = cause(DeliveryState::Rejected(Rejected { error: Some(internal) })).unwrap();
        assert_eq!(kept.condition(), Some("amqp:internal-error"));
        // modified{undeliverable-here}: its x- annotations.
        let annotations: OrderedMap<Symbol, Amqp> =
            [(Symbol::from("x-opt-why"), Amqp::String("stale".into())), (Symbol::from("reserved"), Amqp::Bool(true))]
                .into_iter()
                .collect();
        let undeliverable = |annotations: Option<OrderedMap<Symbol, Amqp>>, here| {
            DeliveryState::Modified(Modified {
                delivery_failed: None,
                undeliverable_here: here,
                message_annotations: annotations,
            })
        };
        let expected: Table =
            [("x-opt-why".to_owned(), charon_model::Value::String("stale".into()))].into_iter().collect();
        assert_eq!(
            cause(undeliverable(Some(annotations.clone()), Some(true))),
            DeathCause::new(None, None, None, Some(expected))
        );
        // Nothing said, or an outcome that does not discard: no cause.
        assert_eq!(cause(DeliveryState::Rejected(Rejected { error: None })), None);
        assert_eq!(cause(undeliverable(None, Some(true))), None);
        assert_eq!(cause(undeliverable(Some(annotations), Some(false))), None);
        assert_eq!(cause(DeliveryState::Released(Released {})), None);
    }
}
