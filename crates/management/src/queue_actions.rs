//! `/api/queues/{vhost}/{name}` PUT and DELETE, `…/contents` (purge) and `…/bindings`.
//!
//! Declares and deletes go through the vhost's own calls with the user as principal, so
//! durability, policies, the dead-letter permission rule and limits apply as over AMQP.
//! Not done as 4.0.5: a declare over HTTP does not add `x-queue-type` to the arguments (4.0.5
//! records the vhost's default type there).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use charon_engine::{Action, Broker, Destination, Principal, QueueDeclare, Resource, User};
use serde_json::{Value as JsonValue, json};

use crate::bindings;
use crate::error::ApiError;
use crate::listing::{self, Params};
use crate::objects::{self, boolean, engine_error};
use crate::request;

/// `PUT /api/queues/{vhost}/{name}` with `durable` (true), `auto_delete` (false) and
/// `arguments` (`x-queue-type` among them): 201 created, 204 when an equivalent queue exists,
/// 400 with RabbitMQ's text for invalid or inequivalent arguments, 401 without configure
/// permission (or for an `amq.` name).
pub(crate) async fn put(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let vhost = objects::declare_vhost(&broker, &user, &vhost)?;
    let request = if body.is_empty() { json!({}) } else { request::decode(&body, &[])? };
    let arguments = objects::arguments(&request)?;
    check_node(&request)?;
    let declare = QueueDeclare {
        name: name.clone(),
        passive: false,
        durable: boolean(&request, "durable", true)?,
        exclusive: false,
        auto_delete: boolean(&request, "auto_delete", false)?,
        arguments,
    };
    if name.starts_with("amq.") {
        return Err(objects::refused());
    }
    let principal = Principal::new(broker.access(), &user);
    let ok = vhost.declare_queue_as(&declare, broker.next_id(), Some(principal)).await.map_err(|e| engine_error(&e))?;
    Ok(if ok.created { StatusCode::CREATED } else { StatusCode::NO_CONTENT })
}

/// A declare's `node`: this node, or RabbitMQ's 400 for one it cannot reach (a bare name is
/// completed with this node's host, as `rabbit_nodes:make/1` does).
fn check_node(request: &JsonValue) -> Result<(), ApiError> {
    let Some(node) = request.get("node").and_then(JsonValue::as_str) else { return Ok(()) };
    let ours = charon_engine::broker::node_name();
    let named = match (node.contains('@'), ours.split_once('@')) {
        (false, Some((_, host))) => format!("{node}@{host}"),
        _ => node.to_owned(),
    };
    if named == ours { Ok(()) } else { Err(ApiError::bad_request(format!("Node {named} could not be contacted"))) }
}

/// `DELETE /api/queues/{vhost}/{name}[?if-empty=true][&if-unused=true]`: 204, 404 when
/// missing, 400 `… not empty` / `… in use`, 401 without configure permission.
pub(crate) async fn delete(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> Result<StatusCode, ApiError> {
    let vhost = objects::vhost_of(&broker, &user, &vhost)?;
    if !vhost.queue_names().contains(&name) {
        return Err(ApiError::not_found());
    }
    objects::check(&broker, &user, Action::Configure, &Resource::queue(vhost.name(), &name))?;
    let flag = |key: &str| params.get(key).is_some_and(|v| v == "true");
    vhost
        .delete_queue(&name, broker.next_id(), flag("if-unused"), flag("if-empty"))
        .await
        .map_err(|e| engine_error(&e))?;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /api/queues/{vhost}/{name}/contents`: purges; 204, 404 when missing, 401 without
/// read permission.
pub(crate) async fn purge(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let vhost = objects::vhost_of(&broker, &user, &vhost)?;
    let queue = vhost.queue(&name, broker.next_id()).map_err(|e| engine_error(&e))?;
    objects::check(&broker, &user, Action::Read, &Resource::queue(vhost.name(), &name))?;
    queue.purge().await.map_err(|e| engine_error(&e))?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/queues/{vhost}/{name}/bindings`: the queue's bindings, the default exchange's
/// first.
pub(crate) async fn bindings(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    let vhost = objects::vhost_of(&broker, &user, &vhost)?;
    if !vhost.queue_names().contains(&name) {
        return Err(ApiError::not_found());
    }
    let destination = Destination::Queue(name);
    let all = bindings::render_vhost(&vhost).into_iter().filter(|b| bindings::leads_to(b, &destination)).collect();
    listing::respond(all, &params, &[]).map(Json)
}
