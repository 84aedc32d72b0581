//! `/api/permissions`: users' configure/write/read patterns per vhost (administrators only).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use charon_engine::{AccessError, Broker, Permission, User};
use serde_json::{Value as JsonValue, json};

use crate::auth;
use crate::error::ApiError;
use crate::request;

fn render(vhost: &str, user: &str, permission: &Permission) -> JsonValue {
    let (configure, write, read) = permission.patterns();
    json!({ "user": user, "vhost": vhost, "configure": configure, "write": write, "read": read })
}

/// The permission entries `keep(vhost, user)` selects, by vhost then user.
pub(crate) fn list_where(broker: &Broker, keep: impl Fn(&str, &str) -> bool) -> Json<JsonValue> {
    let all = broker.access().permissions();
    Json(JsonValue::Array(all.iter().filter(|(v, u, _)| keep(v, u)).map(|(v, u, p)| render(v, u, p)).collect()))
}

/// `GET /api/permissions`
pub(crate) async fn list(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
) -> Result<Json<JsonValue>, ApiError> {
    auth::admin(&user)?;
    Ok(list_where(&broker, |_, _| true))
}

/// `GET /api/permissions/{vhost}/{user}`
pub(crate) async fn get_one(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<JsonValue>, ApiError> {
    auth::admin(&user)?;
    let found = broker.access().permissions().into_iter().find(|(v, u, _)| *v == vhost && *u == name);
    found.map(|(v, u, p)| Json(render(&v, &u, &p))).ok_or_else(ApiError::not_found)
}

/// `PUT /api/permissions/{vhost}/{user}` with `configure`, `write` and `read`: 201 when
/// created, 204 when replaced; 400 `vhost_or_user_not_found`, or for a pattern that does not
/// compile.
pub(crate) async fn put(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    auth::admin(&user)?;
    require_user_and_vhost(&broker, &vhost, &name)?;
    let request = request::decode(&body, &["configure", "write", "read"])?;
    let pattern = |key: &str| request::text(&request, key);
    let permission = Permission::new(&pattern("configure"), &pattern("write"), &pattern("read"))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let created = !broker.access().permissions().iter().any(|(v, u, _)| *v == vhost && *u == name);
    crate::changes::set_permission(&broker, &vhost, &name, permission).await.map_err(crate::changes::api_error)?;
    Ok(if created { StatusCode::CREATED } else { StatusCode::NO_CONTENT })
}

/// `DELETE /api/permissions/{vhost}/{user}`: 204, or 404 when there were none.
pub(crate) async fn delete(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    auth::admin(&user)?;
    if let Some(cluster) = broker.cluster() {
        if !broker.access().permissions().iter().any(|(v, u, _)| *v == vhost && *u == name) {
            return Err(ApiError::not_found());
        }
        cluster.clear_permission(&vhost, &name).await.map_err(ApiError::cluster)?;
        return Ok(StatusCode::NO_CONTENT);
    }
    match broker.access().clear_permission(&vhost, &name).await {
        Ok(true) => Ok(StatusCode::NO_CONTENT),
        Ok(false) | Err(AccessError::NoSuchUser(_) | AccessError::NoSuchVhost(_)) => Err(ApiError::not_found()),
        Err(e) => Err(access_error(e)),
    }
}

/// Both ends of a permission must exist: 400 `vhost_or_user_not_found`, as RabbitMQ answers.
pub(crate) fn require_user_and_vhost(broker: &Broker, vhost: &str, user: &str) -> Result<(), ApiError> {
    if broker.access().account(user).is_some() && broker.access().has_vhost(vhost) {
        Ok(())
    } else {
        Err(ApiError::bad_request("vhost_or_user_not_found"))
    }
}

pub(crate) fn access_error(error: AccessError) -> ApiError {
    match error {
        AccessError::BadRequest(reason) => ApiError::bad_request(reason),
        AccessError::NoSuchUser(_) | AccessError::NoSuchVhost(_) => ApiError::bad_request("vhost_or_user_not_found"),
        AccessError::Store(reason) => ApiError::internal(reason),
    }
}
