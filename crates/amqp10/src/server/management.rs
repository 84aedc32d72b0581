//! The `/management` node: HTTP over AMQP on a link pair, as RabbitMQ 4's
//! `rabbit_amqp_management` implements it and `rabbitmq-amqp-python-client` uses it.
//! Requests carry the method in `subject`, the path in `to` and a map body; responses carry
//! the status in `subject` and correlate by `message-id`.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use charon_engine::{Binding, Destination, EngineError, ErrorKind, ExchangeDeclare, QueueDeclare, VHost};
use charon_model::{Table, Value};
use serde_amqp::Value as Amqp;
use serde_amqp::primitives::{Array, OrderedMap};

use super::address::percent_decode;
use super::session::Session;
use crate::codec::value::{from_amqp, to_amqp};
use crate::codec::{decode_value, parse_message};
use crate::proto::Connection;

/// The node name reported as a queue's leader.
const NODE: &str = "charon@localhost";

#[derive(Debug, Default)]
struct Pair {
    requests: Option<(u16, u32)>,
    responses: Option<(u16, u32)>,
    credit: u32,
    delivery_count: u32,
    waiting: VecDeque<Vec<u8>>,
}

/// Management link pairs by link name.
#[derive(Debug, Default)]
pub(crate) struct ManagementPairs {
    pairs: HashMap<String, Pair>,
}

impl ManagementPairs {
    pub(crate) fn attach_requests(&mut self, name: &str, channel: u16, handle: u32) {
        self.pairs.entry(name.to_owned()).or_default().requests = Some((channel, handle));
    }

    pub(crate) fn attach_responses(&mut self, name: &str, channel: u16, handle: u32) {
        let pair = self.pairs.entry(name.to_owned()).or_default();
        pair.responses = Some((channel, handle));
        pair.delivery_count = super::attach::INITIAL_DELIVERY_COUNT;
    }

    pub(crate) fn forget(&mut self, name: &str, channel: u16, handle: u32) {
        if let Some(pair) = self.pairs.get_mut(name) {
            if pair.requests == Some((channel, handle)) {
                pair.requests = None;
            }
            if pair.responses == Some((channel, handle)) {
                pair.responses = None;
            }
            if pair.requests.is_none() && pair.responses.is_none() {
                self.pairs.remove(name);
            }
        }
    }
}

/// A management error: an HTTP status and RabbitMQ's explanation.
struct Status(&'static str, String);

fn engine_status(error: &EngineError) -> Status {
    let status = match error.kind() {
        ErrorKind::PreconditionFailed => "409",
        ErrorKind::NotFound => "404",
        ErrorKind::AccessRefused => "403",
        _ => "400",
    };
    Status(status, error.to_string())
}

fn text(value: &str) -> Amqp {
    Amqp::String(value.to_owned())
}

fn map(entries: Vec<(&str, Amqp)>) -> Amqp {
    let mut out = OrderedMap::new();
    for (k, v) in entries {
        out.insert(text(k), v);
    }
    Amqp::Map(out)
}

fn field<'a>(body: &'a Amqp, key: &str) -> Option<&'a Amqp> {
    match body {
        Amqp::Map(m) => m.get(&text(key)),
        _ => None,
    }
}

fn bool_field(body: &Amqp, key: &str, default: bool) -> Result<bool, Status> {
    match field(body, key) {
        None => Ok(default),
        Some(Amqp::Bool(b)) => Ok(*b),
        Some(other) => Err(Status("400", format!("bad property {key} {other:?}"))),
    }
}

fn arguments(body: &Amqp) -> Table {
    match field(body, "arguments") {
        Some(Amqp::Map(m)) => m
            .iter()
            .filter_map(|(k, v)| match k {
                Amqp::String(key) => Some((key.clone(), from_amqp(v))),
                Amqp::Symbol(s) => Some((s.as_str().to_owned(), from_amqp(v))),
                _ => None,
            })
            .map(|(k, v)| (k, to_091_argument(v)))
            .collect(),
        _ => Table::new(),
    }
}

/// 1.0 argument values as a 0.9.1 declare would carry them (`mc_amqpl:to_091`).
fn to_091_argument(value: Value) -> Value {
    match value {
        Value::String(s) | Value::Symbol(s) => Value::long_str(&s),
        Value::U64(n) => Value::I64(i64::try_from(n).unwrap_or(i64::MAX)),
        other => other,
    }
}

fn arguments_map(table: &Table) -> Amqp {
    let mut out = OrderedMap::new();
    for (k, v) in table.iter() {
        out.insert(text(k), to_amqp(v));
    }
    Amqp::Map(out)
}

