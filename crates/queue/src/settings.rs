//! A queue's effective dead-lettering, TTL and length settings: its declare arguments merged with
//! the policy that applies to it, with RabbitMQ 4.0.5's precedence rules
//! (`rabbit_queue_type_util:args_policy_lookup/3`, rabbit-dlx.md §2.2).

use charon_model::{Table, Value};

use super::args::QueueType;
use super::consumer_timeout::ConsumerTimeout;

/// RabbitMQ's default quorum-queue delivery limit (`?DEFAULT_DELIVERY_LIMIT`, since 4.0).
pub const DEFAULT_DELIVERY_LIMIT: u64 = 20;

/// What happens when a queue is over its length limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Overflow {
    /// Drop (and dead-letter as `maxlen`) the oldest ready messages (the default).
    #[default]
    DropHead,
    /// Refuse new messages: publisher nack, no dead letter.
    RejectPublish,
    /// Refuse new messages and dead-letter them as `maxlen` (classic queues only).
    RejectPublishDlx,
}

impl Overflow {
    fn parse(text: &str) -> Option<Self> {
        match text {
            "drop-head" => Some(Self::DropHead),
            "reject-publish" => Some(Self::RejectPublish),
            "reject-publish-dlx" => Some(Self::RejectPublishDlx),
            _ => None,
        }
    }
}

/// The settings a queue runs with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueSettings {
    /// Where dead letters go; `Some("")` is the default exchange. `None` drops them.
    pub dead_letter_exchange: Option<String>,
    /// Replaces the message's routing keys when dead-lettering.
    pub dead_letter_routing_key: Option<String>,
    /// Queue TTL in ms.
    pub message_ttl: Option<u64>,
    /// Ready-message limit.
    pub max_length: Option<u64>,
    /// Ready-body-bytes limit.
    pub max_length_bytes: Option<u64>,
    /// What the length limits do.
    pub overflow: Overflow,
    /// Quorum queues: returns allowed before a message is dead-lettered (`None`: unlimited).
    pub delivery_limit: Option<u64>,
    /// Delete the queue after this many ms unused.
    pub expires: Option<u64>,
    /// RabbitMQ's at-least-once dead lettering is in effect: a quorum queue with the
    /// `at-least-once` strategy, a dead-letter exchange and `reject-publish` (with `drop-head`
    /// RabbitMQ falls back to at-most-once).
    pub at_least_once: bool,
    /// Charon's guarantee (not RabbitMQ's): any queue with a dead-letter exchange, in every
    /// overflow mode, keeps a dead letter until its targets confirmed it, when the
    /// `charon-dead-letter-guarantee` policy or the broker's default asks for `at-least-once`.
    /// Its waiting letters do not count against the length limits; [`Self::pending_max`]
    /// bounds them instead. Off while [`Self::at_least_once`] (RabbitMQ's rules) applies.
    pub guaranteed: bool,
    /// Waiting dead letters (messages, body bytes) above which a guaranteed queue holds its
    /// publishers back (`charon-dead-letter-pending-max`, `charon-dead-letter-pending-max-bytes`).
    pub pending_max: Bound,
    /// How long a delivery from this queue may stay unacknowledged (`x-consumer-timeout`,
    /// `consumer-timeout`; any queue type, as in RabbitMQ 4.0.5).
    pub consumer_timeout: ConsumerTimeout,
}

/// A bound on messages and body bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    /// Messages.
    pub messages: u64,
    /// Body bytes.
    pub bytes: u64,
}

/// The default bound on a guaranteed queue's waiting dead letters: they stay in memory.
pub const DEFAULT_PENDING_MAX: Bound = Bound { messages: 100_000, bytes: 128 << 20 };

impl Default for Bound {
    fn default() -> Self {
        DEFAULT_PENDING_MAX
    }
}

/// The policy key for Charon's guarantee (`at-least-once` or `at-most-once`).
pub const GUARANTEE_KEY: &str = "charon-dead-letter-guarantee";
/// The policy keys bounding a guaranteed queue's waiting dead letters.
pub const PENDING_MAX_KEY: &str = "charon-dead-letter-pending-max";
/// See [`PENDING_MAX_KEY`].
pub const PENDING_MAX_BYTES_KEY: &str = "charon-dead-letter-pending-max-bytes";

/// How an argument and a policy value of the same setting combine when both are set.
#[derive(Clone, Copy)]
enum Precedence {
    Argument,
    Policy,
    Min,
}

fn integer(value: &Value) -> Option<i64> {
    value.as_i64()
}

