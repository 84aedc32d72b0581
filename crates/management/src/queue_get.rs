//! `POST /api/queues/{vhost}/{name}/get`: fetches messages as RabbitMQ's management does,
//! with `basic.get`s on a channel of its own, then settles them all by `ackmode`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use base64::Engine;
use charon_engine::{Action, Broker, Owner, Resource, Settle, User};
use charon_model::{Message, MessageId};
use serde_json::{Map, Value as JsonValue, json};

use crate::error::ApiError;
use crate::json::table_to_json;
use crate::objects::{self, engine_error};
use crate::request;

/// Reads an integer field as RabbitMQ does: `["not_integer", V]` otherwise.
fn integer(request: &JsonValue, key: &str) -> Result<Option<i64>, ApiError> {
    match request.get(key) {
        None => Ok(None),
        Some(value) => match value.as_i64() {
            Some(n) => Ok(Some(n)),
            None => Err(ApiError::bad_request_json(json!(["not_integer", value]))),
        },
    }
}

/// `POST /api/queues/{vhost}/{name}/get` with `count`, `ackmode` (`ack_requeue_true`,
/// `ack_requeue_false`, `reject_requeue_true`, `reject_requeue_false`), `encoding` (`auto`:
/// text when the body is UTF-8, else base64; or `base64`) and optionally `truncate` (bytes of
/// payload shown).
pub(crate) async fn get(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<JsonValue>, ApiError> {
    let vhost = objects::vhost_of(&broker, &user, &vhost)?;
    let request = request::decode(&body, &["ackmode", "count", "encoding"])?;
    let count = integer(&request, "count")?.unwrap_or_default();
    let truncate = integer(&request, "truncate")?;
    let base64 = match request::text(&request, "encoding").as_str() {
        "auto" => false,
        "base64" => true,
        _ => return Err(ApiError::bad_request("Unsupported encoding. Please use auto or base64.")),
    };
    // `ack_requeue_false` fetches with no_ack, as 4.0.5 does (it counts as `get_no_ack`, not
    // as an ack); the other modes fetch, then settle.
    let settle = match request::text(&request, "ackmode").as_str() {
        "ack_requeue_true" | "reject_requeue_true" => Some(Settle::Requeue),
        "ack_requeue_false" => None,
        "reject_requeue_false" => Some(Settle::Discard),
        // RabbitMQ's handler crashes on any other mode (observed on 4.0.5).
        _ => return Err(ApiError::crash()),
    };
    let session = broker.next_id();
    let queue = vhost.queue(&name, session).map_err(|_| ApiError::not_found_named("not_found", "queue_not_found"))?;
    let resource = Resource::queue(vhost.name(), &name);
    charon_engine::Principal::new(broker.access(), &user)
        .check(Action::Read, &resource)
        .map_err(|e| ApiError::not_authorised(&format!("ACCESS_REFUSED - {e}")))?;
    let owner = Owner { session, channel: 1 };
    let mut got = Vec::new();
    let mut seqs = Vec::new();
    for _ in 0..count.max(0) {
        let Some(ok) = queue.get(owner, settle.is_none()).await.map_err(|e| engine_error(&e))? else { break };
        seqs.push(ok.delivery.seq);
        got.push(render(&ok.delivery.message, ok.delivery.redelivered, ok.remaining, base64, truncate));
    }
    if let Some(settle) = settle.filter(|_| !seqs.is_empty()) {
        queue.settle(seqs, settle).await;
    }
    Ok(Json(JsonValue::Array(got)))
}

fn render(message: &Message, redelivered: bool, remaining: u32, base64: bool, truncate: Option<i64>) -> JsonValue {
    let body = message.body.bytes();
    let shown = match truncate.and_then(|t| usize::try_from(t).ok()) {
        Some(limit) => body.get(..limit.min(body.len())).unwrap_or_default(),
        None => body,
    };
    let (payload, encoding) = match std::str::from_utf8(shown) {
        Ok(text) if !base64 => (text.to_owned(), "string"),
        _ => (base64::engine::general_purpose::STANDARD.encode(shown), "base64"),
    };
    json!({
        "payload_bytes": body.len(),
        "redelivered": redelivered,
        "exchange": message.routing.exchange,
        "routing_key": message.routing.routing_key,
        "message_count": remaining,
        "properties": properties(message),
        "payload": payload,
        "payload_encoding": encoding,
    })
}

pub(crate) fn id(id: &MessageId) -> JsonValue {
    match id {
        MessageId::String(s) => s.clone().into(),
        MessageId::Ulong(n) => (*n).into(),
        MessageId::Uuid(bytes) => base64::engine::general_purpose::STANDARD.encode(bytes).into(),
        MessageId::Binary(bytes) => base64::engine::general_purpose::STANDARD.encode(bytes).into(),
    }
}

/// The 0.9.1 properties as RabbitMQ's `rabbit_mgmt_format:basic_properties` lists them (its
/// order: last field first), or `[]` when there are none, as 4.0.5 renders an empty list.
pub(crate) fn properties(message: &Message) -> JsonValue {
    let p = message.properties();
    let mut fields = Map::new();
    let mut put = |key: &str, value: Option<JsonValue>| {
        if let Some(value) = value {
            fields.insert(key.to_owned(), value);
        }
    };
    put("cluster_id", p.cluster_id.clone().map(Into::into));
    put("app_id", p.app_id.clone().map(Into::into));
    put("user_id", p.user_id.as_ref().map(|u| String::from_utf8_lossy(u).into_owned().into()));
    put("type", p.message_type.clone().map(Into::into));
    put("timestamp", p.timestamp.map(|ms| (ms / 1000).into()));
    put("message_id", p.message_id.as_ref().map(id));
    put("expiration", p.ttl.map(|ttl| ttl.to_string().into()));
    put("reply_to", p.reply_to.clone().map(Into::into));
    put("correlation_id", p.correlation_id.as_ref().map(id));
    put("priority", p.priority.map(Into::into));
    put("delivery_mode", p.delivery_mode.map(Into::into));
    put("headers", (!message.headers.is_empty()).then(|| table_to_json(&message.headers)));
    put("content_encoding", p.content_encoding.clone().map(Into::into));
    put("content_type", p.content_type.clone().map(Into::into));
    if fields.is_empty() { JsonValue::Array(Vec::new()) } else { JsonValue::Object(fields) }
}
