//! A job's state changes on the vhost's dead-letter event stream: one JSON message (the job as
//! the API shows it) on [`EVENTS_EXCHANGE`] with routing key `redrive.<state>.<source queue>`,
//! so that a binding `redrive.#` follows every job and `redrive.*.orders` one queue's.
//! Best effort like the death events: built only while the exchange has a binding, never
//! waited for, transient.

use std::sync::Arc;

use charon_model::{Body, Message, MessageId, Properties, Routing};

use super::job::JobView;
use crate::dead_letter::events::EVENTS_EXCHANGE;
use crate::queue::Enqueue;
use crate::vhost::VHost;

/// The routing key of a job's state-change event.
#[must_use]
pub fn routing_key(view: &JobView) -> String {
    format!("redrive.{}.{}", view.state.as_str(), view.source)
}

/// The event message for `view`'s current state.
#[must_use]
pub fn event_message(view: &JobView) -> Message {
    let routing =
        Routing { exchange: EVENTS_EXCHANGE.to_owned(), routing_key: routing_key(view), ..Routing::default() };
    // A view of strings, numbers and maps of them always serializes.
    let body = serde_json::to_vec(view).unwrap_or_default();
    let mut message = Message::new(routing, Body::Data(body.into()));
    message.set_properties(Properties {
        content_type: Some("application/json".to_owned()),
        delivery_mode: Some(1),
        durable: Some(false),
        message_id: Some(MessageId::String(format!("redrive-{}-{}", view.id, view.updated_at))),
        timestamp: Some(view.updated_at),
        ..Properties::default()
    });
    message
}

/// Publishes `view`'s state change, if anything listens; returns at once.
pub fn announce(vhost: &VHost, view: &JobView) {
    if !vhost.dead_letter_events().listened() {
        return;
    }
    let message = Arc::new(event_message(view));
    let Some(queues) = vhost.route_dead_letter(EVENTS_EXCHANGE, &message.routing, &message.headers) else {
        return;
    };
    if queues.is_empty() {
        return;
    }
    tokio::spawn(async move {
        for queue in queues {
            queue.publish(vec![Enqueue { message: Arc::clone(&message), confirm: None }], None).await;
        }
    });
}