/// `args_policy_lookup`: the argument `x-<key>` and the policy's `<key>`, resolved.
fn lookup<'a>(arguments: &'a Table, policy: Option<&'a Table>, key: &str) -> (Option<&'a Value>, Option<&'a Value>) {
    (arguments.get(&format!("x-{key}")), policy.and_then(|p| p.get(key)))
}

fn resolve_integer(arguments: &Table, policy: Option<&Table>, key: &str, rule: Precedence) -> Option<i64> {
    match lookup(arguments, policy, key) {
        (None, None) => None,
        (Some(arg), None) => integer(arg),
        (None, Some(pol)) => integer(pol),
        (Some(arg), Some(pol)) => match (integer(arg), integer(pol)) {
            (Some(a), Some(p)) => Some(match rule {
                Precedence::Argument => a,
                Precedence::Policy => p,
                Precedence::Min => a.min(p),
            }),
            (a, p) => a.or(p),
        },
    }
}

fn resolve_text(arguments: &Table, policy: Option<&Table>, key: &str, rule: Precedence) -> Option<String> {
    let (arg, pol) = lookup(arguments, policy, key);
    let pick = match (arg, pol, rule) {
        (Some(a), Some(_), Precedence::Argument) => Some(a),
        (Some(_), Some(p), _) => Some(p),
        (a, p, _) => a.or(p),
    };
    pick.and_then(Value::as_str).map(str::to_owned)
}

/// A delivery-limit value as rabbit_fifo compares it with a message's count. `x-delivery-limit`
/// has no validator, and Erlang orders every non-number above every number: a limit that is not
/// an integer is never reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Limit {
    At(i64),
    Never,
}

fn limit_of(value: &Value) -> Limit {
    integer(value).map_or(Limit::Never, Limit::At)
}

/// `resolve_delivery_limit/2`: min of argument and policy, or max when either is negative; the
/// default 20 when neither is set; a negative or non-integer result means unlimited.
fn resolve_delivery_limit(arguments: &Table, policy: Option<&Table>) -> Option<u64> {
    let limit = match lookup(arguments, policy, "delivery-limit") {
        (None, None) => return Some(DEFAULT_DELIVERY_LIMIT),
        (Some(one), None) | (None, Some(one)) => limit_of(one),
        (Some(arg), Some(pol)) => {
            let (a, p) = (limit_of(arg), limit_of(pol));
            let negative = |l: Limit| matches!(l, Limit::At(n) if n < 0);
            if negative(a) || negative(p) { a.max(p) } else { a.min(p) }
        }
    };
    match limit {
        Limit::At(n) => u64::try_from(n).ok(),
        Limit::Never => None,
    }
}

fn non_negative(value: Option<i64>) -> Option<u64> {
    value.and_then(|n| u64::try_from(n).ok())
}

impl QueueSettings {
    /// Merges a queue's arguments with the definition of the policy that applies to it;
    /// `guarantee_default` is the broker's `dead_letter_guarantee` (a policy overrides it).
    #[must_use]
    pub fn resolve(queue_type: QueueType, arguments: &Table, policy: Option<&Table>, guarantee_default: bool) -> Self {
        let quorum = queue_type == QueueType::Quorum;
        let overflow_rule = if quorum { Precedence::Policy } else { Precedence::Argument };
        let overflow = resolve_text(arguments, policy, "overflow", overflow_rule)
            .and_then(|text| Overflow::parse(&text))
            .unwrap_or_default();
        // Quorum queues accept reject-publish-dlx but treat it as drop-head.
        let overflow = if quorum && overflow == Overflow::RejectPublishDlx { Overflow::DropHead } else { overflow };
        let delivery_limit = if quorum { resolve_delivery_limit(arguments, policy) } else { None };
        let min = |key| non_negative(resolve_integer(arguments, policy, key, Precedence::Min));
        let dead_letter_exchange = resolve_text(arguments, policy, "dead-letter-exchange", Precedence::Argument);
        let strategy = resolve_text(arguments, policy, "dead-letter-strategy", Precedence::Argument);
        let at_least_once = quorum
            && strategy.as_deref() == Some("at-least-once")
            && dead_letter_exchange.is_some()
            && overflow == Overflow::RejectPublish;
        let charon = |key: &str| policy.and_then(|p| p.get(key));
        let guarantee =
            charon(GUARANTEE_KEY).and_then(Value::as_str).map_or(guarantee_default, |g| g == "at-least-once");
        let guaranteed = guarantee && !at_least_once && dead_letter_exchange.is_some();
        let bound = |key: &str, default: u64| {
            charon(key).and_then(Value::as_i64).and_then(|n| u64::try_from(n).ok()).unwrap_or(default)
        };
        let pending_max = Bound {
            messages: bound(PENDING_MAX_KEY, DEFAULT_PENDING_MAX.messages),
            bytes: bound(PENDING_MAX_BYTES_KEY, DEFAULT_PENDING_MAX.bytes),
        };
        Self {
            dead_letter_exchange,
            dead_letter_routing_key: resolve_text(arguments, policy, "dead-letter-routing-key", Precedence::Argument),
            message_ttl: min("message-ttl"),
            max_length: min("max-length"),
            max_length_bytes: min("max-length-bytes"),
            overflow,
            delivery_limit,
            expires: min("expires"),
            at_least_once,
            guaranteed,
            pending_max,
            consumer_timeout: {
                let (arg, pol) = lookup(arguments, policy, "consumer-timeout");
                ConsumerTimeout::resolve(arg, pol)
            },
        }
    }

