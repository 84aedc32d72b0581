//! The task that publishes a vhost's dead-letter events: each becomes a small JSON message on
//! [`EVENTS_EXCHANGE`], routed like any publish to a topic exchange.

use std::sync::Arc;

use charon_model::{Body, Message, MessageId, Properties, Routing};
use tokio::sync::mpsc;

use super::event::{DeadLetterEvent, EVENTS_EXCHANGE};
use crate::Enqueue;
use crate::dead_letter::route::Router;

/// Publishes the buffer's events until the vhost (its routes) is gone. Waits for room in slow
/// target queues: the buffer in front of it absorbs that, dropping what does not fit.
pub(super) async fn publish_events(mut rx: mpsc::Receiver<DeadLetterEvent>, routes: Arc<dyn Router>) {
    let mut ids = IdSource::new();
    while let Some(event) = rx.recv().await {
        let message = Arc::new(event_message(&event, ids.next()));
        let Some(queues) = routes.route(EVENTS_EXCHANGE, &message.routing, &message.headers) else {
            break;
        };
        for queue in queues {
            queue.publish(vec![Enqueue { message: Arc::clone(&message), confirm: None }], None).await;
        }
    }
}

/// The message of one event: JSON, transient, with a message id of its own.
pub(super) fn event_message(event: &DeadLetterEvent, message_id: String) -> Message {
    let routing =
        Routing { exchange: EVENTS_EXCHANGE.to_owned(), routing_key: event.routing_key(), ..Routing::default() };
    let mut message = Message::new(routing, Body::Data(event.to_json().into()));
    message.set_properties(Properties {
        content_type: Some("application/json".to_owned()),
        delivery_mode: Some(1),
        durable: Some(false),
        message_id: Some(MessageId::String(message_id)),
        timestamp: Some(event.time),
        ..Properties::default()
    });
    message
}

/// Message ids unique across vhosts and restarts: a random prefix and a sequence number.
struct IdSource {
    prefix: u64,
    last: u64,
}

impl IdSource {
    fn new() -> Self {
        Self { prefix: rand::random(), last: 0 }
    }

    fn next(&mut self) -> String {
        self.last += 1;
        format!("{:016x}-{}", self.prefix, self.last)
    }
}

#[cfg(test)]
mod tests {
    use charon_model::DeathReason;

    use super::*;

    #[test]
    fn an_event_message_is_transient_json_on_the_events_exchange() {
        let event = DeadLetterEvent {
            vhost: "/".into(),
            queue: "orders".into(),
            reason: DeathReason::Maxlen,
            drop_reason: None,
            message_id: None,
            correlation_id: None,
            count: 1,
            dead_letter_exchange: None,
            routing_keys: vec!["orders".into()],
            time: 7,
            error_condition: None,
        };
        let message = event_message(&event, "id-1".into());
        assert_eq!(
            (message.routing.exchange.as_str(), message.routing.routing_key.as_str()),
            (EVENTS_EXCHANGE, "maxlen.orders")
        );
        assert_eq!(message.properties().content_type.as_deref(), Some("application/json"));
        assert_eq!(message.properties().message_id, Some(MessageId::String("id-1".into())));
        assert!(!message.is_persistent());
        assert_eq!(message.body.bytes().as_ref(), event.to_json().as_bytes());
        let mut ids = IdSource::new();
        assert_ne!(ids.next(), ids.next());
    }
}
