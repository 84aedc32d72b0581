//! `GET /api/nodes[/{name}]` (monitors only, as in RabbitMQ): this node, with the memory and
//! disk measurements behind its alarms and its file descriptors, and in a cluster every other
//! member with whether it runs (its own measurements are its own API's, for now). Erlang's own counters
//! (`proc_used`/`proc_total`, `run_queue`, `gc_*`, `io_*`, `mnesia_*`, `context_switches`) have
//! no honest equivalent in Charon and are left out, as are the churn counters it does not keep.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::{Extension, Path, State};
use charon_engine::{Broker, User};
use serde_json::{Value as JsonValue, json};

use crate::error::ApiError;

/// `is_authorized_monitor`.
fn monitor(user: &User) -> Result<(), ApiError> {
    if user.tags().is_monitor() { Ok(()) } else { Err(ApiError::not_authorised("Not monitor user")) }
}

/// Open file descriptors and the soft limit, read from `/proc` (off the runtime's workers);
/// `None` where the system does not say.
async fn file_descriptors() -> (Option<u64>, Option<u64>) {
    tokio::task::spawn_blocking(|| {
        let used = std::fs::read_dir("/proc/self/fd").ok().map(|dir| dir.count() as u64);
        let total = std::fs::read_to_string("/proc/self/limits").ok().and_then(|limits| {
            limits
                .lines()
                .find(|line| line.starts_with("Max open files"))
                .and_then(|line| line.split_whitespace().nth(3))
                .and_then(|soft| soft.parse().ok())
        });
        (used, total)
    })
    .await
    .unwrap_or((None, None))
}

async fn node(broker: &Broker) -> JsonValue {
    let resources = broker.resources();
    let alarms = resources.alarms();
    let (fd_used, fd_total) = file_descriptors().await;
    json!({
        "name": charon_engine::broker::node_name(),
        "type": "disc",
        "running": true,
        "being_drained": false,
        "partitions": [],
        "os_pid": std::process::id().to_string(),
        "processors": std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        "uptime": u64::try_from(broker.uptime().as_millis()).unwrap_or(u64::MAX),
        "mem_used": resources.resident_bytes.load(Ordering::Relaxed),
        "mem_limit": resources.memory_limit_bytes.load(Ordering::Relaxed),
        "mem_alarm": alarms.memory,
        "mem_calculation_strategy": "rss",
        "disk_free": resources.disk_free_bytes.load(Ordering::Relaxed),
        "disk_free_limit": resources.disk_free_limit_bytes.load(Ordering::Relaxed),
        "disk_free_alarm": alarms.disk,
        "fd_used": fd_used,
        "fd_total": fd_total,
        "rates_mode": "none",
        "enabled_plugins": [],
        "exchange_types": crate::overview::exchange_types(),
    })
}

/// Another member of the cluster, as this node sees it.
fn peer(member: &charon_engine::cluster::Member) -> JsonValue {
    json!({
        "name": member.name,
        "type": "disc",
        "running": member.running,
        "being_drained": false,
        "partitions": [],
    })
}

/// Every node: this one in full, the other members of its cluster by name and liveness.
async fn nodes(broker: &Broker) -> Vec<JsonValue> {
    let here = node(broker).await;
    let Some(cluster) = broker.cluster() else {
        return vec![here];
    };
    let me = charon_engine::broker::node_name();
    cluster.members().iter().map(|member| if member.name == me { here.clone() } else { peer(member) }).collect()
}

/// `GET /api/nodes`
pub(crate) async fn list(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
) -> Result<Json<JsonValue>, ApiError> {
    monitor(&user)?;
    Ok(Json(JsonValue::Array(nodes(&broker).await)))
}

/// `GET /api/nodes/{name}`
pub(crate) async fn get_one(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(name): Path<String>,
) -> Result<Json<JsonValue>, ApiError> {
    monitor(&user)?;
    let found = nodes(&broker).await.into_iter().find(|node| node["name"] == name.as_str());
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
