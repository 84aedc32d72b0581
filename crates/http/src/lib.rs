//! Charon's HTTP management API: the part of RabbitMQ's management plugin that dead lettering
//! needs, with its paths, JSON and status codes, so `rabbitmqadmin`-style scripts and the
//! conformance suite work against either broker.
//!
//! - `PUT`, `GET`, `DELETE /api/policies/{vhost}/{name}`; `GET /api/policies[/{vhost}]`
//! - `GET /api/queues[/{vhost}[/{name}]]` with `messages`, `messages_ready`,
//!   `messages_unacknowledged`, the applied policy and the effective definition.
//! - `GET /api/health/checks/alarms` and `/local-alarms`: RabbitMQ's alarm health checks.
//! - `/api/vhost-limits[/{vhost}[/{limit}]]`, `/api/user-limits[/{user}[/{limit}]]`: GET, PUT
//!   `{"value": N}`, DELETE, as `set_vhost_limits` / `set_user_limits`.
//!
//! - `/api/users[/{user}[/permissions]]`, `/api/whoami`, `/api/vhosts[/{vhost}[/permissions]]`,
//!   `/api/permissions[/{vhost}/{user}]`, `/api/topic-permissions[/{vhost}/{user}]`: users,
//!   vhosts and permissions at runtime.
//!
//! - `GET`, `POST /api/definitions[/{vhost}]`: RabbitMQ's definitions export and import
//!   ([`definitions`]).
//!
//! Every request needs HTTP basic auth against the broker's users, under the broker's login
//! policy (`loopback_users`, the failed-login throttle), by a user with a management tag; each
//! endpoint then applies RabbitMQ's rule for it ([`auth`]). [`serve`] serves plain HTTP,
//! [`serve_tls`] HTTPS.

mod auth;
pub mod definitions;
mod error;
mod health;
pub mod json;
mod limits;
mod permissions;
mod policies;
mod queues;
mod request;
mod tls;
mod topic_permissions;
mod users;
mod vhosts;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use charon_engine::Broker;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use tls::serve_tls;

/// The API's routes over `broker`.
pub fn router(broker: Arc<Broker>) -> Router {
    Router::new()
        .route("/api/policies", get(policies::list_all))
        .route("/api/policies/{vhost}", get(policies::list_vhost))
        .route("/api/policies/{vhost}/{name}", get(policies::get_one).put(policies::put).delete(policies::delete))
        .route("/api/queues", get(queues::list_all))
        .route("/api/queues/{vhost}", get(queues::list_vhost))
        .route("/api/queues/{vhost}/{name}", get(queues::get_one))
        .route("/api/vhost-limits", get(limits::vhost_all))
        .route("/api/vhost-limits/{vhost}", get(limits::vhost_one))
        .route("/api/vhost-limits/{vhost}/{limit}", axum::routing::put(limits::vhost_put).delete(limits::vhost_delete))
        .route("/api/user-limits", get(limits::user_all))
        .route("/api/user-limits/{user}", get(limits::user_one))
        .route("/api/user-limits/{user}/{limit}", axum::routing::put(limits::user_put).delete(limits::user_delete))
        .route("/api/users", get(users::list))
        .route("/api/users/{user}", get(users::get_one).put(users::put).delete(users::delete))
        .route("/api/users/{user}/permissions", get(users::permissions))
        .route("/api/whoami", get(users::whoami))
        .route("/api/vhosts", get(vhosts::list))
        .route("/api/vhosts/{vhost}", get(vhosts::get_one).put(vhosts::put).delete(vhosts::delete))
        .route("/api/vhosts/{vhost}/permissions", get(vhosts::permissions))
        .route("/api/permissions", get(permissions::list))
        .route(
            "/api/permissions/{vhost}/{user}",
            get(permissions::get_one).put(permissions::put).delete(permissions::delete),
        )
        .route("/api/topic-permissions", get(topic_permissions::list))
        .route(
            "/api/topic-permissions/{vhost}/{user}",
            get(topic_permissions::get_one).put(topic_permissions::put).delete(topic_permissions::delete),
        )
        .route("/api/definitions", get(definitions::get_all).post(definitions::post_all))
        .route("/api/definitions/{vhost}", get(definitions::get_vhost).post(definitions::post_vhost))
        .route("/api/health/checks/alarms", get(health::alarms))
        .route("/api/health/checks/local-alarms", get(health::local_alarms))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&broker), auth::require_user))
        .with_state(broker)
}

/// Serves the API on `listener` until `shutdown` turns true.
///
/// # Errors
/// When the listener fails.
pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    axum::serve(listener, router(broker).into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        })
        .await
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod access_tests;
