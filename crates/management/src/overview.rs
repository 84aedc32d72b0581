//! `GET /api/overview`, `/api/cluster-name` and `/api/extensions`: what the node is, with the
//! totals of what the user may see (RabbitMQ 4.0.5: monitors get the node's listeners and
//! contexts and the consumer count; other management users the totals of their own vhosts and
//! connections).
//!
//! Left out: what only an Erlang node has (`erlang_version`, `erlang_full_version`,
//! `statistics_db_event_queue`), the sampled rates Charon does not keep
//! (`sample_retention_policies`, `churn_rates`, the `*_details` rates); see [`message_stats`]
//! for how its counts differ.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Extension, State};
use charon_engine::cluster::NodeReport;
use charon_engine::metrics;
use charon_engine::{Broker, Listener, User, VHost};
use charon_model::identity;
use serde_json::{Value as JsonValue, json};

use crate::auth;

/// The exchange types Charon implements, with RabbitMQ's descriptions.
pub(crate) fn exchange_types() -> JsonValue {
    let types: Vec<JsonValue> = [
        ("direct", "AMQP direct exchange, as per the AMQP specification"),
        ("fanout", "AMQP fanout exchange, as per the AMQP specification"),
        ("headers", "AMQP headers exchange, as per the AMQP specification"),
        ("topic", "AMQP topic exchange, as per the AMQP specification"),
        ("x-local-random", "Picks one random local binding (queue) to route via (to)."),
    ]
    .into_iter()
    .map(|(name, description)| json!({"name": name, "description": description, "enabled": true}))
    .collect();
    JsonValue::Array(types)
}

/// The overview's `message_stats`: the message counters (the ones the Prometheus
/// `rabbitmq_global_*` families show, both protocols summed) under RabbitMQ's names, of this
/// node and of the running members whose reports are `others`.
///
/// Differences from 4.0.5, deliberate: the counts are the nodes', so only monitors (and
/// administrators) see them — a management user gets `{}` where RabbitMQ sums the user's own
/// vhosts; the `*_details` rates and `disk_reads`/`disk_writes` are left out (Charon does not
/// sample them); and the counts start at zero when the broker starts, as RabbitMQ's do.
pub(crate) fn message_stats(monitor: bool, others: &[NodeReport]) -> JsonValue {
    if !monitor {
        return json!({});
    }
    let mut stats = metrics::message_stats();
    for report in others {
        for (name, value) in &report.message_stats {
            if let Some(sum) = stats.get_mut(name) {
                *sum += value;
            }
        }
    }
    json!(stats)
}

/// The node's listeners as the overview lists them.
fn listeners(list: &[Listener], node: &str) -> JsonValue {
    list.iter()
        .map(|l| {
            json!({
                "node": node,
                "protocol": l.protocol,
                "ip_address": charon_engine::connection_info::host(l.address.ip()),
                "port": l.address.port(),
                "socket_opts": [],
            })
        })
        .collect()
}

/// The HTTP listeners as the overview's `contexts` (RabbitMQ's web dispatch contexts).
fn contexts(list: &[Listener], node: &str) -> JsonValue {
    list.iter()
        .filter_map(|l| {
            let description = match l.protocol.as_str() {
                "http" | "https" => "RabbitMQ Management",
                "http/prometheus" => "RabbitMQ Prometheus",
                _ => return None,
            };
            Some(json!({
                "ssl_opts": [],
                "node": node,
                "description": description,
                "path": "/",
                "ip": charon_engine::connection_info::host(l.address.ip()),
                "port": l.address.port().to_string(),
            }))
        })
        .collect()
}

/// Queue, message and consumer totals over `vhosts`.
async fn totals(vhosts: &[Arc<VHost>]) -> (usize, usize, u64, u64, u64, u64) {
    let (mut queues, mut exchanges, mut ready, mut unacked, mut other, mut consumers) = (0, 0, 0, 0, 0, 0);
    for vhost in vhosts {
        exchanges += vhost.exchanges().len();
        // Every node reports its own: the other nodes' are added from their reports.
        for queue in vhost.local_queues() {
            queues += 1;
            if let Ok(stats) = queue.stats().await {
                ready += u64::from(stats.ready);
                unacked += u64::from(stats.unacked);
                other += u64::from(stats.dead_letters_pending) + u64::from(stats.delayed);
                consumers += u64::from(stats.consumers);
            }
        }
    }
    (queues, exchanges, ready, unacked, other, consumers)
}

