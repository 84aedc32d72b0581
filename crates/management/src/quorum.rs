//! RabbitMQ's quorum-queue endpoints for a cluster's replicated quorum queues
//! (docs/clustering.md): each member's Raft state, and the membership changes
//! `rabbitmq-queues` makes (`add_member`, `delete_member`, `grow`, `shrink`), which `charon
//! ctl` calls. The changes are an administrator's, as RabbitMQ's are; a failed one is 503
//! with its reason, as RabbitMQ answers.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use charon_engine::{Broker, EngineError, User};
use serde_json::{Value as JsonValue, json};

use crate::auth;
use crate::error::ApiError;
use crate::request;

/// `GET /api/queues/quorum/{vhost}/{name}/status`: each member of a replicated quorum queue's
/// group with its Raft state, in RabbitMQ 4.3.6's keys (a member that is down shows
/// `noconnection` and empty values, as there). `Machine Version` is the version of Charon's
/// replicated journal (rabbit_fifo's is 8 in 4.3.6: a different machine). 404 for a queue
/// that is not replicated (on a single node, a quorum queue has no group).
pub(crate) async fn status(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<JsonValue>, ApiError> {
    auth::vhost(&broker, &user, &vhost)?;
    let cluster = broker.cluster().ok_or_else(ApiError::not_found)?;
    let statuses = cluster.replica_statuses(&vhost, &name).await.ok_or_else(ApiError::not_found)?;
    let members = statuses
        .into_iter()
        .map(|(node, status)| match status {
            Some(s) => json!({
                "Node Name": node,
                "Raft State": s.state,
                "Membership": if s.voter { "voter" } else { "promotable" },
                "Last Log Index": s.last_log,
                "Last Written": s.last_written,
                "Last Applied": s.applied,
                "Commit Index": s.committed,
                "Snapshot Index": s.snapshot.map_or(-1, |i| i64::try_from(i).unwrap_or(i64::MAX)),
                "Term": s.term,
                "Machine Version": charon_engine::cluster::replicas::MACHINE_VERSION,
            }),
            None => json!({
                "Node Name": node,
                "Raft State": "noconnection",
                "Membership": "",
                "Last Log Index": "",
                "Last Written": "",
                "Last Applied": "",
                "Commit Index": "",
                "Snapshot Index": "",
                "Term": "",
                "Machine Version": "",
            }),
        })
        .collect();
    Ok(Json(JsonValue::Array(members)))
}

/// A membership change's failure, as RabbitMQ answers it: 404 for a missing queue, 503 with the
/// reason for anything else.
fn refused(error: &EngineError) -> ApiError {
    match error {
        EngineError::NotFound(_) => ApiError::not_found(),
        other => ApiError::unavailable(other.to_string()),
    }
}

/// The `node` of a membership change's body.
fn node_of(body: &Bytes) -> Result<String, ApiError> {
    let request = request::decode(body, &[])?;
    let node = request.get("node").and_then(JsonValue::as_str);
    node.map(str::to_owned).ok_or_else(|| ApiError::bad_request("node is missing"))
}

/// `POST /api/queues/quorum/{vhost}/{name}/replicas/add` with `{"node": ...}`: 204 once the
/// node votes in the queue's group.
pub(crate) async fn add_member(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(queue): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    change_member(&broker, &user, &queue, &body, true).await
}

/// `DELETE /api/queues/quorum/{vhost}/{name}/replicas/delete` with `{"node": ...}`: 204.
pub(crate) async fn delete_member(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(queue): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    change_member(&broker, &user, &queue, &body, false).await
}

/// Adds (`add`) or removes the body's node as a member of queue `(vhost, name)`.
async fn change_member(
    broker: &Broker,
    user: &User,
    (vhost, name): &(String, String),
    body: &Bytes,
    add: bool,
) -> Result<StatusCode, ApiError> {
    auth::admin(user)?;
    let node = node_of(body)?;
    let cluster = broker.cluster().ok_or_else(ApiError::not_found)?;
    let changed = match add {
        true => cluster.add_replica(vhost, name, &node).await,
        false => cluster.delete_replica(vhost, name, &node).await,
    };
    changed.map_err(|e| refused(&e))?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/queues/quorum/replicas/on/{node}/grow` with `strategy` (`all`, or `even`: only
/// the queues with an even number of members), `vhost_pattern` and `queue_pattern` (regular
/// expressions, `.*` when absent): `node` joins every such queue it is not a member of. 204.
pub(crate) async fn grow(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(node): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    auth::admin(&user)?;
    let request = if body.is_empty() { json!({}) } else { request::decode(&body, &[])? };
    let text =
        |key: &str, default: &'static str| request.get(key).and_then(JsonValue::as_str).unwrap_or(default).to_owned();
    let even = match text("strategy", "all").as_str() {
        "all" => false,
        "even" => true,
        other => return Err(ApiError::bad_request(format!("strategy must be all or even, not {other}"))),
    };
    let cluster = broker.cluster().ok_or_else(ApiError::not_found)?;
    let queues = cluster.replicated_matching(&text("vhost_pattern", ".*"), &text("queue_pattern", ".*"));
    for (vhost, name, members) in queues.map_err(|e| ApiError::bad_request(e.to_string()))? {
        if members.contains(&node) || (even && members.len() % 2 == 1) {
            continue;
        }
        cluster.add_replica(&vhost, &name, &node).await.map_err(|e| refused(&e))?;
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /api/queues/quorum/replicas/on/{node}/shrink`: `node` leaves every replicated queue
/// it is a member of but not the home of; 200 with each queue's outcome (`vhost`, `name`,
/// `size` after, `result` `ok` or the reason).
pub(crate) async fn shrink(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(node): Path<String>,
) -> Result<Json<JsonValue>, ApiError> {
    auth::admin(&user)?;
    let cluster = broker.cluster().ok_or_else(ApiError::not_found)?;
    let queues = cluster.replicated_matching(".*", ".*").map_err(|e| ApiError::bad_request(e.to_string()))?;
    let mut outcomes = Vec::new();
    for (vhost, name, members) in queues.into_iter().filter(|(_, _, members)| members.contains(&node)) {
        let (size, result) = match cluster.delete_replica(&vhost, &name, &node).await {
            Ok(()) => (members.len() - 1, "ok".to_owned()),
            Err(e) => (members.len(), e.to_string()),
        };
        outcomes.push(json!({ "vhost": vhost, "name": name, "size": size, "result": result }));
    }
    Ok(Json(JsonValue::Array(outcomes)))
}
