//! Request bodies as RabbitMQ's `rabbit_mgmt_util:with_decode/5` reads them: JSON, with its
//! required keys.

use serde_json::Value as JsonValue;

use crate::error::ApiError;

/// The body as JSON, with every key of `required` present.
///
/// # Errors
/// 400 `not_json`, or 400 listing the missing keys as RabbitMQ does:
/// `[{key_missing,write},{key_missing,read}]`.
pub(crate) fn decode(body: &[u8], required: &[&str]) -> Result<JsonValue, ApiError> {
    let request: JsonValue = serde_json::from_slice(body).map_err(|_| ApiError::bad_request("not_json"))?;
    let missing: Vec<String> = required
        .iter()
        .filter(|key| request.get(**key).is_none())
        .map(|key| format!("{{key_missing,{key}}}"))
        .collect();
    if missing.is_empty() { Ok(request) } else { Err(ApiError::bad_request(format!("[{}]", missing.join(",")))) }
}

/// A string field (empty when missing or not a string).
pub(crate) fn text(request: &JsonValue, key: &str) -> String {
    request.get(key).and_then(JsonValue::as_str).unwrap_or_default().to_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn missing_keys_are_listed_as_rabbitmq_lists_them() {
        let error = decode(br#"{"write":""}"#, &["configure", "write", "read"]).unwrap_err();
        assert!(format!("{error:?}").contains("[{key_missing,configure},{key_missing,read}]"));
        assert!(format!("{:?}", decode(b"nope", &[]).unwrap_err()).contains("not_json"));
        let ok = decode(br#"{"a":"x","b":1}"#, &["a"]).unwrap();
        assert_eq!((text(&ok, "a"), text(&ok, "b"), text(&ok, "c")), ("x".into(), String::new(), String::new()));
    }
}
