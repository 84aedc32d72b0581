//! The `/management` node's routes, with RabbitMQ 4.0.5's statuses, bodies and checks in its
//! order (`rabbit_amqp_management:handle_http_req/8`).
//!
//! Where RabbitMQ 4.0.5 has no answer and crashes the session (an unknown method or path, a
//! binding without destination, `GET /bindings` without `dste`/`dstq`), Charon answers 400.

use std::collections::HashMap;
use std::sync::Arc;

use charon_engine::{
    Action, Binding, Broker, Client, Destination, EngineError, ExchangeDeclare, ExchangeKind, Principal, QueueDeclare,
    Resource, ResourceKind, VHost,
};
use serde_amqp::Value as Amqp;
use serde_amqp::primitives::Array;

use super::management_body::{
    Status, Target, arguments_map, bad, binding_location, decode, decode_binding, decode_exchange, decode_queue, map,
    parse_binding_segment, parse_target, prohibit_cr_lf, sorted, text,
};

/// The node name reported as a queue's leader.
const NODE: &str = "charon@localhost";

/// A successful answer: status and body.
type Answer = Result<(&'static str, Amqp), Refusal>;

/// Why a request got no successful answer.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// An HTTP status and explanation, sent as the response.
    Status(Status),
    /// A permission refusal: RabbitMQ's `check_resource_access` raises it inside the session
    /// process, so the session ends with `amqp:unauthorized-access` and no response is sent.
    Unauthorized(String),
}

impl From<Status> for Refusal {
    fn from(status: Status) -> Self {
        Self::Status(status)
    }
}

/// Engine errors of an operation that checks permissions as it goes (a declare): refusals
/// end the session, the rest become statuses.
fn checked(error: EngineError, status: impl FnOnce(EngineError) -> Status) -> Refusal {
    match error {
        EngineError::PermissionRefused { .. } => Refusal::Unauthorized(error.to_string()),
        other => Refusal::Status(status(other)),
    }
}

/// `prohibit_reserved_amq/1`.
fn prohibit_reserved(kind: &str, name: &str, vhost: &VHost) -> Result<(), Status> {
    if name.starts_with("amq.") {
        return Err(Status(
            "403",
            format!("{kind} '{name}' in vhost '{}' starts with reserved prefix 'amq.'", vhost.name()),
        ));
    }
    Ok(())
}

fn default_exchange() -> Status {
    Status("403", "operation not permitted on the default exchange".to_owned())
}

/// Queue declare errors: precondition failures are 409, except the properties a queue type
/// refuses (`{protocol_error, ...}` from `rabbit_queue_type:declare/2`), which are 400, and a
/// vhost's queue limit, 403.
fn declare_status(error: &EngineError) -> Status {
    let text = error.to_string();
    match error {
        EngineError::Inequivalent(_) => Status("409", text),
        EngineError::Precondition(t) if t.starts_with("invalid property '") => bad(text),
        EngineError::Precondition(_) => Status("409", text),
        // RabbitMQ 4.0.5 answers a vhost's max-queues with 403 here (observed).
        EngineError::QueueLimit { .. } => Status("403", text),
        _ => bad(text),
    }
}

fn message_count(count: u32) -> Amqp {
    map(vec![("message_count", Amqp::Ulong(u64::from(count)))])
}

fn binding_map(source: &str, binding: &Binding) -> Amqp {
    let (dst_key, dst) = match &binding.destination {
        Destination::Queue(q) => ("destination_queue", q),
        Destination::Exchange(x) => ("destination_exchange", x),
    };
    map(vec![
        ("source", text(source)),
        (dst_key, text(dst)),
        ("binding_key", text(&binding.key)),
        ("arguments", arguments_map(&binding.arguments)),
        ("location", text(&binding_location(source, &binding.destination, &binding.key, &binding.arguments))),
    ])
}

