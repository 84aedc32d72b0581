//! Request parsing for the `/management` node: the request target (RabbitMQ normalizes it as
//! a URI first), the map bodies of queue, exchange and binding requests, arguments converted
//! as `mc_amqpl:to_091/2` does, and binding locations. Refusals carry RabbitMQ 4.0.5's status
//! and text, including its Erlang rendering (`~tp`) of the offending term.

use std::collections::HashMap;

use charon_engine::Destination;
use charon_model::erlang;
use charon_model::{Table, Value};
use serde_amqp::Value as Amqp;
use serde_amqp::primitives::OrderedMap;

use super::address::percent_decode;
use crate::codec::value::to_amqp;

/// A management error: an HTTP status and RabbitMQ's explanation.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Status(pub(super) &'static str, pub(super) String);

/// A `400 Bad Request`.
pub(super) fn bad(text: impl Into<String>) -> Status {
    Status("400", text.into())
}

/// A UTF-8 string value.
pub(super) fn text(value: &str) -> Amqp {
    Amqp::String(value.to_owned())
}

/// A map with string keys in the given order.
pub(super) fn map(entries: Vec<(&str, Amqp)>) -> Amqp {
    let mut out = OrderedMap::new();
    for (k, v) in entries {
        out.insert(text(k), v);
    }
    Amqp::Map(out)
}

/// What a `PUT /queues/:queue` body asks for.
#[derive(Debug)]
pub(super) struct QueueBody {
    pub(super) durable: bool,
    pub(super) exclusive: bool,
    pub(super) auto_delete: bool,
    pub(super) arguments: Table,
}

/// What a `PUT /exchanges/:exchange` body asks for.
#[derive(Debug)]
pub(super) struct ExchangeBody {
    pub(super) kind: String,
    pub(super) durable: bool,
    pub(super) auto_delete: bool,
    pub(super) internal: bool,
    pub(super) arguments: Table,
}

/// What a `POST /bindings` body asks for.
#[derive(Debug)]
pub(super) struct BindingBody {
    pub(super) source: Option<String>,
    pub(super) destination: Option<Destination>,
    pub(super) key: Option<String>,
    pub(super) arguments: Table,
}

/// The entries of a map body; `null` counts as an empty map (RabbitMQ crashes on it).
fn entries<'a>(body: &'a Amqp, what: &str) -> Result<Vec<(&'a Amqp, &'a Amqp)>, Status> {
    match body {
        Amqp::Map(m) => Ok(m.iter().collect()),
        Amqp::Null => Ok(Vec::new()),
        other => Err(bad(format!("bad {what} body {}", term(other)))),
    }
}

fn key_of(k: &Amqp) -> Option<&str> {
    match k {
        Amqp::String(s) => Some(s.as_str()),
        _ => None,
    }
}

/// `decode_queue/1`: known keys with the right types, in wire order; anything else is a 400.
pub(super) fn decode_queue(body: &Amqp) -> Result<QueueBody, Status> {
    let mut out = QueueBody { durable: true, exclusive: false, auto_delete: false, arguments: Table::new() };
    for (k, v) in entries(body, "queue")? {
        match (key_of(k), v) {
            (Some("durable"), Amqp::Bool(b)) => out.durable = *b,
            (Some("exclusive"), Amqp::Bool(b)) => out.exclusive = *b,
            (Some("auto_delete"), Amqp::Bool(b)) => out.auto_delete = *b,
            (Some("arguments"), args) => out.arguments = arguments(args)?,
            _ => return Err(bad(format!("bad queue property {{{},{}}}", term(k), term(v)))),
        }
    }
    Ok(out)
}

/// `decode_exchange/1`.
pub(super) fn decode_exchange(body: &Amqp) -> Result<ExchangeBody, Status> {
    let mut out = ExchangeBody {
        kind: "direct".to_owned(),
        durable: true,
        auto_delete: false,
        internal: false,
        arguments: Table::new(),
    };
    for (k, v) in entries(body, "exchange")? {
        match (key_of(k), v) {
            (Some("durable"), Amqp::Bool(b)) => out.durable = *b,
            (Some("auto_delete"), Amqp::Bool(b)) => out.auto_delete = *b,
            (Some("internal"), Amqp::Bool(b)) => out.internal = *b,
            (Some("type"), Amqp::String(s)) => out.kind.clone_from(s),
            (Some("arguments"), args) => out.arguments = arguments(args)?,
            _ => return Err(bad(format!("bad exchange property {{{},{}}}", term(k), term(v)))),
        }
    }
    Ok(out)
}

