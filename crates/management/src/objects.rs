//! What the object endpoints (queues, exchanges, bindings) share: the vhost lookup, the
//! permission checks RabbitMQ's management applies, and engine errors as RabbitMQ's HTTP
//! answers.

use std::sync::Arc;

use charon_engine::{Action, Broker, EngineError, ErrorKind, Principal, Resource, User, VHost};

use crate::auth;
use crate::error::ApiError;

/// The vhost named, for a user allowed in it (`is_authorized_vhost`); 404 when missing.
pub(crate) fn vhost_of(broker: &Broker, user: &User, name: &str) -> Result<Arc<VHost>, ApiError> {
    auth::vhost(broker, user, name)?;
    broker.vhosts().into_iter().find(|v| v.name() == name).ok_or_else(ApiError::not_found)
}

/// As [`vhost_of`], but a missing vhost is RabbitMQ's `not_found`/`vhost_not_found` (what a
/// declare into a missing vhost answers, observed on 4.0.5).
pub(crate) fn declare_vhost(broker: &Broker, user: &User, name: &str) -> Result<Arc<VHost>, ApiError> {
    auth::vhost(broker, user, name)?;
    broker
        .vhosts()
        .into_iter()
        .find(|v| v.name() == name)
        .ok_or_else(|| ApiError::not_found_named("not_found", "vhost_not_found"))
}

/// 401 `Access refused.`: RabbitMQ's management answer when a user lacks the configure, write
/// or read permission an operation needs (`rabbit_mgmt_util:check_resource_access`).
pub(crate) fn refused() -> ApiError {
    ApiError::not_authorised("Access refused.")
}

/// Checks one permission, refusing as the management API does.
pub(crate) fn check(broker: &Broker, user: &User, action: Action, resource: &Resource) -> Result<(), ApiError> {
    Principal::new(broker.access(), user).check(action, resource).map_err(|_| refused())
}

/// An engine error from a declare, delete or bind: permission and reserved-name refusals as
/// 401 `Access refused.`, a missing object as 404, everything else as 400 with the error's text
/// (RabbitMQ's channel error without its code, as 4.0.5 answers them).
pub(crate) fn engine_error(error: &EngineError) -> ApiError {
    match error.kind() {
        ErrorKind::AccessRefused => refused(),
        ErrorKind::NotFound => ApiError::not_found(),
        _ => ApiError::bad_request(error.to_string()),
    }
}

/// A JSON boolean field, `default` when missing; RabbitMQ's `["not_boolean", V]` otherwise.
pub(crate) fn boolean(request: &serde_json::Value, key: &str, default: bool) -> Result<bool, ApiError> {
    match request.get(key) {
        None => Ok(default),
        Some(serde_json::Value::Bool(b)) => Ok(*b),
        Some(other) => Err(ApiError::bad_request_json(serde_json::json!(["not_boolean", other]))),
    }
}

/// A request's `arguments`: an object, or missing, `null` or `[]` (an empty Erlang property
/// list, which 4.0.5 accepts) for none.
pub(crate) fn arguments(request: &serde_json::Value) -> Result<charon_model::Table, ApiError> {
    match request.get("arguments") {
        None | Some(serde_json::Value::Null) => Ok(charon_model::Table::new()),
        Some(serde_json::Value::Array(items)) if items.is_empty() => Ok(charon_model::Table::new()),
        Some(value) => match crate::json::from_json(value) {
            Some(charon_model::Value::Table(table)) => Ok(table),
            _ => Err(ApiError::bad_request("arguments must be an object")),
        },
    }
}
