//! `GET /api/aliveness-test/{vhost}`: RabbitMQ declares the `aliveness-test` queue in the
//! vhost, publishes `test_message` to it through the default exchange and takes it back with
//! a `basic.get`; so does this, through the engine. The queue stays, as in RabbitMQ.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Extension, Path, State};
use bytes::Bytes;
use charon_engine::{Broker, Flush, Owner, Publisher, QueueDeclare, User};
use charon_model::{Body, Message, Routing, Table};
use serde_json::{Value as JsonValue, json};

use crate::auth;
use crate::error::ApiError;

/// RabbitMQ's queue name and payload.
const QUEUE: &str = "aliveness-test";
const PAYLOAD: &[u8] = b"test_message";

/// `GET /api/aliveness-test/{vhost}`
pub(crate) async fn check(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(vhost): Path<String>,
) -> Result<Json<JsonValue>, ApiError> {
    auth::vhost(&broker, &user, &vhost)?;
    let vhost = broker.vhosts().into_iter().find(|v| v.name() == vhost).ok_or_else(ApiError::not_found)?;
    let session = broker.next_id();
    let failed = |reason: String| Json(json!({"status": "failed", "reason": reason}));
    let declare = QueueDeclare {
        name: QUEUE.into(),
        passive: false,
        durable: false,
        exclusive: false,
        auto_delete: false,
        arguments: Table::new(),
    };
    if let Err(error) = vhost.declare_queue(&declare, session).await {
        return Ok(failed(error.to_string()));
    }
    let routing = Routing { exchange: String::new(), routing_key: QUEUE.into(), cc: Vec::new(), bcc: Vec::new() };
    let message = Message::new(routing, Body::Data(Bytes::from_static(PAYLOAD)));
    let mut publisher = Publisher::new(None);
    let queues = match publisher.route(&vhost, &message) {
        Ok(queues) => queues,
        Err(error) => return Ok(failed(error.to_string())),
    };
    publisher.push(&queues, 0, &Arc::new(message), None);
    publisher.flush(Flush::Wait).await;
    let queue = vhost.queue(QUEUE, session).map_err(|e| ApiError::internal(e.to_string()))?;
    match queue.get(Owner { session, channel: 0 }, true).await {
        Ok(Some(_)) => Ok(Json(json!({"status": "ok"}))),
        Ok(None) => Ok(failed("aliveness-test queue is empty".to_owned())),
        Err(error) => Ok(failed(error.to_string())),
    }
}
