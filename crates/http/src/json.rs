//! JSON ↔ model values, as RabbitMQ's management API maps them.

use charon_model::{Table, Value};
use serde_json::Value as Json;

/// A JSON value from a request body (integers as `I64`, strings as long strings).
pub(crate) fn from_json(json: &Json) -> Value {
    match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::I64(i),
            None => Value::F64(n.as_f64().unwrap_or_default()),
        },
        Json::String(s) => Value::long_str(s),
        Json::Array(items) => Value::List(items.iter().map(from_json).collect()),
        Json::Object(map) => Value::Table(map.iter().map(|(k, v)| (k.clone(), from_json(v))).collect()),
    }
}

/// A table as a JSON object.
pub(crate) fn table_to_json(table: &Table) -> Json {
    Json::Object(table.iter().map(|(k, v)| (k.to_owned(), to_json(v))).collect())
}

/// A model value as JSON.
pub(crate) fn to_json(value: &Value) -> Json {
    match value {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::F32(f) => serde_json::Number::from_f64(f64::from(*f)).map_or(Json::Null, Json::Number),
        Value::F64(f) => serde_json::Number::from_f64(*f).map_or(Json::Null, Json::Number),
        Value::U64(n) => Json::from(*n),
        Value::List(items) | Value::Array(items) => Json::Array(items.iter().map(to_json).collect()),
        Value::Table(table) => table_to_json(table),
        other => match (other.as_i64(), other.as_str()) {
            (Some(n), _) => Json::from(n),
            (None, Some(s)) => Json::from(s),
            _ => Json::from(format!("{other:?}")),
        },
    }
}
