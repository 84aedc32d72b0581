//! Queues: `GET /v2/queues`, `PUT|GET|PATCH|DELETE /v2/queues/{q}`, `.../stats`, `.../purge`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use charon_engine::Settle;
use charon_engine::dead_letter::FALLBACK_QUEUE;
use serde_json::{Value, json};

use crate::body::{self, int_param};
use crate::caller::{Caller, check_queue, valid_name};
use crate::error::ZaqarError;
use crate::metadata::Metadata;
use crate::reserved::{self, QueueSettings};
use crate::{Zaqar, engine};

/// `max_queues_per_page`.
const MAX_QUEUES_PER_PAGE: i64 = 20;
/// `max_queue_metadata`.
const MAX_QUEUE_METADATA: usize = 64 * 1024;
/// The JSON-patch media type `PATCH` requires.
const PATCH_TYPE: &str = "application/openstack-messaging-v2.0-json-patch";

fn queue_missing(name: &str, project: &str) -> ZaqarError {
    ZaqarError::not_found(format!("Queue {name} does not exist for project {project}"))
}

/// `GET /v2/queues?limit&marker&detailed&with_count`: the project's queues by name.
pub(crate) async fn list(
    State(z): State<Arc<Zaqar>>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<body::Pairs>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ZaqarError> {
    let query = body::query(query.map_err(|e| ZaqarError::invalid(e.body_text()))?.0);
    let limit = int_param(&query, "limit")?;
    if let Some(limit) = limit
        && !(1..=MAX_QUEUES_PER_PAGE).contains(&limit)
    {
        return Err(ZaqarError::invalid(format!(
            "Limit must be at least 1 and no greater than {MAX_QUEUES_PER_PAGE}."
        )));
    }
    let limit = usize::try_from(limit.unwrap_or(10)).unwrap_or(10);
    let detailed = body::bool_param(&query, "detailed")?.unwrap_or(false);
    let with_count = body::bool_param(&query, "with_count")?.unwrap_or(false);
    let marker = query.get("marker").cloned();
    let mut names: Vec<String> = engine::vhost(&z.broker, &caller.project)
        .map(|v| v.queue_names())
        .unwrap_or_default()
        .into_iter()
        .filter(|n| valid_name(n) && n != FALLBACK_QUEUE)
        .collect();
    names.sort_unstable();
    let count = names.len();
    let page: Vec<&String> =
        names.iter().filter(|n| marker.as_ref().is_none_or(|m| n.as_str() > m.as_str())).take(limit).collect();
    let queues: Vec<Value> = page
        .iter()
        .map(|name| {
            let mut q = json!({ "name": name, "href": format!("/v2/queues/{name}") });
            if detailed && let Some(fields) = q.as_object_mut() {
                fields.insert("metadata".to_owned(), reserved::shown(&z.metadata.get(&caller.project, name)));
            }
            q
        })
        .collect();
    let mut links = Vec::new();
    if let Some(last) = page.last() {
        let mut href = format!("/v2/queues?marker={last}&limit={limit}");
        if detailed {
            href.push_str("&detailed=true");
        }
        links.push(json!({ "rel": "next", "href": href }));
    }
    let mut answer = json!({ "queues": queues, "links": links });
    if with_count && let Some(fields) = answer.as_object_mut() {
        fields.insert("count".to_owned(), count.into());
    }
    Ok(Json(answer))
}

/// Metadata from a request body: a JSON object (an empty body is none).
fn metadata_of(bytes: &[u8]) -> Result<Metadata, ZaqarError> {
    if bytes.len() > MAX_QUEUE_METADATA {
        return Err(ZaqarError::invalid(format!("Queue metadata is too large. Max size: {MAX_QUEUE_METADATA}")));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Metadata::new());
    }
    match body::json(bytes)? {
        Value::Object(meta) => Ok(meta),
        _ => Err(ZaqarError::body("Request body must be a JSON object.")),
    }
}

