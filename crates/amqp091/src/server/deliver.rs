//! Messages out: `basic.deliver` to consumers and the content of any message sent to a client.

use std::sync::Arc;
use std::time::Instant;

use charon_engine::Delivery;
use charon_engine::metrics::{LocalCounters, TypedCounter};
use charon_model::Message;

use super::ack_timeout::AckTimer;
use super::channel::{ChannelState, PendingAck};
use super::session::ConsumerRoute;
use crate::codec::put_deliver;
use crate::mapping;
use crate::proto::Connection;

/// Writes a message's content header and body frames, its properties rendered for a 0.9.1
/// consumer by [`mapping::for_consumer`].
pub(crate) fn send_content(conn: &mut Connection, channel: u16, message: &Message) {
    let rendered = mapping::for_consumer(message);
    conn.send_content(channel, rendered.content_properties(), message.body.bytes());
}

/// What a batch of deliveries to one consumer touches: its channel (delivery tags, unacked
/// deliveries), the connection's counters and its consumer-timeout timer.
pub(crate) struct Deliveries<'a> {
    pub(crate) channel: &'a mut ChannelState,
    pub(crate) counters: &'a mut LocalCounters,
    pub(crate) ack_timer: &'a mut AckTimer,
}

impl Deliveries<'_> {
    /// Writes deliveries for the consumer `route`, assigning delivery tags; they are settled
    /// through the queue the consumer was subscribed to.
    pub(crate) fn deliver(self, route: &ConsumerRoute, items: Vec<Delivery>, conn: &mut Connection) {
        let Self { channel: state, counters, ack_timer } = self;
        let count = u64::try_from(items.len()).unwrap_or(u64::MAX);
        let delivered_at = Instant::now();
        let had_unacked = state.unacked.oldest().is_some();
        let queue_type = route.queue.config.queue_type;
        let how = if route.no_ack { TypedCounter::ConsumeAutoAck } else { TypedCounter::ConsumeManualAck };
        counters.add_typed(queue_type, how, count);
        for delivery in items {
            if delivery.redelivered {
                counters.add_typed(queue_type, TypedCounter::Redelivered, 1);
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
            ack_timer.watch(oldest);
        }
    }
}
