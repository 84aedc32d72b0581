//! `/api/bindings`: list bindings, create them between an exchange and a queue or exchange,
//! and show or delete one by its properties key.
//!
//! Listings include each queue's implicit binding from the default exchange (`source: ""`,
//! its name as key), as 4.0.5 does. The properties key is RabbitMQ's shape: the routing key
//! URL-quoted (`~` when empty), and with arguments `~` and a 6-character URL-safe base64 hash
//! of them. RabbitMQ hashes with `erlang:phash2/2`; Charon's hash is its own, so a key with
//! arguments differs from 4.0.5's literal value, while keys without arguments are the same
//! (clients read keys from the listings and send them back, which works either way).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use charon_engine::{Action, Binding, Broker, Destination, Resource, User, VHost};
use charon_model::Table;
use serde_json::{Value as JsonValue, json};

use crate::auth;
use crate::error::ApiError;
use crate::exchanges::engine_name;
use crate::json::table_to_json;
use crate::listing::{self, Params};
use crate::objects::{self, engine_error};
use crate::request;

/// Every binding of `vhost`, the default exchange's implicit ones first for each queue's name
/// order, then the explicit ones in the engine's order (source, destination, key).
pub(crate) fn render_vhost(vhost: &VHost) -> Vec<JsonValue> {
    let mut queues: Vec<String> = vhost.queue_names();
    queues.sort();
    let implicit = queues.into_iter().map(|q| {
        let binding = Binding { destination: Destination::Queue(q.clone()), key: q, arguments: Table::new() };
        render(vhost.name(), "", &binding)
    });
    let explicit: Vec<JsonValue> = vhost.bindings().iter().map(|(source, b)| render(vhost.name(), source, b)).collect();
    implicit.chain(explicit).collect()
}

/// Whether a rendered binding leads to `destination`.
pub(crate) fn leads_to(binding: &JsonValue, destination: &Destination) -> bool {
    let (kind, name) = match destination {
        Destination::Queue(name) => ("queue", name),
        Destination::Exchange(name) => ("exchange", name),
    };
    binding["destination_type"] == kind && binding["destination"] == name.as_str()
}

fn render(vhost: &str, source: &str, binding: &Binding) -> JsonValue {
    let (kind, name) = match &binding.destination {
        Destination::Queue(name) => ("queue", name),
        Destination::Exchange(name) => ("exchange", name),
    };
    json!({
        "source": source,
        "vhost": vhost,
        "destination": name,
        "destination_type": kind,
        "routing_key": binding.key,
        "arguments": table_to_json(&binding.arguments),
        "properties_key": properties_key(&binding.key, &binding.arguments),
    })
}

/// RabbitMQ's `pack_binding_props`: `~` for an empty key without arguments, the quoted key,
/// or the quoted key, `~` and the arguments' hash.
pub(crate) fn properties_key(key: &str, arguments: &Table) -> String {
    match (key.is_empty(), arguments.is_empty()) {
        (true, true) => "~".to_owned(),
        (_, true) => quote(key),
        _ => format!("{}~{}", quote(key), charon_engine::exchange::arguments_hash(arguments)),
    }
}

/// `quote_plus` with `~` escaped too (`quote_binding`): unreserved characters stay, a space is
/// `+`, the rest percent-encoded.
fn quote(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' => char::from(b).to_string(),
            b' ' => "+".to_owned(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// Percent-encodes all but RFC 3986's unreserved characters, as RabbitMQ encodes the
/// segments of a binding's `Location` (the properties key is quoted again there).
fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => char::from(b).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// Whether a path's `props` segment names the binding with properties key `key`: the router
/// hands the segment over percent-decoded, so the key is compared decoded too.
fn key_matches(key: &str, props: &str) -> bool {
    if key == props {
        return true;
    }
    let bytes = key.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (b, hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                decoded.push(byte);
                i += 3;
            }
            _ => {
                decoded.push(b);
                i += 1;
            }
        }
    }
    decoded == props.as_bytes()
}

/// `GET /api/bindings`
pub(crate) async fn list_all(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    let all =
        broker.vhosts().iter().filter(|v| auth::sees(&broker, &user, v.name())).flat_map(|v| render_vhost(v)).collect();
    listing::respond(all, &params, &[]).map(Json)
}

/// `GET /api/bindings/{vhost}`
pub(crate) async fn list_vhost(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    let vhost = objects::vhost_of(&broker, &user, &vhost)?;
    listing::respond(render_vhost(&vhost), &params, &[]).map(Json)
}

/// The two ends of a `/api/bindings/{vhost}/e/{source}/{q|e}/{destination}` path, after
/// checking both exist (404 otherwise).
fn ends(vhost: &VHost, source: &str, kind: &str, destination: &str) -> Result<(String, Destination), ApiError> {
    let source = engine_name(source).to_owned();
    vhost.exchange(&source).ok_or_else(ApiError::not_found)?;
    let destination = match kind {
        "q" => {
            vhost.queue_names().iter().find(|q| *q == destination).ok_or_else(ApiError::not_found)?;
            Destination::Queue(destination.to_owned())
        }
        "e" => {
            let name = engine_name(destination).to_owned();
            vhost.exchange(&name).ok_or_else(ApiError::not_found)?;
            Destination::Exchange(name)
        }
        _ => return Err(ApiError::not_found()),
    };
    Ok((source, destination))
}

