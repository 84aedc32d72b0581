//! Messages: `POST|GET|DELETE /v2/queues/{q}/messages`, `GET|DELETE .../messages/{id}`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use charon_engine::queue::{BrowseRequest, BrowsedMessage};
use charon_engine::{Owner, QueueRef, Settle};
use serde_json::{Value, json};

use crate::body::{self, bool_param, int_param, list_param};
use crate::caller::{Caller, check_queue};
use crate::claims::Holder;
use crate::error::ZaqarError;
use crate::message::{self, now_ms};
use crate::reserved::{
    MAX_MESSAGE_DELAY, MAX_MESSAGE_TTL, MAX_POST_SIZE, MIN_MESSAGE_DELAY, MIN_MESSAGE_TTL, QueueSettings,
};
use crate::{Zaqar, engine};

/// `max_messages_per_page`.
const MAX_PER_PAGE: i64 = 20;
/// `max_messages_per_claim_or_pop`.
const MAX_POP: i64 = 20;

type QueryResult = Result<Query<body::Pairs>, axum::extract::rejection::QueryRejection>;

fn query_of(query: QueryResult) -> Result<body::Query, ZaqarError> {
    query.map(|Query(q)| body::query(q)).map_err(|e| ZaqarError::invalid(e.body_text()))
}

fn base(queue: &str) -> String {
    format!("/v2/queues/{queue}")
}

/// `POST /v2/queues/{q}/messages` `{"messages": [{"ttl", "body", "delay"}]}`: publishes them
/// (creating the queue) and answers 201 with their hrefs once the engine confirmed them.
///
/// A delay is Zaqar's only when the queue has `_default_message_delay`: its post spec then has
/// a `delay` field (an int, defaulting to the queue's delay); otherwise the field is dropped,
/// unchecked. A delayed message is published with a "not before" time (post time + delay): the
/// engine keeps it out of the queue's ready messages until then, for every protocol.
pub(crate) async fn post(
    State(z): State<Arc<Zaqar>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    bytes: Bytes,
) -> Result<Response, ZaqarError> {
    check_queue(&caller, &name)?;
    let settings = QueueSettings::read(&z.metadata.get(&caller.project, &name))?;
    let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if settings.max_post_size < MAX_POST_SIZE && size > settings.max_post_size {
        return Err(ZaqarError::invalid(format!(
            "Message collection size is too large. The max size for current queue is {}. It is calculated by max size = min(max_messages_post_size_config: {MAX_POST_SIZE}, max_messages_post_size_queue: {}).",
            settings.max_post_size, settings.max_post_size
        )));
    }
    if size > MAX_POST_SIZE {
        return Err(ZaqarError::invalid(format!("Message collection size is too large. Max size {MAX_POST_SIZE}")));
    }
    let document = body::json(&bytes)?;
    let Some(posted) = document.get("messages") else {
        return Err(ZaqarError::invalid("No messages were found in the request body."));
    };
    let Value::Array(posted) = posted else {
        return Err(ZaqarError::body("Request body must be a JSON array."));
    };
    if posted.is_empty() {
        return Err(ZaqarError::invalid("No messages to enqueu."));
    }
    let now = now_ms();
    let mut messages = Vec::with_capacity(posted.len());
    for item in posted {
        if !item.is_object() {
            return Err(ZaqarError::body("Messages must be JSON objects."));
        }
        let ttl = body::int_field(item, "ttl", Some(settings.default_ttl))?;
        let Some(content) = item.get("body") else {
            return Err(ZaqarError::body("Missing \"body\" field."));
        };
        let delay =
            if settings.default_delay != 0 { body::int_field(item, "delay", Some(settings.default_delay))? } else { 0 };
        if !(MIN_MESSAGE_TTL..=MAX_MESSAGE_TTL).contains(&ttl) {
            return Err(ZaqarError::invalid(format!(
                "The TTL for a message may not exceed {MAX_MESSAGE_TTL} seconds, and must be at least {MIN_MESSAGE_TTL} seconds long."
            )));
        }
        if !(MIN_MESSAGE_DELAY..=MAX_MESSAGE_DELAY).contains(&delay) {
            // Zaqar's text, its missing space included.
            return Err(ZaqarError::invalid(format!(
                "The Delay TTL for a message may not exceed {MAX_MESSAGE_DELAY} seconds,and must be at least {MIN_MESSAGE_DELAY} seconds long."
            )));
        }
        let mut posted = message::posted(&name, content, ttl, &caller.client_id, now);
        if delay > 0 {
            posted.broker.not_before = Some(now.saturating_add(delay.saturating_mul(1000)));
        }
        messages.push(Arc::new(posted));
    }
    let vhost = engine::vhost_for_write(&z.broker, &caller.project, z.config.create_vhosts).await?;
    let (queue, _) = engine::ensure_queue(&vhost, &name).await?;
    let ids: Vec<String> =
        engine::publish_confirmed(&z.broker, &queue, messages).await?.into_iter().map(message::id_of).collect();
    let path = format!("{}/messages", base(&name));
    let hrefs: Vec<String> = ids.iter().map(|id| format!("{path}/{id}")).collect();
    let location = format!("{path}?ids={}", ids.join(","));
    Ok((StatusCode::CREATED, [(header::LOCATION, location)], Json(json!({ "resources": hrefs }))).into_response())
}

