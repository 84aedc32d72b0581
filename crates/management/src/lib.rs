//! Charon's HTTP management API: the part of RabbitMQ's management plugin that dead lettering
//! needs, with its paths, JSON and status codes, so `rabbitmqadmin`-style scripts and the
//! conformance suite work against either broker.
//!
//! - `PUT`, `GET`, `DELETE /api/policies/{vhost}/{name}`; `GET /api/policies[/{vhost}]`
//! - The same for `/api/operator-policies` ([`operator_policies`]).
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
//! - `/api/connections[/{name}[/channels]]` (GET; DELETE closes with 320 and `X-Reason`),
//!   `/api/vhosts/{vhost}/connections|channels`, `/api/channels[/{name}]`,
//!   `/api/consumers[/{vhost}]`: the runtime objects ([`runtime`]).
//! - `/api/overview`, `/api/nodes[/{name}]`, `/api/cluster-name`, `/api/extensions`,
//!   `/api/aliveness-test/{vhost}`, and the health checks `virtual-hosts`,
//!   `node-is-quorum-critical`, `port-listener/{port}`, `protocol-listener/{protocol}`.
//! - `GET`, `POST /api/definitions[/{vhost}]`: RabbitMQ's definitions export and import
//!   ([`definitions`]).
//!
//! - `/api/charon/redrives[/{vhost}[/{id}[/pause|resume|cancel]]]`: redrive jobs ([`redrives`],
//!   a Charon extension).
//! - `/api/charon/queues/{vhost}/{name}/messages[/delete|/move]`: the dead-letter browser
//!   ([`dead_letter_browser`]); `GET /api/charon/dead-letters/{vhost}`: dead lettering per
//!   queue ([`dead_letters`]).
//!
//! Every request needs HTTP basic auth against the broker's users, under the broker's login
//! policy (`loopback_users`, the failed-login throttle), by a user with a management tag; each
//! endpoint then applies RabbitMQ's rule for it ([`auth`]). [`serve`] serves plain HTTP,
//! [`serve_tls`] HTTPS.

mod aliveness;
pub mod auth;
mod bindings;
mod changes;
mod channels;
mod connections;
mod consumers;
mod dead_letter_browser;
mod dead_letter_rates;
mod dead_letters;
pub mod definitions;
mod error;
mod exchange_publish;
mod exchanges;
mod forward;
mod health;
pub mod json;
mod limits;
mod listing;
mod nodes;
mod objects;
mod operator_policies;
mod overview;
mod permissions;
mod policies;
mod queue_actions;
mod queue_get;
mod queues;
mod quorum;
mod rates;
mod redrives;
mod request;
mod runtime;
mod tls;
mod topic_permissions;
mod users;
mod vhosts;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::Request;
use axum::routing::get;
use axum::{Router, ServiceExt};
use charon_engine::Broker;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::Layer;
use tower::util::{MapRequest, MapRequestLayer};

pub use forward::answer_forwarded;
pub use tls::{serve_tls, serve_tls_router};

