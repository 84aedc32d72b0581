//! `POST /api/definitions[/{vhost}]` and `--definitions FILE`: RabbitMQ's definitions applied
//! through the engine's own paths (the ones the API and the protocols use), in the order
//! RabbitMQ's `rabbit_definitions:apply_defs` applies them: users, vhosts, permissions, topic
//! permissions, exchanges, global parameters, policies, parameters, queues, bindings.
//!
//! As in RabbitMQ 4.0.5 (observed): users and vhosts that exist are updated; queues and
//! exchanges that exist are left as they are, whatever the file says (no equivalence check);
//! `amq.*` queues and exchanges and the default exchange are skipped; objects that are not
//! JSON objects are skipped; a missing `durable` is true. The import stops at the first object
//! it cannot apply, keeping what came before, with RabbitMQ's reason.
//!
//! Where Charon cannot do what the file asks it refuses, rather than import half of it: a
//! vhost whose `default_queue_type` is not classic, tracing, a hash algorithm other than
//! SHA-256/512 (RabbitMQ would keep an MD5 hash), a runtime parameter other than
//! `vhost-limits` and `operator_policy` (RabbitMQ answers the same for a plugin that is not
//! enabled), and global parameters other than the two every 4.0.5 export carries about the
//! cluster it came from (`cluster_tags`, `internal_cluster_id`), which describe that cluster
//! and are skipped. Operator policies travel as `operator_policy` runtime parameters, as 4.0.5
//! exports them; a top-level `operator_policies` section is ignored, as 4.0.5 ignores it.
//! A vhost's `max-queues` is checked per queue by the engine, not for the whole file first as
//! RabbitMQ does, so the text of that refusal differs.

use crate::changes::{self, Refused};
use base64::Engine as _;
use charon_engine::{
    Account, Broker, Destination, EngineError, ExchangeDeclare, ExchangeKind, HashingAlgorithm, LimitScope,
    PasswordHash, Permission, Policy, PolicyFields, PolicyKind, QueueDeclare, SessionId, Tags, VHost, VhostInfo,
};
use charon_model::{Table, Value, erlang};
use serde_json::{Map, Value as JsonValue};

use super::error::ImportError;
use crate::json::from_json;

/// Global parameters every 4.0.5 export carries about the cluster it came from.
const CLUSTER_PARAMETERS: [&str; 2] = ["cluster_tags", "internal_cluster_id"];

/// A definitions body: a JSON object; an empty body is an empty one, as RabbitMQ's
/// `decode(<<"">>)` takes it.
///
/// # Errors
/// [`ImportError::NotJson`] for anything else.
pub fn parse(body: &[u8]) -> Result<Map<String, JsonValue>, ImportError> {
    if body.is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_slice(body) {
        Ok(JsonValue::Object(map)) => Ok(map),
        _ => Err(ImportError::NotJson),
    }
}

/// Imports cluster-wide definitions. `acting` (the API's caller) is granted full permissions
/// on the vhosts the import creates, as RabbitMQ grants its acting user; an import at start
/// has none.
///
/// # Errors
/// The first object that could not be applied.
pub async fn cluster(
    broker: &Broker,
    definitions: &Map<String, JsonValue>,
    acting: Option<&str>,
) -> Result<(), ImportError> {
    let importer = Importer { broker, session: broker.next_id(), only: None };
    for user in section(definitions, "users")? {
        importer.user(user).await?;
    }
    for vhost in section(definitions, "vhosts")? {
        importer.vhost(vhost, acting).await?;
    }
    for permission in section(definitions, "permissions")? {
        importer.permission(permission).await?;
    }
    for permission in section(definitions, "topic_permissions")? {
        importer.topic_permission(permission).await?;
    }
    importer.objects(definitions, true).await
}

/// Imports one vhost's definitions (exchanges, parameters, policies, queues, bindings) into
/// `vhost`, whatever vhost the objects name, as RabbitMQ does; anything else in the file is
/// ignored.
///
/// # Errors
/// [`ImportError::NoSuchVhost`], or the first object that could not be applied.
pub async fn vhost(broker: &Broker, vhost: &str, definitions: &Map<String, JsonValue>) -> Result<(), ImportError> {
    if !broker.vhosts().iter().any(|v| v.name() == vhost) {
        return Err(ImportError::NoSuchVhost);
    }
    let importer = Importer { broker, session: broker.next_id(), only: Some(vhost) };
    importer.objects(definitions, false).await
}