/// `decode_binding/1`.
pub(super) fn decode_binding(body: &Amqp) -> Result<BindingBody, Status> {
    let mut out = BindingBody { source: None, destination: None, key: None, arguments: Table::new() };
    let (mut queue, mut exchange) = (None, None);
    for (k, v) in entries(body, "binding")? {
        match (key_of(k), v) {
            (Some("source"), Amqp::String(s)) => out.source = Some(s.clone()),
            (Some("destination_queue"), Amqp::String(s)) => queue = Some(s.clone()),
            (Some("destination_exchange"), Amqp::String(s)) => exchange = Some(s.clone()),
            (Some("binding_key"), Amqp::String(s)) => out.key = Some(s.clone()),
            (Some("arguments"), args) => out.arguments = arguments(args)?,
            _ => return Err(bad(format!("bad binding field {{{},{}}}", term(k), term(v)))),
        }
    }
    // A queue destination wins when both are given, as in RabbitMQ.
    out.destination = queue.map(Destination::Queue).or(exchange.map(Destination::Exchange));
    Ok(out)
}

/// `args_amqp_to_amqpl/1`: string or symbol keys, values as `mc_amqpl:to_091/2` maps them.
fn arguments(args: &Amqp) -> Result<Table, Status> {
    let Amqp::Map(m) = args else {
        return Err(bad(format!("unsupported arguments {}", term(args))));
    };
    let mut table = Table::new();
    for (k, v) in m.iter() {
        let key = match k {
            Amqp::String(s) => s.clone(),
            Amqp::Symbol(s) => s.as_str().to_owned(),
            _ => return Err(bad(format!("unsupported argument {{{},{}}}", term(k), term(v)))),
        };
        table.insert(key, to_091(v));
    }
    Ok(table)
}

/// One value as a 0.9.1 table value (`mc_amqpl:to_091/1`).
fn to_091(value: &Amqp) -> Value {
    match value {
        Amqp::String(s) => Value::long_str(s),
        Amqp::Symbol(s) => Value::long_str(s.as_str()),
        Amqp::Binary(b) => Value::LongStr(bytes::Bytes::copy_from_slice(b.as_ref())),
        Amqp::Long(n) => Value::I64(*n),
        Amqp::Ulong(n) => Value::I64(i64::try_from(*n).unwrap_or(i64::MAX)),
        Amqp::Byte(n) => Value::I8(*n),
        Amqp::Ubyte(n) => Value::U8(*n),
        Amqp::Short(n) => Value::I16(*n),
        Amqp::Ushort(n) => Value::U16(*n),
        Amqp::Uint(n) => Value::U32(*n),
        Amqp::Int(n) => Value::I32(*n),
        Amqp::Double(f) => Value::F64(f.into_inner()),
        Amqp::Float(f) => Value::F32(f.into_inner()),
        // 0.9.1 timestamps are whole seconds.
        Amqp::Timestamp(t) => Value::Timestamp(t.milliseconds() / 1000 * 1000),
        Amqp::Bool(b) => Value::Bool(*b),
        Amqp::Null => Value::Null,
        Amqp::List(items) => Value::List(items.iter().map(to_091).collect()),
        Amqp::Array(items) => Value::List(items.0.iter().map(to_091).collect()),
        Amqp::Map(m) => {
            let mut table = Table::new();
            for (k, v) in m.iter() {
                let key = match k {
                    Amqp::String(s) => s.clone(),
                    Amqp::Symbol(s) => s.as_str().to_owned(),
                    other => term(other),
                };
                table.insert(key, to_091(v));
            }
            Value::Table(table)
        }
        // No 0.9.1 form (RabbitMQ crashes): kept as the 1.0 value.
        other => crate::codec::value::from_amqp(other),
    }
}

/// Arguments as a response map: utf8 keys, values as `mc_amqpl:from_091/2` maps them.
pub(super) fn arguments_map(table: &Table) -> Amqp {
    let mut out = OrderedMap::new();
    for (k, v) in table.iter() {
        out.insert(text(k), from_091(v));
    }
    Amqp::Map(out)
}