fn between(vhost: &VHost, source: &str, destination: &Destination) -> Vec<JsonValue> {
    render_vhost(vhost).into_iter().filter(|b| b["source"] == source && leads_to(b, destination)).collect()
}

/// `GET /api/bindings/{vhost}/e/{source}/{q|e}/{destination}`
pub(crate) async fn list_between(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, source, kind, destination)): Path<(String, String, String, String)>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    let vhost = objects::vhost_of(&broker, &user, &vhost)?;
    let (source, destination) = ends(&vhost, &source, &kind, &destination)?;
    listing::respond(between(&vhost, &source, &destination), &params, &[]).map(Json)
}

/// Write on the destination, read on the source: what binding and unbinding need.
fn check_bind(
    broker: &Broker,
    user: &User,
    vhost: &VHost,
    source: &str,
    destination: &Destination,
) -> Result<(), ApiError> {
    let target = match destination {
        Destination::Queue(name) => Resource::queue(vhost.name(), name),
        Destination::Exchange(name) => Resource::exchange(vhost.name(), name),
    };
    objects::check(broker, user, Action::Write, &target)?;
    objects::check(broker, user, Action::Read, &Resource::exchange(vhost.name(), source))
}

/// `POST /api/bindings/{vhost}/e/{source}/{q|e}/{destination}` with `routing_key` and
/// `arguments` (both optional): 201 with the new binding's `Location` relative to the path
/// (`{destination}/{properties_key}`), as RabbitMQ answers.
pub(crate) async fn create(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, source, kind, destination)): Path<(String, String, String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let vhost = objects::vhost_of(&broker, &user, &vhost)?;
    let (source, target) = ends(&vhost, &source, &kind, &destination)?;
    let request = if body.is_empty() { json!({}) } else { request::decode(&body, &[])? };
    let key = request::text(&request, "routing_key");
    let arguments = objects::arguments(&request)?;
    check_bind(&broker, &user, &vhost, &source, &target)?;
    let session = broker.next_id();
    vhost.bind(&source, target, &key, &arguments, session).await.map_err(|e| engine_error(&e))?;
    let location = format!("{}/{}", percent(&destination), percent(&properties_key(&key, &arguments)));
    Ok((StatusCode::CREATED, [(header::LOCATION, location)]).into_response())
}

fn find(vhost: &VHost, source: &str, destination: &Destination, props: &str) -> Option<Binding> {
    vhost
        .bindings_between(source, destination)
        .into_iter()
        .find(|b| key_matches(&properties_key(&b.key, &b.arguments), props))
}

/// `GET /api/bindings/{vhost}/e/{source}/{q|e}/{destination}/{props}`
pub(crate) async fn get_one(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, source, kind, destination, props)): Path<(String, String, String, String, String)>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    let vhost = objects::vhost_of(&broker, &user, &vhost)?;
    let (source, destination) = ends(&vhost, &source, &kind, &destination)?;
    let rendered = between(&vhost, &source, &destination)
        .into_iter()
        .find(|b| b["properties_key"].as_str().is_some_and(|key| key_matches(key, &props)))
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(listing::one(rendered, &params)))
}

/// `DELETE /api/bindings/{vhost}/e/{source}/{q|e}/{destination}/{props}`: 204, 404 when no
/// binding has that key.
pub(crate) async fn delete(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, source, kind, destination, props)): Path<(String, String, String, String, String)>,
) -> Result<StatusCode, ApiError> {
    let vhost = objects::vhost_of(&broker, &user, &vhost)?;
    let (source, destination) = ends(&vhost, &source, &kind, &destination)?;
    let binding = find(&vhost, &source, &destination, &props).ok_or_else(ApiError::not_found)?;
    check_bind(&broker, &user, &vhost, &source, &destination)?;
    let session = broker.next_id();
    vhost
        .unbind(&source, destination, &binding.key, &binding.arguments, session)
        .await
        .map_err(|e| engine_error(&e))?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_keys_have_rabbitmqs_shape() {
        assert_eq!(properties_key("", &Table::new()), "~");
        assert_eq!(properties_key("a.b", &Table::new()), "a.b");
        assert_eq!(properties_key("a b~/", &Table::new()), "a+b%7E%2F");
        let mut args = Table::new();
        args.insert("x", charon_model::Value::I64(1));
        let key = properties_key("a.b", &args);
        assert!(key.starts_with("a.b~") && key.len() == 10, "{key}");
        assert_eq!(percent(&properties_key("a b/c~d%\u{e9}", &Table::new())), "a%2Bb%252Fc%257Ed%2525%25C3%25A9");
        assert!(key_matches("a+b%7E%2F", "a+b~/") && key_matches("~", "~") && !key_matches("a", "b"));
    }
}
