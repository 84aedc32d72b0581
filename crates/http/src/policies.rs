//! `/api/policies`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use charon_engine::{Broker, Policy, User, VHost};
use serde_json::{Value as JsonValue, json};

use crate::auth;
use crate::error::ApiError;
use crate::json::{from_json, table_to_json};
use crate::listing::{self, Params};
use crate::request;

/// The vhost named, after `check` authorised the user for it; 404 when it does not exist.
fn vhost_of(
    broker: &Broker,
    user: &User,
    name: &str,
    check: fn(&Broker, &User, &str) -> Result<(), ApiError>,
) -> Result<Arc<VHost>, ApiError> {
    check(broker, user, name)?;
    broker.vhosts().into_iter().find(|v| v.name() == name).ok_or_else(ApiError::not_found)
}

fn render(vhost: &str, policy: &Policy) -> JsonValue {
    json!({
        "vhost": vhost,
        "name": policy.name,
        "pattern": policy.pattern,
        "apply-to": policy.apply_to.as_str(),
        "definition": table_to_json(&policy.definition),
        "priority": policy.priority,
    })
}

/// `GET /api/policies`
pub(crate) async fn list_all(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    let all = broker
        .vhosts()
        .iter()
        .filter(|v| auth::sees(&broker, &user, v.name()))
        .flat_map(|v| v.policies().iter().map(|p| render(v.name(), p)).collect::<Vec<_>>())
        .collect();
    listing::respond(all, &params, &[]).map(Json)
}

/// `GET /api/policies/{vhost}`
pub(crate) async fn list_vhost(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    let vhost = vhost_of(&broker, &user, &vhost, auth::vhost)?;
    listing::respond(vhost.policies().iter().map(|p| render(vhost.name(), p)).collect(), &params, &[]).map(Json)
}

/// `GET /api/policies/{vhost}/{name}`
pub(crate) async fn get_one(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<JsonValue>, ApiError> {
    let vhost = vhost_of(&broker, &user, &vhost, auth::policies)?;
    let policy = vhost.policy(&name).ok_or_else(ApiError::not_found)?;
    Ok(Json(render(vhost.name(), &policy)))
}

/// `PUT /api/policies/{vhost}/{name}` with `pattern`, `definition`, and optionally `priority`
/// (0) and `apply-to` (`all`): 201 when created, 204 when replaced, 400 with RabbitMQ's reason
/// when invalid (nothing changes).
pub(crate) async fn put(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let vhost = vhost_of(&broker, &user, &vhost, auth::policies)?;
    let request = request::decode(&body, &["pattern", "definition"])?;
    let field = |key: &str| request.get(key);
    let invalid = |reason: String| ApiError::bad_request(format!("Validation failed\n\n{reason}\n"));
    let pattern = field("pattern").and_then(JsonValue::as_str).unwrap_or_default();
    let apply_to = field("apply-to").and_then(JsonValue::as_str).unwrap_or("all");
    let priority = match field("priority") {
        None => 0,
        Some(p) => p
            .as_i64()
            .or_else(|| p.as_f64().map(|f| f as i64))
            .ok_or_else(|| invalid(format!("{p} priority must be a number")))?,
    };
    let definition = match field("definition").map(from_json) {
        Some(Some(charon_model::Value::Table(table))) => table,
        Some(None) => {
            let reason = format!("definition nested deeper than {} levels", charon_model::MAX_DEPTH);
            return Err(invalid(reason));
        }
        other => {
            let shown = other.flatten().as_ref().map(charon_model::erlang::term).unwrap_or_default();
            return Err(invalid(format!("definition must be a dictionary: {shown}")));
        }
    };
    let policy = Policy::new(&name, pattern, apply_to, priority, definition).map_err(invalid)?;
    let created = vhost.set_policy(policy).await.map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(if created { StatusCode::CREATED } else { StatusCode::NO_CONTENT })
}

/// `DELETE /api/policies/{vhost}/{name}`: 204, or 404 when there is no such policy.
pub(crate) async fn delete(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let vhost = vhost_of(&broker, &user, &vhost, auth::policies)?;
    if vhost.delete_policy(&name).await { Ok(StatusCode::NO_CONTENT) } else { Err(ApiError::not_found()) }
}
