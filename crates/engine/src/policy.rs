//! Policies: named, prioritised definitions applied to the queues whose names match a pattern
//! (`rabbit_policy.erl`, `rabbit_policies.erl`). Validation texts are RabbitMQ 4.0.5's, as its
//! HTTP API returns them.

use charon_model::{Table, Value, erlang};
use regex::Regex;

use crate::queue::QueueType;

/// What a policy applies to (`apply-to`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplyTo {
    /// Queues and exchanges.
    All,
    /// Queues of any type.
    Queues,
    /// Classic queues.
    ClassicQueues,
    /// Quorum queues.
    QuorumQueues,
    /// Streams (Charon has none).
    Streams,
    /// Exchanges.
    Exchanges,
}

impl ApplyTo {
    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "all" => Self::All,
            "queues" => Self::Queues,
            "classic_queues" => Self::ClassicQueues,
            "quorum_queues" => Self::QuorumQueues,
            "streams" => Self::Streams,
            "exchanges" => Self::Exchanges,
            _ => return None,
        })
    }

    /// The name used on the wire.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::Queues => "queues",
            Self::ClassicQueues => "classic_queues",
            Self::QuorumQueues => "quorum_queues",
            Self::Streams => "streams",
            Self::Exchanges => "exchanges",
        }
    }

    fn covers(self, queue_type: QueueType) -> bool {
        match self {
            Self::All | Self::Queues => true,
            Self::ClassicQueues => queue_type == QueueType::Classic,
            Self::QuorumQueues => queue_type == QueueType::Quorum,
            Self::Streams | Self::Exchanges => false,
        }
    }
}

/// A validated policy.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Name, unique per vhost.
    pub name: String,
    /// The regular expression queue names must match.
    pub pattern: String,
    /// What it applies to.
    pub apply_to: ApplyTo,
    /// Among matching policies, the highest priority applies.
    pub priority: i64,
    /// The settings, as given (JSON numbers as `I64`/`F64`, strings as long strings).
    pub definition: Table,
    regex: Regex,
}

/// A policy key, its check, and the text after the offending value when the check fails.
type Validator = (&'static str, fn(&Value) -> bool, &'static str);

/// The policy keys RabbitMQ 4.0.5 validates, with their checks (`rabbit_policies:validate_policy0/2`).
const VALIDATORS: &[Validator] = &[
    ("alternate-exchange", is_text, "is not a valid alternate exchange name"),
    ("consumer-timeout", |v| at_least(v, 0), "is not a valid consumer timeout"),
    ("dead-letter-exchange", is_text, "is not a valid dead letter exchange name"),
    ("dead-letter-routing-key", is_text, "is not a valid dead letter routing key"),
    ("dead-letter-strategy", |v| one_of(v, &["at-most-once", "at-least-once"]), "is not a valid dead letter strategy"),
    ("message-ttl", |v| at_least(v, 0), "is not a valid message TTL"),
    ("expires", |v| at_least(v, 1), "is not a valid queue expiry"),
    ("max-length", |v| at_least(v, 0), "is not a valid maximum length"),
    ("max-length-bytes", |v| at_least(v, 0), "is not a valid maximum length in bytes"),
    ("max-in-memory-length", |v| at_least(v, 0), "is not a valid maximum memory in bytes"),
    ("max-in-memory-bytes", |v| at_least(v, 0), "is not a valid maximum memory in bytes"),
    ("queue-mode", |v| one_of(v, &["default", "lazy"]), "is not a valid queue-mode value"),
    ("queue-version", |v| matches!(v, Value::I64(1 | 2)), "is not a valid queue-version value"),
    (
        "overflow",
        |v| one_of(v, &["drop-head", "reject-publish", "reject-publish-dlx"]),
        "is not a valid overflow value",
    ),
    ("delivery-limit", |v| matches!(v, Value::I64(_)), "is not a valid delivery limit"),
    (
        "queue-leader-locator",
        |v| one_of(v, &["client-local", "balanced", "random", "least-leaders"]),
        "is not a valid queue leader locator value",
    ),
    ("initial-cluster-size", |v| at_least(v, 0), "is not a valid cluster size"),
    ("max-age", is_text, "is not a valid max age"),
    // Charon's own keys (docs/dead-lettering.md): accepted in policies only.
    (
        crate::queue::settings::GUARANTEE_KEY,
        |v| one_of(v, &["at-most-once", "at-least-once"]),
        "is not a valid dead letter guarantee",
    ),
    (crate::queue::settings::PENDING_MAX_KEY, |v| at_least(v, 1), "is not a valid maximum of pending dead letters"),
    (
        crate::queue::settings::PENDING_MAX_BYTES_KEY,
        |v| at_least(v, 1),
        "is not a valid maximum of pending dead-letter bytes",
    ),
];

fn is_text(value: &Value) -> bool {
    matches!(value, Value::LongStr(_) | Value::String(_))
}

fn at_least(value: &Value, min: i64) -> bool {
    matches!(value, Value::I64(n) if *n >= min)
}

fn one_of(value: &Value, allowed: &[&str]) -> bool {
    is_text(value) && value.as_str().is_some_and(|s| allowed.contains(&s))
}

