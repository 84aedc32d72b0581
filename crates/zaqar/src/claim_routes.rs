//! Claims over HTTP: `POST /v2/queues/{q}/claims?limit=N`, `GET|PATCH|DELETE .../claims/{cid}`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use charon_engine::Owner;
use serde_json::{Value, json};

use crate::body::{self, int_param};
use crate::caller::{Caller, check_queue};
use crate::claims::{self, Claim, Claimed, seconds_ms};
use crate::error::ZaqarError;
use crate::message::{self, now_ms};
use crate::reserved::QueueSettings;
use crate::{Zaqar, dead_letter, engine};

/// `max_messages_per_claim_or_pop`.
const MAX_CLAIM: i64 = 20;
/// Zaqar's default number of messages claimed.
const DEFAULT_LIMIT: i64 = 10;
/// `default_claim_ttl`, `default_grace_ttl`.
const DEFAULT_TTL: i64 = 300;
const DEFAULT_GRACE: i64 = 60;
/// `MIN_CLAIM_TTL`/`MIN_CLAIM_GRACE`, `max_claim_ttl`/`max_claim_grace`.
const MIN_SECONDS: i64 = 60;
const MAX_SECONDS: i64 = 43_200;

/// `ttl` and `grace` of a claim body (defaults for an empty body), checked as
/// `Validator.claim_updating` / `claim_creation` do.
fn ttl_and_grace(bytes: &[u8], check_grace: bool) -> Result<(u64, u64), ZaqarError> {
    let (ttl, grace) = if bytes.is_empty() {
        (DEFAULT_TTL, DEFAULT_GRACE)
    } else {
        let document = body::json(bytes)?;
        if !document.is_object() {
            return Err(ZaqarError::body("Request body must be a JSON object."));
        }
        (
            body::int_field(&document, "ttl", Some(DEFAULT_TTL))?,
            body::int_field(&document, "grace", Some(DEFAULT_GRACE))?,
        )
    };
    if !(MIN_SECONDS..=MAX_SECONDS).contains(&ttl) {
        return Err(ZaqarError::invalid(format!(
            "The TTL for a claim may not exceed {MAX_SECONDS} seconds, and must be at least {MIN_SECONDS} seconds long."
        )));
    }
    if check_grace && !(MIN_SECONDS..=MAX_SECONDS).contains(&grace) {
        return Err(ZaqarError::invalid(format!(
            "The grace for a claim may not exceed {MAX_SECONDS} seconds, and must be at least {MIN_SECONDS} seconds long."
        )));
    }
    Ok((ttl.unsigned_abs(), grace.unsigned_abs()))
}

fn base(queue: &str) -> String {
    format!("/v2/queues/{queue}")
}

fn rendered(claim: &Claim, cid: &str, name: &str, now: i64) -> Vec<Value> {
    claim.messages.iter().map(|m| message::render(&m.message, m.seq, &base(name), Some(cid), m.count, now)).collect()
}

/// `POST /v2/queues/{q}/claims?limit=N` `{"ttl", "grace"}`: claims up to N ready messages,
/// oldest first; a message already claimed `_max_claim_count` times goes to the dead-letter
/// queue instead. 201 with the messages and `Location`, 204 when none was claimed.
pub(crate) async fn create(
    State(z): State<Arc<Zaqar>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    query: Result<Query<body::Pairs>, axum::extract::rejection::QueryRejection>,
    bytes: Bytes,
) -> Result<Response, ZaqarError> {
    check_queue(&caller, &name)?;
    let query = body::query(query.map_err(|e| ZaqarError::invalid(e.body_text()))?.0);
    let limit = int_param(&query, "limit")?;
    let (ttl, grace) = ttl_and_grace(&bytes, false)?;
    if let Some(limit) = limit
        && !(1..=MAX_CLAIM).contains(&limit)
    {
        return Err(ZaqarError::invalid(format!("Limit must be at least 1 and may not be greater than {MAX_CLAIM}.")));
    }
    ttl_and_grace(&bytes, true)?;
    let settings = QueueSettings::read(&z.metadata.get(&caller.project, &name))?;
    let Some(vhost) = engine::vhost(&z.broker, &caller.project) else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let Some(queue) = engine::queue(&vhost, &name) else { return Ok(StatusCode::NO_CONTENT.into_response()) };
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    // Taken and recorded on a task of its own: a request dropped halfway (its client, or the
    // node that forwarded it, went away) must not leave messages held by a claim nobody
    // records, which would never expire. A claim its client never saw expires as any other.
    let taking =
        tokio::spawn(take(Arc::clone(&z), caller.project.clone(), vhost, queue, limit, settings, (ttl, grace)));
    let Some((cid, claim)) = taking.await.map_err(|e| ZaqarError::unavailable(e.to_string()))?? else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let messages = rendered(&claim, &cid, &name, claim.created_ms);
    let location = format!("{}/claims/{cid}", base(&name));
    Ok((StatusCode::CREATED, [(header::LOCATION, location)], Json(json!({ "messages": messages }))).into_response())
}

