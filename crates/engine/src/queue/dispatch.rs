//! Handing ready messages to consumers: round-robin dispatch within prefetch, channel and
//! connection windows, and AMQP 1.0 link credit (with drain).

use std::sync::Arc;

use super::CreditGrant;
use super::state::{QueueState, Unacked};
use crate::session::SessionEvent;

impl QueueState {
    /// Hands ready messages to consumers that can take them, round-robin, one message at a
    /// time, and batches each consumer's deliveries into one event.
    pub(crate) fn dispatch(&mut self) {
        let quorum = self.quorum();
        let count = self.consumers.len();
        let mut misses = 0;
        while misses < count && self.ready_len() > 0 {
            let index = self.next_consumer % count;
            self.next_consumer = (index + 1) % count;
            let Some(consumer) = self.consumers.get_mut(index) else {
                break;
            };
            if !consumer.reserve(&self.handle) {
                misses += 1;
                continue;
            }
            misses = 0;
            let entry = if self.head_expired() { None } else { self.pop_ready() };
            let Some(entry) = entry else {
                // Expired (its dead-lettering waits for room), or reading the head back
                // failed; the queue tries again later.
                if let Some(consumer) = self.consumers.get(index) {
                    consumer.unreserve();
                }
                break;
            };
            let Some(consumer) = self.consumers.get_mut(index) else {
                break;
            };
            if consumer.spec.link_credit.is_some() {
                consumer.credit -= 1;
                consumer.delivery_count = consumer.delivery_count.wrapping_add(1);
            }
            consumer.batch.push(entry.delivery(quorum));
            if consumer.spec.no_ack {
                self.journal.removed(self.handle.id, &entry);
            } else {
                consumer.unacked += 1;
                let owner = consumer.spec.owner;
                let id = consumer.spec.id;
                self.journal.delivered(self.handle.id, &entry);
                self.unacked.insert(entry.seq, Unacked { entry, consumer: Some(id), owner });
            }
        }
        for consumer in &mut self.consumers {
            if consumer.batch.is_empty() {
                continue;
            }
            let event = SessionEvent::Deliveries {
                consumer: consumer.spec.id,
                queue: Arc::clone(&self.handle),
                items: std::mem::take(&mut consumer.batch),
            };
            self.outbox.push((consumer.spec.session.clone(), event));
        }
    }

    /// Applies a receiver's flow to a credit-based consumer: the credit it may use now is what
    /// the receiver granted beyond what it has seen, minus what is already on its way
    /// (2.6.7: link-credit-snd = delivery-count-rcv + link-credit-rcv - delivery-count-snd).
    /// A drain runs after dispatch, so a waiting message is delivered before the credit is
    /// used up.
    pub(crate) fn credit(&mut self, grant: CreditGrant) {
        let Some(index) = self.consumers.iter().position(|c| c.spec.id == grant.consumer) else {
            return;
        };
        if let Some(consumer) = self.consumers.get_mut(index) {
            let limit = grant.delivery_count.wrapping_add(grant.link_credit);
            let left = limit.wrapping_sub(consumer.delivery_count);
            consumer.credit = if left > grant.link_credit { 0 } else { left };
        }
        self.dispatch();
        let available = u32::try_from(self.ready_len()).unwrap_or(u32::MAX);
        let Some(consumer) = self.consumers.get_mut(index) else {
            return;
        };
        if grant.drain && consumer.credit > 0 {
            consumer.delivery_count = consumer.delivery_count.wrapping_add(consumer.credit);
            consumer.credit = 0;
        }
        if grant.drain || grant.echo {
            let event = SessionEvent::CreditState {
                consumer: consumer.spec.id,
                delivery_count: consumer.delivery_count,
                credit: consumer.credit,
                available,
                drain: grant.drain,
            };
            self.outbox.push((consumer.spec.session.clone(), event));
        }
    }
}