impl Policy {
    /// Validates a policy as RabbitMQ does, in its order: apply-to, pattern, then the
    /// definition (empty, unknown keys, then each key's check).
    ///
    /// # Errors
    /// The text after RabbitMQ's "Validation failed\n\n".
    pub fn new(name: &str, pattern: &str, apply_to: &str, priority: i64, definition: Table) -> Result<Self, String> {
        let apply_to = ApplyTo::parse(apply_to).ok_or_else(|| {
            format!(
                "apply-to '{apply_to}' unrecognised; should be one of: 'queues', 'classic_queues',  \
                 'quorum_queues', 'streams', 'exchanges', or 'all'"
            )
        })?;
        let regex = Regex::new(pattern).map_err(|e| {
            let first = e.to_string().lines().last().unwrap_or_default().trim().to_owned();
            format!("pattern should be regular expression but is invalid: {{\"{first}\",0}}")
        })?;
        if definition.is_empty() {
            return Err("no policy provided".to_owned());
        }
        let unknown: Vec<String> = definition
            .iter()
            .filter(|(key, _)| !VALIDATORS.iter().any(|(known, _, _)| known == key))
            .map(|(key, value)| erlang::tuple(&[erlang::text(key), erlang::term(value)]))
            .collect();
        if !unknown.is_empty() {
            return Err(format!("[{}] are not recognised policy settings", unknown.join(",")));
        }
        for (key, check, text) in VALIDATORS {
            if let Some(value) = definition.get(key)
                && !check(value)
            {
                return Err(format!("{} {text}", erlang::term(value)));
            }
        }
        Ok(Self { name: name.to_owned(), pattern: pattern.to_owned(), apply_to, priority, definition, regex })
    }

    /// Whether the policy applies to a queue of this name and type.
    #[must_use]
    pub fn matches_queue(&self, name: &str, queue_type: QueueType) -> bool {
        self.apply_to.covers(queue_type) && self.regex.is_match(name)
    }

    /// Whether the policy applies to the exchange `name`.
    #[must_use]
    pub fn matches_exchange(&self, name: &str) -> bool {
        matches!(self.apply_to, ApplyTo::All | ApplyTo::Exchanges) && self.regex.is_match(name)
    }
}

/// The policy that applies to an exchange, chosen as [`effective`] chooses for a queue.
#[must_use]
pub fn effective_for_exchange<'a>(policies: impl Iterator<Item = &'a Policy>, name: &str) -> Option<&'a Policy> {
    highest(policies.filter(|p| p.matches_exchange(name)))
}

/// The policy that applies to a queue: the matching one with the highest priority (the first
/// by name among equals).
#[must_use]
pub fn effective<'a>(
    policies: impl Iterator<Item = &'a Policy>,
    name: &str,
    queue_type: QueueType,
) -> Option<&'a Policy> {
    highest(policies.filter(|p| p.matches_queue(name, queue_type)))
}

/// Of matching policies, the one with the highest priority (the first by name among equals).
fn highest<'a>(matching: impl Iterator<Item = &'a Policy>) -> Option<&'a Policy> {
    matching.fold(None, |best: Option<&Policy>, p| match best {
        Some(b) if b.priority > p.priority || (b.priority == p.priority && b.name <= p.name) => Some(b),
        _ => Some(p),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(entries: &[(&str, Value)]) -> Table {
        entries.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
    }

    #[test]
    fn validation_texts_match_rabbitmq() {
        let err = |d: Table| Policy::new("p", "^q", "all", 0, d).unwrap_err();
        assert_eq!(err(def(&[("max-length", Value::I64(-1))])), "-1 is not a valid maximum length");
        assert_eq!(err(def(&[("foo", Value::I64(1))])), "[{<<\"foo\">>,1}] are not recognised policy settings");
        assert_eq!(err(Table::new()), "no policy provided");
        assert_eq!(err(def(&[("overflow", Value::long_str("x"))])), "<<\"x\">> is not a valid overflow value");
        assert_eq!(err(def(&[("message-ttl", Value::long_str("5"))])), "<<\"5\">> is not a valid message TTL");
        let bad_apply = Policy::new("p", "^q", "bogus", 0, def(&[("max-length", Value::I64(1))])).unwrap_err();
        assert!(bad_apply.starts_with("apply-to 'bogus' unrecognised; should be one of: 'queues',"));
        assert!(Policy::new("p", "(", "all", 0, def(&[("max-length", Value::I64(1))])).is_err());
    }

    #[test]
    fn the_highest_priority_matching_policy_applies() {
        let p = |name: &str, pattern: &str, apply: &str, priority| {
            Policy::new(name, pattern, apply, priority, def(&[("max-length", Value::I64(1))])).unwrap()
        };
        let policies = [p("a", "^q", "all", 1), p("b", "^q1", "queues", 5), p("c", "^q", "quorum_queues", 9)];
        let name = |q, t| effective(policies.iter(), q, t).map(|p| p.name.clone());
        assert_eq!(name("q1", QueueType::Classic).as_deref(), Some("b"));
        assert_eq!(name("q2", QueueType::Classic).as_deref(), Some("a"));
        assert_eq!(name("q1", QueueType::Quorum).as_deref(), Some("c"));
        assert_eq!(name("x", QueueType::Classic), None);
    }
}
