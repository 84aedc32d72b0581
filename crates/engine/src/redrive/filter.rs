//! Which messages a [`Filter`] selects, and the death record it looks at.

use charon_model::{Death, DeathEvent, DeathHistory, Message, Value};

use super::spec::Filter;
use crate::dead_letter::events::id_text;

/// The last death of a message and its history entry: the death that brought it into the
/// dead-letter queue. `None` for a message that never died.
#[must_use]
pub fn last_death(message: &Message) -> Option<(&DeathEvent, Option<&Death>)> {
    let history: &DeathHistory = message.broker.deaths.as_deref()?;
    let entry = history.entries.iter().find(|d| d.queue == history.last.queue && d.reason == history.last.reason);
    Some((&history.last, entry))
}

impl Filter {
    /// Whether `message` passes every criterion.
    #[must_use]
    pub fn matches(&self, message: &Message) -> bool {
        let death = last_death(message);
        if !self.reasons.is_empty() && !death.is_some_and(|(d, _)| self.reasons.iter().any(|r| r == d.reason.as_str()))
        {
            return false;
        }
        if !self.source_queues.is_empty() && !death.is_some_and(|(d, _)| self.source_queues.contains(&d.queue)) {
            return false;
        }
        if self.died_after.is_some() || self.died_before.is_some() {
            let Some(seconds) = death.and_then(|(_, entry)| entry).map(|e| e.last_time.div_euclid(1000)) else {
                return false;
            };
            if self.died_after.is_some_and(|after| seconds < after)
                || self.died_before.is_some_and(|before| seconds >= before)
            {
                return false;
            }
        }
        if !self.message_ids.is_empty() {
            let id = message.properties().message_id.as_ref().map(id_text);
            if !id.is_some_and(|id| self.message_ids.contains(&id)) {
                return false;
            }
        }
        self.headers.iter().all(|(key, wanted)| {
            let found = message.headers.get(key).or_else(|| message.annotations.get(key));
            found.is_some_and(|value| same(value, wanted))
        })
    }

    /// Whether no criterion is set (every message matches).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// A stored value against a JSON string, integer or boolean. A string also matches an integer
/// or boolean value written the same way (`"3"` matches 3): query strings have only text.
fn same(value: &Value, wanted: &serde_json::Value) -> bool {
    match wanted {
        serde_json::Value::String(text) => match value.as_str() {
            Some(found) => found == text,
            None => {
                value.as_i64().is_some_and(|n| n.to_string() == *text)
                    || value.as_bool().is_some_and(|b| b.to_string() == *text)
            }
        },
        serde_json::Value::Bool(flag) => value.as_bool() == Some(*flag),
        serde_json::Value::Number(n) => n.as_i64().is_some_and(|n| value.as_i64() == Some(n)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use charon_model::{Body, DeathReason, DeathRecord, MessageId, Properties, Routing};

    use super::*;

    fn dead(queue: &str, reason: DeathReason, at_ms: i64) -> Message {
        let mut m = Message::new(
            Routing { exchange: "ex".into(), routing_key: "k".into(), ..Routing::default() },
            Body::Data("b".into()),
        );
        let keys = vec!["k".to_owned()];
        let record =
            DeathRecord { queue, reason, exchange: "ex", routing_keys: &keys, ttl: None, now: at_ms, cause: None };
        m.broker.deaths = Some(Box::new(DeathHistory::new(&record)));
        m
    }

    #[test]
    fn each_criterion_selects_on_the_last_death() {
        let mut m = dead("orders", DeathReason::Rejected, 1_700_000_000_500);
        m.set_properties(Properties { message_id: Some(MessageId::String("id1".into())), ..Properties::default() });
        m.headers.insert("tenant", Value::long_str("acme"));
        m.headers.insert("n", Value::I32(3));
        let f = |json: &str| serde_json::from_str::<Filter>(json).unwrap().matches(&m);
        assert!(f("{}"));
        assert!(f(r#"{"reasons":["expired","rejected"]}"#));
        assert!(!f(r#"{"reasons":["expired"]}"#));
        assert!(f(r#"{"source_queues":["orders"]}"#));
        assert!(!f(r#"{"source_queues":["billing"]}"#));
        assert!(f(r#"{"died_after":1700000000,"died_before":1700000001}"#));
        assert!(!f(r#"{"died_after":1700000001}"#));
        assert!(!f(r#"{"died_before":1700000000}"#));
        assert!(f(r#"{"headers":{"tenant":"acme","n":3}}"#));
        assert!(f(r#"{"headers":{"n":"3"}}"#));
        assert!(!f(r#"{"headers":{"n":"4"}}"#));
        assert!(!f(r#"{"headers":{"tenant":"other"}}"#));
        assert!(!f(r#"{"headers":{"missing":"x"}}"#));
        assert!(f(r#"{"message_ids":["id0","id1"]}"#));
        assert!(!f(r#"{"message_ids":["id0"]}"#));
        // A message that never died matches no death criterion.
        let alive = Message::default();
        assert!(!serde_json::from_str::<Filter>(r#"{"reasons":["rejected"]}"#).unwrap().matches(&alive));
    }

    #[test]
    fn the_last_death_is_the_one_that_counts() {
        let mut m = dead("orders", DeathReason::Rejected, 1_000);
        let keys = vec!["r".to_owned()];
        let again = DeathRecord {
            queue: "retry",
            reason: DeathReason::Expired,
            exchange: "",
            routing_keys: &keys,
            ttl: None,
            now: 9_000,
            cause: None,
        };
        m.broker.deaths.as_deref_mut().unwrap().record(&again);
        let f = |json: &str| serde_json::from_str::<Filter>(json).unwrap().matches(&m);
        assert!(f(r#"{"reasons":["expired"],"source_queues":["retry"],"died_after":9}"#));
        assert!(!f(r#"{"reasons":["rejected"]}"#));
    }
}
