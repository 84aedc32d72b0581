//! `/api/operator-policies`: RabbitMQ's operator policies (`rabbit_mgmt_wm_operator_policies`,
//! `rabbit_mgmt_wm_operator_policy`), the limits an operator imposes on queues whatever their
//! users' policies say. Same JSON as `/api/policies` ([`crate::policies`]); only the keys
//! 4.0.5 allows in an operator policy are accepted.
//!
//! As 4.0.5 (observed): the lists are for any management user (each vhost it may open; every
//! vhost for an administrator), one policy's `GET`, `PUT` and `DELETE` for administrators only
//! (401 `Not administrator user`, policymakers included); validation failures are not
//! HTML-escaped. On a vhost that does not exist, one policy's `GET`, `PUT` and `DELETE` crash
//! RabbitMQ's handler (500, no body), and Charon answers the same.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use charon_engine::{Broker, PolicyKind, User, VHost};
use serde_json::Value as JsonValue;

use crate::auth;
use crate::error::ApiError;
use crate::listing::Params;
use crate::policies::{self, find_vhost, list_all_of, list_vhost_of, policy_from_body};

/// `is_authorized_admin`, then the vhost (a missing one crashes `lookup_op`: 500).
fn vhost_for_admin(broker: &Broker, user: &User, name: &str) -> Result<Arc<VHost>, ApiError> {
    auth::admin(user)?;
    find_vhost(broker, name).ok_or_else(ApiError::crash)
}

/// `GET /api/operator-policies`
pub(crate) async fn list_all(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    list_all_of(&broker, &user, PolicyKind::Operator, &params).map(Json)
}

/// `GET /api/operator-policies/{vhost}`
pub(crate) async fn list_vhost(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    list_vhost_of(&broker, &user, &vhost, PolicyKind::Operator, &params).map(Json)
}

/// `GET /api/operator-policies/{vhost}/{name}`: 404 when there is no such policy.
pub(crate) async fn get_one(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<JsonValue>, ApiError> {
    let vhost = vhost_for_admin(&broker, &user, &vhost)?;
    let policy = vhost.operator_policy(&name).ok_or_else(ApiError::not_found)?;
    Ok(Json(policies::render(vhost.name(), &policy)))
}

/// `PUT /api/operator-policies/{vhost}/{name}` with `pattern`, `definition`, and optionally
/// `priority` (0) and `apply-to` (`all`): 201 when created, 204 when replaced, 400 with
/// RabbitMQ's reason when invalid (nothing changes). Applied at once to the queues it matches.
pub(crate) async fn put(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let vhost = vhost_for_admin(&broker, &user, &vhost)?;
    policies::store(&vhost, policy_from_body(PolicyKind::Operator, &name, &body)?).await
}

/// `DELETE /api/operator-policies/{vhost}/{name}`: 204, or 404 when there is no such policy;
/// the queues it governed return to their user policy's values.
pub(crate) async fn delete(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let vhost = vhost_for_admin(&broker, &user, &vhost)?;
    match vhost.delete_operator_policy(&name).await {
        Ok(true) => Ok(StatusCode::NO_CONTENT),
        Ok(false) => Err(ApiError::not_found()),
        Err(e) => Err(ApiError::cluster(e)),
    }
}
