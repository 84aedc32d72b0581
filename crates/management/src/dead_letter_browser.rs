//! The dead-letter browser (issue 20), a Charon extension: a queue's messages without taking
//! them, paged and filtered, each with its death history as one table; and deleting or moving
//! chosen ones.
//!
//! - `GET /api/charon/queues/{vhost}/{queue}/messages`: `page` (1), `page_size` (50, at most
//!   500), `order` (`oldest` or `newest`), the filter of a redrive job as parameters (`reason`,
//!   `source_queue`, `message_id` — each comma-separated for several —, `died_after`,
//!   `died_before` in seconds, `header.<name>=<value>`), `truncate` (payload bytes shown), and
//!   the cursors `after` / `before`: the id of the previous page's last item. With a cursor a
//!   page costs a page of reads, whatever the queue's depth; `page=N` alone skips the matches
//!   of the pages before it (reading, never holding, them). Only ready messages are listed (as
//!   RabbitMQ's get shows them); an unknown parameter is a 400.
//! - `POST …/messages/delete` `{"ids": […]}` → `{"deleted": N}`.
//! - `POST …/messages/move` `{"ids": […], "destination": {…}}` → `{"moved": N, "failed": N}`,
//!   at least once ([`charon_engine::redrive::oneshot`]).
//!
//! Rights: read on the queue (as RabbitMQ's get and purge); a move also needs write on its
//! destination exchange, as a redrive job does.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use base64::Engine;
use charon_engine::queue::{BrowseRequest, BrowsedMessage};
use charon_engine::redrive::{Filter, Target};
use charon_engine::{Action, Broker, QueueRef, Resource, User};
use charon_model::{Message, REDRIVE_COUNT_KEY};
use serde::Deserialize;
use serde_json::{Value as JsonValue, json};

use crate::error::ApiError;
use crate::listing::Params;
use crate::objects::{self, engine_error};
use crate::redrives::{check_rights, redrive_error};

const DEFAULT_PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: usize = 500;
/// Messages read per browse while filtering.
const CHUNK: usize = 256;

/// A browse request as the query string gives it.
struct BrowseQuery {
    page: u64,
    page_size: usize,
    newest: bool,
    filter: Filter,
    truncate: Option<usize>,
    cursor: Option<u64>,
}

fn number<T: std::str::FromStr>(params: &Params, key: &str) -> Result<Option<T>, ApiError> {
    params
        .get(key)
        .map(|v| {
            v.parse::<T>().map_err(|_| ApiError::bad_request_verbatim(format!("{key} must be a non-negative integer")))
        })
        .transpose()
}

fn list(params: &Params, key: &str) -> Vec<String> {
    params.get(key).map(|v| v.split(',').filter(|s| !s.is_empty()).map(str::to_owned).collect()).unwrap_or_default()
}

impl BrowseQuery {
    fn parse(params: &Params) -> Result<Self, ApiError> {
        const KNOWN: [&str; 11] = [
            "page",
            "page_size",
            "order",
            "reason",
            "source_queue",
            "died_after",
            "died_before",
            "message_id",
            "truncate",
            "after",
            "before",
        ];
        if let Some(unknown) = params.keys().find(|k| !KNOWN.contains(&k.as_str()) && !k.starts_with("header.")) {
            return Err(ApiError::bad_request_verbatim(format!("unknown parameter '{unknown}'")));
        }
        let page = number::<u64>(params, "page")?.unwrap_or(1);
        let page_size = number::<usize>(params, "page_size")?.unwrap_or(DEFAULT_PAGE_SIZE);
        if page == 0 || page_size == 0 || page_size > MAX_PAGE_SIZE {
            return Err(ApiError::bad_request_verbatim(format!(
                "page must be at least 1 and page_size between 1 and {MAX_PAGE_SIZE}"
            )));
        }
        let newest = match params.get("order").map(String::as_str) {
            None | Some("oldest") => false,
            Some("newest") => true,
            Some(other) => {
                return Err(ApiError::bad_request_verbatim(format!("order must be oldest or newest, not '{other}'")));
            }
        };
        let (after, before) = (number::<u64>(params, "after")?, number::<u64>(params, "before")?);
        let cursor = match (after, before, newest) {
            (Some(_), Some(_), _) | (Some(_), None, true) | (None, Some(_), false) => {
                return Err(ApiError::bad_request_verbatim(
                    "use after with order=oldest and before with order=newest, not both",
                ));
            }
            (after, before, _) => after.or(before),
        };
        let filter = Filter {
            reasons: list(params, "reason"),
            source_queues: list(params, "source_queue"),
            died_after: number::<i64>(params, "died_after")?,
            died_before: number::<i64>(params, "died_before")?,
            headers: params
                .iter()
                .filter_map(|(k, v)| {
                    k.strip_prefix("header.").map(|name| (name.to_owned(), JsonValue::String(v.clone())))
                })
                .collect(),
            message_ids: list(params, "message_id"),
        };
        filter.validate().map_err(redrive_error)?;
        Ok(Self { page, page_size, newest, filter, truncate: number::<usize>(params, "truncate")?, cursor })
    }
}

