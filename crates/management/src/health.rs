//! RabbitMQ's alarm health checks, which Kubernetes and Docker probes call:
//! `GET /api/health/checks/alarms` and `/api/health/checks/local-alarms` answer 200
//! `{"status":"ok"}`, or 503 with the alarms in effect (RabbitMQ 4.0.5's bodies, observed).
//! A single node's alarms are the cluster's, so both report the same alarms.
//!
//! Also `virtual-hosts`, `node-is-quorum-critical`, `port-listener/{port}` and
//! `protocol-listener/{protocol}` (the listeners the gateway bound, from the broker's
//! [`charon_engine::Listeners`]). `certificate-expiration` is not served.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use charon_engine::Broker;
use serde_json::{Value as JsonValue, json};

use crate::error::ApiError;

/// `GET /api/health/checks/alarms`: every running node's alarms.
pub(crate) async fn alarms(State(broker): State<Arc<Broker>>) -> (StatusCode, Json<JsonValue>) {
    let node = charon_engine::broker::node_name();
    check(broker.resources().alarms_by_node(&node), "There are alarms in effect in the cluster")
}

/// `GET /api/health/checks/local-alarms`: this node's.
pub(crate) async fn local_alarms(State(broker): State<Arc<Broker>>) -> (StatusCode, Json<JsonValue>) {
    let node = charon_engine::broker::node_name();
    check(vec![(node, broker.resources().local_alarms())], "There are alarms in effect on the node")
}

fn check(nodes: Vec<(String, charon_engine::Alarms)>, reason: &str) -> (StatusCode, Json<JsonValue>) {
    let alarms: Vec<JsonValue> = nodes
        .iter()
        .flat_map(|(node, alarms)| alarms.resources().into_iter().map(move |r| json!({"node": node, "resource": r})))
        .collect();
    if alarms.is_empty() {
        return (StatusCode::OK, Json(json!({"status": "ok"})));
    }
    (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "failed", "reason": reason, "alarms": alarms})))
}

/// `GET /api/health/checks/virtual-hosts`: every vhost is running. A Charon vhost is live
/// from its creation until its deletion, so the check passes while the node answers.
pub(crate) async fn virtual_hosts() -> Json<JsonValue> {
    Json(json!({"status": "ok"}))
}

/// `GET /api/health/checks/node-is-quorum-critical`: a single node is never critical for a
/// quorum (4.0.5's answer on one node); in a cluster, 503 with the quorum queues (and the
/// metadata store, as RabbitMQ 4.3.6 lists `rabbitmq_metadata`) that would lose their majority
/// were this node to stop.
pub(crate) async fn node_is_quorum_critical(State(broker): State<Arc<Broker>>) -> (StatusCode, Json<JsonValue>) {
    let Some(cluster) = broker.cluster() else {
        return (StatusCode::OK, Json(json!({"status": "ok", "reason": "single node cluster"})));
    };
    let (queues, metadata) = cluster.quorum_critical();
    let mut listed: Vec<JsonValue> = queues.iter().map(|(vhost, name)| quorum_queue(vhost, name)).collect();
    if metadata {
        listed.push(json!({
            "name": "rabbitmq_metadata",
            "readable_name": "rabbitmq_metadata",
            "type": "process",
            "virtual_host": "(not applicable)",
        }));
    }
    failed_unless_empty(listed, "There are quorum queues that would lose their quorum if the target node is shut down")
}

/// `GET /api/health/checks/quorum-queues-without-elected-leaders/all-vhosts/` and
/// `.../vhost/{vhost}/`: 503 with the quorum queues that have no majority of their members
/// running.
pub(crate) async fn without_leaders_all(State(broker): State<Arc<Broker>>) -> (StatusCode, Json<JsonValue>) {
    without_leaders(&broker, None)
}

/// The same, for one vhost.
pub(crate) async fn without_leaders_in(
    State(broker): State<Arc<Broker>>,
    Path(vhost): Path<String>,
) -> (StatusCode, Json<JsonValue>) {
    without_leaders(&broker, Some(&vhost))
}

fn without_leaders(broker: &Broker, vhost: Option<&str>) -> (StatusCode, Json<JsonValue>) {
    let queues = broker.cluster().map(|c| c.queues_without_leaders(vhost)).unwrap_or_default();
    let listed = queues.iter().map(|(vhost, name)| quorum_queue(vhost, name)).collect();
    failed_unless_empty(listed, "Detected quorum queues without an elected leader")
}

/// A quorum queue as RabbitMQ 4.3.6's quorum health checks list it.
fn quorum_queue(vhost: &str, name: &str) -> JsonValue {
    json!({
        "name": name,
        "readable_name": format!("queue '{name}' in vhost '{vhost}'"),
        "type": "rabbit_quorum_queue",
        "virtual_host": vhost,
    })
}

fn failed_unless_empty(queues: Vec<JsonValue>, reason: &str) -> (StatusCode, Json<JsonValue>) {
    if queues.is_empty() {
        return (StatusCode::OK, Json(json!({"status": "ok"})));
    }
    (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "failed", "reason": reason, "queues": queues})))
}

/// `GET /api/health/checks/port-listener/{port}`.
pub(crate) async fn port_listener(
    State(broker): State<Arc<Broker>>,
    Path(port): Path<String>,
) -> Result<(StatusCode, Json<JsonValue>), ApiError> {
    let port: u16 = port.parse().map_err(|_| ApiError::bad_request("Invalid port"))?;
    let mut ports: Vec<u16> = broker.listeners().list().iter().map(|l| l.address.port()).collect();
    if ports.contains(&port) {
        return Ok((StatusCode::OK, Json(json!({"status": "ok", "port": port}))));
    }
    ports.sort_unstable();
    ports.dedup();
    let body = json!({"status": "failed", "reason": "No active listener", "missing": port, "ports": ports});
    Ok((StatusCode::SERVICE_UNAVAILABLE, Json(body)))
}

/// `GET /api/health/checks/protocol-listener/{protocol}`; the name is normalised as RabbitMQ
/// does (`amqp091`, `amqp0-9-1`, `amqp1.0`, ... are `amqp`; `prometheus` is `http/prometheus`).
pub(crate) async fn protocol_listener(
    State(broker): State<Arc<Broker>>,
    Path(protocol): Path<String>,
) -> (StatusCode, Json<JsonValue>) {
    let wanted = normalise_protocol(&protocol);
    let mut protocols: Vec<String> = Vec::new();
    for listener in broker.listeners().list() {
        if !protocols.contains(&listener.protocol) {
            protocols.push(listener.protocol);
        }
    }
    if protocols.contains(&wanted) {
        return (StatusCode::OK, Json(json!({"status": "ok", "protocol": wanted})));
    }
    let body = json!({"status": "failed", "reason": "No active listener", "missing": protocol, "protocols": protocols});
    (StatusCode::SERVICE_UNAVAILABLE, Json(body))
}

fn normalise_protocol(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    match lower.as_str() {
        "amqp091" | "amqp0.9.1" | "amqp0-9-1" | "amqp10" | "amqp1.0" | "amqp1-0" => "amqp".to_owned(),
        "amqps" => "amqp/ssl".to_owned(),
        "prometheus" => "http/prometheus".to_owned(),
        _ => lower,
    }
}