/// Refuses a DLQ chain: `queue`'s dead-letter queue may not have one itself, and a queue that
/// is another's dead-letter queue may not get one (Zaqar's docs: "not supported").
fn check_dead_letter_chain(z: &Zaqar, project: &str, queue: &str, settings: &QueueSettings) -> Result<(), ZaqarError> {
    let Some(dead_letter) = &settings.dead_letter else { return Ok(()) };
    if dead_letter.queue == queue {
        return Err(ZaqarError::invalid("_dead_letter_queue can not be the queue itself."));
    }
    let target = QueueSettings::read(&z.metadata.get(project, &dead_letter.queue)).ok();
    if target.is_some_and(|t| t.dead_letter.is_some()) {
        return Err(ZaqarError::invalid(format!(
            "Queue {} has a dead letter queue itself: chaining dead letter queues is not supported.",
            dead_letter.queue
        )));
    }
    let sources = z.metadata.dead_letter_sources(project, queue);
    if let Some(source) = sources.first() {
        return Err(ZaqarError::invalid(format!(
            "Queue {queue} is the dead letter queue of {source}: chaining dead letter queues is not supported."
        )));
    }
    Ok(())
}

/// Checks and stores metadata for `queue`.
async fn store(z: &Zaqar, project: &str, queue: &str, meta: Metadata) -> Result<(), ZaqarError> {
    let settings = QueueSettings::read(&meta)?;
    check_dead_letter_chain(z, project, queue, &settings)?;
    // Claim counts are a quorum queue's return counts: a classic queue declared over AMQP
    // does not keep them, so its claim-count DLQ would never move anything.
    let existing = engine::vhost(&z.broker, project).and_then(|v| engine::queue(&v, queue));
    if settings.dead_letter.is_some()
        && existing.is_some_and(|q| q.config.queue_type != charon_engine::QueueType::Quorum)
    {
        return Err(ZaqarError::invalid(format!(
            "Queue {queue} is not a quorum queue: it keeps no claim counts, so _max_claim_count can not be used on it."
        )));
    }
    z.metadata.set(project, queue, Some(meta)).await
}

