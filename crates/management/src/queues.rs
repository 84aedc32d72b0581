//! `/api/queues`: a queue's properties and message counters.
//!
//! Rendered as 4.0.5 does: properties, counts, byte counts, `node`, the exclusive consumer's
//! tag, and `message_stats` (`publish`, `deliver_get`, `redeliver`, `ack`, each with
//! `_details.rate` from [`rates`](crate::rates)) once the queue has counted anything;
//! `consumer_utilisation` (and `consumer_capacity`, the same figure in 4.0.5) as RabbitMQ
//! averages it, and `memory` as an estimate of what the queue holds in RAM (Charon's queue is
//! no Erlang process; see the engine's `QueueStats::memory`). Not rendered, because Charon does
//! not measure them: `idle_since`, the Erlang process fields (`reductions`,
//! `garbage_collection`), the `*_ram`/`*_paged_out`/`*_persistent` splits, the split of
//! `deliver_get` into `deliver`/`get`/`*_no_ack`, and the rates of the message counts
//! (`messages_details`).

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::extract::{Extension, Path, Query, State};
use charon_engine::{Broker, MessageCounters, QueueRef, QueueType, User, VHost};
use serde_json::{Value as JsonValue, json};

use crate::auth;
use crate::error::ApiError;
use crate::json::table_to_json;
use crate::listing::{self, Params};
use crate::rates::Sampler;

async fn render(vhost: &VHost, queue: &QueueRef, sampler: &Sampler) -> Option<JsonValue> {
    // A queue of another node that does not answer is listed as RabbitMQ lists a queue whose
    // node is down: `state` "down", no counters.
    let (stats, state) = match queue.stats().await {
        Ok(stats) => (stats, "running"),
        Err(_) if queue.home.is_some() => (charon_engine::QueueStats::default(), "down"),
        Err(_) => return None,
    };
    let config = &queue.config;
    let applied = vhost.queue_policies(queue);
    let mut rendered = json!({
        "name": config.name,
        "vhost": config.vhost,
        "durable": config.durable,
        "auto_delete": config.auto_delete,
        "exclusive": config.exclusive_owner.is_some(),
        "arguments": table_to_json(&config.arguments),
        "type": config.queue_type.as_str(),
        "state": state,
        "consumers": stats.consumers,
        // Delayed messages (Zaqar's `delay`) are in `messages`, never in `messages_ready`.
        "messages": u64::from(stats.ready)
            + u64::from(stats.unacked)
            + u64::from(stats.dead_letters_pending)
            + u64::from(stats.delayed),
        "messages_ready": stats.ready,
        "messages_unacknowledged": stats.unacked,
        "message_bytes": stats.message_bytes_ready + stats.message_bytes_unacknowledged + stats.message_bytes_delayed,
        "message_bytes_ready": stats.message_bytes_ready,
        "message_bytes_unacknowledged": stats.message_bytes_unacknowledged,
        "node": queue.home.clone().unwrap_or_else(charon_engine::broker::node_name),
        "exclusive_consumer_tag": stats.exclusive_consumer_tag,
        // 4.0.5 reports the same figure under both names.
        "consumer_utilisation": stats.consumer_utilisation,
        "consumer_capacity": stats.consumer_utilisation,
        "memory": stats.memory,
        "policy": applied.policy.as_ref().map(|p| p.name.clone()),
        "operator_policy": applied.operator_policy.as_ref().map(|p| p.name.clone()),
        // Both policies' definitions merged, the stricter value winning, as 4.0.5 shows it.
        "effective_policy_definition": applied.effective_definition().map_or_else(|| json!({}), |d| table_to_json(&d)),
    });
    let counters = stats.counters;
    let key = (config.vhost.clone(), config.name.clone(), queue.id);
    let rates = sampler.sample(key, Instant::now(), counters);
    if counters != MessageCounters::default()
        && let Some(fields) = rendered.as_object_mut()
    {
        let stat = |count: u64, rate: f64| (json!(count), json!({ "rate": rate }));
        let mut stats = serde_json::Map::new();
        for (name, (count, details)) in [
            ("ack", stat(counters.acked, rates.acked)),
            ("deliver_get", stat(counters.delivered, rates.delivered)),
            ("publish", stat(counters.published, rates.published)),
            ("redeliver", stat(counters.redelivered, rates.redelivered)),
        ] {
            stats.insert(name.to_owned(), count);
            stats.insert(format!("{name}_details"), details);
        }
        fields.insert("message_stats".into(), JsonValue::Object(stats));
    }
    // A single-active-consumer queue names its active consumer, as 4.0.5 does (`null` while
    // nobody consumes).
    if stats.single_active_consumer
        && let Some(fields) = rendered.as_object_mut()
    {
        fields.insert("single_active_consumer_tag".into(), stats.single_active_consumer_tag.into());
    }
    // A quorum queue's members, as RabbitMQ 4.3.6 lists them; with fewer than a majority of
    // them running its state is `minority` (docs/clustering.md, "Observed ... for issue 42").
    if let (Some(members), Some(fields)) = (vhost.quorum_members(queue), rendered.as_object_mut()) {
        if members.online.len() <= members.members.len() / 2 {
            fields.insert("state".into(), "minority".into());
        }
        fields.insert("leader".into(), members.leader.into());
        fields.insert("members".into(), members.members.into());
        fields.insert("online".into(), members.online.into());
    }
    // Quorum queues report their at-least-once dead letters waiting for their targets, as
    // RabbitMQ 4.0.5 does (`messages_dlx`); they are in `messages`, not in `messages_ready`.
    if config.queue_type == QueueType::Quorum
        && let Some(fields) = rendered.as_object_mut()
    {
        fields.insert("messages_dlx".into(), stats.dead_letters_pending.into());
        fields.insert("message_bytes_dlx".into(), stats.dead_letters_pending_bytes.into());
    }
    Some(rendered)
}

