//! `GET /api/charon/dead-letters/{vhost}`: per queue that dead-lettered messages or receives
//! them, what died there by reason, at what rate, and what it holds — from the counters and
//! gauges the queues keep anyway ([`charon_engine::QueueHandle::dead_lettered`],
//! `oldest_ready_at`, the gauges of its last pass), so the overview costs no queue a message.
//!
//! A queue "receives dead letters" when a queue's dead-letter exchange (argument or policy)
//! routes its dead-letter routing key (or, without one, that queue's name) to it, and the
//! vhost's fallback queue always does.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::extract::{Extension, Path, State};
use charon_engine::dead_letter::FALLBACK_QUEUE;
use charon_engine::metrics::DeadLetterStrategy;
use charon_engine::{Broker, QueueRef, User, VHost};
use charon_model::{DeathReason, Routing, Table};
use serde_json::{Map, Value as JsonValue, json};

use crate::auth;
use crate::dead_letter_rates::{Counts, DeadLetterRates, REASONS};
use crate::error::ApiError;
use crate::objects;

const STRATEGIES: [DeadLetterStrategy; 3] =
    [DeadLetterStrategy::Disabled, DeadLetterStrategy::AtMostOnce, DeadLetterStrategy::AtLeastOnce];
const BY_REASON: [DeathReason; 4] =
    [DeathReason::Rejected, DeathReason::Expired, DeathReason::Maxlen, DeathReason::DeliveryLimit];

/// What `queue` dead-lettered (or dropped), by reason in [`REASONS`] order.
fn counts(queue: &QueueRef) -> Counts {
    BY_REASON.map(|reason| STRATEGIES.iter().map(|s| queue.dead_lettered.get(*s, reason)).sum())
}

/// The names of the queues the vhost's dead-letter exchanges lead to.
fn targets(vhost: &VHost, queues: &[QueueRef]) -> BTreeSet<String> {
    let mut out = BTreeSet::from([FALLBACK_QUEUE.to_owned()]);
    for queue in queues {
        let policy = vhost.queue_policy(queue);
        let setting = |argument: &str, key: &str| {
            queue
                .config
                .arguments
                .get(argument)
                .or_else(|| policy.as_ref()?.definition.get(key))
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        };
        let Some(exchange) = setting("x-dead-letter-exchange", "dead-letter-exchange") else { continue };
        let key =
            setting("x-dead-letter-routing-key", "dead-letter-routing-key").unwrap_or_else(|| queue.name().to_owned());
        let routing = Routing { exchange: exchange.clone(), routing_key: key, ..Routing::default() };
        for target in vhost.route_dead_letter(&exchange, &routing, &Table::new()).unwrap_or_default() {
            out.insert(target.name().to_owned());
        }
    }
    out
}

/// `GET /api/charon/dead-letters/{vhost}`.
pub(crate) async fn overview(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Extension(rates): Extension<Arc<DeadLetterRates>>,
    Path(vhost): Path<String>,
) -> Result<Json<JsonValue>, ApiError> {
    auth::vhost_visible(&broker, &user, &vhost)?;
    let vhost = objects::vhost_of(&broker, &user, &vhost)?;
    let mut queues = vhost.queues();
    queues.sort_by(|a, b| a.name().cmp(b.name()));
    let targets = targets(&vhost, &queues);
    let now = Instant::now();
    let now_ms = charon_engine::clock::now_ms();
    let mut out = Vec::new();
    for queue in &queues {
        let counts = counts(queue);
        if counts.iter().all(|n| *n == 0) && !targets.contains(queue.name()) {
            continue;
        }
        let key = (vhost.name().to_owned(), queue.name().to_owned(), queue.id);
        let per_second = rates.sample(key, now, counts);
        let by_reason = |values: &[JsonValue]| -> Map<String, JsonValue> {
            REASONS.iter().zip(values).map(|(r, v)| ((*r).to_owned(), v.clone())).collect()
        };
        let oldest = queue.oldest_ready_at.load(std::sync::atomic::Ordering::Relaxed);
        let age = if oldest > 0 { now_ms.saturating_sub(oldest).max(0) / 1000 } else { 0 };
        out.push(json!({
            "queue": queue.name(),
            "dead_lettered": by_reason(&counts.map(JsonValue::from)),
            "rates": by_reason(&per_second.map(JsonValue::from)),
            "messages": queue.gauges.load().messages(),
            "oldest_message_age_seconds": age,
        }));
    }
    Ok(Json(JsonValue::Array(out)))
}
