//! Changes to vhosts, users, permissions, topic permissions and limits: through the cluster
//! when the node runs in one (every node makes them; this one has when the call returns),
//! else made here. The one place that decides, for the API's handlers and the definitions
//! import alike.

use charon_engine::access::{Account, Permission, TopicPermission, VhostInfo};
use charon_engine::{AccessError, Broker, EngineError, LimitScope, Limits};

use crate::error::ApiError;

/// Why a change was not made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    /// This node's access control refused it (a bad pattern, a store failure).
    #[error(transparent)]
    Access(#[from] AccessError),
    /// A limit RabbitMQ does not know, or this node's store failed.
    #[error(transparent)]
    Limits(EngineError),
    /// The cluster did not take it (no majority): RabbitMQ 4.3.6 answers 500, empty body.
    #[error("{0}")]
    Cluster(EngineError),
}

/// Creates vhost `name` or replaces its description and tags, with full permissions there for
/// `creator` when it is created; whether it was.
pub(crate) async fn put_vhost(
    broker: &Broker,
    name: &str,
    info: VhostInfo,
    creator: Option<&str>,
) -> Result<bool, Refused> {
    if let Some(cluster) = broker.cluster() {
        let (description, tags) = (info.description, info.tags.as_slice().to_vec());
        return cluster.put_vhost(name, description, tags, creator).await.map_err(Refused::Cluster);
    }
    let created = broker.add_vhost(name, info).await?;
    if let (true, Some(creator)) = (created, creator) {
        broker.access().set_permission(name, creator, Permission::full()).await?;
    }
    Ok(created)
}

/// Creates or replaces a user (its password hashed by the caller: every node stores one hash).
pub(crate) async fn put_user(broker: &Broker, account: Account) -> Result<(), Refused> {
    match broker.cluster() {
        Some(cluster) => cluster.put_user(&account).await.map_err(Refused::Cluster),
        None => Ok(broker.access().put_user(account).await?),
    }
}

/// Sets `user`'s permissions in `vhost`.
pub(crate) async fn set_permission(
    broker: &Broker,
    vhost: &str,
    user: &str,
    permission: Permission,
) -> Result<(), Refused> {
    match broker.cluster() {
        Some(cluster) => cluster.set_permission(vhost, user, &permission).await.map_err(Refused::Cluster),
        None => Ok(broker.access().set_permission(vhost, user, permission).await?),
    }
}

/// Sets `user`'s topic permissions on `exchange` in `vhost` (the patterns checked here first,
/// so that a bad one is refused by this node rather than by every node).
pub(crate) async fn set_topic_permission(
    broker: &Broker,
    (vhost, user): (&str, &str),
    exchange: &str,
    (write, read): (&str, &str),
) -> Result<(), Refused> {
    TopicPermission::new(user, vhost, write, read)?;
    match broker.cluster() {
        Some(cluster) => {
            cluster.set_topic_permission(vhost, user, exchange, (write, read)).await.map_err(Refused::Cluster)
        }
        None => Ok(broker.access().set_topic_permission(vhost, user, exchange, write, read).await?),
    }
}

/// Sets one limit (checked here first).
pub(crate) async fn set_limit(
    broker: &Broker,
    scope: LimitScope,
    name: &str,
    limit: &str,
    value: i64,
) -> Result<(), Refused> {
    Limits::check(scope, limit, value).map_err(Refused::Limits)?;
    match broker.cluster() {
        Some(cluster) => cluster.set_limit(scope, name, limit, value).await.map_err(Refused::Cluster),
        None => broker.limits().set(scope, name, limit, value).await.map_err(Refused::Limits),
    }
}

/// Clears one limit, if it is set.
pub(crate) async fn clear_limit(broker: &Broker, scope: LimitScope, name: &str, limit: &str) -> Result<(), Refused> {
    match broker.cluster() {
        Some(cluster) if broker.limits().get(scope, name).contains_key(limit) => {
            cluster.clear_limit(scope, name, limit).await.map_err(Refused::Cluster)
        }
        Some(_) => Ok(()),
        None => broker.limits().clear(scope, name, limit).await.map(drop).map_err(Refused::Limits),
    }
}

/// The API's answer to a refusal: RabbitMQ's for what this node refused, 500 with an empty body
/// for what the cluster did not take.
pub(crate) fn api_error(refused: Refused) -> ApiError {
    match refused {
        Refused::Access(e) => crate::permissions::access_error(e),
        Refused::Limits(EngineError::Precondition(reason)) => {
            ApiError::bad_request_verbatim(format!("Validation failed\n\n{reason}\n"))
        }
        Refused::Limits(e) => ApiError::internal(e.to_string()),
        Refused::Cluster(e) => ApiError::cluster(e),
    }
}
