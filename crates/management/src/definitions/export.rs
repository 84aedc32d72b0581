//! `GET /api/definitions[/{vhost}]`: the broker's definitions as RabbitMQ 4.0.5's management
//! plugin exports them (`rabbit_mgmt_wm_definitions`), so that the file imports into RabbitMQ.
//!
//! What 4.0.5 leaves out, Charon leaves out: the default exchange and the `amq.*` ones, and
//! exclusive queues (they cannot be recreated); Charon also leaves out its own `amq.charon.*`
//! queue, which RabbitMQ's import would skip anyway. `global_parameters` is empty: Charon has
//! no cluster tags and no cluster id of RabbitMQ's kind.

use charon_engine::{Account, Broker, Destination, LimitScope, VHost, VhostInfo};
use charon_model::identity;
use serde_json::{Map, Value as JsonValue, json};

use crate::json::table_to_json;

/// The whole broker: `rabbitmq_definition_format` `cluster`.
#[must_use]
pub fn cluster(broker: &Broker) -> JsonValue {
    let access = broker.access();
    let vhosts = broker.vhosts();
    let mut all = header("cluster");
    let node = charon_model::node::node_name();
    all.insert("original_cluster_name".into(), json!(node));
    all.insert("explanation".into(), json!(format!("Definitions of cluster '{node}'")));
    all.insert("users".into(), access.accounts().iter().map(|a| user(broker, a)).collect());
    all.insert("vhosts".into(), access.vhosts().iter().map(|(name, info)| vhost_entry(name, info)).collect());
    all.insert(
        "permissions".into(),
        access
            .permissions()
            .iter()
            .map(|(vhost, user, permission)| {
                let (configure, write, read) = permission.patterns();
                json!({ "user": user, "vhost": vhost, "configure": configure, "write": write, "read": read })
            })
            .collect(),
    );
    all.insert(
        "topic_permissions".into(),
        access
            .topic_permissions()
            .into_iter()
            .map(|(vhost, user, exchange, write, read)| {
                json!({ "user": user, "vhost": vhost, "exchange": exchange, "write": write, "read": read })
            })
            .collect(),
    );
    all.insert("parameters".into(), vhosts.iter().flat_map(|v| parameters(broker, v, true)).collect());
    all.insert("global_parameters".into(), json!([]));
    insert_objects(&mut all, &vhosts, true);
    JsonValue::Object(all)
}

/// One vhost: `rabbitmq_definition_format` `single_virtual_host`, without users, vhosts or
/// permissions and without the objects' `vhost` fields; `None` when it does not exist.
#[must_use]
pub fn vhost(broker: &Broker, name: &str) -> Option<JsonValue> {
    let vhost = broker.vhosts().into_iter().find(|v| v.name() == name)?;
    let info = broker.access().vhosts().into_iter().find(|(n, _)| n == name).map(|(_, info)| info).unwrap_or_default();
    let mut all = header("single_virtual_host");
    all.insert("original_vhost_name".into(), json!(name));
    all.insert("explanation".into(), json!(format!("Definitions of virtual host '{name}'")));
    all.insert("metadata".into(), metadata(&info));
    all.insert("description".into(), json!(info.description));
    all.insert("default_queue_type".into(), json!(DEFAULT_QUEUE_TYPE));
    let limits = broker.limits().get(LimitScope::Vhost, name);
    // 4.0.5 prints no limits as an empty (Erlang) list, and limits as an object.
    all.insert("limits".into(), if limits.is_empty() { json!([]) } else { json!(limits) });
    all.insert("parameters".into(), parameters(broker, &vhost, false).into());
    insert_objects(&mut all, std::slice::from_ref(&vhost), false);
    Some(JsonValue::Object(all))
}

/// Queues declared without a type are classic: Charon has no per-vhost default.
const DEFAULT_QUEUE_TYPE: &str = "classic";

fn header(format: &str) -> Map<String, JsonValue> {
    let mut all = Map::new();
    for key in ["rabbit_version", "rabbitmq_version", "product_version"] {
        all.insert(key.into(), json!(identity::VERSION));
    }
    all.insert("product_name".into(), json!(identity::PRODUCT));
    all.insert("rabbitmq_definition_format".into(), json!(format));
    all
}

