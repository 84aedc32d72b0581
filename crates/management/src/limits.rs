//! `/api/vhost-limits` and `/api/user-limits`: RabbitMQ's `set_vhost_limits` and
//! `set_user_limits` over HTTP, with 4.0.5's JSON and validation texts (observed).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use charon_engine::{Broker, LimitScope, User};
use serde_json::{Value as JsonValue, json};

use crate::auth;
use crate::error::ApiError;

fn render(scope: LimitScope, name: &str, limits: &BTreeMap<String, i64>) -> JsonValue {
    let key = if scope == LimitScope::Vhost { "vhost" } else { "user" };
    json!({ key: name, "value": limits })
}

/// The vhost or user named, which must exist.
fn check_target(broker: &Broker, scope: LimitScope, name: &str) -> Result<(), ApiError> {
    let found = match scope {
        LimitScope::Vhost => broker.vhosts().iter().any(|v| v.name() == name),
        LimitScope::User => broker.user(name).is_some(),
    };
    if found { Ok(()) } else { Err(ApiError::not_found()) }
}

fn list(broker: &Broker, scope: LimitScope, only: Option<&str>) -> Json<JsonValue> {
    let all = broker.limits().all(scope);
    let shown = all.iter().filter(|(name, _)| only.is_none_or(|o| o == name));
    Json(JsonValue::Array(shown.map(|(name, limits)| render(scope, name, limits)).collect()))
}

/// `GET /api/vhost-limits`
pub(crate) async fn vhost_all(State(broker): State<Arc<Broker>>) -> Json<JsonValue> {
    list(&broker, LimitScope::Vhost, None)
}

/// `GET /api/vhost-limits/{vhost}`
pub(crate) async fn vhost_one(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(vhost): Path<String>,
) -> Result<Json<JsonValue>, ApiError> {
    auth::vhost_visible(&broker, &user, &vhost)?;
    check_target(&broker, LimitScope::Vhost, &vhost)?;
    Ok(list(&broker, LimitScope::Vhost, Some(&vhost)))
}

/// `PUT /api/vhost-limits/{vhost}/{limit}` with `{"value": N}`.
pub(crate) async fn vhost_put(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, limit)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    put(&broker, &user, LimitScope::Vhost, &vhost, &limit, &body).await
}

/// `DELETE /api/vhost-limits/{vhost}/{limit}`
pub(crate) async fn vhost_delete(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, limit)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    delete(&broker, &user, LimitScope::Vhost, &vhost, &limit).await
}

/// `GET /api/user-limits`
pub(crate) async fn user_all(State(broker): State<Arc<Broker>>) -> Json<JsonValue> {
    list(&broker, LimitScope::User, None)
}

/// `GET /api/user-limits/{user}`
pub(crate) async fn user_one(
    State(broker): State<Arc<Broker>>,
    Path(name): Path<String>,
) -> Result<Json<JsonValue>, ApiError> {
    check_target(&broker, LimitScope::User, &name)?;
    Ok(list(&broker, LimitScope::User, Some(&name)))
}

/// `PUT /api/user-limits/{user}/{limit}` with `{"value": N}`.
pub(crate) async fn user_put(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((name, limit)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    put(&broker, &user, LimitScope::User, &name, &limit, &body).await
}

/// `DELETE /api/user-limits/{user}/{limit}`
pub(crate) async fn user_delete(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((name, limit)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    delete(&broker, &user, LimitScope::User, &name, &limit).await
}

async fn put(
    broker: &Broker,
    user: &User,
    scope: LimitScope,
    name: &str,
    limit: &str,
    body: &[u8],
) -> Result<StatusCode, ApiError> {
    auth::admin(user)?;
    check_target(broker, scope, name)?;
    let request: JsonValue = serde_json::from_slice(body).map_err(|_| ApiError::bad_request("not_json"))?;
    let invalid = |reason: String| ApiError::bad_request_verbatim(format!("Validation failed\n\n{reason}\n"));
    let value = match request.get("value") {
        None => return Err(ApiError::bad_request("[{key_missing,value}]")),
        Some(value) => value.as_i64().ok_or_else(|| {
            let shown = match value {
                JsonValue::String(s) => charon_model::erlang::text(s),
                other => other.to_string(),
            };
            invalid(format!("{limit} should be a number, actually was {shown}"))
        })?,
    };
    crate::changes::set_limit(broker, scope, name, limit, value).await.map_err(crate::changes::api_error)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn delete(
    broker: &Broker,
    user: &User,
    scope: LimitScope,
    name: &str,
    limit: &str,
) -> Result<StatusCode, ApiError> {
    auth::admin(user)?;
    check_target(broker, scope, name)?;
    crate::changes::clear_limit(broker, scope, name, limit).await.map_err(crate::changes::api_error)?;
    Ok(StatusCode::NO_CONTENT)
}
