//! Request bodies and query parameters as Zaqar reads them (`wsgi_utils.deserialize`,
//! `sanitize`, falcon's `get_param_as_int` / `get_param_as_bool`).

use std::collections::HashMap;

use axum::http::StatusCode;
use serde_json::Value;

use crate::error::ZaqarError;

/// Parses a JSON body (`Malformed JSON` otherwise; an empty one is refused).
pub(crate) fn json(bytes: &[u8]) -> Result<Value, ZaqarError> {
    if bytes.is_empty() {
        return Err(ZaqarError::body("Request body can not be empty"));
    }
    serde_json::from_slice(bytes).map_err(|_| ZaqarError::malformed())
}

/// An integer field of an object with a default (`sanitize`'s spec `(name, int, default)`).
pub(crate) fn int_field(object: &Value, name: &str, default: Option<i64>) -> Result<i64, ZaqarError> {
    match object.get(name) {
        None => default.ok_or_else(|| ZaqarError::body(format!("Missing \"{name}\" field."))),
        Some(Value::Number(n)) if n.is_i64() => n.as_i64().ok_or_else(|| wrong_type(name)),
        Some(_) => Err(wrong_type(name)),
    }
}

fn wrong_type(name: &str) -> ZaqarError {
    ZaqarError::body(format!("The value of the \"{name}\" field must be a int."))
}

/// Query parameters; a repeated one (`ids=a&ids=b`, as python-zaqarclient sends lists) keeps its
/// values joined with commas, the way falcon's `get_param_as_list` reads both spellings.
pub(crate) type Query = HashMap<String, String>;

/// The pairs of a query string, as axum parses them.
pub(crate) type Pairs = Vec<(String, String)>;

/// [`Query`] from the pairs of a query string.
pub(crate) fn query(pairs: Pairs) -> Query {
    let mut query = Query::new();
    for (key, value) in pairs {
        query
            .entry(key)
            .and_modify(|v: &mut String| {
                v.push(',');
                v.push_str(&value);
            })
            .or_insert(value);
    }
    query
}

fn invalid_param(name: &str, what: &str) -> ZaqarError {
    ZaqarError::new(
        StatusCode::BAD_REQUEST,
        "Invalid parameter",
        format!("The \"{name}\" parameter is invalid. The value must be {what}."),
    )
}

/// An integer parameter.
pub(crate) fn int_param(query: &Query, name: &str) -> Result<Option<i64>, ZaqarError> {
    query.get(name).map(|v| v.trim().parse().map_err(|_| invalid_param(name, "an integer"))).transpose()
}

/// A boolean parameter, with falcon's spellings.
pub(crate) fn bool_param(query: &Query, name: &str) -> Result<Option<bool>, ZaqarError> {
    query
        .get(name)
        .map(|v| match v.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" | "t" | "y" => Ok(true),
            "false" | "0" | "no" | "off" | "f" | "n" => Ok(false),
            _ => Err(invalid_param(name, "a boolean")),
        })
        .transpose()
}

/// A list parameter (`ids=a,b`), empty items left out.
pub(crate) fn list_param(query: &Query, name: &str) -> Option<Vec<String>> {
    query.get(name).map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
}