/// `rabbit_mgmt_format:internal_user/1` with the user's limits.
fn user(broker: &Broker, account: &Account) -> JsonValue {
    let (hash, algorithm) = match account.password() {
        Some(hash) => (hash.to_base64(), hash.algorithm().as_str()),
        None => (String::new(), charon_engine::HashingAlgorithm::Sha256.as_str()),
    };
    json!({
        "name": account.name(),
        "password_hash": hash,
        "hashing_algorithm": algorithm,
        "tags": account.tags().as_slice(),
        "limits": broker.limits().get(LimitScope::User, account.name()),
    })
}

fn metadata(info: &VhostInfo) -> JsonValue {
    json!({ "description": info.description, "tags": info.tags.as_slice(), "default_queue_type": DEFAULT_QUEUE_TYPE })
}

fn vhost_entry(name: &str, info: &VhostInfo) -> JsonValue {
    json!({
        "name": name,
        "description": info.description,
        "metadata": metadata(info),
        "tags": info.tags.as_slice(),
        "default_queue_type": DEFAULT_QUEUE_TYPE,
    })
}

/// A vhost's runtime parameters: its limits (`vhost-limits`) and its operator policies
/// (`operator_policy`: 4.0.5 exports them there, not as a section of their own, observed).
fn parameters(broker: &Broker, vhost: &VHost, with_vhost: bool) -> Vec<JsonValue> {
    let mut parameters = Vec::new();
    let limits = broker.limits().get(LimitScope::Vhost, vhost.name());
    if !limits.is_empty() {
        parameters.push(json!({ "value": limits, "component": "vhost-limits", "name": "limits" }));
    }
    for policy in vhost.operator_policies() {
        let value = json!({
            "pattern": policy.pattern,
            "definition": table_to_json(&policy.definition),
            "priority": policy.priority,
            "apply-to": policy.apply_to.as_str(),
        });
        parameters.push(json!({ "value": value, "component": "operator_policy", "name": policy.name }));
    }
    if with_vhost {
        for parameter in &mut parameters {
            if let Some(fields) = parameter.as_object_mut() {
                fields.insert("vhost".into(), json!(vhost.name()));
            }
        }
    }
    parameters
}

/// Policies, queues, exchanges and bindings of `vhosts`.
fn insert_objects(all: &mut Map<String, JsonValue>, vhosts: &[std::sync::Arc<VHost>], with_vhost: bool) {
    let mut policies = Vec::new();
    let mut queues = Vec::new();
    let mut exchanges = Vec::new();
    let mut bindings = Vec::new();
    for vhost in vhosts {
        let tag = |mut object: JsonValue| {
            if with_vhost && let Some(fields) = object.as_object_mut() {
                fields.insert("vhost".into(), json!(vhost.name()));
            }
            object
        };
        for policy in vhost.policies() {
            policies.push(tag(json!({
                "name": policy.name,
                "pattern": policy.pattern,
                "apply-to": policy.apply_to.as_str(),
                "definition": table_to_json(&policy.definition),
                "priority": policy.priority,
            })));
        }
        let mut own = vhost.queues();
        own.retain(|q| q.config.exclusive_owner.is_none() && !q.name().starts_with("amq."));
        own.sort_by(|a, b| a.name().cmp(b.name()));
        let exported: std::collections::HashSet<&str> = own.iter().map(|q| q.name()).collect();
        for queue in &own {
            let config = &queue.config;
            queues.push(tag(json!({
                "name": config.name,
                "durable": config.durable,
                "auto_delete": config.auto_delete,
                "arguments": table_to_json(&config.arguments),
            })));
        }
        for exchange in vhost.exchanges() {
            if exchange.name.is_empty() || exchange.name.starts_with("amq.") {
                continue;
            }
            exchanges.push(tag(json!({
                "name": exchange.name,
                "type": exchange.kind.as_str(),
                "durable": exchange.durable,
                "auto_delete": exchange.auto_delete,
                "internal": exchange.internal,
                "arguments": table_to_json(&exchange.arguments),
            })));
        }
        for (source, binding) in vhost.bindings() {
            let (destination, kind) = match &binding.destination {
                // A binding to a queue that is not exported could not be imported.
                Destination::Queue(name) if !exported.contains(name.as_str()) => continue,
                Destination::Queue(name) => (name, "queue"),
                Destination::Exchange(name) => (name, "exchange"),
            };
            bindings.push(tag(json!({
                "source": source,
                "destination": destination,
                "destination_type": kind,
                "routing_key": binding.key,
                "arguments": table_to_json(&binding.arguments),
            })));
        }
    }
    all.insert("policies".into(), policies.into());
    all.insert("queues".into(), queues.into());
    all.insert("exchanges".into(), exchanges.into());
    all.insert("bindings".into(), bindings.into());
}