fn binding_location(binding_source: &str, destination: &Destination, key: &str, args: &Table) -> String {
    let (kind, name) = match destination {
        Destination::Queue(q) => ('q', q.as_str()),
        Destination::Exchange(x) => ('e', x.as_str()),
    };
    format!(
        "/bindings/src={};dst{kind}={};key={};args={}",
        quote(binding_source),
        quote(name),
        quote(key),
        args_hash(args)
    )
}

/// Percent-encodes everything but unreserved characters (RFC 3986), like `uri_string:quote`.
fn quote(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => char::from(b).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// A stable hash identifying a binding's arguments in its location (empty when there are
/// none, as in RabbitMQ; the hash itself is ours).
fn args_hash(args: &Table) -> String {
    if args.is_empty() {
        return String::new();
    }
    let mut hash: u32 = 0x811c_9dc5;
    for byte in format!("{args:?}").bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash.to_be_bytes()
        .iter()
        .map(|b| {
            const URLSAFE: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
            char::from(URLSAFE.get(usize::from(b % 64)).copied().unwrap_or(b'A'))
        })
        .collect()
}

fn binding_map(source: &str, binding: &Binding) -> Amqp {
    let (dst_key, dst) = match &binding.destination {
        Destination::Queue(q) => ("destination_queue", q.clone()),
        Destination::Exchange(x) => ("destination_exchange", x.clone()),
    };
    map(vec![
        ("source", text(source)),
        (dst_key, Amqp::String(dst)),
        ("binding_key", text(&binding.key)),
        ("arguments", arguments_map(&binding.arguments)),
        ("location", Amqp::String(binding_location(source, &binding.destination, &binding.key, &binding.arguments))),
    ])
}

fn string_field(body: &Amqp, key: &str) -> Option<String> {
    match field(body, key) {
        Some(Amqp::String(s)) => Some(s.clone()),
        _ => None,
    }
}

impl Session {
    async fn queue_info(&self, vhost: &VHost, name: &str) -> Result<Amqp, Status> {
        let queue = vhost
            .queue(name, self.id)
            .map_err(|_| Status("404", format!("queue '{name}' in vhost '{}' not found", vhost.name())))?;
        let stats = queue.stats().await.map_err(|e| engine_status(&e))?;
        let config = &queue.config;
        Ok(map(vec![
            ("leader", text(NODE)),
            ("replicas", Amqp::Array(Array::from(vec![text(NODE)]))),
            ("message_count", Amqp::Ulong(u64::from(stats.ready))),
            ("consumer_count", Amqp::Uint(stats.consumers)),
            ("name", text(name)),
            ("vhost", text(vhost.name())),
            ("durable", Amqp::Bool(config.durable)),
            ("auto_delete", Amqp::Bool(config.auto_delete)),
            ("exclusive", Amqp::Bool(config.exclusive_owner.is_some())),
            ("type", text(config.queue_type.as_str())),
            ("arguments", arguments_map(&config.arguments)),
        ]))
    }

    async fn handle_http(&mut self, method: &str, target: &str, body: &Amqp) -> Result<(&'static str, Amqp), Status> {
        let vhost = self.vhost.clone().ok_or(Status("500", "no vhost".to_owned()))?;
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let segments: Vec<&str> = path.split('/').skip(1).collect();
        match (method, segments.as_slice()) {
            ("GET", ["queues", name]) => {
                let name = percent_decode(name).unwrap_or_default();
                Ok(("200", self.queue_info(&vhost, &name).await?))
            }
            ("PUT", ["queues", name]) => {
                let name = percent_decode(name).unwrap_or_default();
                if name.is_empty() {
                    return Err(Status("400", "declare queue with empty name not allowed".to_owned()));
                }
                if name.starts_with("amq.") {
                    return Err(Status(
                        "403",
                        format!("queue '{name}' in vhost '{}' starts with reserved prefix 'amq.'", vhost.name()),
                    ));
                }
                let declare = QueueDeclare {
                    name: name.clone(),
                    passive: false,
                    durable: bool_field(body, "durable", true)?,
                    exclusive: bool_field(body, "exclusive", false)?,
                    auto_delete: bool_field(body, "auto_delete", false)?,
                    arguments: arguments(body),
                };
                let ok = vhost.declare_queue(&declare, self.id).await.map_err(|e| match e.kind() {
                    ErrorKind::PreconditionFailed => Status("409", e.to_string()),
                    _ => Status("400", e.to_string()),
                })?;
                let status = if ok.created { "201" } else { "200" };
                Ok((status, self.queue_info(&vhost, &name).await?))
            }
            ("DELETE", ["queues", name, "messages"]) => {
                let name = percent_decode(name).unwrap_or_default();
                let queue = vhost.queue(&name, self.id).map_err(|e| Status("400", e.to_string()))?;
                let count = queue.purge().await.map_err(|e| Status("400", e.to_string()))?;
                Ok(("200", map(vec![("message_count", Amqp::Ulong(u64::from(count)))])))
            }
            ("DELETE", ["queues", name]) => {
                let name = percent_decode(name).unwrap_or_default();
                let count =
                    vhost.delete_queue(&name, self.id, false, false).await.map_err(|e| Status("400", e.to_string()))?;
                Ok(("200", map(vec![("message_count", Amqp::Ulong(u64::from(count)))])))
            }
            ("PUT", ["exchanges", name]) => {
                let name = percent_decode(name).unwrap_or_default();
                if name.is_empty() {
                    return Err(Status("403", "operation not permitted on the default exchange".to_owned()));
                }
                if name.starts_with("amq.") && vhost.exchange(&name).is_none() {
                    return Err(Status(
                        "403",
                        format!("exchange '{name}' in vhost '{}' starts with reserved prefix 'amq.'", vhost.name()),
                    ));
                }
                let declare = ExchangeDeclare {
                    name,
                    kind: string_field(body, "type").unwrap_or_else(|| "direct".to_owned()),
                    passive: false,
                    durable: bool_field(body, "durable", true)?,
                    auto_delete: bool_field(body, "auto_delete", false)?,
                    internal: bool_field(body, "internal", false)?,
                    arguments: arguments(body),
                };
                vhost.declare_exchange(&declare).map_err(|e| match e {
                    EngineError::Inequivalent(_) => Status("409", e.to_string()),
                    other => Status("400", other.to_string()),
                })?;
                Ok(("204", Amqp::Null))
            }
            ("DELETE", ["exchanges", name]) => {
                let name = percent_decode(name).unwrap_or_default();
                if name.is_empty() {
                    return Err(Status("403", "operation not permitted on the default exchange".to_owned()));
                }
                if name.starts_with("amq.") {
                    return Err(Status(
                        "403",
                        format!("exchange '{name}' in vhost '{}' starts with reserved prefix 'amq.'", vhost.name()),
                    ));
                }
                vhost.delete_exchange(&name, false).map_err(|e| Status("400", e.to_string()))?;
                Ok(("204", Amqp::Null))
            }
            ("POST", ["bindings"]) => {
                let source = string_field(body, "source").unwrap_or_default();
                let key = string_field(body, "binding_key").unwrap_or_default();
                let destination =
                    match (string_field(body, "destination_queue"), string_field(body, "destination_exchange")) {
                        (Some(q), _) => Destination::Queue(q),
                        (None, Some(x)) => Destination::Exchange(x),
                        (None, None) => return Err(Status("400", "missing destination".to_owned())),
                    };
                vhost
                    .bind(&source, destination, &key, &arguments(body), self.id)
                    .map_err(|e| Status("400", e.to_string()))?;
                Ok(("204", Amqp::Null))
            }
            ("DELETE", ["bindings", segment]) => {
                let (source, destination, key, hash) = parse_binding_segment(segment)
                    .ok_or_else(|| Status("400", format!("bad binding path segment '{segment}'")))?;
                let found = vhost
                    .bindings_between(&source, &destination)
                    .into_iter()
                    .find(|b| b.key == key && args_hash(&b.arguments) == hash);
                if let Some(binding) = found {
                    vhost
                        .unbind(&source, binding.destination, &binding.key, &binding.arguments, self.id)
                        .map_err(|e| Status("400", e.to_string()))?;
                }
                Ok(("204", Amqp::Null))
            }
            ("GET", ["bindings"]) => {
                let params: HashMap<String, String> = query
                    .split('&')
                    .filter_map(|kv| kv.split_once('='))
                    .filter_map(|(k, v)| Some((k.to_owned(), percent_decode(v)?)))
                    .collect();
                let source = params.get("src").cloned().unwrap_or_default();
                let key = params.get("key").cloned().unwrap_or_default();
                let destination = match (params.get("dstq"), params.get("dste")) {
                    (Some(q), _) => Destination::Queue(q.clone()),
                    (None, Some(x)) => Destination::Exchange(x.clone()),
                    _ => {
                        return Err(Status("400", format!("missing 'dste' or 'dstq' in query: {query}")));
                    }
                };
                let list: Vec<Amqp> = vhost
                    .bindings_between(&source, &destination)
                    .iter()
                    .filter(|b| b.key == key)
                    .map(|b| binding_map(&source, b))
                    .collect();
                Ok(("200", Amqp::List(list)))
            }
            _ => Err(Status("400", format!("unsupported request {method} {target}"))),
        }
    }

    /// Handles one request and queues its response on the pair's response link.
    pub(crate) async fn management_request(&mut self, pair: &str, payload: &Bytes, conn: &mut Connection) {
        let Ok(parsed) = parse_message(payload) else {
            return;
        };
        let Some(properties) = parsed.properties.clone() else {
            return;
        };
        let method = properties.subject.clone().unwrap_or_default();
        let target = properties.to.clone().unwrap_or_default();
        let body = match decode_value(&parsed.body_sections) {
            Ok(Amqp::Described(d)) => d.value,
            _ => Amqp::Null,
        };
        let (status, response) = match self.handle_http(&method, &target, &body).await {
            Ok(ok) => ok,
            Err(Status(status, explanation)) => {
                tracing::warn!(method, target, explanation, "management request failed");
                (status, Amqp::String(explanation))
            }
        };
        let mut message = Vec::new();
        let correlation = properties.message_id.map(|id| crate::codec::encode_value(&id)).unwrap_or_else(|| vec![0x40]);
        response_sections(&mut message, status, &correlation, &response);
        let Some(entry) = self.management_pair(pair) else {
            return;
        };
        entry.waiting.push_back(message);
        self.send_management_responses(pair, conn);
    }

    fn management_pair(&mut self, pair: &str) -> Option<&mut Pair> {
        self.management.pairs.get_mut(pair)
    }

    /// The client granted credit on a response link.
    pub(crate) fn management_credit(
        &mut self,
        pair: &str,
        delivery_count: Option<u32>,
        link_credit: u32,
        drain: bool,
        echo: bool,
        conn: &mut Connection,
    ) {
        let Some(entry) = self.management_pair(pair) else {
            return;
        };
        let rcv = delivery_count.unwrap_or(super::attach::INITIAL_DELIVERY_COUNT);
        let limit = rcv.wrapping_add(link_credit);
        let left = limit.wrapping_sub(entry.delivery_count);
        entry.credit = if left > link_credit { 0 } else { left };
        self.send_management_responses(pair, conn);
        let Some(entry) = self.management_pair(pair) else {
            return;
        };
        if drain {
            entry.delivery_count = entry.delivery_count.wrapping_add(entry.credit);
            entry.credit = 0;
        }
        if drain || echo {
            let (count, credit) = (entry.delivery_count, entry.credit);
            if let Some((channel, handle)) = entry.responses {
                conn.consumer_flow(channel, handle, count, credit, drain, 0);
            }
        }
    }

    fn send_management_responses(&mut self, pair: &str, conn: &mut Connection) {
        let Some(entry) = self.management_pair(pair) else {
            return;
        };
        let Some((channel, handle)) = entry.responses else {
            return;
        };
        while entry.credit > 0 {
            let Some(message) = entry.waiting.pop_front() else {
                break;
            };
            entry.credit -= 1;
            entry.delivery_count = entry.delivery_count.wrapping_add(1);
            conn.send_transfer(channel, handle, &[], true, &message);
        }
    }
}

/// Response sections: properties (subject = status, correlation-id = request message-id),
/// application-properties `http:response = 1.1`, and an `amqp-value` body.
fn response_sections(out: &mut Vec<u8>, status: &str, correlation_id: &[u8], body: &Amqp) {
    // properties: described list [message-id, user-id, to, subject, reply-to, correlation-id]
    let mut fields = Vec::new();
    fields.extend([0x40, 0x40, 0x40]);
    fields.extend(crate::codec::encode_value(&Amqp::String(status.to_owned())));
    fields.push(0x40);
    fields.extend_from_slice(correlation_id);
    out.extend([0x00, 0x53, 0x73, 0xd0]);
    out.extend(u32::try_from(fields.len() + 4).unwrap_or(0).to_be_bytes());
    out.extend(6u32.to_be_bytes());
    out.extend(fields);
    let mut app = OrderedMap::new();
    app.insert(text("http:response"), text("1.1"));
    out.extend([0x00, 0x53, 0x74]);
    out.extend(crate::codec::encode_value(&Amqp::Map(app)));
    out.extend([0x00, 0x53, 0x77]);
    out.extend(crate::codec::encode_value(body));
}

fn parse_binding_segment(segment: &str) -> Option<(String, Destination, String, String)> {
    let mut source = None;
    let mut destination = None;
    let mut key = None;
    let mut args = None;
    for part in segment.split(';') {
        let (name, value) = part.split_once('=')?;
        match name {
            "src" => source = Some(percent_decode(value)?),
            "dstq" => destination = Some(Destination::Queue(percent_decode(value)?)),
            "dste" => destination = Some(Destination::Exchange(percent_decode(value)?)),
            "key" => key = Some(percent_decode(value)?),
            "args" => args = Some(value.to_owned()),
            _ => return None,
        }
    }
    Some((source?, destination?, key?, args?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_locations_round_trip() {
        let location = binding_location("e 1", &Destination::Queue("q/1".into()), "k", &Table::new());
        assert_eq!(location, "/bindings/src=e%201;dstq=q%2F1;key=k;args=");
        let segment = location.trim_start_matches("/bindings/");
        assert_eq!(
            parse_binding_segment(segment),
            Some(("e 1".into(), Destination::Queue("q/1".into()), "k".into(), String::new()))
        );
    }
}