/// `binding_checks/5`: neither end may be the default exchange or hold CR/LF.
fn binding_checks(source: &str, destination: &Destination) -> Result<(), Status> {
    if source.is_empty() {
        return Err(default_exchange());
    }
    prohibit_cr_lf(source)?;
    let name = match destination {
        Destination::Exchange(x) if x.is_empty() => return Err(default_exchange()),
        Destination::Exchange(x) => x,
        Destination::Queue(q) => q,
    };
    prohibit_cr_lf(name)
}

/// The HTTP-over-AMQP requests of the `/management` node, over what they need of the
/// connection: its broker and client (user, vhost, id), and the durability each exclusive
/// queue was declared with (RabbitMQ reports that, though such a queue never outlives the
/// connection).
pub(super) struct HttpApi<'a> {
    pub(super) broker: &'a Broker,
    pub(super) client: &'a Client,
    pub(super) exclusive_durable: &'a mut HashMap<String, bool>,
}

impl HttpApi<'_> {
    /// Answers one request.
    pub(super) async fn handle(&mut self, method: &str, target: &str, body: &Amqp) -> Answer {
        let vhost = self.client.vhost().cloned().ok_or_else(|| Status("500", "no vhost".to_owned()))?;
        let Target { segments, query } = parse_target(target)?;
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        match (method, segments.as_slice()) {
            ("GET", ["queues", name]) => {
                let name = decode(name)?;
                Ok(("200", self.queue_info(&vhost, &name).await?))
            }
            ("PUT", ["queues", name]) => self.put_queue(&vhost, name, body).await,
            ("DELETE", ["queues", name, "messages"]) => {
                let name = decode(name)?;
                self.permit(Action::Read, ResourceKind::Queue, &name)?;
                let queue = vhost.queue(&name, self.client.id()).map_err(|e| bad(e.to_string()))?;
                let count = queue.purge().await.map_err(|e| bad(e.to_string()))?;
                Ok(("200", message_count(count)))
            }
            ("DELETE", ["queues", name]) => {
                let name = decode(name)?;
                prohibit_cr_lf(&name)?;
                self.permit(Action::Configure, ResourceKind::Queue, &name)?;
                let count =
                    vhost.delete_queue(&name, self.client.id(), false, false).await.map_err(|e| bad(e.to_string()))?;
                self.exclusive_durable.remove(&name);
                Ok(("200", message_count(count)))
            }
            ("PUT", ["exchanges", name]) => self.put_exchange(&vhost, name, body).await,
            ("DELETE", ["exchanges", name]) => {
                let name = decode(name)?;
                prohibit_cr_lf(&name)?;
                if name.is_empty() {
                    return Err(default_exchange().into());
                }
                prohibit_reserved("exchange", &name, &vhost)?;
                self.permit(Action::Configure, ResourceKind::Exchange, &name)?;
                vhost.delete_exchange(&name, false).await.map_err(|e| bad(e.to_string()))?;
                Ok(("204", Amqp::Null))
            }
            ("POST", ["bindings"]) => {
                let request = decode_binding(body)?;
                let source = request.source.ok_or_else(|| bad("missing source"))?;
                let destination = request.destination.ok_or_else(|| bad("missing destination"))?;
                let key = request.key.unwrap_or_default();
                binding_checks(&source, &destination)?;
                self.permit_binding(&vhost, &source, &destination, &key)?;
                let args = sorted(request.arguments);
                vhost
                    .bind(&source, destination, &key, &args, self.client.id())
                    .await
                    .map_err(|e| bad(e.to_string()))?;
                Ok(("204", Amqp::Null))
            }
            ("DELETE", ["bindings", segment]) => {
                let (source, destination, key, hash) = parse_binding_segment(segment)
                    .ok_or_else(|| bad(format!("bad binding path segment '{segment}'")))?;
                binding_checks(&source, &destination)?;
                self.permit_binding(&vhost, &source, &destination, &key)?;
                let found = vhost
                    .bindings_between(&source, &destination)
                    .into_iter()
                    .find(|b| b.key == key && charon_engine::exchange::arguments_hash(&b.arguments) == hash);
                if let Some(binding) = found {
                    vhost
                        .unbind(&source, binding.destination, &binding.key, &binding.arguments, self.client.id())
                        .await
                        .map_err(|e| bad(e.to_string()))?;
                }
                Ok(("204", Amqp::Null))
            }
            ("GET", ["bindings"]) => {
                let query_text = target.split_once('?').map(|(_, q)| q).unwrap_or_default();
                let (Some(source), Some(key)) = (query.get("src"), query.get("key")) else {
                    return Err(bad(format!("missing 'src' or 'key' in query: {query_text}")).into());
                };
                let destination = match (query.get("dste"), query.get("dstq")) {
                    (Some(x), _) => Destination::Exchange(x.clone()),
                    (None, Some(q)) => Destination::Queue(q.clone()),
                    (None, None) => return Err(bad(format!("missing 'dste' or 'dstq' in query: {query_text}")).into()),
                };
                let mut bindings: Vec<Binding> =
                    vhost.bindings_between(source, &destination).into_iter().filter(|b| &b.key == key).collect();
                bindings.sort_by_cached_key(|b| format!("{:?}", b.arguments));
                Ok(("200", Amqp::List(bindings.iter().map(|b| binding_map(source, b)).collect())))
            }
            _ => Err(bad(format!("unsupported request {method} {target}")).into()),
        }
    }

    /// The logged-in user, checked against the broker's permissions.
    fn principal(&self) -> Option<Principal<'_>> {
        self.client.user().map(|user| Principal::new(self.broker.access(), user))
    }

    /// `check_resource_access/4`.
    fn permit(&self, action: Action, kind: ResourceKind, name: &str) -> Result<(), Refusal> {
        let vhost = self.client.vhost().map_or("", |v| v.name());
        let resource = Resource { kind, vhost: vhost.to_owned(), name: name.to_owned() };
        let principal = self.principal().ok_or_else(|| Refusal::Unauthorized("not logged in".to_owned()))?;
        principal.check(action, &resource).map_err(|e| Refusal::Unauthorized(e.to_string()))
    }

    /// `binding_checks/5`'s permissions: write on the destination, read on the source, then
    /// the binding key on a topic exchange.
    fn permit_binding(&self, vhost: &VHost, source: &str, destination: &Destination, key: &str) -> Result<(), Refusal> {
        match destination {
            Destination::Queue(q) => self.permit(Action::Write, ResourceKind::Queue, q)?,
            Destination::Exchange(x) => self.permit(Action::Write, ResourceKind::Exchange, x)?,
        }
        self.permit(Action::Read, ResourceKind::Exchange, source)?;
        if let (Some(principal), Some(info)) = (self.principal(), vhost.exchange(source))
            && info.kind == ExchangeKind::Topic
        {
            principal
                .check_topic(Action::Read, vhost.name(), source, key)
                .map_err(|e| Refusal::Unauthorized(e.to_string()))?;
        }
        Ok(())
    }

    async fn queue_info(&self, vhost: &VHost, name: &str) -> Result<Amqp, Status> {
        let queue = vhost.queue(name, self.client.id()).map_err(|e| match e {
            EngineError::NotFound(_) => Status("404", format!("queue '{name}' in vhost '{}' not found", vhost.name())),
            other => bad(other.to_string()),
        })?;
        let stats = queue.stats().await.map_err(|e| bad(e.to_string()))?;
        let config = &queue.config;
        let durable = match config.exclusive_owner {
            Some(_) => self.exclusive_durable.get(name).copied().unwrap_or(config.durable),
            None => config.durable,
        };
        Ok(map(vec![
            ("leader", text(NODE)),
            ("replicas", Amqp::Array(Array::from(vec![text(NODE)]))),
            ("message_count", Amqp::Ulong(u64::from(stats.ready))),
            ("consumer_count", Amqp::Uint(stats.consumers)),
            ("name", text(name)),
            ("vhost", text(vhost.name())),
            ("durable", Amqp::Bool(durable)),
            ("auto_delete", Amqp::Bool(config.auto_delete)),
            ("exclusive", Amqp::Bool(config.exclusive_owner.is_some())),
            ("type", text(config.queue_type.as_str())),
            ("arguments", arguments_map(&config.arguments)),
        ]))
    }

    async fn put_queue(&mut self, vhost: &Arc<VHost>, segment: &str, body: &Amqp) -> Answer {
        let request = decode_queue(body)?;
        let name = decode(segment)?;
        if name.is_empty() {
            return Err(bad("declare queue with empty name not allowed").into());
        }
        prohibit_cr_lf(&name)?;
        prohibit_reserved("queue", &name, vhost)?;
        self.permit(Action::Configure, ResourceKind::Queue, &name)?;
        let existing = vhost.queue(&name, self.client.id());
        if let (Ok(queue), Some(&current)) = (&existing, self.exclusive_durable.get(&name))
            && queue.config.exclusive_owner.is_some()
            && current != request.durable
        {
            return Err(Refusal::Status(Status(
                "409",
                format!(
                    "inequivalent arg 'durable' for queue '{name}' in vhost '{}': received '{}' but current is '{current}'",
                    vhost.name(),
                    request.durable
                ),
            )));
        }
        if matches!(existing, Err(EngineError::NotFound(_))) {
            // `check_dead_letter_exchange/4`, before the declare.
            if let Some(dlx) = request.arguments.get("x-dead-letter-exchange")
                && !matches!(dlx, charon_model::Value::LongStr(_))
            {
                return Err(
                    bad(format!("invalid type '{}' for arg 'x-dead-letter-exchange'", dlx.rabbit_type_name())).into()
                );
            }
        }
        let declare = QueueDeclare {
            name: name.clone(),
            passive: false,
            durable: request.durable,
            exclusive: request.exclusive,
            auto_delete: request.auto_delete,
            arguments: request.arguments,
        };
        // The engine checks the dead-letter rule for a queue it creates.
        let ok = vhost
            .declare_queue_as(&declare, self.client.id(), self.principal())
            .await
            .map_err(|e| checked(e, |e| declare_status(&e)))?;
        if ok.created && declare.exclusive {
            self.exclusive_durable.insert(name.clone(), declare.durable);
        }
        let status = if ok.created { "201" } else { "200" };
        Ok((status, self.queue_info(vhost, &name).await?))
    }

    async fn put_exchange(&self, vhost: &VHost, segment: &str, body: &Amqp) -> Answer {
        let name = decode(segment)?;
        let request = decode_exchange(body)?;
        ExchangeKind::parse(&request.kind).map_err(|e| bad(e.to_string()))?;
        if name.is_empty() {
            return Err(default_exchange().into());
        }
        self.permit(Action::Configure, ResourceKind::Exchange, &name)?;
        if vhost.exchange(&name).is_none() {
            prohibit_cr_lf(&name)?;
            prohibit_reserved("exchange", &name, vhost)?;
        }
        let declare = ExchangeDeclare {
            name,
            kind: request.kind,
            passive: false,
            durable: request.durable,
            auto_delete: request.auto_delete,
            internal: request.internal,
            arguments: request.arguments,
        };
        vhost.declare_exchange_as(&declare, self.principal()).await.map_err(|e| {
            checked(e, |e| match e {
                EngineError::Inequivalent(_) => Status("409", e.to_string()),
                other => bad(other.to_string()),
            })
        })?;
        Ok(("204", Amqp::Null))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vhost_queue_limit_is_403_as_rabbitmq_answers_it() {
        let error = EngineError::QueueLimit { queue: "q".into(), vhost: "/".into(), max: 1 };
        let Status(code, text) = declare_status(&error);
        assert_eq!((code, text.as_str()), ("403", "cannot declare queue 'q': queue limit in vhost '/' (1) is reached"));
    }
}
