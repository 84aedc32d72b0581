//! Messages out: `basic.deliver` to consumers and the content of any message sent to a client.

use std::sync::Arc;
use std::time::Instant;

use charon_engine::metrics::TypedCounter;
use charon_engine::{ConsumerId, Delivery};
use charon_model::Message;

use super::channel::PendingAck;
use super::session::Session;
use crate::codec::put_deliver;
use crate::mapping;
use crate::proto::Connection;

/// Writes a message's content header and body frames, its properties rendered for a 0.9.1
/// consumer by [`mapping::for_consumer`].
pub(crate) fn send_content(conn: &mut Connection, channel: u16, message: &Message) {
    let rendered = mapping::for_consumer(message);
    conn.send_content(channel, rendered.content_properties(), message.body.bytes());
}

impl Session {
    /// Writes deliveries for one consumer, assigning delivery tags; they are settled through
    /// the queue the consumer was subscribed to.
    pub(crate) fn deliver(&mut self, consumer: ConsumerId, items: Vec<Delivery>, conn: &mut Connection) {
        let count = u32::try_from(items.len()).unwrap_or(u32::MAX);
        // Room in the connection's outbound window comes back whatever happens below.
        let outbound = self.client.sink().outbound.clone();
        let route = self.consumers.get(&consumer).cloned();
        let state = route.as_ref().and_then(|r| self.channels.get_mut(&r.channel));
        if let (Some(route), Some(state)) = (route, state) {
            let delivered_at = Instant::now();
            let had_unacked = state.unacked.oldest().is_some();
            let queue_type = route.queue.config.queue_type;
            let how = if route.no_ack { TypedCounter::ConsumeAutoAck } else { TypedCounter::ConsumeManualAck };
            self.client.counters().add_typed(queue_type, how, u64::from(count));
            for delivery in items {
                if delivery.redelivered {
                    self.client.counters().add_typed(queue_type, TypedCounter::Redelivered, 1);
                }
                let tag = state.tag();
                if !route.no_ack {
                    let pending =
                        PendingAck { queue: Arc::clone(&route.queue), seq: delivery.seq, consumed: true, delivered_at };
                    state.unacked.push(tag, pending);
                }
                let message = &delivery.message;
                put_deliver(
                    conn.output(),
                    route.channel,
                    &route.tag,
                    tag,
                    delivery.redelivered,
                    &message.routing.exchange,
                    &message.routing.routing_key,
                );
                send_content(conn, route.channel, message);
            }
            if !had_unacked && let Some(oldest) = state.unacked.oldest() {
                self.ack_timer.watch(oldest, self.consumer_timeout);
            }
        }
        // Deliveries for a consumer that is gone were requeued by the queue when its channel
        // closed (or were no-ack and are dropped, as in RabbitMQ).
        outbound.release(count);
    }
}
