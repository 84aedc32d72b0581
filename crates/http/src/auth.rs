//! HTTP basic authentication against the broker's users, and RabbitMQ's management
//! authorisation rules (`rabbit_web_dispatch_access_control`): every request needs a user
//! with a management tag; endpoints then ask for an administrator, a monitor, a user who may
//! use the vhost named, or a policymaker there.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use charon_engine::{Broker, User};

use crate::error::ApiError;

/// Rejects requests without valid credentials or from users without a management tag;
/// passes the [`User`] on to the handlers.
pub(crate) async fn require_user(State(broker): State<Arc<Broker>>, mut request: Request, next: Next) -> Response {
    let user = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Basic "))
        .and_then(|encoded| base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok())
        .and_then(|decoded| String::from_utf8(decoded).ok())
        .and_then(|text| {
            let (name, password) = text.split_once(':')?;
            broker.authenticate(name, password)
        });
    match user {
        Some(user) if !user.tags().is_management() => {
            tracing::warn!(user = user.name, "HTTP access denied: Not management user");
            ApiError::not_authorised("Not management user").into_response()
        }
        Some(user) => {
            request.extensions_mut().insert::<User>(user);
            next.run(request).await
        }
        None => ApiError::not_authorized().into_response(),
    }
}

/// `is_authorized_admin`.
pub(crate) fn admin(user: &User) -> Result<(), ApiError> {
    if user.tags().is_administrator() { Ok(()) } else { Err(ApiError::not_authorised("Not administrator user")) }
}

/// Whether `user` sees `vhost` in lists: administrators and monitors see every vhost, others
/// those they may open.
pub(crate) fn sees(broker: &Broker, user: &User, vhost: &str) -> bool {
    user.tags().is_monitor() || broker.access().can_open(user, vhost)
}

/// `is_authorized_vhost`: an administrator, or a user who may open the vhost (a vhost that
/// does not exist passes, and the endpoint answers 404).
pub(crate) fn vhost(broker: &Broker, user: &User, vhost: &str) -> Result<(), ApiError> {
    let exists = broker.vhosts().iter().any(|v| v.name() == vhost);
    if user.tags().is_administrator() || !exists || broker.access().can_open(user, vhost) {
        Ok(())
    } else {
        Err(ApiError::not_authorised("User not authorised to access virtual host"))
    }
}

/// `is_authorized_vhost_visible_for_monitoring`: as [`vhost`], or a monitor.
pub(crate) fn vhost_visible(broker: &Broker, user: &User, name: &str) -> Result<(), ApiError> {
    if user.tags().is_monitor() { Ok(()) } else { vhost(broker, user, name) }
}

/// `is_authorized_policies`: an administrator, or a policymaker who may open the vhost.
pub(crate) fn policies(broker: &Broker, user: &User, vhost: &str) -> Result<(), ApiError> {
    let exists = broker.vhosts().iter().any(|v| v.name() == vhost);
    let policymaker = user.tags().is_policymaker() && (!exists || broker.access().can_open(user, vhost));
    if user.tags().is_administrator() || policymaker {
        Ok(())
    } else {
        Err(ApiError::not_authorised("User not authorised to access object"))
    }
}