/// The objects of one section (those that are JSON objects, as RabbitMQ takes them).
fn section<'a>(
    definitions: &'a Map<String, JsonValue>,
    key: &str,
) -> Result<Vec<&'a Map<String, JsonValue>>, ImportError> {
    match definitions.get(key) {
        None | Some(JsonValue::Null) => Ok(Vec::new()),
        Some(JsonValue::Array(items)) => Ok(items.iter().filter_map(JsonValue::as_object).collect()),
        Some(_) => Err(ImportError::Invalid(format!("{key} must be a list"))),
    }
}

fn text<'a>(object: &'a Map<String, JsonValue>, key: &str) -> Option<&'a str> {
    object.get(key).and_then(JsonValue::as_str)
}

fn flag(object: &Map<String, JsonValue>, key: &str, default: bool) -> Result<bool, ImportError> {
    match object.get(key) {
        None | Some(JsonValue::Null) => Ok(default),
        Some(JsonValue::Bool(b)) => Ok(*b),
        Some(other) => Err(ImportError::Invalid(format!("{key} must be a boolean, got {other}"))),
    }
}

/// An `arguments` or `definition` object as a table (absent or `[]`: empty, as RabbitMQ's
/// `args/1`).
fn table(object: &Map<String, JsonValue>, key: &str) -> Result<Table, ImportError> {
    match object.get(key) {
        None | Some(JsonValue::Null) => Ok(Table::default()),
        Some(JsonValue::Array(items)) if items.is_empty() => Ok(Table::default()),
        Some(json @ JsonValue::Object(_)) => match from_json(json) {
            Some(Value::Table(table)) => Ok(table),
            _ => Err(ImportError::Invalid(format!("{key} nested deeper than {} levels", charon_model::MAX_DEPTH))),
        },
        Some(other) => Err(ImportError::Invalid(format!("{key} must be an object, got {other}"))),
    }
}

/// Tags as a comma-separated string or a list of strings.
fn tags(value: Option<&JsonValue>) -> Result<Tags, ImportError> {
    match value {
        None | Some(JsonValue::Null) => Ok(Tags::default()),
        Some(JsonValue::String(text)) => Ok(Tags::parse(text)),
        Some(JsonValue::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned))
            .collect::<Option<Vec<String>>>()
            .map(Tags::new)
            .ok_or_else(|| ImportError::Invalid("tags must be strings".into())),
        Some(other) => Err(ImportError::Invalid(format!("tags must be a string or a list, got {other}"))),
    }
}

/// Applies definitions through the engine.
struct Importer<'a> {
    broker: &'a Broker,
    /// The connection id the engine's declares and bindings are made for (none owns them).
    session: SessionId,
    /// A vhost-scoped import's vhost.
    only: Option<&'a str>,
}