/// The queue of a request, or 404.
fn queue_of(z: &Zaqar, caller: &Caller, name: &str) -> Result<QueueRef, ZaqarError> {
    engine::vhost(&z.broker, &caller.project)
        .and_then(|v| engine::queue(&v, name))
        .ok_or_else(|| ZaqarError::not_found(format!("Queue {name} does not exist for project {}", caller.project)))
}

/// One message by sequence number, claimed, delayed or not (Zaqar's `get` does not look at
/// delays).
async fn find(queue: &QueueRef, seq: u64) -> Option<BrowsedMessage> {
    let request = BrowseRequest {
        after: seq.checked_sub(1),
        before: None,
        newest_first: false,
        limit: 1,
        include_unacked: true,
        include_delayed: true,
    };
    queue.browse(request).await.ok()?.items.into_iter().find(|i| i.seq == seq)
}

/// A browsed message as Zaqar shows it, with its claim if one holds it.
fn shown(z: &Zaqar, queue: &QueueRef, name: &str, item: &BrowsedMessage, now: i64) -> Value {
    let claim = z.claims.claim_of(queue, item.seq, now);
    let count = claim.as_ref().map_or(item.returned, |(_, count)| *count);
    message::render(&item.message, item.seq, &base(name), claim.as_ref().map(|(cid, _)| cid.as_str()), count, now)
}

