//! Zaqar's reserved queue metadata (`Validator.queue_metadata_putting` and the DLQ keys of
//! `zaqar/storage/*/claims.py`), read once per request into [`QueueSettings`].

use serde_json::{Map, Value, json};

use crate::error::ZaqarError;
use crate::metadata::Metadata;

/// `max_messages_post_size`.
pub(crate) const MAX_POST_SIZE: u64 = 256 * 1024;
/// `max_message_ttl`.
pub(crate) const MAX_MESSAGE_TTL: i64 = 1_209_600;
/// `MIN_MESSAGE_TTL`.
pub(crate) const MIN_MESSAGE_TTL: i64 = 60;
/// `default_message_ttl`.
pub(crate) const DEFAULT_MESSAGE_TTL: i64 = 3600;
/// `max_message_delay`.
pub(crate) const MAX_MESSAGE_DELAY: i64 = 900;
/// `MIN_DELAY_TTL`.
pub(crate) const MIN_MESSAGE_DELAY: i64 = 0;

/// What a queue's reserved metadata asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct QueueSettings {
    /// TTL of a message posted without one, seconds.
    pub(crate) default_ttl: i64,
    /// Largest post, bytes.
    pub(crate) max_post_size: u64,
    /// `_default_message_delay`, seconds; 0 when unset. Zaqar's v2 API honours a message's
    /// `delay` only when this is set (its post spec has no `delay` field otherwise, so the
    /// field is dropped), and only then keeps delayed messages out of listings and claims.
    pub(crate) default_delay: i64,
    /// The claim-count dead-letter queue, when both of its keys are set.
    pub(crate) dead_letter: Option<DeadLetterSettings>,
}

/// `_max_claim_count` and `_dead_letter_queue` (both set), `_dead_letter_queue_messages_ttl`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DeadLetterSettings {
    /// A message claimed this often is moved by the next claim that picks it.
    pub(crate) max_claim_count: u32,
    /// Where it goes.
    pub(crate) queue: String,
    /// Its TTL there, seconds (else it keeps its own).
    pub(crate) ttl: Option<i64>,
}

/// A truthy integer value of `key` (Python's `if value:` leaves 0, null and false out).
fn int_of(meta: &Metadata, key: &str) -> Result<Option<i64>, ZaqarError> {
    match meta.get(key) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(None),
        Some(Value::Number(n)) if n.is_i64() => Ok(n.as_i64().filter(|n| *n != 0)),
        Some(_) => Err(ZaqarError::invalid(format!("{key} must be integer."))),
    }
}

impl QueueSettings {
    /// Reads and checks the reserved keys of `meta` as Zaqar does before storing them.
    ///
    /// # Errors
    /// Zaqar's 400 texts; and Charon's for what it does not do (encryption).
    pub(crate) fn read(meta: &Metadata) -> Result<Self, ZaqarError> {
        let default_ttl = int_of(meta, "_default_message_ttl")?;
        if let Some(ttl) = default_ttl
            && !(MIN_MESSAGE_TTL..=MAX_MESSAGE_TTL).contains(&ttl)
        {
            return Err(ZaqarError::invalid(format!(
                "_default_message_ttl can not exceed {MAX_MESSAGE_TTL} seconds, and must be at least {MIN_MESSAGE_TTL} seconds long."
            )));
        }
        let max_post_size = int_of(meta, "_max_messages_post_size")?;
        if let Some(size) = max_post_size
            && !(size > 0 && size.unsigned_abs() <= MAX_POST_SIZE)
        {
            return Err(ZaqarError::invalid(format!(
                "_max_messages_post_size can not exceed {MAX_POST_SIZE},  and must be at least greater than 0."
            )));
        }
        let default_delay = int_of(meta, "_default_message_delay")?;
        if let Some(delay) = default_delay
            && !(MIN_MESSAGE_DELAY..=MAX_MESSAGE_DELAY).contains(&delay)
        {
            return Err(ZaqarError::invalid(format!(
                "The TTL can not exceed {MAX_MESSAGE_DELAY} seconds, and must be at least {MIN_MESSAGE_DELAY} seconds long."
            )));
        }
        match meta.get("_enable_encrypt_messages") {
            None | Some(Value::Null) | Some(Value::Bool(false)) => {}
            Some(Value::Bool(true)) => {
                return Err(ZaqarError::invalid("_enable_encrypt_messages is not supported by Charon."));
            }
            Some(_) => return Err(ZaqarError::invalid("_enable_encrypt_messages must be boolean.")),
        }
        Ok(Self {
            default_ttl: default_ttl.unwrap_or(DEFAULT_MESSAGE_TTL),
            max_post_size: max_post_size.map_or(MAX_POST_SIZE, i64::unsigned_abs),
            default_delay: default_delay.unwrap_or(0),
            dead_letter: dead_letter(meta)?,
        })
    }
}