impl Importer<'_> {
    /// Exchanges, global parameters, policies, parameters, queues and bindings.
    async fn objects(&self, definitions: &Map<String, JsonValue>, global: bool) -> Result<(), ImportError> {
        for exchange in section(definitions, "exchanges")? {
            self.exchange(exchange).await?;
        }
        if global {
            for parameter in section(definitions, "global_parameters")? {
                global_parameter(parameter)?;
            }
        }
        for policy in section(definitions, "policies")? {
            self.policy(policy).await?;
        }
        for parameter in section(definitions, "parameters")? {
            self.parameter(parameter).await?;
        }
        for queue in section(definitions, "queues")? {
            self.queue(queue).await?;
        }
        for binding in section(definitions, "bindings")? {
            self.binding(binding).await?;
        }
        Ok(())
    }

    /// The vhost an object goes to: the scoped import's, else the object's own.
    fn vhost_name<'o>(&'o self, object: &'o Map<String, JsonValue>) -> Result<&'o str, ImportError> {
        match self.only {
            Some(vhost) => Ok(vhost),
            None => text(object, "vhost").ok_or_else(|| {
                ImportError::Invalid("Virtual host does not exist and is not specified in definitions file.".into())
            }),
        }
    }

    fn vhost_of(&self, object: &Map<String, JsonValue>) -> Result<std::sync::Arc<VHost>, ImportError> {
        let name = self.vhost_name(object)?;
        self.broker.vhosts().into_iter().find(|v| v.name() == name).ok_or_else(|| ImportError::missing_vhost(name))
    }

    async fn user(&self, object: &Map<String, JsonValue>) -> Result<(), ImportError> {
        let name = text(object, "name").ok_or_else(|| ImportError::Invalid("user without a name".into()))?;
        let tags = match object.get("tags") {
            None => return Err(ImportError::Invalid("tags_not_present".into())),
            value => tags(value)?,
        };
        let password = match (text(object, "password"), text(object, "password_hash")) {
            (Some(_), Some(_)) => {
                return Err(ImportError::Invalid("both_password_and_password_hash_are_provided".into()));
            }
            (Some(password), None) => (!password.is_empty()).then(|| PasswordHash::new(password)),
            (None, Some(hash)) if !hash.is_empty() => {
                if base64::engine::general_purpose::STANDARD.decode(hash).is_err() {
                    return Err(ImportError::term("not_base64", hash));
                }
                let algorithm = match text(object, "hashing_algorithm") {
                    Some(algorithm) => HashingAlgorithm::parse(algorithm).map_err(ImportError::access)?,
                    None => HashingAlgorithm::Sha256,
                };
                Some(PasswordHash::from_base64(algorithm, hash).map_err(ImportError::access)?)
            }
            (None, _) => None,
        };
        changes::put_user(self.broker, Account::new(name.to_owned(), password, tags)).await.map_err(refused)?;
        if let Some(JsonValue::Object(limits)) = object.get("limits") {
            self.limits(LimitScope::User, name, limits, name).await?;
        }
        Ok(())
    }

    /// Sets the limits given and clears the others, as RabbitMQ replaces a limits value.
    async fn limits(
        &self,
        scope: LimitScope,
        name: &str,
        limits: &Map<String, JsonValue>,
        place: &str,
    ) -> Result<(), ImportError> {
        let store = |e: Refused| match e {
            Refused::Limits(EngineError::Precondition(reason)) => ImportError::validation(&reason, place),
            other => refused(other),
        };
        for (limit, value) in limits {
            let Some(value) = value.as_i64() else {
                let shown = match value {
                    JsonValue::String(s) => erlang::text(s),
                    other => other.to_string(),
                };
                return Err(ImportError::validation(
                    &format!("{limit} should be a number, actually was {shown}"),
                    place,
                ));
            };
            changes::set_limit(self.broker, scope, name, limit, value).await.map_err(store)?;
        }
        for limit in scope.known().iter().filter(|l| !limits.contains_key(**l)) {
            changes::clear_limit(self.broker, scope, name, limit).await.map_err(store)?;
        }
        Ok(())
    }

    async fn vhost(&self, object: &Map<String, JsonValue>, acting: Option<&str>) -> Result<(), ImportError> {
        let name = text(object, "name").ok_or_else(|| ImportError::Invalid("vhost without a name".into()))?;
        let empty = Map::new();
        let metadata = object.get("metadata").and_then(JsonValue::as_object).unwrap_or(&empty);
        if let Some(kind) = metadata.get("default_queue_type").filter(|k| !k.is_null() && k.as_str() != Some("classic"))
        {
            return Err(ImportError::Invalid(format!("unsupported default_queue_type {kind}: Charon's is classic")));
        }
        if object.get("tracing").and_then(JsonValue::as_bool) == Some(true) {
            return Err(ImportError::Invalid("tracing is not supported".into()));
        }
        let description = text(object, "description").or_else(|| text(metadata, "description")).unwrap_or_default();
        let tags = tags(object.get("tags").or_else(|| metadata.get("tags")))?;
        let info = VhostInfo { description: description.to_owned(), tags };
        changes::put_vhost(self.broker, name, info, acting).await.map(drop).map_err(refused)
    }

    /// The user and vhost of a permission, which must exist.
    fn permission_target<'o>(&self, object: &'o Map<String, JsonValue>) -> Result<(&'o str, &'o str), ImportError> {
        let user = text(object, "user").unwrap_or_default();
        let vhost = text(object, "vhost").unwrap_or_default();
        if self.broker.access().account(user).is_none() {
            return Err(ImportError::term("no_such_user", user));
        }
        if !self.broker.access().has_vhost(vhost) {
            return Err(ImportError::missing_vhost(vhost));
        }
        Ok((user, vhost))
    }

    async fn permission(&self, object: &Map<String, JsonValue>) -> Result<(), ImportError> {
        let (user, vhost) = self.permission_target(object)?;
        let pattern = |key: &str| text(object, key).unwrap_or_default();
        let permission =
            Permission::new(pattern("configure"), pattern("write"), pattern("read")).map_err(ImportError::access)?;
        changes::set_permission(self.broker, vhost, user, permission).await.map_err(refused)
    }

    async fn topic_permission(&self, object: &Map<String, JsonValue>) -> Result<(), ImportError> {
        let (user, vhost) = self.permission_target(object)?;
        let pattern = |key: &str| text(object, key).unwrap_or_default();
        let patterns = (pattern("write"), pattern("read"));
        changes::set_topic_permission(self.broker, (vhost, user), pattern("exchange"), patterns).await.map_err(refused)
    }

    async fn exchange(&self, object: &Map<String, JsonValue>) -> Result<(), ImportError> {
        let name = text(object, "name").unwrap_or_default();
        if name.is_empty() || name.starts_with("amq.") {
            tracing::warn!(exchange = name, "skipping the import of a default or amq.* exchange");
            return Ok(());
        }
        let vhost = self.vhost_of(object)?;
        let kind = text(object, "type").unwrap_or("undefined");
        if ExchangeKind::parse(kind).is_err() {
            return Err(ImportError::Invalid(format!("precondition_failed: unknown exchange type '{kind}'")));
        }
        if vhost.exchange(name).is_some() {
            return Ok(());
        }
        let declare = ExchangeDeclare {
            name: name.to_owned(),
            kind: kind.to_owned(),
            passive: false,
            durable: flag(object, "durable", true)?,
            auto_delete: flag(object, "auto_delete", false)?,
            internal: flag(object, "internal", false)?,
            arguments: table(object, "arguments")?,
        };
        vhost.declare_exchange(&declare).await.map_err(ImportError::engine)
    }

    async fn policy(&self, object: &Map<String, JsonValue>) -> Result<(), ImportError> {
        let vhost = self.vhost_of(object)?;
        let Some(name) = text(object, "name") else {
            return Err(ImportError::Invalid(format!("policy in virtual host '{}' has undefined name", vhost.name())));
        };
        let place = format!("{}/{name}", vhost.name());
        let pattern = text(object, "pattern").unwrap_or_default();
        let apply_to = text(object, "apply-to").unwrap_or("all");
        let priority = match object.get("priority") {
            None | Some(JsonValue::Null) => 0,
            Some(p) => {
                p.as_i64().ok_or_else(|| ImportError::validation(&format!("{p} priority must be a number"), &place))?
            }
        };
        let definition = match object.get("definition") {
            Some(JsonValue::Object(_)) => table(object, "definition").map_err(|_| {
                let reason = format!("definition nested deeper than {} levels", charon_model::MAX_DEPTH);
                ImportError::validation(&reason, &place)
            })?,
            other => {
                let shown = other.and_then(from_json).as_ref().map_or_else(|| "undefined".into(), erlang::term);
                return Err(ImportError::validation(&format!("definition must be a dictionary: {shown}"), &place));
            }
        };
        let policy = Policy::new(name, pattern, apply_to, priority, definition)
            .map_err(|r| ImportError::validation(&r, &place))?;
        vhost.set_policy(policy).await.map(drop).map_err(|e| ImportError::Store(e.to_string()))
    }

    async fn parameter(&self, object: &Map<String, JsonValue>) -> Result<(), ImportError> {
        let vhost = self.vhost_of(object)?;
        let component = text(object, "component").unwrap_or("undefined");
        let name = text(object, "name").unwrap_or("undefined");
        let place = format!("{}/{component}/{name}", vhost.name());
        match (component, object.get("value")) {
            ("vhost-limits", Some(JsonValue::Object(limits))) => {
                self.limits(LimitScope::Vhost, vhost.name(), limits, &place).await
            }
            ("vhost-limits", other) => {
                let shown = other.map_or_else(|| "undefined".to_owned(), ToString::to_string);
                Err(ImportError::validation(&format!("{shown} is not a valid limits value"), &place))
            }
            ("operator_policy", value) => self.operator_policy(&vhost, name, value, &place).await,
            (other, _) => Err(ImportError::validation(&format!("component {other} not found"), &place)),
        }
    }

    /// An `operator_policy` runtime parameter, validated as RabbitMQ validates the parameter
    /// (`priority` is required here, unlike over HTTP; every failing field is reported).
    async fn operator_policy(
        &self,
        vhost: &VHost,
        name: &str,
        value: Option<&JsonValue>,
        place: &str,
    ) -> Result<(), ImportError> {
        let Some(JsonValue::Object(value)) = value else {
            let shown = value.and_then(from_json).as_ref().map_or_else(|| "undefined".into(), erlang::term);
            return Err(ImportError::validation(&format!("{name} not a list {shown}"), place));
        };
        let mut fields = PolicyFields::default();
        for (key, json) in value {
            let Some(term) = from_json(json) else {
                let reason = format!("{key} nested deeper than {} levels", charon_model::MAX_DEPTH);
                return Err(ImportError::validation(&reason, place));
            };
            match key.as_str() {
                "pattern" => fields.pattern = Some(term),
                "definition" => fields.definition = Some(term),
                "priority" => fields.priority = Some(term),
                "apply-to" => fields.apply_to = Some(term),
                _ => fields.unrecognised.insert(key.as_str(), term),
            }
        }
        let policy = Policy::from_fields(PolicyKind::Operator, name, fields)
            .map_err(|reason| ImportError::validation(&reason, place))?;
        vhost.set_policy(policy).await.map(drop).map_err(|e| ImportError::Store(e.to_string()))
    }

    async fn queue(&self, object: &Map<String, JsonValue>) -> Result<(), ImportError> {
        let name = text(object, "name").unwrap_or_default();
        if name.starts_with("amq.") {
            tracing::warn!(queue = name, "skipping the import of a queue whose name begins with 'amq.'");
            return Ok(());
        }
        let vhost = self.vhost_of(object)?;
        match vhost.queue(name, self.session) {
            Err(EngineError::NotFound(_)) => {}
            // There (an exclusive queue included): left as it is.
            _ => return Ok(()),
        }
        let declare = QueueDeclare {
            name: name.to_owned(),
            passive: false,
            durable: flag(object, "durable", true)?,
            exclusive: false,
            auto_delete: flag(object, "auto_delete", false)?,
            arguments: table(object, "arguments")?,
        };
        vhost.declare_queue(&declare, self.session).await.map(drop).map_err(ImportError::engine)
    }

    async fn binding(&self, object: &Map<String, JsonValue>) -> Result<(), ImportError> {
        let vhost = self.vhost_of(object)?;
        let source = text(object, "source").unwrap_or_default();
        let name = text(object, "destination").unwrap_or_default().to_owned();
        let (destination, kind) = match text(object, "destination_type") {
            Some("queue") => (Destination::Queue(name.clone()), "queue"),
            Some("exchange") => (Destination::Exchange(name.clone()), "exchange"),
            other => {
                return Err(ImportError::Invalid(format!("invalid destination_type {}", other.unwrap_or("undefined"))));
            }
        };
        let mut missing = Vec::new();
        if vhost.exchange(source).is_none() {
            missing.push(("exchange", source));
        }
        let found = match &destination {
            Destination::Queue(queue) => !matches!(vhost.queue(queue, self.session), Err(EngineError::NotFound(_))),
            Destination::Exchange(exchange) => vhost.exchange(exchange).is_some(),
        };
        if !found {
            missing.push((kind, &name));
        }
        if !missing.is_empty() {
            return Err(ImportError::resources_missing(vhost.name(), &missing));
        }
        let key = text(object, "routing_key").unwrap_or_default();
        let arguments = table(object, "arguments")?;
        vhost.bind(source, destination, key, &arguments, self.session).await.map_err(ImportError::engine)
    }
}

/// A global parameter: the exporting cluster's own are skipped, others refused.
fn global_parameter(object: &Map<String, JsonValue>) -> Result<(), ImportError> {
    let name = text(object, "name").unwrap_or("undefined");
    if CLUSTER_PARAMETERS.contains(&name) {
        tracing::info!(parameter = name, "skipping the exporting cluster's global parameter");
        Ok(())
    } else {
        Err(ImportError::Invalid(format!(
            "global parameter {name} is not supported: Charon has no global runtime parameters"
        )))
    }
}

/// An import's error for a change not made.
fn refused(refused: Refused) -> ImportError {
    match refused {
        Refused::Access(e) => ImportError::access(e),
        Refused::Limits(e) => ImportError::engine(e),
        Refused::Cluster(e) => ImportError::Store(e.to_string()),
    }
}