/// `GET /v2/queues/{q}/messages?limit&marker&echo&include_claimed&include_delayed` or `?ids=`.
///
/// Delayed messages are listed only with `include_delayed=true` — and always when the queue has
/// no `_default_message_delay`: Zaqar then sets `include_delayed` itself.
pub(crate) async fn list(
    State(z): State<Arc<Zaqar>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    query: QueryResult,
) -> Result<Json<Value>, ZaqarError> {
    check_queue(&caller, &name)?;
    let query = query_of(query)?;
    if let Some(ids) = list_param(&query, "ids") {
        return by_ids(&z, &caller, &name, &ids).await;
    }
    let limit = int_param(&query, "limit")?;
    if let Some(limit) = limit
        && !(1..=MAX_PER_PAGE).contains(&limit)
    {
        return Err(ZaqarError::invalid(format!(
            "Limit must be at least 1 and may not be greater than {MAX_PER_PAGE}."
        )));
    }
    let limit = usize::try_from(limit.unwrap_or(10)).unwrap_or(10);
    let echo = bool_param(&query, "echo")?.unwrap_or(false);
    let include_claimed = bool_param(&query, "include_claimed")?.unwrap_or(false);
    let asked_delayed = bool_param(&query, "include_delayed")?;
    let marker = match query.get("marker") {
        Some(m) => Some(message::seq_of(m).ok_or_else(|| ZaqarError::invalid(format!("Invalid marker: {m}")))?),
        None => None,
    };
    let Ok(queue) = queue_of(&z, &caller, &name) else {
        return Ok(Json(json!({ "messages": [], "links": [] })));
    };
    let delaying = QueueSettings::read(&z.metadata.get(&caller.project, &name))?.default_delay != 0;
    let include_delayed = !delaying || asked_delayed.unwrap_or(false);
    let now = now_ms();
    let mut shown_messages = Vec::new();
    let mut after = marker;
    let mut last = marker;
    // Pages until `limit` messages passed the echo filter (a page with more never comes back empty).
    loop {
        let request = BrowseRequest {
            after,
            before: None,
            newest_first: false,
            limit,
            include_unacked: include_claimed,
            include_delayed,
        };
        let page = queue.browse(request).await.map_err(|e| ZaqarError::unavailable(e.to_string()))?;
        for item in &page.items {
            last = Some(item.seq);
            if !echo && message::client_of(&item.message).as_deref() == Some(caller.client_id.as_str()) {
                continue;
            }
            shown_messages.push(shown(&z, &queue, &name, item, now));
            if shown_messages.len() == limit {
                break;
            }
        }
        after = page.items.last().map(|i| i.seq);
        if shown_messages.len() == limit || !page.has_more || after.is_none() {
            break;
        }
    }
    let mut links = Vec::new();
    if !shown_messages.is_empty()
        && let Some(last) = last
    {
        let mut href = format!("{}/messages?marker={}&limit={limit}", base(&name), message::id_of(last));
        if echo {
            href.push_str("&echo=true");
        }
        if include_claimed {
            href.push_str("&include_claimed=true");
        }
        if include_delayed {
            // Zaqar's next link repeats the listing's arguments, `include_delayed` as it used it
            // (set by Zaqar itself when the queue has no default delay).
            href.push_str("&include_delayed=true");
        }
        links.push(json!({ "rel": "next", "href": href }));
    }
    Ok(Json(json!({ "messages": shown_messages, "links": links })))
}

/// `GET .../messages?ids=a,b`: those that exist; 404 when none does.
async fn by_ids(z: &Zaqar, caller: &Caller, name: &str, ids: &[String]) -> Result<Json<Value>, ZaqarError> {
    let count = i64::try_from(ids.len()).unwrap_or(i64::MAX);
    if !(1..=MAX_PER_PAGE).contains(&count) {
        return Err(ZaqarError::invalid(format!(
            "Limit must be at least 1 and may not be greater than {MAX_PER_PAGE}."
        )));
    }
    let not_found = || {
        ZaqarError::not_found(format!(
            "No messages with IDs: {ids:?} found in the queue {name} for project {}.",
            caller.project
        ))
    };
    let queue = queue_of(z, caller, name).map_err(|_| not_found())?;
    let now = now_ms();
    let mut found = Vec::new();
    for seq in ids.iter().filter_map(|id| message::seq_of(id)) {
        if let Some(item) = find(&queue, seq).await {
            found.push(shown(z, &queue, name, &item, now));
        }
    }
    if found.is_empty() {
        return Err(not_found());
    }
    Ok(Json(json!({ "messages": found })))
}