/// Takes up to `limit` messages of `queue` for a new claim, held by an engine owner of its own
/// (moving those past the claim count to the dead-letter queue), and records it; the claim's
/// id and a copy of it, or `None` when nothing was claimed. What it took is given back when
/// the queue fails halfway.
async fn take(
    z: Arc<Zaqar>,
    project: String,
    vhost: Arc<charon_engine::VHost>,
    queue: charon_engine::QueueRef,
    limit: i64,
    settings: QueueSettings,
    (ttl, grace): (u64, u64),
) -> Result<Option<(String, Claim)>, ZaqarError> {
    let owner = Owner { session: z.broker.next_id(), channel: 1 };
    let mut claimed = Vec::new();
    let mut doomed = Vec::new();
    for _ in 0..limit {
        let got = match queue.get(owner, false).await {
            Ok(got) => got,
            Err(e) => {
                queue.owner_closed(owner).await;
                return Err(ZaqarError::unavailable(e.to_string()));
            }
        };
        let Some(ok) = got else { break };
        // The quorum queue's return count: how often it was claimed (or delivered) before.
        let count = ok.delivery.message.broker.acquired_count;
        match &settings.dead_letter {
            Some(dead_letter) if count >= dead_letter.max_claim_count => doomed.push(ok.delivery),
            _ => claimed.push(Claimed { seq: ok.delivery.seq, message: ok.delivery.message, count: count + 1 }),
        }
    }
    if let Some(dead_letter) = &settings.dead_letter
        && let Err(error) = dead_letter::move_to_dead_letter_queue(&z.broker, &vhost, &queue, doomed, dead_letter).await
    {
        tracing::warn!(queue = %queue.name(), %error, "moving messages to the dead letter queue failed; they stay");
    }
    if claimed.is_empty() {
        return Ok(None);
    }
    let now = now_ms();
    let cid = claims::new_id();
    let claim = Claim {
        project,
        queue,
        messages: claimed,
        ttl,
        grace,
        created_ms: now,
        expires_ms: now.saturating_add(seconds_ms(ttl)),
    };
    z.claims.insert(cid.clone(), claim.clone());
    Ok(Some((cid, claim)))
}

fn claim_missing(cid: &str) -> ZaqarError {
    ZaqarError::not_found(format!("Claim {cid} does not exist."))
}

/// `GET .../claims/{cid}`: its age, ttl and messages.
pub(crate) async fn show(
    State(z): State<Arc<Zaqar>>,
    Extension(caller): Extension<Caller>,
    Path((name, cid)): Path<(String, String)>,
) -> Result<Json<Value>, ZaqarError> {
    check_queue(&caller, &name)?;
    let now = now_ms();
    let claim = z.claims.get(&caller.project, &name, &cid, now).ok_or_else(|| claim_missing(&cid))?;
    Ok(Json(json!({
        "age": (now - claim.created_ms) / 1000,
        "ttl": claim.ttl,
        "grace": claim.grace,
        "messages": rendered(&claim, &cid, &name, now),
        "href": format!("{}/claims/{cid}", base(&name)),
    })))
}

/// `PATCH .../claims/{cid}` `{"ttl", "grace"}`: renews it from now (204).
pub(crate) async fn renew(
    State(z): State<Arc<Zaqar>>,
    Extension(caller): Extension<Caller>,
    Path((name, cid)): Path<(String, String)>,
    bytes: Bytes,
) -> Result<StatusCode, ZaqarError> {
    check_queue(&caller, &name)?;
    let _ = body::json(&bytes)?;
    let (ttl, grace) = ttl_and_grace(&bytes, false)?;
    if z.claims.renew(&caller.project, &name, &cid, ttl, grace, now_ms()) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(claim_missing(&cid))
    }
}

/// `DELETE .../claims/{cid}`: releases its messages back to the queue (204, also when it is
/// already gone).
pub(crate) async fn release(
    State(z): State<Arc<Zaqar>>,
    Extension(caller): Extension<Caller>,
    Path((name, cid)): Path<(String, String)>,
) -> Result<StatusCode, ZaqarError> {
    check_queue(&caller, &name)?;
    if let Some(claim) = z.claims.remove(&caller.project, &name, &cid) {
        claims::release(&claim).await;
    }
    Ok(StatusCode::NO_CONTENT)
}