/// `mc_amqpl:from_091/2`: long strings over 4096 bytes stay binary.
fn from_091(value: &Value) -> Amqp {
    match value {
        Value::LongStr(b) if b.len() > 4096 => Amqp::Binary(b.to_vec().into()),
        other => to_amqp(other),
    }
}

/// Binding arguments sorted by key, as RabbitMQ stores them.
pub(super) fn sorted(table: Table) -> Table {
    let mut entries: Vec<(String, Value)> = table.iter().map(|(k, v)| (k.to_owned(), v.clone())).collect();
    entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut out = Table::new();
    for (k, v) in entries {
        out.insert(k, v);
    }
    out
}

/// `prohibit_cr_lf/1`.
pub(super) fn prohibit_cr_lf(name: &str) -> Result<(), Status> {
    if name.contains(['\n', '\r']) {
        return Err(bad(format!("Bad name '{name}': line feed and carriage return characters not allowed")));
    }
    Ok(())
}

/// A percent-decoded path segment or query value.
pub(super) fn decode(segment: &str) -> Result<String, Status> {
    percent_decode(segment).ok_or_else(|| bad(format!("failed to decode '{segment}'")))
}

/// A parsed request target: raw path segments after the leading `/`, and the query.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Target {
    pub(super) segments: Vec<String>,
    pub(super) query: HashMap<String, String>,
}

fn is_unreserved(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-._~".contains(c)
}

fn allowed(c: char, in_path: bool) -> bool {
    is_unreserved(c) || "!$&'()*+,;=:@/".contains(c) || (!in_path && c == '?')
}

/// `parse_uri/1`: RabbitMQ normalizes the target as a URI (`uri_string:normalize/2`) and
/// answers 400 for a character no URI may hold or a bad percent-encoding; dot segments are
/// removed and a fragment is ignored.
pub(super) fn parse_target(uri: &str) -> Result<Target, Status> {
    let refuse = |what: String| bad(format!("failed to normalize URI '{uri}': {what}"));
    // 0: path, 1: query, 2: fragment.
    let mut part = 0u8;
    for (i, c) in uri.char_indices() {
        match c {
            '?' if part == 0 => part = 1,
            '#' if part < 2 => part = 2,
            '%' => {
                let hex: String = uri.get(i + 1..).unwrap_or_default().chars().take(2).collect();
                if hex.chars().count() == 2 && !hex.chars().all(|h| h.is_ascii_hexdigit()) {
                    let bytes = format!("%{hex}");
                    return Err(refuse(format!(
                        "invalid_percent_encoding {}",
                        erlang::unicode_binary(bytes.as_bytes())
                    )));
                }
            }
            c if allowed(c, part == 0) => {}
            c => return Err(refuse(format!("invalid_uri {}", erlang::char_string(c)))),
        }
    }
    let without_fragment = uri.split('#').next().unwrap_or_default();
    let (path, query) = match without_fragment.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (without_fragment, None),
    };
    let path = strip_authority(path);
    let path = remove_dot_segments(path);
    let mut segments: Vec<String> = path.split('/').map(str::to_owned).collect();
    if segments.first().is_some_and(String::is_empty) {
        segments.remove(0);
    } else {
        return Err(bad(format!("bad request target '{uri}'")));
    }
    let mut params = HashMap::new();
    for pair in query.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let k = decode(&k.replace('+', " "))?;
        let v = decode(&v.replace('+', " "))?;
        params.insert(k, v);
    }
    Ok(Target { segments, query: params })
}

/// The path of an absolute URI (`scheme://host/path`) or network-path reference (`//host/path`).
fn strip_authority(path: &str) -> &str {
    let scheme_end = path.find("://").filter(|&i| {
        let scheme = path.get(..i).unwrap_or_default();
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    });
    let rest = match (scheme_end, path.strip_prefix("//")) {
        (Some(i), _) => path.get(i + 3..).unwrap_or_default(),
        (None, Some(rest)) => rest,
        (None, None) => return path,
    };
    rest.find('/').and_then(|i| rest.get(i..)).unwrap_or_default()
}

/// RFC 3986 §5.2.4 for an absolute path.
fn remove_dot_segments(path: &str) -> String {
    if !path.starts_with('/') {
        return path.to_owned();
    }
    let mut out: Vec<&str> = Vec::new();
    let parts: Vec<&str> = path.split('/').skip(1).collect();
    let last = parts.len().saturating_sub(1);
    for (i, part) in parts.iter().enumerate() {
        match *part {
            "." | ".." => {
                if *part == ".." {
                    out.pop();
                }
                if i == last {
                    out.push("");
                }
            }
            other => out.push(other),
        }
    }
    format!("/{}", out.join("/"))
}

