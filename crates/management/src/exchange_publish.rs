//! `POST /api/exchanges/{vhost}/{name}/publish`: publishes one message as RabbitMQ's
//! management does (a 0.9.1 publish with `mandatory`), answering `{"routed": bool}`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use base64::Engine;
use charon_engine::{Action, Broker, Flush, Principal, Publisher, Resource, User};
use charon_model::{Body, Message, MessageId, Origin, Properties, Routing, Value};
use serde_json::{Value as JsonValue, json};

use crate::error::ApiError;
use crate::exchanges::engine_name;
use crate::json::from_json;
use crate::objects;
use crate::request;

/// `POST /api/exchanges/{vhost}/{name}/publish` with `routing_key`, `properties`, `payload`
/// and `payload_encoding` (`string` or `base64`).
pub(crate) async fn publish(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<JsonValue>, ApiError> {
    let vhost = objects::vhost_of(&broker, &user, &vhost)?;
    let request = request::decode(&body, &["routing_key", "properties", "payload", "payload_encoding"])?;
    let exchange = engine_name(&name);
    if vhost.exchange(exchange).is_none() {
        return Err(ApiError::not_found_named("not_found", "exchange_not_found"));
    }
    let payload = request::text(&request, "payload");
    let body = match request::text(&request, "payload_encoding").as_str() {
        "string" => Bytes::from(payload),
        "base64" => base64::engine::general_purpose::STANDARD
            .decode(&payload)
            .map(Bytes::from)
            .map_err(|_| ApiError::bad_request_json(json!(["not_base64", payload])))?,
        other => return Err(ApiError::bad_request_json(json!(["unsupported_encoding", other]))),
    };
    let (properties, headers) = properties(request.get("properties").unwrap_or(&JsonValue::Null))?;
    if let Some(claimed) = properties.user_id.as_ref().filter(|id| id.as_ref() != user.name.as_bytes()) {
        return Err(ApiError::bad_request(format!(
            "406 PRECONDITION_FAILED - user_id property set to '{}' but authenticated user was '{}'",
            String::from_utf8_lossy(claimed),
            user.name
        )));
    }
    let channel_error = |e: charon_engine::EngineError| ApiError::bad_request(format!("403 ACCESS_REFUSED - {e}"));
    let principal = Principal::new(broker.access(), &user);
    principal.check(Action::Write, &Resource::exchange(vhost.name(), exchange)).map_err(channel_error)?;
    let routing_key = request::text(&request, "routing_key");
    if principal.has_topic_permission(vhost.name(), exchange) {
        principal.check_topic(Action::Write, vhost.name(), exchange, &routing_key).map_err(channel_error)?;
    }
    let routing = Routing { exchange: exchange.to_owned(), routing_key, ..Routing::default() };
    let mut message = Message::new(routing, Body::Data(body));
    message.headers = headers;
    message.origin = Origin::Amqp091;
    message.set_properties(properties);
    let mut publisher = Publisher::new(None);
    let queues =
        publisher.route(&vhost, &message).map_err(|e| ApiError::bad_request(format!("403 ACCESS_REFUSED - {e}")))?;
    publisher.push(&queues, 0, &Arc::new(message), None);
    publisher.flush(Flush::Wait).await;
    Ok(Json(json!({ "routed": !queues.is_empty() })))
}

/// The 0.9.1 properties from RabbitMQ's JSON names; integers must be integers (RabbitMQ's
/// `["not_int", field]`); unknown names are ignored, as 4.0.5 does.
fn properties(json: &JsonValue) -> Result<(Properties, charon_model::Table), ApiError> {
    let mut properties = Properties::default();
    let mut headers = charon_model::Table::new();
    let Some(fields) = json.as_object() else { return Ok((properties, headers)) };
    let text = |key: &str| fields.get(key).and_then(JsonValue::as_str).map(str::to_owned);
    let int = |key: &str| -> Result<Option<i64>, ApiError> {
        match fields.get(key) {
            None => Ok(None),
            Some(v) => v.as_i64().map(Some).ok_or_else(|| ApiError::bad_request_json(json!(["not_int", key]))),
        }
    };
    properties.content_type = text("content_type");
    properties.content_encoding = text("content_encoding");
    properties.delivery_mode = int("delivery_mode")?.and_then(|n| u8::try_from(n).ok());
    properties.priority = int("priority")?.and_then(|n| u8::try_from(n).ok());
    properties.correlation_id = text("correlation_id").map(MessageId::String);
    properties.reply_to = text("reply_to");
    properties.ttl = text("expiration").and_then(|e| e.parse().ok());
    properties.message_id = text("message_id").map(MessageId::String);
    properties.timestamp = int("timestamp")?.map(|s| s.saturating_mul(1000));
    properties.message_type = text("type");
    properties.user_id = text("user_id").map(Bytes::from);
    properties.app_id = text("app_id");
    properties.cluster_id = text("cluster_id");
    if let Some(Value::Table(table)) = fields.get("headers").and_then(from_json) {
        headers = table;
    }
    Ok((properties, headers))
}