async fn render_all(vhost: &VHost, sampler: &Sampler) -> Vec<JsonValue> {
    let mut queues = vhost.queues();
    queues.sort_by(|a, b| a.name().cmp(b.name()));
    let mut out = Vec::with_capacity(queues.len());
    for queue in &queues {
        out.extend(render(vhost, queue, sampler).await);
    }
    out
}

/// `GET /api/queues`
pub(crate) async fn list_all(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Extension(sampler): Extension<Arc<Sampler>>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    let mut all = Vec::new();
    for vhost in broker.vhosts().iter().filter(|v| auth::sees(&broker, &user, v.name())) {
        all.extend(render_all(vhost, &sampler).await);
    }
    listing::respond(all, &params, SORT).map(Json)
}

/// RabbitMQ's default order for queues.
const SORT: &[&str] = &["vhost", "name"];

/// `GET /api/queues/{vhost}`
pub(crate) async fn list_vhost(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Extension(sampler): Extension<Arc<Sampler>>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    auth::vhost(&broker, &user, &vhost)?;
    let vhost = broker.vhosts().into_iter().find(|v| v.name() == vhost).ok_or_else(ApiError::not_found)?;
    listing::respond(render_all(&vhost, &sampler).await, &params, SORT).map(Json)
}

/// `GET /api/queues/{vhost}/{name}`
pub(crate) async fn get_one(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Extension(sampler): Extension<Arc<Sampler>>,
    Path((vhost, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    auth::vhost(&broker, &user, &vhost)?;
    let vhost = broker.vhosts().into_iter().find(|v| v.name() == vhost).ok_or_else(ApiError::not_found)?;
    let queue = vhost.queues().into_iter().find(|q| q.name() == name).ok_or_else(ApiError::not_found)?;
    let rendered = render(&vhost, &queue, &sampler).await.ok_or_else(ApiError::not_found)?;
    Ok(Json(listing::one(rendered, &params)))
}
