//! JSON ↔ model values, as RabbitMQ's management API maps them.

use charon_model::{MAX_DEPTH, Table, Value};
use serde_json::Value as Json;

/// A JSON value from a request body (integers as `I64`, strings as long strings), or `None`
/// when it nests deeper than the model's [`MAX_DEPTH`]: what the API accepts is stored, and
/// the store reads back no deeper than that (serde_json's own bound, 128, is what keeps its
/// parser off the end of the stack).
pub fn from_json(json: &Json) -> Option<Value> {
    from_json_at(json, 0)
}

fn from_json_at(json: &Json, depth: usize) -> Option<Value> {
    if depth > MAX_DEPTH {
        return None;
    }
    Some(match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::I64(i),
            None => Value::F64(n.as_f64().unwrap_or_default()),
        },
        Json::String(s) => Value::long_str(s),
        Json::Array(items) => Value::List(items.iter().map(|v| from_json_at(v, depth + 1)).collect::<Option<_>>()?),
        Json::Object(map) => Value::Table(
            map.iter().map(|(k, v)| Some((k.clone(), from_json_at(v, depth + 1)?))).collect::<Option<_>>()?,
        ),
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn nested_array(levels: usize) -> Json {
        (0..levels).fold(Json::from(1), |inner, _| Json::Array(vec![inner]))
    }

    #[test]
    fn json_nested_past_the_shared_limit_is_refused() {
        // The innermost number of `n` arrays is `n` levels down.
        assert!(from_json(&nested_array(MAX_DEPTH)).is_some());
        assert!(from_json(&nested_array(MAX_DEPTH + 1)).is_none());
    }
}
