//! `/api/charon/redrives`: redrive jobs (issue 20), a Charon extension (RabbitMQ has none; its
//! users write shovels). JSON in and out as `docs/redrive.md` and the jobs' [`JobView`]
//! describe; errors as `{"error": "bad_request" | "not_found" | "conflict" |
//! "service_unavailable", "reason": …}`. In a cluster every node lists every job and takes
//! every action (sent to the node that runs the job).
//!
//! Rights follow the queue endpoints: a user sees the jobs of the vhosts it may open (a
//! monitor, every vhost); creating, pausing, resuming, cancelling and deleting need what
//! purging the source queue needs (read on it), and a job to an exchange or a queue also needs
//! write on that exchange (the default exchange for a queue), as publishing there would.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use charon_engine::redrive::{JobSpec, JobView, RedriveError, Target};
use charon_engine::{Action, Broker, Resource, User, VHost};
use serde_json::Value as JsonValue;

use crate::auth;
use crate::error::ApiError;
use crate::objects;

/// A redrive error as the API answers it.
pub(crate) fn redrive_error(error: RedriveError) -> ApiError {
    match error {
        RedriveError::Invalid(reason) => ApiError::bad_request_verbatim(reason),
        RedriveError::NotFound(reason) => ApiError::not_found_reason(reason),
        RedriveError::Conflict(reason) => ApiError::conflict(reason),
        RedriveError::Store(reason) => ApiError::internal(reason),
        RedriveError::Unavailable(reason) => ApiError::unavailable(reason),
    }
}

fn render(view: &JobView) -> JsonValue {
    // A view of strings, numbers and maps of them always serializes.
    serde_json::to_value(view).unwrap_or(JsonValue::Null)
}

/// `GET /api/charon/redrives`: the jobs of every vhost the user sees.
pub(crate) async fn list_all(State(broker): State<Arc<Broker>>, Extension(user): Extension<User>) -> Json<JsonValue> {
    let jobs =
        broker.redrives().list(None).iter().filter(|v| auth::sees(&broker, &user, &v.vhost)).map(render).collect();
    Json(JsonValue::Array(jobs))
}

/// `GET /api/charon/redrives/{vhost}`.
pub(crate) async fn list_vhost(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(vhost): Path<String>,
) -> Result<Json<JsonValue>, ApiError> {
    auth::vhost_visible(&broker, &user, &vhost)?;
    let vhost = objects::vhost_of(&broker, &user, &vhost)?;
    Ok(Json(JsonValue::Array(broker.redrives().list(Some(vhost.name())).iter().map(render).collect())))
}

/// The checks of an action on a job over `source` to `destination`.
pub(crate) fn check_rights(
    broker: &Broker,
    user: &User,
    vhost: &VHost,
    source: &str,
    destination: &Target,
) -> Result<(), ApiError> {
    objects::check(broker, user, Action::Read, &Resource::queue(vhost.name(), source))?;
    let exchange = match destination {
        Target::Exchange { exchange, .. } => Some(exchange.as_str()),
        Target::Queue { .. } => Some(""),
        Target::Original { .. } => None,
    };
    if let Some(exchange) = exchange {
        objects::check(broker, user, Action::Write, &Resource::exchange(vhost.name(), exchange))?;
    }
    Ok(())
}

/// `POST /api/charon/redrives/{vhost}` with a job's spec: 201 with the job.
pub(crate) async fn create(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(vhost): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<JsonValue>), ApiError> {
    let vhost = objects::vhost_of(&broker, &user, &vhost)?;
    let spec: JobSpec = serde_json::from_slice(&body).map_err(|e| ApiError::bad_request_verbatim(e.to_string()))?;
    spec.validate().map_err(redrive_error)?;
    check_rights(&broker, &user, &vhost, &spec.source, &spec.destination)?;
    let view = broker.redrives().create(&vhost, spec).await.map_err(redrive_error)?;
    Ok((StatusCode::CREATED, Json(render(&view))))
}

/// The job, for a user allowed to act on it.
fn acting_on(broker: &Broker, user: &User, vhost: &str, id: &str) -> Result<(Arc<VHost>, JobView), ApiError> {
    let vhost = objects::vhost_of(broker, user, vhost)?;
    let view = broker.redrives().get(vhost.name(), id).map_err(redrive_error)?;
    check_rights(broker, user, &vhost, &view.source, &view.destination)?;
    Ok((vhost, view))
}

/// `GET /api/charon/redrives/{vhost}/{id}`.
pub(crate) async fn get_one(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, id)): Path<(String, String)>,
) -> Result<Json<JsonValue>, ApiError> {
    auth::vhost_visible(&broker, &user, &vhost)?;
    let vhost = objects::vhost_of(&broker, &user, &vhost)?;
    broker.redrives().get(vhost.name(), &id).map(|v| Json(render(&v))).map_err(redrive_error)
}

/// `POST /api/charon/redrives/{vhost}/{id}/pause`.
pub(crate) async fn pause(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, id)): Path<(String, String)>,
) -> Result<Json<JsonValue>, ApiError> {
    let (vhost, _) = acting_on(&broker, &user, &vhost, &id)?;
    broker.redrives().pause(&vhost, &id).await.map(|v| Json(render(&v))).map_err(redrive_error)
}

/// `POST /api/charon/redrives/{vhost}/{id}/resume`.
pub(crate) async fn resume(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, id)): Path<(String, String)>,
) -> Result<Json<JsonValue>, ApiError> {
    let (vhost, _) = acting_on(&broker, &user, &vhost, &id)?;
    broker.redrives().resume(&vhost, &id).await.map(|v| Json(render(&v))).map_err(redrive_error)
}

/// `POST /api/charon/redrives/{vhost}/{id}/cancel`.
pub(crate) async fn cancel(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, id)): Path<(String, String)>,
) -> Result<Json<JsonValue>, ApiError> {
    let (vhost, _) = acting_on(&broker, &user, &vhost, &id)?;
    broker.redrives().cancel(&vhost, &id).await.map(|v| Json(render(&v))).map_err(redrive_error)
}

/// `DELETE /api/charon/redrives/{vhost}/{id}`: 204 for a finished job, 409 otherwise.
pub(crate) async fn delete(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let (vhost, _) = acting_on(&broker, &user, &vhost, &id)?;
    broker.redrives().delete(vhost.name(), &id).await.map_err(redrive_error)?;
    Ok(StatusCode::NO_CONTENT)
}