    /// Whether a dead letter waits in the queue until its targets confirmed it (RabbitMQ's
    /// at-least-once or Charon's guarantee).
    #[must_use]
    pub fn keeps_dead_letters(&self) -> bool {
        self.at_least_once || self.guaranteed
    }

    /// Whether a length limit is set.
    #[must_use]
    pub fn is_limited(&self) -> bool {
        self.max_length.is_some() || self.max_length_bytes.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(entries: &[(&str, Value)]) -> Table {
        entries.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
    }

    #[test]
    fn arguments_win_for_dlx_min_wins_for_limits() {
        let args = table(&[
            ("x-dead-letter-exchange", Value::long_str("arg-dlx")),
            ("x-message-ttl", Value::I32(5000)),
            ("x-max-length", Value::I64(10)),
        ]);
        let policy = table(&[
            ("dead-letter-exchange", Value::long_str("policy-dlx")),
            ("dead-letter-routing-key", Value::long_str("policy-key")),
            ("message-ttl", Value::I64(1000)),
            ("max-length", Value::I64(20)),
        ]);
        let s = QueueSettings::resolve(QueueType::Classic, &args, Some(&policy), false);
        assert_eq!(s.dead_letter_exchange.as_deref(), Some("arg-dlx"));
        assert_eq!(s.dead_letter_routing_key.as_deref(), Some("policy-key"));
        assert_eq!((s.message_ttl, s.max_length), (Some(1000), Some(10)));
        assert_eq!(s.delivery_limit, None);
    }

    #[test]
    fn at_least_once_needs_a_quorum_queue_a_dead_letter_exchange_and_reject_publish() {
        let full = [
            ("x-dead-letter-strategy", Value::long_str("at-least-once")),
            ("x-dead-letter-exchange", Value::long_str("dlx")),
            ("x-overflow", Value::long_str("reject-publish")),
        ];
        assert!(QueueSettings::resolve(QueueType::Quorum, &table(&full), None, false).at_least_once);
        assert!(!QueueSettings::resolve(QueueType::Classic, &table(&full), None, false).at_least_once);
        for missing in 0..full.len() {
            let args: Vec<_> =
                full.iter().enumerate().filter(|(i, _)| *i != missing).map(|(_, kv)| kv.clone()).collect();
            assert!(
                !QueueSettings::resolve(QueueType::Quorum, &table(&args), None, false).at_least_once,
                "without {missing}"
            );
        }
        // The strategy by policy; the queue's argument wins over it.
        let args = table(&full[1..]);
        let policy = table(&[("dead-letter-strategy", Value::long_str("at-least-once"))]);
        assert!(QueueSettings::resolve(QueueType::Quorum, &args, Some(&policy), false).at_least_once);
        let mut most = full.to_vec();
        most[0].1 = Value::long_str("at-most-once");
        assert!(!QueueSettings::resolve(QueueType::Quorum, &table(&most), Some(&policy), false).at_least_once);
    }

    #[test]
    fn consumer_timeout_is_the_smaller_of_argument_and_policy_on_every_queue_type() {
        let args = table(&[("x-consumer-timeout", Value::I32(60_000))]);
        let policy = table(&[("consumer-timeout", Value::I64(1000))]);
        for queue_type in [QueueType::Classic, QueueType::Quorum] {
            let s = QueueSettings::resolve(queue_type, &args, Some(&policy), false);
            assert_eq!(s.consumer_timeout, ConsumerTimeout::Millis(1000));
            let s = QueueSettings::resolve(queue_type, &args, None, false);
            assert_eq!(s.consumer_timeout, ConsumerTimeout::Millis(60_000));
        }
        let none = QueueSettings::resolve(QueueType::Classic, &Table::new(), None, false);
        assert_eq!(none.consumer_timeout, ConsumerTimeout::BrokerDefault);
    }

    #[test]
    fn overflow_argument_wins_on_classic_policy_wins_on_quorum() {
        let args = table(&[("x-overflow", Value::long_str("reject-publish"))]);
        let policy = table(&[("overflow", Value::long_str("reject-publish-dlx"))]);
        assert_eq!(
            QueueSettings::resolve(QueueType::Classic, &args, Some(&policy), false).overflow,
            Overflow::RejectPublish
        );
        // Quorum: the policy wins, and reject-publish-dlx means drop-head there.
        assert_eq!(QueueSettings::resolve(QueueType::Quorum, &args, Some(&policy), false).overflow, Overflow::DropHead);
    }

    #[test]
    fn a_non_integer_delivery_limit_is_never_reached() {
        let args = table(&[("x-delivery-limit", Value::long_str("abc"))]);
        assert_eq!(QueueSettings::resolve(QueueType::Quorum, &args, None, false).delivery_limit, None);
        // With a policy: the smaller wins (any number is smaller), unless one is negative.
        let policy = table(&[("delivery-limit", Value::I64(5))]);
        assert_eq!(QueueSettings::resolve(QueueType::Quorum, &args, Some(&policy), false).delivery_limit, Some(5));
        let policy = table(&[("delivery-limit", Value::I64(-1))]);
        assert_eq!(QueueSettings::resolve(QueueType::Quorum, &args, Some(&policy), false).delivery_limit, None);
    }

    #[test]
    fn quorum_delivery_limit_defaults_to_20_and_negative_means_unlimited() {
        let none = Table::new();
        assert_eq!(QueueSettings::resolve(QueueType::Quorum, &none, None, false).delivery_limit, Some(20));
        let args = table(&[("x-delivery-limit", Value::I32(-1))]);
        assert_eq!(QueueSettings::resolve(QueueType::Quorum, &args, None, false).delivery_limit, None);
        let policy = table(&[("delivery-limit", Value::I64(3))]);
        // Either negative: the larger wins.
        assert_eq!(QueueSettings::resolve(QueueType::Quorum, &args, Some(&policy), false).delivery_limit, Some(3));
        let args = table(&[("x-delivery-limit", Value::I32(5))]);
        assert_eq!(QueueSettings::resolve(QueueType::Quorum, &args, Some(&policy), false).delivery_limit, Some(3));
    }

    #[test]
    fn charons_guarantee_needs_a_dead_letter_exchange_comes_from_the_policy_or_the_default_and_yields_to_rabbitmqs() {
        let dlx = table(&[("x-dead-letter-exchange", Value::long_str("dlx"))]);
        let on = table(&[(GUARANTEE_KEY, Value::long_str("at-least-once"))]);
        let off = table(&[(GUARANTEE_KEY, Value::long_str("at-most-once"))]);
        assert!(!QueueSettings::resolve(QueueType::Classic, &dlx, None, false).guaranteed);
        assert!(QueueSettings::resolve(QueueType::Classic, &dlx, Some(&on), false).guaranteed);
        assert!(QueueSettings::resolve(QueueType::Classic, &dlx, None, true).guaranteed, "the broker default");
        assert!(!QueueSettings::resolve(QueueType::Classic, &dlx, Some(&off), true).guaranteed, "the policy wins");
        assert!(!QueueSettings::resolve(QueueType::Classic, &Table::new(), Some(&on), true).guaranteed, "no DLX");
        // Every overflow mode of a quorum queue too, except where RabbitMQ's own rules apply.
        let quorum =
            table(&[("x-dead-letter-exchange", Value::long_str("dlx")), ("x-overflow", Value::long_str("drop-head"))]);
        let s = QueueSettings::resolve(QueueType::Quorum, &quorum, Some(&on), false);
        assert!(s.guaranteed && s.keeps_dead_letters() && !s.at_least_once);
        let rabbit = table(&[
            ("x-dead-letter-exchange", Value::long_str("dlx")),
            ("x-overflow", Value::long_str("reject-publish")),
            ("x-dead-letter-strategy", Value::long_str("at-least-once")),
        ]);
        let s = QueueSettings::resolve(QueueType::Quorum, &rabbit, Some(&on), true);
        assert!(s.at_least_once && !s.guaranteed);
        // The bound on waiting letters: policy keys, else the default.
        assert_eq!(QueueSettings::resolve(QueueType::Classic, &dlx, None, true).pending_max, DEFAULT_PENDING_MAX);
        let bounded = table(&[
            (GUARANTEE_KEY, Value::long_str("at-least-once")),
            (PENDING_MAX_KEY, Value::I64(10)),
            (PENDING_MAX_BYTES_KEY, Value::I64(1000)),
        ]);
        assert_eq!(
            QueueSettings::resolve(QueueType::Classic, &dlx, Some(&bounded), false).pending_max,
            Bound { messages: 10, bytes: 1000 }
        );
    }
}
