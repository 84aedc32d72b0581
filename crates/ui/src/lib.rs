//! Charon's web UI: server-rendered pages on the management port, next to the JSON API.
//!
//! - Pages are HTML rendered on the server with [`maud`] (compiled into the binary, escaped by
//!   default); the CSS and the small script are embedded with `include_str!`. No Node build.
//! - Read-only pages work without JavaScript; the script only refreshes numbers by polling the
//!   JSON API through [`proxy`] and draws redrive progress.
//! - Log-in is a form checked by the API's own login rules ([`charon_management::auth::log_in`]: the
//!   login policy, the management-tag rule); a session is server-side ([`session`]); every form
//!   that changes something carries the session's CSRF token.
//! - Every page gets its data from the API's own router, called in-process as the logged-in
//!   user ([`api`]), so the numbers are those of `/api` and the API's permission rules apply.
//!
//! [`app`] puts the pages in front of the API router: `/api/...` and everything else not a page
//! reaches the API unchanged.

mod api;
mod assets;
mod form;
mod format;
mod layout;
mod pages;
mod proxy;
mod session;
mod viewer;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use charon_engine::Broker;

use crate::api::Api;
use crate::session::Sessions;

/// Marks requests that came over HTTPS (the embedding program layers it on the HTTPS listener's
/// router: `app.layer(axum::Extension(OverTls))`): the session cookie is then `Secure`.
#[derive(Debug, Clone, Copy)]
pub struct OverTls;

/// What every page handler shares.
pub(crate) struct Ui {
    broker: Arc<Broker>,
    api: Api,
    sessions: Sessions,
}

/// The web UI's pages in front of `api` (the management API's [`charon_management::router`] over the
/// same broker): requests for anything that is not a page go to `api` as they are.
pub fn app(broker: Arc<Broker>, api: Router) -> Router {
    let ui = Arc::new(Ui { broker, api: Api::new(api.clone()), sessions: Sessions::default() });
    Router::new()
        .route("/", get(pages::overview::page))
        .route("/login", get(pages::login::form).post(pages::login::submit))
        .route("/logout", post(pages::login::logout))
        .route("/static/app.css", get(assets::css))
        .route("/static/app.js", get(assets::js))
        .route("/connections", get(pages::connections::list))
        .route("/connections/close", post(pages::connections::close))
        .route("/channels", get(pages::connections::channels))
        .route("/exchanges", get(pages::exchanges::list))
        .route("/exchanges/{vhost}/{name}", get(pages::exchanges::one))
        .route("/queues", get(pages::queues::list))
        .route("/queues/{vhost}/{name}", get(pages::queues::one))
        .route("/queues/{vhost}/{name}/purge", post(pages::queues::purge))
        .route("/queues/{vhost}/{name}/delete", post(pages::queues::delete))
        .route("/dead-letters", get(pages::dead_letters::summary))
        .route("/dead-letters/{vhost}/{queue}", get(pages::browser::page))
        .route("/dead-letters/{vhost}/{queue}/delete", post(pages::browser::delete))
        .route("/dead-letters/{vhost}/{queue}/move", post(pages::browser::move_selected))
        .route("/redrives", get(pages::redrives::list).post(pages::redrives::create))
        .route("/redrives/{vhost}/{id}", get(pages::redrives::one))
        .route("/redrives/{vhost}/{id}/{action}", post(pages::redrives::act))
        .route("/admin", get(pages::admin::page))
        .route("/admin/policies", post(pages::admin::put_policy))
        .route("/admin/policies/delete", post(pages::admin::delete_policy))
        .route("/admin/users", post(pages::admin_access::put_user))
        .route("/admin/users/delete", post(pages::admin_access::delete_user_post))
        .route("/admin/vhosts", post(pages::admin_access::put_vhost))
        .route("/admin/vhosts/delete", post(pages::admin_access::delete_vhost_post))
        .route("/admin/permissions", post(pages::admin_access::put_permission))
        .route("/admin/permissions/delete", post(pages::admin_access::delete_permission))
        .route("/ui/api/{*path}", get(proxy::get))
        .with_state(ui)
        .fallback_service(api)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests;