/// The matching messages of one page, and whether more follow; reads a chunk at a time.
async fn scan(queue: &QueueRef, q: &BrowseQuery) -> Result<(Vec<BrowsedMessage>, bool), ApiError> {
    let skip = (q.page - 1).saturating_mul(q.page_size as u64);
    let chunk = if q.filter.is_empty() && skip == 0 { q.page_size + 1 } else { CHUNK };
    let mut cursor = q.cursor;
    let mut skipped = 0u64;
    let mut out = Vec::with_capacity(q.page_size);
    loop {
        let request = BrowseRequest {
            after: cursor.filter(|_| !q.newest),
            before: cursor.filter(|_| q.newest),
            newest_first: q.newest,
            limit: chunk,
            include_unacked: false,
            include_delayed: false,
        };
        let page = queue.browse(request).await.map_err(|e| engine_error(&e))?;
        let last = page.items.last().map(|item| item.seq);
        for item in page.items {
            if !q.filter.matches(&item.message) {
                continue;
            }
            if skipped < skip {
                skipped += 1;
                continue;
            }
            if out.len() == q.page_size {
                return Ok((out, true));
            }
            out.push(item);
        }
        match last {
            Some(seq) if page.has_more => cursor = Some(seq),
            _ => return Ok((out, false)),
        }
    }
}

/// The death history as one table, most recent `{queue, reason}` first; times in seconds.
fn deaths(message: &Message) -> JsonValue {
    let Some(history) = message.broker.deaths.as_deref() else { return JsonValue::Array(Vec::new()) };
    history
        .entries
        .iter()
        .map(|d| {
            json!({
                "reason": d.reason.as_str(),
                "queue": d.queue,
                "exchange": d.exchange,
                "routing_keys": d.routing_keys,
                "count": d.count,
                "first_time": d.first_time.div_euclid(1000),
                "last_time": d.last_time.div_euclid(1000),
                "error_condition": d.cause.as_deref().and_then(|c| c.condition()),
                "error_description": d.cause.as_deref().and_then(|c| c.description()),
            })
        })
        .collect()
}

fn item(item: &BrowsedMessage, truncate: Option<usize>) -> JsonValue {
    let message = &item.message;
    let mut properties = crate::queue_get::properties(message);
    if !properties.is_object() {
        properties = json!({});
    }
    if let Some(fields) = properties.as_object_mut() {
        if message.broker.redrive_count > 0 {
            let headers = fields.entry("headers").or_insert_with(|| json!({}));
            if let Some(headers) = headers.as_object_mut() {
                headers.insert(REDRIVE_COUNT_KEY.to_owned(), message.broker.redrive_count.into());
            }
        }
        if !message.annotations.is_empty() {
            fields.insert("annotations".into(), crate::json::table_to_json(&message.annotations));
        }
    }
    let body = message.body.bytes();
    let shown = body.get(..truncate.unwrap_or(body.len()).min(body.len())).unwrap_or_default();
    let (payload, encoding) = match std::str::from_utf8(shown) {
        Ok(text) => (text.to_owned(), "string"),
        Err(_) => (base64::engine::general_purpose::STANDARD.encode(shown), "base64"),
    };
    json!({
        "id": item.seq.to_string(),
        "properties": properties,
        "payload": payload,
        "payload_encoding": encoding,
        "payload_bytes": body.len(),
        "deaths": deaths(message),
    })
}

/// The queue, for a user who may read it.
fn readable(
    broker: &Broker,
    user: &User,
    vhost: &str,
    name: &str,
) -> Result<(Arc<charon_engine::VHost>, QueueRef), ApiError> {
    let vhost = objects::vhost_of(broker, user, vhost)?;
    let queue = vhost.queue(name, broker.next_id()).map_err(|e| engine_error(&e))?;
    objects::check(broker, user, Action::Read, &Resource::queue(vhost.name(), name))?;
    Ok((vhost, queue))
}

/// `GET /api/charon/queues/{vhost}/{queue}/messages`.
pub(crate) async fn browse(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    let (_, queue) = readable(&broker, &user, &vhost, &name)?;
    let query = BrowseQuery::parse(&params)?;
    let (items, has_more) = scan(&queue, &query).await?;
    Ok(Json(json!({
        "page": query.page,
        "page_size": query.page_size,
        "items": items.iter().map(|i| item(i, query.truncate)).collect::<Vec<_>>(),
        "has_more": has_more,
    })))
}

/// Message ids as the items name them: strings of digits (integers are taken too).
fn ids(values: &[JsonValue]) -> Result<Vec<u64>, ApiError> {
    values
        .iter()
        .map(|v| match v {
            JsonValue::String(s) => s.parse().ok(),
            JsonValue::Number(n) => n.as_u64(),
            _ => None,
        })
        .map(|id| id.ok_or_else(|| ApiError::bad_request_verbatim("ids must be message ids as the browser lists them")))
        .collect()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteBody {
    ids: Vec<JsonValue>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MoveBody {
    ids: Vec<JsonValue>,
    destination: Target,
}

fn body<T: for<'de> Deserialize<'de>>(bytes: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request_verbatim(e.to_string()))
}

/// `POST /api/charon/queues/{vhost}/{queue}/messages/delete`.
pub(crate) async fn delete(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
    bytes: Bytes,
) -> Result<Json<JsonValue>, ApiError> {
    let (_, queue) = readable(&broker, &user, &vhost, &name)?;
    let request: DeleteBody = body(&bytes)?;
    let ids = ids(&request.ids)?;
    let removed = queue.remove(ids).await.map_err(|e| engine_error(&e))?;
    Ok(Json(json!({ "deleted": removed.len() })))
}

/// `POST /api/charon/queues/{vhost}/{queue}/messages/move`.
pub(crate) async fn move_messages(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
    bytes: Bytes,
) -> Result<Json<JsonValue>, ApiError> {
    let (vhost, _) = readable(&broker, &user, &vhost, &name)?;
    let request: MoveBody = body(&bytes)?;
    let ids = ids(&request.ids)?;
    check_rights(&broker, &user, &vhost, &name, &request.destination)?;
    let outcome =
        broker.redrives().move_messages(&vhost, &name, &ids, &request.destination).await.map_err(redrive_error)?;
    Ok(Json(json!({ "moved": outcome.moved, "failed": outcome.failed })))
}
