//! `/api/vhosts`: virtual hosts, created and deleted at runtime (administrators; any
//! management user lists the vhosts it may see).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use charon_engine::{Broker, Tags, User, VhostInfo};
use serde_json::{Value as JsonValue, json};

use crate::auth;
use crate::error::ApiError;
use crate::listing::{self, Params};
use crate::permissions::{access_error, list_where};

fn render(name: &str, info: &VhostInfo) -> JsonValue {
    json!({
        "name": name,
        "description": info.description,
        "tags": info.tags.as_slice(),
        // Queues declared without a type are classic: Charon has no per-vhost default.
        "default_queue_type": "classic",
        "metadata": {
            "description": info.description,
            "tags": info.tags.as_slice(),
            "default_queue_type": "classic",
        },
        "tracing": false,
    })
}

fn info_of(broker: &Broker, name: &str) -> Option<VhostInfo> {
    broker.access().vhosts().into_iter().find(|(n, _)| n == name).map(|(_, info)| info)
}

/// `GET /api/vhosts`: the vhosts the caller may see.
pub(crate) async fn list(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    let all = broker.access().vhosts();
    let shown = all.iter().filter(|(name, _)| auth::sees(&broker, &user, name));
    listing::respond(shown.map(|(name, info)| render(name, info)).collect(), &params, &[]).map(Json)
}

/// `GET /api/vhosts/{vhost}`
pub(crate) async fn get_one(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(name): Path<String>,
) -> Result<Json<JsonValue>, ApiError> {
    auth::admin(&user)?;
    info_of(&broker, &name).map(|info| Json(render(&name, &info))).ok_or_else(ApiError::not_found)
}

/// `PUT /api/vhosts/{vhost}` with optional `description` and `tags`: 201 created (and the
/// creating user granted full permissions there, as RabbitMQ's `put_vhost/6` does), 204
/// updated. A `default_queue_type` other than classic, and tracing, are refused: Charon does
/// neither.
pub(crate) async fn put(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    auth::admin(&user)?;
    let request: JsonValue = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(&body).map_err(|_| ApiError::bad_request("not_json"))?
    };
    let queue_type = request.get("default_queue_type").or_else(|| request.get("defaultqueuetype"));
    if let Some(kind) = queue_type.filter(|k| k.as_str() != Some("classic") && !k.is_null()) {
        return Err(ApiError::bad_request(format!("unsupported default_queue_type {kind}: Charon's is classic")));
    }
    if request.get("tracing").is_some_and(|t| t.as_bool() == Some(true) || t.as_str() == Some("true")) {
        return Err(ApiError::bad_request("tracing is not supported"));
    }
    let description = request.get("description").and_then(JsonValue::as_str).unwrap_or_default().to_owned();
    let tags = match request.get("tags") {
        None | Some(JsonValue::Null) => Tags::default(),
        Some(JsonValue::String(text)) => Tags::parse(text),
        Some(JsonValue::Array(items)) => Tags::new(items.iter().filter_map(|i| i.as_str().map(str::to_owned))),
        Some(_) => return Err(ApiError::bad_request("tags must be a string or a list")),
    };
    let info = VhostInfo { description, tags };
    let created =
        crate::changes::put_vhost(&broker, &name, info, Some(&user.name)).await.map_err(crate::changes::api_error)?;
    Ok(if created { StatusCode::CREATED } else { StatusCode::NO_CONTENT })
}

/// `DELETE /api/vhosts/{vhost}`: everything in it goes; 204, or 404.
pub(crate) async fn delete(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    auth::admin(&user)?;
    if info_of(&broker, &name).is_none() && !broker.vhosts().iter().any(|v| v.name() == name) {
        return Err(ApiError::not_found());
    }
    if let Some(cluster) = broker.cluster().filter(|c| c.has_vhost(&name)) {
        cluster.delete_vhost(&name).await.map_err(ApiError::cluster)?;
        return Ok(StatusCode::NO_CONTENT);
    }
    broker.delete_vhost(&name).await.map_err(access_error)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/vhosts/{vhost}/permissions`
pub(crate) async fn permissions(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(name): Path<String>,
) -> Result<Json<JsonValue>, ApiError> {
    auth::admin(&user)?;
    if info_of(&broker, &name).is_none() {
        return Err(ApiError::not_found());
    }
    Ok(list_where(&broker, |v, _| v == name))
}
