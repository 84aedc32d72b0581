//! Policies: named, prioritised definitions applied to the queues whose names match a pattern
//! (`rabbit_policy.erl`, `rabbit_policies.erl`), in two namespaces: user policies and operator
//! policies. Of each kind the matching policy with the highest priority applies; the two
//! definitions are then merged ([`merge`]). Validation texts are RabbitMQ 4.0.5's, as its HTTP
//! API returns them ([`validation`]).

mod merge;
mod validation;

use charon_model::{Table, Value};
use regex::Regex;

pub use merge::merge;
pub use validation::PolicyFields;

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

/// Which of RabbitMQ's two policy namespaces a policy belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyKind {
    /// A policy (`/api/policies`): set by policymakers, any key.
    User,
    /// An operator policy (`/api/operator-policies`): set by administrators, limits only;
    /// applies alongside the user policy, the stricter value winning ([`merge`]).
    Operator,
}

/// A validated policy.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Name, unique per vhost (and kind).
    pub name: String,
    /// The regular expression queue names must match.
    pub pattern: String,
    /// What it applies to.
    pub apply_to: ApplyTo,
    /// Among matching policies, the highest priority applies.
    pub priority: i64,
    /// The settings, as given (JSON numbers as `I64`/`F64`, strings as long strings).
    pub definition: Table,
    kind: PolicyKind,
    regex: Regex,
}

impl Policy {
    /// Validates a user policy as RabbitMQ does.
    ///
    /// # Errors
    /// The text after RabbitMQ's "Validation failed\n\n" (one line per failing field).
    pub fn new(name: &str, pattern: &str, apply_to: &str, priority: i64, definition: Table) -> Result<Self, String> {
        Self::of_kind(PolicyKind::User, name, pattern, apply_to, priority, definition)
    }

    /// Validates an operator policy as RabbitMQ does.
    ///
    /// # Errors
    /// As [`Policy::new`].
    pub fn operator(
        name: &str,
        pattern: &str,
        apply_to: &str,
        priority: i64,
        definition: Table,
    ) -> Result<Self, String> {
        Self::of_kind(PolicyKind::Operator, name, pattern, apply_to, priority, definition)
    }

    fn of_kind(
        kind: PolicyKind,
        name: &str,
        pattern: &str,
        apply_to: &str,
        priority: i64,
        definition: Table,
    ) -> Result<Self, String> {
        let fields = PolicyFields {
            pattern: Some(Value::long_str(pattern)),
            definition: Some(Value::Table(definition)),
            priority: Some(Value::I64(priority)),
            apply_to: Some(Value::long_str(apply_to)),
            unrecognised: Table::new(),
        };
        Self::from_fields(kind, name, fields)
    }

    /// Validates a policy whose fields may be absent or of any type (a request body, a
    /// definitions file's runtime parameter), reporting every failing field as RabbitMQ does.
    ///
    /// # Errors
    /// As [`Policy::new`].
    pub fn from_fields(kind: PolicyKind, name: &str, fields: PolicyFields) -> Result<Self, String> {
        let checked = validation::fields(kind, name, fields)?;
        Ok(Self {
            name: name.to_owned(),
            pattern: checked.pattern,
            apply_to: checked.apply_to,
            priority: checked.priority,
            definition: checked.definition,
            kind,
            regex: checked.regex,
        })
    }

    /// Its namespace.
    #[must_use]
    pub fn kind(&self) -> PolicyKind {
        self.kind
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
        assert!(Policy::operator("p", "^q", "all", 0, def(&[("consumer-timeout", Value::I64(1))])).is_err());
        let op = Policy::operator("p", "^q", "queues", 0, def(&[("max-length", Value::I64(1))])).unwrap();
        assert_eq!(op.kind(), PolicyKind::Operator);
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
