//! Messages out: `basic.deliver` to consumers and the content of any message sent to a client.

use charon_engine::{ConsumerId, Delivery, QueueRef};
use std::borrow::Cow;

use charon_model::{Encoded, Message, Origin, Table};

use super::channel::PendingAck;
use super::session::Session;
use crate::codec::put_deliver;
use crate::proto::{Connection, ContentProperties};

/// Writes a message's content header and body frames. A message that came from a 0.9.1
/// publisher and was not changed by the broker gets its property bytes back verbatim; a
/// redelivered quorum-queue message also carries `x-delivery-count`, so it is encoded afresh.
pub(crate) fn send_content(conn: &mut Connection, channel: u16, message: &Message) {
    let body = message.body.bytes();
    match &message.encoded {
        Encoded::Amqp091Properties(raw) if message.broker.acquired_count == 0 => {
            conn.send_content(channel, ContentProperties::Raw(raw), body);
        }
        _ if message.origin == Origin::Amqp10 => {
            let converted = super::convert::from_amqp10(message);
            let headers = with_history(&converted.headers, message);
            let expiration = converted.properties.ttl.map(|ttl| ttl.to_string());
            let properties = ContentProperties::Encode {
                properties: &converted.properties,
                headers: &headers,
                expiration: expiration.as_deref(),
            };
            conn.send_content(channel, properties, body);
        }
        _ => {
            let headers = rendered_headers(message);
            let expiration = message.properties().ttl.map(|ttl| ttl.to_string());
            let properties = ContentProperties::Encode {
                properties: message.properties(),
                headers: &headers,
                expiration: expiration.as_deref(),
            };
            conn.send_content(channel, properties, body);
        }
    }
}

/// The headers of a message published over 0.9.1 (or built by the broker), as a 0.9.1
/// consumer sees them: `x-delivery-count` when a quorum queue redelivers it, then the death
/// history.
fn rendered_headers(message: &Message) -> Cow<'_, Table> {
    match message.broker.with_delivery_count(&message.headers) {
        Cow::Borrowed(headers) => with_history(headers, message),
        Cow::Owned(counted) => Cow::Owned(with_history(&counted, message).into_owned()),
    }
}

/// `headers`, plus the death history when the message was dead-lettered.
fn with_history<'a>(headers: &'a Table, message: &Message) -> Cow<'a, Table> {
    match message.broker.deaths.as_deref() {
        Some(history) => Cow::Owned(super::deaths::headers_with_deaths(headers, history)),
        None => Cow::Borrowed(headers),
    }
}

impl Session {
    /// Writes deliveries for one consumer, assigning delivery tags.
    pub(crate) fn deliver(
        &mut self,
        consumer: ConsumerId,
        queue: &QueueRef,
        items: Vec<Delivery>,
        conn: &mut Connection,
    ) {
        let count = u32::try_from(items.len()).unwrap_or(u32::MAX);
        // Room in the connection's outbound window comes back whatever happens below.
        let outbound = self.sink.outbound.clone();
        let route = self.consumers.get(&consumer).cloned();
        let state = route.as_ref().and_then(|r| self.channels.get_mut(&r.channel));
        if let (Some(route), Some(state)) = (route, state) {
            for delivery in items {
                let tag = state.tag();
                if !route.no_ack {
                    let pending = PendingAck { queue: std::sync::Arc::clone(queue), seq: delivery.seq, consumed: true };
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
        }
        // Deliveries for a consumer that is gone were requeued by the queue when its channel
        // closed (or were no-ack and are dropped, as in RabbitMQ).
        outbound.release(count);
    }
}

#[cfg(test)]
mod tests {
    use charon_model::{BrokerAnnotations, DeathHistory, DeathReason, DeathRecord, Value};

    use super::*;

    fn message(acquired_count: u32) -> Message {
        let mut m = Message::default();
        m.origin = Origin::Amqp091;
        m.headers = vec![("z".to_owned(), Value::I32(1))].into_iter().collect();
        m.broker = BrokerAnnotations { acquired_count, ..BrokerAnnotations::default() };
        m
    }

    #[test]
    fn a_redelivered_quorum_message_carries_x_delivery_count_as_a_long_header() {
        let first = message(0);
        assert!(matches!(rendered_headers(&first), Cow::Borrowed(h) if std::ptr::eq(h, &first.headers)));
        let again = message(2);
        let headers = rendered_headers(&again);
        assert_eq!(headers.0, vec![("z".to_owned(), Value::I32(1)), ("x-delivery-count".to_owned(), Value::I64(2))]);
        // With a death history the headers are sorted by name, the count among them.
        let keys = vec!["k".to_owned()];
        let record = DeathRecord {
            queue: "q",
            reason: DeathReason::Rejected,
            exchange: "",
            routing_keys: &keys,
            ttl: None,
            now: 0,
        };
        let mut dead = message(1);
        dead.broker.deaths = Some(Box::new(DeathHistory::new(&record)));
        let headers = rendered_headers(&dead);
        let names: Vec<&str> = headers.iter().map(|(k, _)| k).take(2).collect();
        assert_eq!(names, ["x-death", "x-delivery-count"]);
        assert_eq!(headers.get("x-delivery-count"), Some(&Value::I64(1)));
    }
}