/// `GET /v2/queues/{q}/messages/{id}`.
pub(crate) async fn show(
    State(z): State<Arc<Zaqar>>,
    Extension(caller): Extension<Caller>,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<Value>, ZaqarError> {
    check_queue(&caller, &name)?;
    let missing = || ZaqarError::not_found(format!("Message {id} does not exist."));
    let queue = queue_of(&z, &caller, &name).map_err(|_| missing())?;
    let seq = message::seq_of(&id).ok_or_else(missing)?;
    let item = find(&queue, seq).await.ok_or_else(missing)?;
    Ok(Json(shown(&z, &queue, &name, &item, now_ms())))
}

/// `DELETE /v2/queues/{q}/messages/{id}?claim_id=`: a claimed message needs its claim's id
/// (403 otherwise); 204 also when the message is already gone.
pub(crate) async fn delete_one(
    State(z): State<Arc<Zaqar>>,
    Extension(caller): Extension<Caller>,
    Path((name, id)): Path<(String, String)>,
    query: QueryResult,
) -> Result<StatusCode, ZaqarError> {
    check_queue(&caller, &name)?;
    let query = query_of(query)?;
    let Ok(queue) = queue_of(&z, &caller, &name) else { return Ok(StatusCode::NO_CONTENT) };
    let Some(seq) = message::seq_of(&id) else { return Ok(StatusCode::NO_CONTENT) };
    let cid = query.get("claim_id").map(String::as_str);
    let refused = |status, text: &str| ZaqarError::new(status, "Unable to delete", text);
    match z.claims.take(&queue, seq, cid, now_ms()) {
        Holder::Taken => queue.settle(vec![seq], Settle::Ack).await,
        Holder::Free if cid.is_some() => {
            return Err(refused(
                StatusCode::BAD_REQUEST,
                "A claim was specified, but the message is not currently claimed.",
            ));
        }
        Holder::Free => {
            queue.remove(vec![seq]).await.map_err(|e| ZaqarError::unavailable(e.to_string()))?;
        }
        Holder::Other => {
            return Err(refused(
                StatusCode::FORBIDDEN,
                "This message is claimed; it cannot be deleted without a valid claim ID.",
            ));
        }
        Holder::NoSuchClaim => {
            return Err(refused(StatusCode::BAD_REQUEST, "The specified claim does not exist or has expired."));
        }
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /v2/queues/{q}/messages?ids=` (204) or `?pop=N` (200 with the popped messages).
pub(crate) async fn delete_many(
    State(z): State<Arc<Zaqar>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    query: QueryResult,
) -> Result<Response, ZaqarError> {
    check_queue(&caller, &name)?;
    let query = query_of(query)?;
    let ids = list_param(&query, "ids");
    let pop = int_param(&query, "pop")?;
    match (&ids, pop) {
        (Some(_), Some(_)) => {
            return Err(ZaqarError::invalid("pop and id params cannot be present together in the delete request."));
        }
        (None, None) => {
            return Err(ZaqarError::invalid(
                "The request should have either \"ids\" or \"pop\" parameter in the request, to be able to delete.",
            ));
        }
        (None, Some(pop)) if !(1..=MAX_POP).contains(&pop) => {
            return Err(ZaqarError::invalid(format!(
                "Pop value must be at least 1 and may not be greater than {MAX_POP}."
            )));
        }
        (Some(ids), None) if !(1..=MAX_PER_PAGE).contains(&i64::try_from(ids.len()).unwrap_or(i64::MAX)) => {
            return Err(ZaqarError::invalid(format!(
                "ids parameter should have at least 1 and not greater than {MAX_PER_PAGE} values."
            )));
        }
        _ => {}
    }
    let queue = queue_of(&z, &caller, &name);
    if let Some(ids) = ids {
        if let Ok(queue) = queue {
            let now = now_ms();
            let (mut ready, mut claimed) = (Vec::new(), Vec::new());
            for seq in ids.iter().filter_map(|id| message::seq_of(id)) {
                match z.claims.claim_of(&queue, seq, now) {
                    Some((cid, _)) if z.claims.take(&queue, seq, Some(&cid), now) == Holder::Taken => claimed.push(seq),
                    _ => ready.push(seq),
                }
            }
            if !claimed.is_empty() {
                queue.settle(claimed, Settle::Ack).await;
            }
            queue.remove(ready).await.map_err(|e| ZaqarError::unavailable(e.to_string()))?;
        }
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let mut popped = Vec::new();
    if let Ok(queue) = queue {
        let owner = Owner { session: z.broker.next_id(), channel: 1 };
        let now = now_ms();
        for _ in 0..pop.unwrap_or(0) {
            let got = queue.get(owner, true).await.map_err(|e| ZaqarError::unavailable(e.to_string()))?;
            let Some(ok) = got else { break };
            let count = ok.delivery.message.broker.acquired_count;
            popped.push(message::render(&ok.delivery.message, ok.delivery.seq, &base(&name), None, count, now));
        }
    }
    Ok(Json(json!({ "messages": popped })).into_response())
}
