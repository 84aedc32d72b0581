//! `/api/policies`, and what `/api/operator-policies` ([`crate::operator_policies`]) shares
//! with it: the JSON shape, the lists, and reading and validating a `PUT` body.
//!
//! As 4.0.5 (observed, both kinds): lists are sorted by priority (then vhost and name) and show
//! the vhosts the user may open (every vhost to an administrator); a `PUT` body's `pattern` and
//! `definition` are required, `priority` defaults to 0 and `apply-to` to `all`, and every
//! failing field is reported; a `definition` that is not an object or an `apply-to` that is
//! not a string crashes RabbitMQ's handler (500, no body), and Charon answers the same.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use charon_engine::{Broker, Policy, PolicyFields, PolicyKind, User, VHost};
use charon_model::{Table, Value};
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
    find_vhost(broker, name).ok_or_else(ApiError::not_found)
}

pub(crate) fn find_vhost(broker: &Broker, name: &str) -> Option<Arc<VHost>> {
    broker.vhosts().into_iter().find(|v| v.name() == name)
}

/// A policy of either kind as RabbitMQ renders it.
pub(crate) fn render(vhost: &str, policy: &Policy) -> JsonValue {
    json!({
        "vhost": vhost,
        "name": policy.name,
        "pattern": policy.pattern,
        "apply-to": policy.apply_to.as_str(),
        "definition": table_to_json(&policy.definition),
        "priority": policy.priority,
    })
}

fn of_kind(vhost: &VHost, kind: PolicyKind) -> Vec<Policy> {
    match kind {
        PolicyKind::User => vhost.policies(),
        PolicyKind::Operator => vhost.operator_policies(),
    }
}

/// RabbitMQ's order for policies (`reply_list(.., ["priority"], ..)`, ties in the order of the
/// rest of the object: vhost, then name).
const SORT: &[&str] = &["priority", "vhost", "name"];

/// `GET /api/{operator-}policies`: the policies of the vhosts the user may open
/// (`filter_vhost`: every vhost for an administrator; a monitor sees only its own).
pub(crate) fn list_all_of(
    broker: &Broker,
    user: &User,
    kind: PolicyKind,
    params: &Params,
) -> Result<JsonValue, ApiError> {
    let admin = user.tags().is_administrator();
    let all = broker
        .vhosts()
        .iter()
        .filter(|v| admin || broker.access().can_open(user, v.name()))
        .flat_map(|v| of_kind(v, kind).iter().map(|p| render(v.name(), p)).collect::<Vec<_>>())
        .collect();
    listing::respond(all, params, SORT)
}

/// `GET /api/{operator-}policies/{vhost}` (`is_authorized_vhost`; 404 for no such vhost).
pub(crate) fn list_vhost_of(
    broker: &Broker,
    user: &User,
    vhost: &str,
    kind: PolicyKind,
    params: &Params,
) -> Result<JsonValue, ApiError> {
    let vhost = vhost_of(broker, user, vhost, auth::vhost)?;
    listing::respond(of_kind(&vhost, kind).iter().map(|p| render(vhost.name(), p)).collect(), params, SORT)
}

/// A `PUT` body validated into a policy of `kind`; the failures as RabbitMQ words them, after
/// "Validation failed\n\n", one per line.
pub(crate) fn policy_from_body(kind: PolicyKind, name: &str, body: &[u8]) -> Result<Policy, ApiError> {
    let request = request::decode(body, &["pattern", "definition"])?;
    let field = |key: &str| request.get(key);
    let definition = match field("definition").map(from_json) {
        Some(Some(table @ Value::Table(_))) => table,
        Some(None) => {
            let reason = format!("definition nested deeper than {} levels", charon_model::MAX_DEPTH);
            return Err(invalid(kind, &reason));
        }
        // `maps:to_list/1` of something else: RabbitMQ's handler crashes.
        _ => return Err(ApiError::crash()),
    };
    let apply_to = match field("apply-to") {
        None => Value::long_str("all"),
        Some(JsonValue::String(text)) => Value::long_str(text),
        // `~ts` of a non-string in the error text: RabbitMQ's handler crashes.
        Some(_) => return Err(ApiError::crash()),
    };
    let fields = PolicyFields {
        pattern: field("pattern").and_then(from_json),
        definition: Some(definition),
        priority: Some(field("priority").and_then(from_json).unwrap_or(Value::I64(0))),
        apply_to: Some(apply_to),
        unrecognised: Table::new(),
    };
    Policy::from_fields(kind, name, fields).map_err(|reason| invalid(kind, &reason))
}

/// 400 `Validation failed`: HTML-escaped for a user policy, sent as it is for an operator
/// policy (`rabbit_mgmt_wm_operator_policy` does not escape, observed).
fn invalid(kind: PolicyKind, reason: &str) -> ApiError {
    let text = format!("Validation failed\n\n{reason}\n");
    match kind {
        PolicyKind::User => ApiError::bad_request(text),
        PolicyKind::Operator => ApiError::bad_request_verbatim(text),
    }
}

/// 201 when created, 204 when replaced.
pub(crate) async fn store(vhost: &VHost, policy: Policy) -> Result<StatusCode, ApiError> {
    let created = vhost.set_policy(policy).await.map_err(|e| match vhost.clustered() {
        true => ApiError::cluster(e),
        false => ApiError::internal(e.to_string()),
    })?;
    Ok(if created { StatusCode::CREATED } else { StatusCode::NO_CONTENT })
}

/// `GET /api/policies`
pub(crate) async fn list_all(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    list_all_of(&broker, &user, PolicyKind::User, &params).map(Json)
}

/// `GET /api/policies/{vhost}`
pub(crate) async fn list_vhost(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    list_vhost_of(&broker, &user, &vhost, PolicyKind::User, &params).map(Json)
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
/// when invalid (nothing changes), 404 `vhost_not_found`.
pub(crate) async fn put(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    auth::policies(&broker, &user, &vhost)?;
    let vhost = find_vhost(&broker, &vhost).ok_or_else(|| ApiError::not_found_named("not_found", "vhost_not_found"))?;
    store(&vhost, policy_from_body(PolicyKind::User, &name, &body)?).await
}

/// `DELETE /api/policies/{vhost}/{name}`: 204, or 404 when there is no such policy.
pub(crate) async fn delete(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let vhost = vhost_of(&broker, &user, &vhost, auth::policies)?;
    match vhost.delete_policy(&name).await {
        Ok(true) => Ok(StatusCode::NO_CONTENT),
        Ok(false) => Err(ApiError::not_found()),
        Err(e) => Err(ApiError::cluster(e)),
    }
}