/// `GET /api/overview`
pub(crate) async fn overview(State(broker): State<Arc<Broker>>, Extension(user): Extension<User>) -> Json<JsonValue> {
    let monitor = user.tags().is_monitor();
    let node = charon_engine::broker::node_name();
    let vhosts: Vec<Arc<VHost>> =
        broker.vhosts().into_iter().filter(|v| auth::sees(&broker, &user, v.name())).collect();
    let (mut queues, exchanges, mut ready, mut unacked, mut dead_letters, mut consumers) = totals(&vhosts).await;
    let connections =
        broker.connections().list().into_iter().filter(|l| crate::runtime::sees(&user, &l.info)).collect();
    let reports = charon_engine::Connections::reports(connections).await;
    let mut channels = reports.iter().filter_map(|(_, r)| r.as_ref()).map(|r| r.channels.len() as u64).sum::<u64>();
    let mut connections = reports.len() as u64;
    // The other running members' queues, connections, channels and counters, from their
    // latest reports (exchanges are the cluster's, the same on every node).
    let others: Vec<NodeReport> =
        broker.cluster().into_iter().flat_map(|c| c.members()).filter_map(|m| m.report).collect();
    for report in &others {
        for (_, totals) in report.vhosts.iter().filter(|(vhost, _)| auth::sees(&broker, &user, vhost)) {
            queues += totals.queues as usize;
            (ready, unacked) = (ready + totals.ready, unacked + totals.unacked);
            (dead_letters, consumers) = (dead_letters + totals.other, consumers + totals.consumers);
        }
        let mine = |owner: &String| monitor || *owner == user.name;
        connections += report.connections.iter().filter(|(u, _)| mine(u)).map(|(_, n)| n).sum::<u64>();
        channels += report.channels.iter().filter(|(u, _)| mine(u)).map(|(_, n)| n).sum::<u64>();
    }
    let mut object_totals = json!({
        "channels": channels,
        "exchanges": exchanges,
        "queues": queues,
        "connections": connections,
    });
    let mut body = json!({
        "management_version": identity::VERSION,
        "exchange_types": exchange_types(),
        "product_version": identity::VERSION,
        "product_name": identity::PRODUCT,
        "rabbitmq_version": identity::VERSION,
        "cluster_name": broker.cluster().map_or_else(|| node.clone(), charon_engine::cluster::Cluster::name),
        "cluster_tags": {},
        "node_tags": {},
        "disable_stats": false,
        "default_queue_type": "classic",
        "message_stats": message_stats(monitor, &others),
        "queue_totals": {
            "messages": ready + unacked + dead_letters,
            "messages_ready": ready,
            "messages_unacknowledged": unacked,
        },
    });
    if monitor && let Some(totals) = object_totals.as_object_mut() {
        totals.insert("consumers".into(), consumers.into());
    }
    if let Some(fields) = body.as_object_mut() {
        if monitor {
            let listed = broker.listeners().list();
            fields.insert("node".into(), node.clone().into());
            fields.insert("listeners".into(), listeners(&listed, &node));
            fields.insert("contexts".into(), contexts(&listed, &node));
        }
        fields.insert("object_totals".into(), object_totals);
    }
    Json(body)
}

/// `GET /api/cluster-name`: as a cluster set it, or after this node, as RabbitMQ names a
/// cluster by default (a single node always).
pub(crate) async fn cluster_name(State(broker): State<Arc<Broker>>) -> Json<JsonValue> {
    let name = broker.cluster().map_or_else(charon_engine::broker::node_name, charon_engine::cluster::Cluster::name);
    Json(json!({"name": name}))
}

/// `PUT /api/cluster-name` (administrators, as in RabbitMQ): names the cluster through its
/// metadata group; answered once this node applied it, so a `GET` on this node that follows
/// sees it. A single node refuses it (a deliberate difference: RabbitMQ keeps the name as a
/// runtime parameter, which a single Charon node does not store).
pub(crate) async fn set_cluster_name(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    body: axum::body::Bytes,
) -> Result<axum::http::StatusCode, crate::error::ApiError> {
    crate::auth::admin(&user)?;
    let body: JsonValue =
        serde_json::from_slice(&body).map_err(|e| crate::error::ApiError::bad_request(e.to_string()))?;
    let Some(name) = body.get("name").and_then(JsonValue::as_str) else {
        return Err(crate::error::ApiError::bad_request("name is required"));
    };
    let Some(cluster) = broker.cluster() else {
        return Err(crate::error::ApiError::bad_request("a single node's cluster is named after it"));
    };
    // RabbitMQ 4.3.6 on the minority side of a partition answers 500 with an empty body once
    // its metadata store gives up (after 30 s; Charon's write gives up after 5 s), observed
    // with rmq-cluster.sh (docs/clustering.md).
    cluster.set_name(name.to_owned()).await.map_err(crate::error::ApiError::cluster)?;
    Ok(axum::http::StatusCode::NO_CONTENT)
}

/// `GET /api/extensions`: the management UI's plugin extensions. Charon serves no UI, so
/// none (4.0.5 lists its UI's `dispatcher.js`).
pub(crate) async fn extensions() -> Json<JsonValue> {
    Json(json!([]))
}