/// `PUT /v2/queues/{q}`: creates the queue (201) or replaces its metadata (204).
pub(crate) async fn create(
    State(z): State<Arc<Zaqar>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, ZaqarError> {
    check_queue(&caller, &name)?;
    let meta = metadata_of(&bytes)?;
    QueueSettings::read(&meta)?;
    let vhost = engine::vhost_for_write(&z.broker, &caller.project, z.config.create_vhosts).await?;
    store(&z, &caller.project, &name, meta).await?;
    let (_, created) = engine::ensure_queue(&vhost, &name).await?;
    Ok(if created { StatusCode::CREATED } else { StatusCode::NO_CONTENT })
}

/// `GET /v2/queues/{q}`: its metadata, reserved keys filled in.
pub(crate) async fn show(
    State(z): State<Arc<Zaqar>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ZaqarError> {
    check_queue(&caller, &name)?;
    let vhost = engine::vhost(&z.broker, &caller.project);
    if vhost.and_then(|v| engine::queue(&v, &name)).is_none() {
        return Err(queue_missing(&name, &caller.project));
    }
    Ok(Json(reserved::shown(&z.metadata.get(&caller.project, &name))))
}

/// `DELETE /v2/queues/{q}`: deletes the queue, its messages, claims and metadata; 204 even when
/// it did not exist.
pub(crate) async fn delete(
    State(z): State<Arc<Zaqar>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<StatusCode, ZaqarError> {
    check_queue(&caller, &name)?;
    if let Some(vhost) = engine::vhost(&z.broker, &caller.project) {
        if let Some(queue) = engine::queue(&vhost, &name) {
            z.claims.take_all(&queue);
        }
        vhost
            .delete_queue(&name, 0, false, false)
            .await
            .map_err(|e| ZaqarError::unavailable(format!("Queue could not be deleted: {e}")))?;
    }
    z.metadata.set(&caller.project, &name, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// One JSON-patch operation, checked as `Validator.queue_patching` does.
fn apply_change(meta: &mut Metadata, change: &Value) -> Result<(), ZaqarError> {
    let Some(change) = change.as_object() else {
        return Err(ZaqarError::invalid("Operations must be JSON objects."));
    };
    let available = "add, remove, replace";
    let op = match change.get("op") {
        None => {
            return Err(ZaqarError::invalid(format!(
                "Unable to find `op` in JSON Schema change. It must be one of the following: {available}."
            )));
        }
        Some(Value::String(op)) if matches!(op.as_str(), "add" | "remove" | "replace") => op.as_str(),
        Some(op) => {
            let op = op.as_str().map_or_else(|| op.to_string(), str::to_owned);
            return Err(ZaqarError::invalid(format!(
                "Invalid operation: `{op}`. It must be one of the following: {available}."
            )));
        }
    };
    let Some(path) = change.get("path") else {
        return Err(ZaqarError::invalid("Unable to find 'path' in JSON Schema change"));
    };
    let path = path.as_str().unwrap_or_default();
    let parts = pointer(path)?;
    if parts.len() != 2 {
        return Err(ZaqarError::invalid(format!(
            "Invalid JSON pointer for this resource: '/{}, e.g /metadata/key'",
            parts.join("/")
        )));
    }
    let (root, key) = (parts.first().map(String::as_str), parts.get(1).cloned().unwrap_or_default());
    if op != "remove" && root.map(str::to_lowercase).as_deref() != Some("metadata") {
        return Err(ZaqarError::invalid("The root of path must be metadata, e.g /metadata/key."));
    }
    let reserved = reserved::RESERVED.contains(&key.as_str());
    if op == "remove" {
        // python-zaqarclient removes every key it does not keep, reserved ones it only saw with
        // their defaults included: removing an unset reserved key is not an error.
        if meta.remove(&key).is_none() && !reserved {
            return Err(conflict(&format!("Can't remove non-existent object {key}.")));
        }
        return Ok(());
    }
    let Some(value) = change.get("value") else {
        return Err(ZaqarError::invalid(format!("Operation \"{op}\" requires a member named \"value\".")));
    };
    if op == "replace" && !meta.contains_key(&key) && !reserved {
        return Err(conflict(&format!("Can't replace non-existent object {key}.")));
    }
    meta.insert(key, value.clone());
    Ok(())
}

/// Zaqar's `HTTPConflict` for a patch of a key that is not there.
fn conflict(description: &str) -> ZaqarError {
    ZaqarError::new(StatusCode::CONFLICT, "Resource conflict", description)
}

/// A JSON pointer's parts (`_decode_json_pointer`), with Zaqar's checks.
fn pointer(path: &str) -> Result<Vec<String>, ZaqarError> {
    if !path.starts_with('/') {
        return Err(ZaqarError::invalid(format!("Pointer `{path}` does not start with \"/\".")));
    }
    let rest = path.get(1..).unwrap_or_default();
    let squeezed: String = rest.chars().filter(|c| !c.is_whitespace()).collect();
    if squeezed.contains("//") {
        return Err(ZaqarError::invalid(format!("Pointer `{path}` contains adjacent \"/\".")));
    }
    if path.len() > 1 && path.ends_with('/') {
        return Err(ZaqarError::invalid(format!("Pointer `{path}` end with \"/\".")));
    }
    let bad_escape = path.match_indices('~').any(|(i, _)| !matches!(path.as_bytes().get(i + 1), Some(b'0' | b'1')));
    if bad_escape {
        return Err(ZaqarError::invalid(format!(
            "Pointer `{path}` contains \"~\" not part of a recognized escape sequence."
        )));
    }
    Ok(rest.split('/').map(|p| p.replace("~1", "/").replace("~0", "~").trim().to_owned()).collect())
}

/// `PATCH /v2/queues/{q}` with `application/openstack-messaging-v2.0-json-patch`: applies the
/// operations to the metadata and answers 200 with all of it.
pub(crate) async fn patch(
    State(z): State<Arc<Zaqar>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Response, ZaqarError> {
    check_queue(&caller, &name)?;
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if bytes.len() > MAX_QUEUE_METADATA {
        return Err(ZaqarError::body(format!("Queue metadata is too large. Max size: {MAX_QUEUE_METADATA}")));
    }
    if content_type.split(';').next().map(str::trim) != Some(PATCH_TYPE) {
        return Err(ZaqarError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Unsupported media type",
            format!("Accepted media type for PATCH: {{'Accept-Patch': '{PATCH_TYPE}'}}."),
        ));
    }
    if bytes.is_empty() {
        return Err(ZaqarError::body("PATCH body could not be empty for update."));
    }
    let changes = body::json(&bytes)?;
    let Value::Array(changes) = changes else {
        return Err(ZaqarError::body("Request body must be a JSON array of operation objects."));
    };
    let vhost = engine::vhost(&z.broker, &caller.project);
    if vhost.and_then(|v| engine::queue(&v, &name)).is_none() {
        return Err(queue_missing(&name, &caller.project));
    }
    let mut meta = z.metadata.get(&caller.project, &name);
    for change in &changes {
        apply_change(&mut meta, change).map_err(ZaqarError::into_body_error)?;
    }
    store(&z, &caller.project, &name, meta.clone()).await.map_err(ZaqarError::into_body_error)?;
    Ok(Json(reserved::shown(&meta)).into_response())
}

/// `GET /v2/queues/{q}/stats`: free, claimed and total messages, and the oldest and newest
/// (see [`crate::stats`]).
pub(crate) async fn stats(
    State(z): State<Arc<Zaqar>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ZaqarError> {
    check_queue(&caller, &name)?;
    let queue = engine::vhost(&z.broker, &caller.project).and_then(|v| engine::queue(&v, &name));
    let stats = match queue {
        Some(queue) => crate::stats::of(&queue, &name, crate::message::now_ms()).await?,
        None => None,
    };
    // Zaqar's v2 stats resource answers a queue that does not exist (or vanished meanwhile) as
    // an empty one: 200 with zero counts, not 404.
    Ok(Json(stats.unwrap_or_else(crate::stats::empty)))
}

/// `POST /v2/queues/{q}/purge` `{"resource_types": [...]}`: removes every message, claimed ones
/// included (subscriptions: Charon has none).
pub(crate) async fn purge(
    State(z): State<Arc<Zaqar>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, ZaqarError> {
    check_queue(&caller, &name)?;
    let document =
        if bytes.is_empty() { json!({ "resource_types": ["messages", "subscriptions"] }) } else { body::json(&bytes)? };
    let Some(types) = document.get("resource_types") else {
        return Err(ZaqarError::invalid("Post body must contain key \"resource_types\"."));
    };
    let valid =
        types.as_array().is_some_and(|t| t.iter().all(|t| matches!(t.as_str(), Some("messages" | "subscriptions"))));
    if !valid {
        return Err(ZaqarError::invalid("Resource types must be a sub set of {'messages', 'subscriptions'}."));
    }
    let messages = types.as_array().is_some_and(|t| t.iter().any(|t| t.as_str() == Some("messages")));
    let queue = engine::vhost(&z.broker, &caller.project)
        .and_then(|v| engine::queue(&v, &name))
        .ok_or_else(|| queue_missing(&name, &caller.project))?;
    if messages {
        let claimed = z.claims.take_all(&queue);
        if !claimed.is_empty() {
            queue.settle(claimed, Settle::Ack).await;
        }
        queue.purge().await.map_err(|_| queue_missing(&name, &caller.project))?;
    }
    Ok(StatusCode::NO_CONTENT)
}