/// A binding's location: `/bindings/src=…;dstq=…;key=…;args=…`.
pub(super) fn binding_location(source: &str, destination: &Destination, key: &str, args: &Table) -> String {
    let (kind, name) = match destination {
        Destination::Queue(q) => ('q', q.as_str()),
        Destination::Exchange(x) => ('e', x.as_str()),
    };
    format!(
        "/bindings/src={};dst{kind}={};key={};args={}",
        quote(source),
        quote(name),
        quote(key),
        charon_engine::exchange::arguments_hash(args)
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

/// A `DELETE /bindings/…` segment: `src=…;dst[eq]=…;key=…;args=…`, the names percent-encoded
/// and non-empty (RabbitMQ's regular expression), or `None`.
pub(super) fn parse_binding_segment(segment: &str) -> Option<(String, Destination, String, String)> {
    let name_ok = |s: &str, may_be_empty: bool| {
        (may_be_empty || !s.is_empty()) && s.chars().all(|c| is_unreserved(c) || c == '%')
    };
    let rest = segment.strip_prefix("src=")?;
    let (source, rest) = rest.split_once(";dst")?;
    let (kind, rest) = rest.split_at_checked(1)?;
    let (destination, rest) = rest.strip_prefix('=')?.split_once(";key=")?;
    let (key, hash) = rest.split_once(";args=")?;
    if !name_ok(source, false) || !name_ok(destination, false) || !name_ok(key, true) {
        return None;
    }
    if !hash.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return None;
    }
    let destination = percent_decode(destination)?;
    let destination = match kind {
        "q" => Destination::Queue(destination),
        "e" => Destination::Exchange(destination),
        _ => return None,
    };
    Some((percent_decode(source)?, destination, percent_decode(key)?, hash.to_owned()))
}

/// A value as RabbitMQ's AMQP 1.0 codec represents it, printed like Erlang's `~tp` on one line
/// (`{utf8,<<"bla">>}`, `{ulong,1}`, `true`, `null`).
pub(super) fn term(value: &Amqp) -> String {
    let tagged = |tag: &str, v: String| erlang::tuple(&[tag, &v]);
    let list = |items: &mut dyn Iterator<Item = String>| erlang::list(items);
    match value {
        Amqp::Null => "null".to_owned(),
        Amqp::Bool(b) => b.to_string(),
        Amqp::Ubyte(n) => tagged("ubyte", n.to_string()),
        Amqp::Ushort(n) => tagged("ushort", n.to_string()),
        Amqp::Uint(n) => tagged("uint", n.to_string()),
        Amqp::Ulong(n) => tagged("ulong", n.to_string()),
        Amqp::Byte(n) => tagged("byte", n.to_string()),
        Amqp::Short(n) => tagged("short", n.to_string()),
        Amqp::Int(n) => tagged("int", n.to_string()),
        Amqp::Long(n) => tagged("long", n.to_string()),
        Amqp::Float(f) => tagged("float", erlang::float(f64::from(f.into_inner()))),
        Amqp::Double(f) => tagged("double", erlang::float(f.into_inner())),
        Amqp::Char(c) => tagged("char", u32::from(*c).to_string()),
        Amqp::Timestamp(t) => tagged("timestamp", t.milliseconds().to_string()),
        Amqp::Uuid(u) => tagged("uuid", erlang::unicode_binary(u.as_inner())),
        Amqp::Binary(b) => tagged("binary", erlang::unicode_binary(b.as_ref())),
        Amqp::String(s) => tagged("utf8", erlang::unicode_binary(s.as_bytes())),
        Amqp::Symbol(s) => tagged("symbol", erlang::unicode_binary(s.as_str().as_bytes())),
        Amqp::List(items) => tagged("list", list(&mut items.iter().map(term))),
        Amqp::Map(m) => tagged("map", list(&mut m.iter().map(|(k, v)| erlang::tuple(&[term(k), term(v)])))),
        Amqp::Array(items) => format!("{{array,{}}}", list(&mut items.0.iter().map(term))),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
#[path = "management_body_tests.rs"]
mod tests;
