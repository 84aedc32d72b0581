//! RabbitMQ's alarm health checks, which Kubernetes and Docker probes call:
//! `GET /api/health/checks/alarms` and `/api/health/checks/local-alarms` answer 200
//! `{"status":"ok"}`, or 503 with the alarms in effect (RabbitMQ 4.0.5's bodies, observed).
//! A single node's alarms are the cluster's, so both report the same alarms.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use charon_engine::Broker;
use serde_json::{Value as JsonValue, json};

/// `GET /api/health/checks/alarms`.
pub(crate) async fn alarms(State(broker): State<Arc<Broker>>) -> (StatusCode, Json<JsonValue>) {
    check(&broker, "There are alarms in effect in the cluster")
}

/// `GET /api/health/checks/local-alarms`.
pub(crate) async fn local_alarms(State(broker): State<Arc<Broker>>) -> (StatusCode, Json<JsonValue>) {
    check(&broker, "There are alarms in effect on the node")
}

fn check(broker: &Broker, reason: &str) -> (StatusCode, Json<JsonValue>) {
    let resources = broker.resources().alarms().resources();
    if resources.is_empty() {
        return (StatusCode::OK, Json(json!({"status": "ok"})));
    }
    let node = charon_engine::broker::node_name();
    let alarms: Vec<JsonValue> = resources.iter().map(|r| json!({"node": node, "resource": r})).collect();
    (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "failed", "reason": reason, "alarms": alarms})))
}