/// The API's routes over `broker`.
pub fn router(broker: Arc<Broker>) -> Router {
    Router::new()
        .route("/api/policies", get(policies::list_all))
        .route("/api/policies/{vhost}", get(policies::list_vhost))
        .route("/api/policies/{vhost}/{name}", get(policies::get_one).put(policies::put).delete(policies::delete))
        .route("/api/operator-policies", get(operator_policies::list_all))
        .route("/api/operator-policies/{vhost}", get(operator_policies::list_vhost))
        .route(
            "/api/operator-policies/{vhost}/{name}",
            get(operator_policies::get_one).put(operator_policies::put).delete(operator_policies::delete),
        )
        .route("/api/queues", get(queues::list_all))
        .route("/api/queues/{vhost}", get(queues::list_vhost))
        .route("/api/queues/{vhost}/{name}", get(queues::get_one).put(queue_actions::put).delete(queue_actions::delete))
        .route("/api/queues/{vhost}/{name}/contents", axum::routing::delete(queue_actions::purge))
        .route("/api/queues/{vhost}/{name}/get", axum::routing::post(queue_get::get))
        .route("/api/queues/{vhost}/{name}/bindings", get(queue_actions::bindings))
        .route("/api/queues/quorum/{vhost}/{name}/status", get(quorum::status))
        .route("/api/queues/quorum/{vhost}/{name}/replicas/add", axum::routing::post(quorum::add_member))
        .route("/api/queues/quorum/{vhost}/{name}/replicas/delete", axum::routing::delete(quorum::delete_member))
        .route("/api/queues/quorum/replicas/on/{node}/grow", axum::routing::post(quorum::grow))
        .route("/api/queues/quorum/replicas/on/{node}/shrink", axum::routing::delete(quorum::shrink))
        .route("/api/exchanges", get(exchanges::list_all))
        .route("/api/exchanges/{vhost}", get(exchanges::list_vhost))
        .route("/api/exchanges/{vhost}/{name}", get(exchanges::get_one).put(exchanges::put).delete(exchanges::delete))
        .route("/api/exchanges/{vhost}/{name}/publish", axum::routing::post(exchange_publish::publish))
        .route("/api/exchanges/{vhost}/{name}/bindings/source", get(exchanges::bindings_source))
        .route("/api/exchanges/{vhost}/{name}/bindings/destination", get(exchanges::bindings_destination))
        .route("/api/bindings", get(bindings::list_all))
        .route("/api/bindings/{vhost}", get(bindings::list_vhost))
        .route(
            "/api/bindings/{vhost}/e/{source}/{kind}/{destination}",
            get(bindings::list_between).post(bindings::create),
        )
        .route(
            "/api/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}",
            get(bindings::get_one).delete(bindings::delete),
        )
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
        .route("/api/health/checks/virtual-hosts", get(health::virtual_hosts))
        .route("/api/health/checks/node-is-quorum-critical", get(health::node_is_quorum_critical))
        .route("/api/health/checks/quorum-queues-without-elected-leaders/all-vhosts/", get(health::without_leaders_all))
        .route(
            "/api/health/checks/quorum-queues-without-elected-leaders/vhost/{vhost}/",
            get(health::without_leaders_in),
        )
        .route("/api/health/checks/quorum-queues-without-elected-leaders/all-vhosts", get(health::without_leaders_all))
        .route(
            "/api/health/checks/quorum-queues-without-elected-leaders/vhost/{vhost}",
            get(health::without_leaders_in),
        )
        .route("/api/health/checks/port-listener/{port}", get(health::port_listener))
        .route("/api/health/checks/protocol-listener/{protocol}", get(health::protocol_listener))
        .route("/api/aliveness-test/{vhost}", get(aliveness::check))
        .route("/api/connections", get(connections::list_all))
        .route("/api/connections/{name}", get(connections::get_one).delete(connections::delete))
        .route("/api/connections/{name}/channels", get(connections::channels))
        .route("/api/vhosts/{vhost}/connections", get(connections::list_vhost))
        .route("/api/channels", get(channels::list_all))
        .route("/api/channels/{name}", get(channels::get_one))
        .route("/api/vhosts/{vhost}/channels", get(channels::list_vhost))
        .route("/api/consumers", get(consumers::list_all))
        .route("/api/consumers/{vhost}", get(consumers::list_vhost))
        .route("/api/overview", get(overview::overview))
        .route("/api/cluster-name", get(overview::cluster_name).put(overview::set_cluster_name))
        .route("/api/extensions", get(overview::extensions))
        .route("/api/nodes", get(nodes::list))
        .route("/api/nodes/{name}", get(nodes::get_one))
        .route("/api/charon/cluster/nodes/{name}", axum::routing::delete(nodes::forget))
        .route("/api/charon/cluster/nodes", axum::routing::post(nodes::join))
        .route("/api/charon/redrives", get(redrives::list_all))
        .route("/api/charon/redrives/{vhost}", get(redrives::list_vhost).post(redrives::create))
        .route("/api/charon/redrives/{vhost}/{id}", get(redrives::get_one).delete(redrives::delete))
        .route("/api/charon/redrives/{vhost}/{id}/pause", axum::routing::post(redrives::pause))
        .route("/api/charon/redrives/{vhost}/{id}/resume", axum::routing::post(redrives::resume))
        .route("/api/charon/redrives/{vhost}/{id}/cancel", axum::routing::post(redrives::cancel))
        .route("/api/charon/dead-letters/{vhost}", get(dead_letters::overview))
        .merge(
            Router::new()
                .route("/api/charon/queues/{vhost}/{name}/messages", get(dead_letter_browser::browse))
                .route(
                    "/api/charon/queues/{vhost}/{name}/messages/delete",
                    axum::routing::post(dead_letter_browser::delete),
                )
                .route(
                    "/api/charon/queues/{vhost}/{name}/messages/move",
                    axum::routing::post(dead_letter_browser::move_messages),
                )
                .route_layer(axum::middleware::from_fn_with_state(Arc::clone(&broker), forward::to_home)),
        )
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&broker), auth::require_user))
        .layer(axum::Extension(Arc::new(rates::Sampler::default())))
        .layer(axum::Extension(Arc::new(dead_letter_rates::DeadLetterRates::default())))
        .with_state(broker)
}

/// Serves the API on `listener` until `shutdown` turns true.
///
/// # Errors
/// When the listener fails.
pub async fn serve(listener: TcpListener, broker: Arc<Broker>, shutdown: watch::Receiver<bool>) -> std::io::Result<()> {
    serve_router(listener, router(broker), shutdown).await
}

/// Serves `app` (the API's [`router`], possibly with more routes around it, such as the web UI)
/// on `listener` until `shutdown` turns true, with the peer address each request needs for the
/// login policy.
///
/// # Errors
/// When the listener fails.
pub async fn serve_router(
    listener: TcpListener,
    app: Router,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    axum::serve(listener, ServiceExt::into_make_service_with_connect_info::<SocketAddr>(with_trailing_slashes(app)))
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        })
        .await
}

/// `app` answering an API path with one trailing slash as the path without it. RabbitMQ's
/// HTTP server (cowboy) ignores a trailing slash, so `GET /api/connections/` lists the
/// connections; client libraries' recovery tooling asks that way. A route-level middleware
/// would run after routing: this one wraps the router.
pub fn with_trailing_slashes(app: Router) -> MapRequest<Router, fn(Request) -> Request> {
    MapRequestLayer::new(trim_trailing_slash as fn(Request) -> Request).layer(app)
}

/// `/api/queues/` → `/api/queues`; `/api/queues//` (an empty name) and non-API paths stay.
fn trim_trailing_slash(mut request: Request) -> Request {
    let path = request.uri().path();
    let Some(trimmed) = path.strip_suffix('/').filter(|p| p.starts_with("/api/") && !p.ends_with('/')) else {
        return request;
    };
    let target = match request.uri().query() {
        Some(query) => format!("{trimmed}?{query}"),
        None => trimmed.to_owned(),
    };
    let mut parts = request.uri().clone().into_parts();
    if let Ok(path_and_query) = target.parse() {
        parts.path_and_query = Some(path_and_query);
        if let Ok(uri) = axum::http::Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
    }
    request
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod access_tests;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod objects_tests;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod runtime_tests;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod operator_policies_tests;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod redrives_tests;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod dead_letter_browser_tests;