/// The DLQ keys: active only when both `_max_claim_count` and `_dead_letter_queue` are set.
fn dead_letter(meta: &Metadata) -> Result<Option<DeadLetterSettings>, ZaqarError> {
    let max = int_of(meta, "_max_claim_count")?;
    if let Some(max) = max
        && max < 1
    {
        return Err(ZaqarError::invalid("_max_claim_count must be at least 1."));
    }
    let queue = match meta.get("_dead_letter_queue") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) if crate::caller::valid_name(name) => Some(name.clone()),
        Some(_) => {
            return Err(ZaqarError::invalid(
                "_dead_letter_queue must be a queue name: ASCII letters, digits, underscores, dots and dashes, at most 64.",
            ));
        }
    };
    let ttl = int_of(meta, "_dead_letter_queue_messages_ttl")?;
    if let Some(ttl) = ttl
        && !(MIN_MESSAGE_TTL..=MAX_MESSAGE_TTL).contains(&ttl)
    {
        return Err(ZaqarError::invalid(format!(
            "_dead_letter_queue_messages_ttl can not exceed {MAX_MESSAGE_TTL} seconds, and must be at least {MIN_MESSAGE_TTL} seconds long."
        )));
    }
    Ok(match (max, queue) {
        (Some(max), Some(queue)) => {
            Some(DeadLetterSettings { max_claim_count: u32::try_from(max).unwrap_or(u32::MAX), queue, ttl })
        }
        _ => None,
    })
}

/// The reserved keys a `PATCH` may replace or remove without their being set.
pub(crate) const RESERVED: [&str; 7] = [
    "_max_messages_post_size",
    "_default_message_ttl",
    "_default_message_delay",
    "_dead_letter_queue",
    "_dead_letter_queue_messages_ttl",
    "_max_claim_count",
    "_enable_encrypt_messages",
];

/// The metadata as `GET /v2/queues/{q}` shows it: the stored keys, and Zaqar's two reserved
/// keys with defaults (`_get_reserved_metadata`) filled in where unset or falsy. The DLQ keys
/// show only when set: python-zaqarclient's `metadata(new_meta=...)` adds the keys it was shown
/// as null and then removes every key it was shown, so showing them as null would make it
/// remove what it just added.
pub(crate) fn shown(meta: &Metadata) -> Value {
    let mut shown: Map<String, Value> = meta.clone();
    let defaults =
        [("_max_messages_post_size", json!(MAX_POST_SIZE)), ("_default_message_ttl", json!(DEFAULT_MESSAGE_TTL))];
    for (key, value) in defaults {
        let unset = match shown.get(key) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => true,
            Some(Value::Number(n)) => n.as_i64() == Some(0),
            Some(_) => false,
        };
        if unset {
            shown.insert(key.to_owned(), value);
        }
    }
    Value::Object(shown)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn meta(value: Value) -> Metadata {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn the_dead_letter_queue_needs_both_keys() {
        let one = QueueSettings::read(&meta(json!({"_max_claim_count": 2}))).unwrap();
        assert_eq!(one.dead_letter, None);
        let both = QueueSettings::read(&meta(json!({"_max_claim_count": 2, "_dead_letter_queue": "d"}))).unwrap();
        assert_eq!(both.dead_letter, Some(DeadLetterSettings { max_claim_count: 2, queue: "d".into(), ttl: None }));
        assert_eq!((both.default_ttl, both.max_post_size), (3600, 262_144));
    }

    #[test]
    fn reserved_values_are_checked() {
        let text = |v: Value| QueueSettings::read(&meta(v)).unwrap_err().to_string();
        assert!(text(json!({"_default_message_ttl": "x"})).contains("_default_message_ttl must be integer."));
        assert!(text(json!({"_default_message_ttl": 10})).contains("must be at least 60 seconds long"));
        assert!(text(json!({"_max_messages_post_size": 300_000})).contains("can not exceed 262144"));
        assert!(text(json!({"_dead_letter_queue": "a b"})).contains("_dead_letter_queue must be a queue name"));
        let range = "Invalid API request: The TTL can not exceed 900 seconds, and must be at least 0 seconds long.";
        assert!(text(json!({"_default_message_delay": 901})).ends_with(range));
        assert!(text(json!({"_default_message_delay": -1})).ends_with(range));
        assert!(text(json!({"_default_message_delay": "x"})).contains("_default_message_delay must be integer."));
        let delayed = QueueSettings::read(&meta(json!({"_default_message_delay": 900}))).unwrap();
        assert_eq!(delayed.default_delay, 900);
        assert_eq!(QueueSettings::read(&meta(json!({"_default_message_delay": 0}))).unwrap().default_delay, 0);
    }

    #[test]
    fn unset_reserved_keys_show_their_defaults() {
        let shown = shown(&meta(json!({"a": 1, "_max_claim_count": 3})));
        assert_eq!(shown["a"], 1);
        assert_eq!(shown["_max_claim_count"], 3);
        assert_eq!(shown["_default_message_ttl"], 3600);
        assert_eq!(shown.get("_dead_letter_queue"), None);
    }
}
