//! `/api/consumers[/{vhost}]`: every queue's consumers, as the queues report them (their
//! tasks know their consumers, single-active-consumer state included), with the channel each
//! belongs to. Non-monitors see only the consumers of their own connections.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Extension, Path, Query, State};
use charon_engine::{Broker, Listed, SessionId, User, VHost};
use serde_json::Value as JsonValue;

use crate::auth;
use crate::error::ApiError;
use crate::listing::{self, Params};
use crate::runtime;

/// The consumers of `vhost`'s queues that `keep` selects (given the consumer's connection).
/// `default_timeout` is the broker's `consumer_timeout`, for queues that set none.
async fn of_vhost(
    vhost: &VHost,
    default_timeout: Option<u64>,
    connections: &HashMap<SessionId, Listed>,
    keep: impl Fn(&charon_engine::ConsumerReport, Option<&Listed>) -> bool,
) -> Vec<JsonValue> {
    let mut queues = vhost.queues();
    queues.sort_by(|a, b| a.name().cmp(b.name()));
    let mut out = Vec::new();
    for queue in queues {
        let Ok(consumers) = queue.consumers().await else {
            continue;
        };
        let timeout = queue.consumer_timeout.get().millis(default_timeout);
        for consumer in &consumers {
            let connection = connections.get(&consumer.owner.session);
            if keep(consumer, connection) {
                out.push(runtime::consumer(vhost.name(), queue.name(), consumer, connection, timeout));
            }
        }
    }
    out
}

fn connections_by_id(broker: &Broker) -> HashMap<SessionId, Listed> {
    broker.connections().list().into_iter().map(|l| (l.id, l)).collect()
}

/// Whether `user` sees a consumer on `connection`.
fn visible(user: &User, connection: Option<&Listed>) -> bool {
    user.tags().is_monitor() || connection.is_some_and(|l| runtime::sees(user, &l.info))
}

/// `GET /api/consumers`
pub(crate) async fn list_all(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    let connections = connections_by_id(&broker);
    let mut all = Vec::new();
    for vhost in broker.vhosts().iter().filter(|v| auth::sees(&broker, &user, v.name())) {
        all.extend(of_vhost(vhost, broker.consumer_timeout(), &connections, |_, c| visible(&user, c)).await);
    }
    listing::respond(all, &params, &[]).map(Json)
}

/// `GET /api/consumers/{vhost}`
pub(crate) async fn list_vhost(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    auth::vhost_visible(&broker, &user, &vhost)?;
    let vhost = broker.vhosts().into_iter().find(|v| v.name() == vhost).ok_or_else(ApiError::not_found)?;
    let connections = connections_by_id(&broker);
    let all = of_vhost(&vhost, broker.consumer_timeout(), &connections, |_, c| visible(&user, c)).await;
    listing::respond(all, &params, &[]).map(Json)
}

/// The consumers of channel `number` of `listed` (a channel's `consumer_details`).
pub(crate) async fn of_channel(broker: &Broker, listed: &Listed, number: u32) -> Vec<JsonValue> {
    let Some(vhost) = broker.vhosts().into_iter().find(|v| v.name() == listed.info.vhost) else {
        return Vec::new();
    };
    let connections = HashMap::from([(listed.id, listed.clone())]);
    of_vhost(&vhost, broker.consumer_timeout(), &connections, |c, _| {
        c.owner.session == listed.id && c.owner.channel == number
    })
    .await
}
