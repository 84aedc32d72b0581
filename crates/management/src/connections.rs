//! `/api/connections`: the open connections, one connection, closing it
//! (`DELETE` → 320 CONNECTION_FORCED with the `X-Reason` header's text), a vhost's
//! connections and a connection's channels. Lists are `Vec<JsonValue>` so the shared paging
//! and sorting can be applied to them.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use charon_engine::{Broker, Connections, Listed, User};
use serde_json::Value as JsonValue;

use crate::auth;
use crate::error::ApiError;
use crate::listing::{self, Params};
use crate::runtime;

/// The close text when the request names none (RabbitMQ 4.0.5's, observed).
const DEFAULT_REASON: &str = "Closed via management plugin";

/// The connections `user` sees that `keep` selects, rendered, oldest first.
pub(crate) async fn rendered(broker: &Broker, user: &User, keep: impl Fn(&Listed) -> bool) -> Vec<JsonValue> {
    let listed = broker.connections().list().into_iter().filter(|l| runtime::sees(user, &l.info) && keep(l)).collect();
    Connections::reports(listed)
        .await
        .iter()
        .map(|(l, report)| runtime::connection(l, report.as_ref(), false))
        .collect()
}

/// `GET /api/connections`
pub(crate) async fn list_all(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    listing::respond(rendered(&broker, &user, |_| true).await, &params, &[]).map(Json)
}

/// `GET /api/vhosts/{vhost}/connections`
pub(crate) async fn list_vhost(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    auth::vhost_visible(&broker, &user, &vhost)?;
    if !broker.vhosts().iter().any(|v| v.name() == vhost) {
        return Err(ApiError::not_found());
    }
    listing::respond(rendered(&broker, &user, |l| l.info.vhost == vhost).await, &params, &[]).map(Json)
}

/// The connection `name`, if `user` may see it (`is_authorized_user`: a monitor, or its
/// own; `DELETE` needs an administrator, or its own).
fn authorised(broker: &Broker, user: &User, name: &str, deleting: bool) -> Result<Listed, ApiError> {
    // RabbitMQ 4.0.5 answers 500 to a non-monitor asking for a connection that does not exist
    // (its authorisation reads the missing connection's user); Charon answers 404.
    let listed = broker.connections().find(name).ok_or_else(ApiError::not_found)?;
    let tags = user.tags();
    let privileged = if deleting { tags.is_administrator() } else { tags.is_monitor() };
    if privileged || listed.info.user == user.name {
        Ok(listed)
    } else {
        Err(ApiError::not_authorised("User not authorised to access object"))
    }
}

/// `GET /api/connections/{name}`
pub(crate) async fn get_one(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(name): Path<String>,
) -> Result<Json<JsonValue>, ApiError> {
    let listed = authorised(&broker, &user, &name, false)?;
    let (listed, report) = Connections::reports(vec![listed]).await.pop().ok_or_else(ApiError::not_found)?;
    Ok(Json(runtime::connection(&listed, report.as_ref(), true)))
}

/// `DELETE /api/connections/{name}`: closes it with 320 CONNECTION_FORCED and the `X-Reason`
/// header's text.
pub(crate) async fn delete(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let listed = authorised(&broker, &user, &name, true)?;
    let reason = headers.get("x-reason").and_then(|v| v.to_str().ok()).unwrap_or(DEFAULT_REASON);
    if broker.connections().close(listed.id, reason) { Ok(StatusCode::NO_CONTENT) } else { Err(ApiError::not_found()) }
}

/// `GET /api/connections/{name}/channels`
pub(crate) async fn channels(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(name): Path<String>,
) -> Result<Json<JsonValue>, ApiError> {
    let listed = authorised(&broker, &user, &name, false)?;
    let (listed, report) = Connections::reports(vec![listed]).await.pop().ok_or_else(ApiError::not_found)?;
    let Some(report) = report.filter(|_| listed.info.protocol == runtime::AMQP_091) else {
        return Ok(Json(JsonValue::Array(Vec::new())));
    };
    let channels = report.channels.iter().map(|c| runtime::channel(&listed, &report, c)).collect();
    Ok(Json(JsonValue::Array(channels)))
}
