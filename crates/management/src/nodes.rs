//! `GET /api/nodes[/{name}]` (monitors only, as in RabbitMQ): this node, with the memory and
//! disk measurements behind its alarms and its file descriptors, and in a cluster every other
//! member with whether it runs and, while it does, the same measurements from the report it
//! answered this node's last ping with. Erlang's own counters
//! (`proc_used`/`proc_total`, `run_queue`, `gc_*`, `io_*`, `mnesia_*`, `context_switches`) have
//! no honest equivalent in Charon and are left out, as are the churn counters it does not keep.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Extension, Path, State};
use charon_engine::cluster::NodeReport;
use charon_engine::{Broker, User};
use serde_json::{Value as JsonValue, json};

use crate::error::ApiError;

/// `is_authorized_monitor`.
fn monitor(user: &User) -> Result<(), ApiError> {
    if user.tags().is_monitor() { Ok(()) } else { Err(ApiError::not_authorised("Not monitor user")) }
}

/// A node as RabbitMQ lists it: by name and liveness, with its measurements when it reported
/// them (this node always; another while it runs).
fn render(name: &str, running: bool, report: Option<&NodeReport>) -> JsonValue {
    let mut node = json!({
        "name": name,
        "type": "disc",
        "running": running,
        "being_drained": false,
        "partitions": [],
    });
    let (Some(report), Some(fields)) = (report, node.as_object_mut()) else {
        return node;
    };
    let measured = json!({
        "os_pid": report.os_pid.to_string(),
        "processors": report.processors,
        "uptime": report.uptime,
        "mem_used": report.mem_used,
        "mem_limit": report.mem_limit,
        "mem_alarm": report.mem_alarm,
        "mem_calculation_strategy": "rss",
        "disk_free": report.disk_free,
        "disk_free_limit": report.disk_free_limit,
        "disk_free_alarm": report.disk_free_alarm,
        "fd_used": report.fd_used,
        "fd_total": report.fd_total,
        "rates_mode": "none",
        "enabled_plugins": [],
        "exchange_types": crate::overview::exchange_types(),
    });
    if let JsonValue::Object(measured) = measured {
        fields.extend(measured);
    }
    node
}

/// Every node: this one, and in a cluster every other member, with what it last reported.
fn nodes(broker: &Broker) -> Vec<JsonValue> {
    let me = charon_engine::broker::node_name();
    let here = render(&me, true, Some(&NodeReport::of(broker)));
    let Some(cluster) = broker.cluster() else {
        return vec![here];
    };
    cluster
        .members()
        .iter()
        .map(|member| {
            if member.name == me { here.clone() } else { render(&member.name, member.running, member.report.as_ref()) }
        })
        .collect()
}

/// `GET /api/nodes`
pub(crate) async fn list(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
) -> Result<Json<JsonValue>, ApiError> {
    monitor(&user)?;
    Ok(Json(JsonValue::Array(nodes(&broker))))
}

/// `GET /api/nodes/{name}`
pub(crate) async fn get_one(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(name): Path<String>,
) -> Result<Json<JsonValue>, ApiError> {
    monitor(&user)?;
    let found = nodes(&broker).into_iter().find(|node| node["name"] == name.as_str());
    found.map(Json).ok_or_else(ApiError::not_found)
}

/// `DELETE /api/charon/cluster/nodes/{name}` (administrators; a Charon addition behind
/// `charon ctl forget_cluster_node`, which rabbitmqctl runs over Erlang RPC): removes a member
/// that is down. 204; 400 with the reason when it is no member, runs, or is this node; 404 on
/// a single node.
pub(crate) async fn forget(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(name): Path<String>,
) -> Result<axum::http::StatusCode, ApiError> {
    crate::auth::admin(&user)?;
    let cluster = broker.cluster().ok_or_else(ApiError::not_found)?;
    cluster.forget(&name).await.map_err(|e| match e {
        charon_engine::EngineError::Precondition(reason) => ApiError::bad_request(reason),
        other => ApiError::internal(other.to_string()),
    })?;
    Ok(axum::http::StatusCode::NO_CONTENT)
}

/// `POST /api/charon/cluster/nodes` with `{"node": NAME, "address": "HOST:PORT"}` (address
/// optional for a configured peer; administrators; a Charon addition behind `charon ctl
/// join_cluster`): this node, alone in its own cluster, joins the one NAME is a member of. 204;
/// 400 with the reason when it is refused; 404 on a single node.
pub(crate) async fn join(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    body: axum::body::Bytes,
) -> Result<axum::http::StatusCode, ApiError> {
    crate::auth::admin(&user)?;
    let cluster = broker.cluster().ok_or_else(ApiError::not_found)?;
    let request: JsonValue = serde_json::from_slice(&body).map_err(|_| ApiError::bad_request("not_json"))?;
    let Some(node) = request.get("node").and_then(JsonValue::as_str) else {
        return Err(ApiError::bad_request("node is required"));
    };
    let address = request.get("address").and_then(JsonValue::as_str);
    cluster.join(node, address).await.map_err(|e| match e {
        charon_engine::EngineError::Precondition(reason) => ApiError::bad_request(reason),
        other => ApiError::internal(other.to_string()),
    })?;
    Ok(axum::http::StatusCode::NO_CONTENT)
}
