//! A Zaqar message in the engine's model, and back.
//!
//! Posting makes a persistent 0.9.1-style message published through the default exchange to the
//! queue: the JSON `body` serialised as the payload (`content-type: application/json`), the
//! `ttl` as its per-message TTL (`expiration`, ms), the posting time as its `timestamp`, the
//! poster's `Client-ID` in the header `x-zaqar-client-id`. A message's Zaqar id is the
//! sequence number the queue gave it (answered by the publish itself), in hex: stable while the
//! message stays in its queue, and a direct lookup.
//! Messages published over AMQP show as Zaqar messages too: a body that is not JSON becomes a
//! JSON string (UTF-8, lossy), a message without TTL shows `ttl` 0.

use std::sync::Arc;

use bytes::Bytes;
use charon_model::{Body, Message, Origin, Properties, Routing, Value as AmqpValue};
use serde_json::{Value, json};

/// The header that keeps the poster's `Client-ID` (for `echo=false` listings).
pub(crate) const CLIENT_HEADER: &str = "x-zaqar-client-id";

/// A message to post to `queue`.
pub(crate) fn posted(queue: &str, body: &Value, ttl_seconds: i64, client_id: &str, now_ms: i64) -> Message {
    let routing = Routing { exchange: String::new(), routing_key: queue.to_owned(), ..Routing::default() };
    let payload = serde_json::to_vec(body).unwrap_or_default();
    let mut message = Message::new(routing, Body::Data(Bytes::from(payload)));
    message.origin = Origin::Amqp091;
    message.headers.insert(CLIENT_HEADER, AmqpValue::long_str(client_id));
    message.set_properties(Properties {
        content_type: Some("application/json".to_owned()),
        delivery_mode: Some(2),
        ttl: Some(ttl_seconds.unsigned_abs().saturating_mul(1000)),
        timestamp: Some(now_ms),
        ..Properties::default()
    });
    message
}

/// The poster's client id, when Zaqar posted it.
pub(crate) fn client_of(message: &Message) -> Option<String> {
    match message.headers.get(CLIENT_HEADER) {
        Some(AmqpValue::LongStr(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
        _ => None,
    }
}

/// A message id: the queue sequence number in hex.
pub(crate) fn id_of(seq: u64) -> String {
    format!("{seq:024x}")
}

/// The sequence number an id names.
pub(crate) fn seq_of(id: &str) -> Option<u64> {
    (!id.is_empty() && id.len() <= 24).then(|| u64::from_str_radix(id, 16).ok()).flatten()
}

/// The body as JSON: parsed when it is JSON, else a string.
fn body_of(message: &Message) -> Value {
    let bytes = message.body.bytes();
    serde_json::from_slice(bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// How a message shows (`format_message_v1_1`): `href` ends `?claim_id=<cid>` when claimed
/// (python-zaqarclient reads the claim id from there).
pub(crate) fn render(
    message: &Arc<Message>,
    seq: u64,
    base: &str,
    claim: Option<&str>,
    claim_count: u32,
    now_ms: i64,
) -> Value {
    let id = id_of(seq);
    let href = match claim {
        Some(cid) => format!("{base}/messages/{id}?claim_id={cid}"),
        None => format!("{base}/messages/{id}"),
    };
    let properties = message.properties();
    let ttl = properties.ttl.map_or(0, |ms| ms / 1000);
    let age = properties.timestamp.map_or(0, |at| (now_ms.saturating_sub(at) / 1000).max(0));
    let mut shown = json!({
        "id": id,
        "href": href,
        "ttl": ttl,
        "age": age,
        "body": body_of(message),
        "claim_count": claim_count,
    });
    if let (Some(cid), Some(fields)) = (claim, shown.as_object_mut()) {
        fields.insert("claim_id".to_owned(), Value::String(cid.to_owned()));
    }
    shown
}

/// Milliseconds since the epoch.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn a_posted_message_renders_back_as_it_was_posted() {
        let m = Arc::new(posted("q", &json!({"a": [1]}), 300, "c1", 1_000));
        assert!(m.is_persistent());
        assert_eq!(client_of(&m).as_deref(), Some("c1"));
        let shown = render(&m, 42, "/v2/queues/q", Some("cid"), 2, 11_000);
        assert_eq!(shown["id"], "00000000000000000000002a");
        assert_eq!(shown["href"], "/v2/queues/q/messages/00000000000000000000002a?claim_id=cid");
        assert_eq!((shown["ttl"].clone(), shown["age"].clone()), (json!(300), json!(10)));
        assert_eq!(shown["body"], json!({"a": [1]}));
        assert_eq!(seq_of("00000000000000000000002a"), Some(42));
        assert_eq!(seq_of("zz"), None);
    }
}
