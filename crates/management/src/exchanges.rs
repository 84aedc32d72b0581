//! `/api/exchanges`: list, show, declare and delete exchanges, and the bindings from or to one.
//!
//! An exchange renders as 4.0.5's `arguments`, `auto_delete`, `durable`, `internal`, `name`,
//! `type`, `vhost`. Not rendered: `user_who_performed_action` (Charon does not record who
//! declared an exchange), `message_stats`, `incoming` and `outgoing` (no per-exchange publish
//! counters yet).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use charon_engine::{Action, Broker, Destination, ExchangeDeclare, ExchangeInfo, ExchangeKind, Resource, User, VHost};
use serde_json::{Value as JsonValue, json};

use crate::auth;
use crate::bindings;
use crate::error::ApiError;
use crate::json::table_to_json;
use crate::listing::{self, Params};
use crate::objects::{self, boolean, engine_error};
use crate::request;

/// RabbitMQ's default order for exchanges.
const SORT: &[&str] = &["vhost", "name"];

/// The name the API uses for the default exchange in paths.
const DEFAULT_EXCHANGE: &str = "amq.default";

/// A path's exchange name as the engine names it (`amq.default` is the default exchange).
pub(crate) fn engine_name(name: &str) -> &str {
    if name == DEFAULT_EXCHANGE { "" } else { name }
}

fn render(vhost: &str, exchange: &ExchangeInfo) -> JsonValue {
    json!({
        "arguments": table_to_json(&exchange.arguments),
        "auto_delete": exchange.auto_delete,
        "durable": exchange.durable,
        "internal": exchange.internal,
        "name": exchange.name,
        "type": exchange.kind.as_str(),
        "vhost": vhost,
    })
}

fn render_all(vhost: &VHost) -> Vec<JsonValue> {
    vhost.exchanges().iter().map(|e| render(vhost.name(), e)).collect()
}

/// `GET /api/exchanges`
pub(crate) async fn list_all(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    let all =
        broker.vhosts().iter().filter(|v| auth::sees(&broker, &user, v.name())).flat_map(|v| render_all(v)).collect();
    listing::respond(all, &params, SORT).map(Json)
}

/// `GET /api/exchanges/{vhost}`
pub(crate) async fn list_vhost(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    let vhost = objects::vhost_of(&broker, &user, &vhost)?;
    listing::respond(render_all(&vhost), &params, SORT).map(Json)
}

/// `GET /api/exchanges/{vhost}/{name}`
pub(crate) async fn get_one(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    let vhost = objects::vhost_of(&broker, &user, &vhost)?;
    let exchange = vhost.exchange(engine_name(&name)).ok_or_else(ApiError::not_found)?;
    Ok(Json(listing::one(render(vhost.name(), &exchange), &params)))
}

/// `PUT /api/exchanges/{vhost}/{name}` with `type` (`direct` by default), `durable` (true),
/// `auto_delete`, `internal` (false) and `arguments`: 201 created, 204 when an equivalent
/// exchange exists, 400 with RabbitMQ's text when not; 401 without configure permission or
/// for an `amq.` name.
pub(crate) async fn put(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let vhost = objects::declare_vhost(&broker, &user, &vhost)?;
    let request = if body.is_empty() { json!({}) } else { request::decode(&body, &[])? };
    let arguments = objects::arguments(&request)?;
    let declare = ExchangeDeclare {
        name: engine_name(&name).to_owned(),
        kind: request.get("type").and_then(JsonValue::as_str).unwrap_or("direct").to_owned(),
        passive: false,
        durable: boolean(&request, "durable", true)?,
        auto_delete: boolean(&request, "auto_delete", false)?,
        internal: boolean(&request, "internal", false)?,
        arguments,
    };
    if declare.name.is_empty() || declare.name.starts_with("amq.") {
        return Err(objects::refused());
    }
    if ExchangeKind::parse(&declare.kind).is_err() {
        // What RabbitMQ 4.0.5 answers for a name its VM has no atom for. For one it has
        // (`bogus`, `queue`: any atom of its code) it says "invalid exchange type": an artifact
        // of Erlang's atom table that Charon does not imitate (`conformance/OBSERVED-0.9.1.md`).
        return Err(ApiError::bad_request(format!("unknown exchange type '{}'", declare.kind)));
    }
    let existed = vhost.exchange(&declare.name).is_some();
    let principal = charon_engine::Principal::new(broker.access(), &user);
    vhost.declare_exchange_as(&declare, Some(principal)).await.map_err(|e| engine_error(&e))?;
    Ok(if existed { StatusCode::NO_CONTENT } else { StatusCode::CREATED })
}

/// `DELETE /api/exchanges/{vhost}/{name}[?if-unused=true]`: 204, 404 when missing, 400
/// `… in use` when `if-unused` and it has bindings, 401 without configure permission or for
/// the default and `amq.*` exchanges.
pub(crate) async fn delete(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> Result<StatusCode, ApiError> {
    let vhost = objects::vhost_of(&broker, &user, &vhost)?;
    let name = engine_name(&name);
    if vhost.exchange(name).is_none() {
        return Err(ApiError::not_found());
    }
    objects::check(&broker, &user, Action::Configure, &Resource::exchange(vhost.name(), name))?;
    let if_unused = params.get("if-unused").is_some_and(|v| v == "true");
    vhost.delete_exchange(name, if_unused).await.map_err(|e| engine_error(&e))?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/exchanges/{vhost}/{name}/bindings/source`
pub(crate) async fn bindings_source(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    let vhost = objects::vhost_of(&broker, &user, &vhost)?;
    let name = engine_name(&name);
    vhost.exchange(name).ok_or_else(ApiError::not_found)?;
    let all = bindings::render_vhost(&vhost).into_iter().filter(|b| b["source"] == name).collect();
    listing::respond(all, &params, &[]).map(Json)
}

/// `GET /api/exchanges/{vhost}/{name}/bindings/destination`
pub(crate) async fn bindings_destination(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    let vhost = objects::vhost_of(&broker, &user, &vhost)?;
    let name = engine_name(&name);
    vhost.exchange(name).ok_or_else(ApiError::not_found)?;
    let all = bindings::render_vhost(&vhost)
        .into_iter()
        .filter(|b| bindings::leads_to(b, &Destination::Exchange(name.to_owned())))
        .collect();
    listing::respond(all, &params, &[]).map(Json)
}
