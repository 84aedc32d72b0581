//! `GET /v2/queues/{q}/stats`, as Zaqar's MongoDB driver counts and its v2 resource shows:
//! `free` (not claimed — delayed messages included, Zaqar's `_count` does not look at delays),
//! `claimed` and `total`, and, when the queue holds messages, the `oldest` and `newest` of them
//! (claimed ones included, delayed ones not: Zaqar's `first(sort=±1)`) as
//! `{"age": s, "created": "YYYY-MM-DDTHH:MM:SSZ", "href": ".../messages/<id>"}`.
//!
//! The two ends are a browse of one message from each end of the queue, never a scan.

use charon_engine::QueueRef;
use charon_engine::queue::{BrowseRequest, BrowsedMessage};
use serde_json::{Map, Value, json};

use crate::error::ZaqarError;
use crate::message;

/// The stats document of `queue` (named `name`) at `now_ms`.
///
/// # Errors
/// 503 when the queue cannot be browsed.
pub(crate) async fn of(queue: &QueueRef, name: &str, now_ms: i64) -> Result<Option<Value>, ZaqarError> {
    let Ok(stats) = queue.stats().await else { return Ok(None) };
    let free = u64::from(stats.ready) + u64::from(stats.delayed);
    let claimed = u64::from(stats.unacked);
    let mut messages = Map::new();
    messages.insert("claimed".to_owned(), json!(claimed));
    messages.insert("free".to_owned(), json!(free));
    messages.insert("total".to_owned(), json!(free + claimed));
    if free + claimed > 0 {
        // Zaqar answers 503 when every message is delayed (its resource reads ends its driver
        // did not find); Charon leaves them out.
        let oldest = end(queue, false).await?;
        let newest = end(queue, true).await?;
        if let (Some(oldest), Some(newest)) = (oldest, newest) {
            messages.insert("oldest".to_owned(), stat(&oldest, name, now_ms));
            messages.insert("newest".to_owned(), stat(&newest, name, now_ms));
        }
    }
    Ok(Some(json!({ "messages": messages })))
}

/// The stats of a queue that does not exist, as Zaqar's v2 resource shows them.
pub(crate) fn empty() -> Value {
    json!({ "messages": { "claimed": 0, "free": 0, "total": 0 } })
}

/// The first (or last) message of the queue, claimed or not, delayed ones left out.
async fn end(queue: &QueueRef, newest_first: bool) -> Result<Option<BrowsedMessage>, ZaqarError> {
    let request = BrowseRequest {
        after: None,
        before: None,
        newest_first,
        limit: 1,
        include_unacked: true,
        include_delayed: false,
    };
    let page = queue.browse(request).await.map_err(|_| ZaqarError::unavailable("Queue stats could not be read."))?;
    Ok(page.items.into_iter().next())
}

/// `stat_message`: its age in whole seconds and creation time (the post's `timestamp`; a
/// message published over AMQP without one counts as created now), and its href.
fn stat(item: &BrowsedMessage, name: &str, now_ms: i64) -> Value {
    let created_ms = item.message.properties().timestamp.unwrap_or(now_ms);
    let created = created_ms.div_euclid(1000);
    json!({
        "age": now_ms.div_euclid(1000).saturating_sub(created).max(0),
        "created": iso(created),
        "href": format!("/v2/queues/{name}/messages/{}", message::id_of(item.seq)),
    })
}

/// Seconds since the epoch as `%Y-%m-%dT%H:%M:%SZ` (UTC).
fn iso(seconds: i64) -> String {
    format!("{}Z", charon_model::calendar::UtcTime::from_epoch(seconds).format('T'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_show_as_zaqar_formats_them() {
        assert_eq!(iso(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(iso(1_795_723_199), "2026-11-26T19:59:59Z");
        assert_eq!(iso(-1), "1969-12-31T23:59:59Z");
    }
}
