//! Queue declare arguments: validation and equivalence, with RabbitMQ 4.0.5's texts
//! (`rabbit_amqqueue:check_declare_arguments/3`, `rabbit_misc:assert_args_equivalence/4`).

use charon_model::{Table, Value, erlang};

use crate::error::{EngineError, Resource};

/// The queue types Charon accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueType {
    /// `classic` (the default).
    Classic,
    /// `quorum`: durable only; same engine for now, with quorum semantics where they differ
    /// on the wire.
    Quorum,
}

impl QueueType {
    /// The short name stored in `x-queue-type`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Classic => "classic",
            Self::Quorum => "quorum",
        }
    }

    /// RabbitMQ's module name, used in error texts.
    #[must_use]
    pub fn module(self) -> &'static str {
        match self {
            Self::Classic => "rabbit_classic_queue",
            Self::Quorum => "rabbit_quorum_queue",
        }
    }

    /// The `x-` arguments this type understands (the `queue_arguments` capability).
    fn arguments(self) -> &'static [&'static str] {
        match self {
            Self::Classic => &[
                "x-expires",
                "x-message-ttl",
                "x-dead-letter-exchange",
                "x-dead-letter-routing-key",
                "x-max-length",
                "x-max-length-bytes",
                "x-max-priority",
                "x-overflow",
                "x-queue-mode",
                "x-queue-version",
                "x-single-active-consumer",
                "x-queue-type",
                "x-queue-master-locator",
                "x-queue-leader-locator",
            ],
            Self::Quorum => &[
                "x-dead-letter-exchange",
                "x-dead-letter-routing-key",
                "x-dead-letter-strategy",
                "x-expires",
                "x-max-length",
                "x-max-length-bytes",
                "x-max-in-memory-length",
                "x-max-in-memory-bytes",
                "x-overflow",
                "x-single-active-consumer",
                "x-queue-type",
                "x-quorum-initial-group-size",
                "x-delivery-limit",
                "x-message-ttl",
                "x-queue-leader-locator",
            ],
        }
    }
}

/// Every argument any RabbitMQ queue type knows (classic, quorum and stream); an argument in
/// this list that the declared type lacks is refused, anything else is ignored.
const ALL_KNOWN_ARGUMENTS: &[&str] = &[
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-dead-letter-strategy",
    "x-delivery-limit",
    "x-expires",
    "x-initial-cluster-size",
    "x-max-age",
    "x-max-in-memory-bytes",
    "x-max-in-memory-length",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-message-ttl",
    "x-overflow",
    "x-queue-leader-locator",
    "x-queue-master-locator",
    "x-queue-mode",
    "x-queue-type",
    "x-queue-version",
    "x-quorum-initial-group-size",
    "x-single-active-consumer",
    "x-stream-max-segment-size-bytes",
];

/// Ten years in milliseconds: RabbitMQ's ceiling for TTLs and expiries.
pub const MAX_EXPIRY_MS: i64 = 315_360_000_000;

type Check = fn(&Value, &Table) -> Result<(), String>;

/// Validators in RabbitMQ's `declare_args()` order, which decides which error wins when several
/// arguments are wrong.
const VALIDATORS: &[(&str, Check)] = &[
    ("x-expires", check_expires),
    ("x-message-ttl", check_message_ttl),
    ("x-dead-letter-exchange", check_dlx),
    ("x-dead-letter-routing-key", check_dlrk),
    ("x-dead-letter-strategy", check_dlx_strategy),
    ("x-max-length", check_non_negative),
    ("x-max-length-bytes", check_non_negative),
    ("x-max-in-memory-length", check_non_negative),
    ("x-max-in-memory-bytes", check_non_negative),
    ("x-max-priority", check_max_priority),
    ("x-overflow", check_overflow),
    ("x-queue-mode", check_queue_mode),
    ("x-queue-version", check_queue_version),
    ("x-single-active-consumer", check_bool),
    ("x-queue-type", check_queue_type),
    ("x-quorum-initial-group-size", check_positive),
    ("x-queue-leader-locator", check_leader_locator),
];

fn is_rabbit_integer(value: &Value) -> bool {
    matches!(
        value,
        Value::I8(_) | Value::I16(_) | Value::I32(_) | Value::I64(_) | Value::U8(_) | Value::U16(_) | Value::U32(_)
    )
}

fn integer(value: &Value) -> Result<i64, String> {
    match value.as_i64() {
        Some(n) if is_rabbit_integer(value) => Ok(n),
        _ => Err(format!("\"expected integer, got {}\"", value.rabbit_type_name())),
    }
}

fn is_string(value: &Value) -> bool {
    matches!(value, Value::LongStr(_) | Value::String(_))
}

fn check_expiry(n: i64) -> Result<(), String> {
    if n < 0 {
        Err(erlang::tuple(&["value_negative", &n.to_string()]))
    } else if n > MAX_EXPIRY_MS {
        Err(erlang::tuple(&["value_too_large", &n.to_string()]))
    } else {
        Ok(())
    }
}

fn check_expires(value: &Value, _: &Table) -> Result<(), String> {
    let n = integer(value)?;
    if n == 0 {
        return Err("{value_zero,0}".to_owned());
    }
    check_expiry(n)
}

fn check_message_ttl(value: &Value, _: &Table) -> Result<(), String> {
    check_expiry(integer(value)?)
}

fn check_non_negative(value: &Value, _: &Table) -> Result<(), String> {
    let n = integer(value)?;
    if n < 0 { Err(erlang::tuple(&["value_negative", &n.to_string()])) } else { Ok(()) }
}

fn check_positive(value: &Value, args: &Table) -> Result<(), String> {
    check_non_negative(value, args)?;
    if integer(value)? == 0 { Err("{value_zero,0}".to_owned()) } else { Ok(()) }
}

fn check_max_priority(value: &Value, args: &Table) -> Result<(), String> {
    check_non_negative(value, args)?;
    let n = integer(value)?;
    if n > 255 { Err(erlang::tuple(&["max_value_exceeded", &n.to_string()])) } else { Ok(()) }
}

fn unacceptable(value: &Value) -> String {
    erlang::tuple(&["unacceptable_type", value.rabbit_type_name()])
}

fn check_dlx(value: &Value, _: &Table) -> Result<(), String> {
    if is_string(value) { Ok(()) } else { Err(unacceptable(value)) }
}

fn check_dlrk(value: &Value, args: &Table) -> Result<(), String> {
    if !is_string(value) {
        return Err(unacceptable(value));
    }
    if args.contains("x-dead-letter-exchange") { Ok(()) } else { Err("routing_key_but_no_dlx_defined".to_owned()) }
}

fn one_of(value: &Value, allowed: &[&str], error: &str) -> Result<(), String> {
    if !is_string(value) {
        return Err(unacceptable(value));
    }
    match value.as_str() {
        Some(s) if allowed.contains(&s) => Ok(()),
        _ => Err(error.to_owned()),
    }
}

fn check_dlx_strategy(value: &Value, _: &Table) -> Result<(), String> {
    one_of(value, &["at-most-once", "at-least-once"], "invalid_dlx_strategy")
}

fn check_overflow(value: &Value, _: &Table) -> Result<(), String> {
    one_of(value, &["drop-head", "reject-publish", "reject-publish-dlx"], "invalid_overflow")
}

/// `client-local` and `balanced`, and the legacy values RabbitMQ 4 still takes as `balanced`
/// (`rabbit_queue_location`): RabbitMQ's AMQP 1.0 Go client sends `random` for its balanced
/// locator. On one node every value places the queue on it.
fn check_leader_locator(value: &Value, _: &Table) -> Result<(), String> {
    one_of(value, &["client-local", "balanced", "random", "least-leaders", "min-masters"], "invalid_queue_locator_arg")
}

fn check_queue_mode(value: &Value, _: &Table) -> Result<(), String> {
    if !is_string(value) {
        return Err(unacceptable(value));
    }
    match value.as_str() {
        Some("default" | "lazy") => Ok(()),
        other => Err(format!("\"unsupported queue mode '{}'\"", other.unwrap_or_default())),
    }
}

fn check_queue_version(value: &Value, args: &Table) -> Result<(), String> {
    check_non_negative(value, args)?;
    match integer(value)? {
        1 | 2 => Ok(()),
        n => Err(format!("\"unsupported queue version '{n}'\"")),
    }
}

fn check_bool(value: &Value, _: &Table) -> Result<(), String> {
    match value {
        Value::Bool(_) => Ok(()),
        other => Err(unacceptable(other)),
    }
}

fn check_queue_type(value: &Value, _: &Table) -> Result<(), String> {
    if !is_string(value) {
        return Err(unacceptable(value));
    }
    match value.as_str() {
        Some("classic" | "quorum" | "rabbit_classic_queue" | "rabbit_quorum_queue") => Ok(()),
        other => Err(format!("\"unsupported queue type '{}'\"", other.unwrap_or_default())),
    }
}

/// A classic queue's `x-max-priority` (validated at declare: 0–255).
pub(crate) fn max_priority(arguments: &Table) -> Option<u8> {
    arguments.get("x-max-priority").and_then(Value::as_i64).and_then(|max| u8::try_from(max).ok())
}

/// Whether `x-single-active-consumer` is on (validated at declare).
pub(crate) fn single_active_consumer(arguments: &Table) -> bool {
    matches!(arguments.get("x-single-active-consumer"), Some(Value::Bool(true)))
}

/// A consumer's `x-priority` (0 without one): any integer, as RabbitMQ 4.0.5 takes it
/// (`rabbit_queue_consumers`' `consumer_priority`); anything else is refused with its text.
pub(crate) fn consumer_priority(arguments: &Table) -> Result<i64, String> {
    arguments.get("x-priority").map_or(Ok(0), integer)
}

/// The queue type named by `x-queue-type` (classic when absent).
#[must_use]
pub fn queue_type_of(arguments: &Table) -> QueueType {
    match arguments.get("x-queue-type").and_then(Value::as_str) {
        Some("quorum" | "rabbit_quorum_queue") => QueueType::Quorum,
        _ => QueueType::Classic,
    }
}

/// Validates the arguments of a queue being created, returning its type.
///
/// # Errors
/// RabbitMQ's 406 texts: `invalid arg 'x-…' for queue 'q' in vhost '/': …` for a bad value,
/// `… of queue type rabbit_classic_queue` for an argument the type lacks.
pub fn validate_declare(resource: &Resource, arguments: &Table) -> Result<QueueType, EngineError> {
    let invalid =
        |key: &str, reason: String| EngineError::Precondition(format!("invalid arg '{key}' for {resource}: {reason}"));
    // The channel checks the dead-letter exchange's type first, with its own text
    // (`rabbit_misc:r_arg/4` in rabbit_channel's queue.declare, before any validator).
    if let Some(dlx) = arguments.get("x-dead-letter-exchange").filter(|v| !is_string(v)) {
        return Err(EngineError::Precondition(format!(
            "invalid type '{}' for arg 'x-dead-letter-exchange' in {resource}",
            dlx.rabbit_type_name()
        )));
    }
    if let Some(value) = arguments.get("x-queue-type") {
        check_queue_type(value, arguments).map_err(|e| invalid("x-queue-type", e))?;
    }
    let queue_type = queue_type_of(arguments);
    let supported = queue_type.arguments();
    for (key, check) in VALIDATORS {
        if !supported.contains(key) {
            continue;
        }
        if let Some(value) = arguments.get(key) {
            check(value, arguments).map_err(|e| invalid(key, e))?;
        }
    }
    for (key, _) in arguments.iter() {
        if ALL_KNOWN_ARGUMENTS.contains(&key) && !supported.contains(&key) {
            return Err(EngineError::Precondition(format!(
                "invalid arg '{key}' for {resource} of queue type {}",
                queue_type.module()
            )));
        }
    }
    Ok(queue_type)
}

/// A bare value as RabbitMQ's `rabbit_misc:val/1` prints it: `'b'`, `'20'`, `'true'`.
fn bare(value: &Value) -> String {
    match value {
        Value::LongStr(_) | Value::String(_) | Value::Symbol(_) => {
            format!("'{}'", value.as_str().unwrap_or_default())
        }
        Value::Bool(b) => format!("'{b}'"),
        other => format!("'{}'", other.as_i64().map_or_else(|| format!("{other:?}"), |n| n.to_string())),
    }
}

/// The two sides of an inequivalence as RabbitMQ prints them: bare values when both are set
/// (`rabbit_misc:assert_args_equivalence1` passes the values without their types), otherwise
/// `the value 'b' of type 'longstr'` against `none`.
pub fn describe_pair(received: Option<&Value>, current: Option<&Value>) -> (String, String) {
    match (received, current) {
        (Some(r), Some(c)) => (bare(r), bare(c)),
        (r, c) => (describe(r), describe(c)),
    }
}

/// Formats a typed value as RabbitMQ's `rabbit_misc:val/1` does for a `{Type, Value}` pair:
/// `the value 'b' of type 'longstr'`, or `none` when absent.
fn describe(value: Option<&Value>) -> String {
    match value {
        None => "none".to_owned(),
        Some(v) => {
            let shown = match v {
                Value::LongStr(_) | Value::String(_) | Value::Symbol(_) => v.as_str().unwrap_or_default().to_owned(),
                Value::Bool(b) => b.to_string(),
                other => other.as_i64().map_or_else(|| format!("{other:?}"), |n| n.to_string()),
            };
            format!("the value '{shown}' of type '{}'", v.rabbit_type_name())
        }
    }
}

/// Checks that a redeclare's arguments match the existing queue's for every argument its type
/// understands (integers compare by class, `x-queue-type` classic equals absent).
///
/// # Errors
/// `inequivalent arg 'x-…' for queue …: received … but current is …`.
pub fn assert_equivalent(
    resource: &Resource,
    queue_type: QueueType,
    current: &Table,
    requested: &Table,
) -> Result<(), EngineError> {
    for key in queue_type.arguments() {
        let (old, new) = (current.get(key), requested.get(key));
        let same = match (old, new) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                a.rabbit_type_name() == b.rabbit_type_name() && a.equivalent(b)
                    || (is_rabbit_integer(a) && is_rabbit_integer(b) && a.equivalent(b))
            }
            (None, Some(v)) | (Some(v), None) => *key == "x-queue-type" && v.as_str() == Some("classic"),
        };
        if !same {
            let (received, current) = describe_pair(new, old);
            return Err(EngineError::inequivalent(resource.clone(), key, received, current));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(entries: &[(&str, Value)]) -> Table {
        entries.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
    }

    fn q() -> Resource {
        Resource::queue("/", "q")
    }

    #[test]
    fn texts_match_rabbitmq() {
        let err = |a: Table| validate_declare(&q(), &a).unwrap_err().to_string();
        assert_eq!(
            err(args(&[("x-dead-letter-routing-key", Value::long_str("k"))])),
            "invalid arg 'x-dead-letter-routing-key' for queue 'q' in vhost '/': routing_key_but_no_dlx_defined"
        );
        assert_eq!(
            err(args(&[("x-max-length", Value::I32(-1))])),
            "invalid arg 'x-max-length' for queue 'q' in vhost '/': {value_negative,-1}"
        );
        assert_eq!(
            err(args(&[("x-message-ttl", Value::long_str("1"))])),
            "invalid arg 'x-message-ttl' for queue 'q' in vhost '/': \"expected integer, got longstr\""
        );
        assert_eq!(
            err(args(&[("x-dead-letter-exchange", Value::I32(1))])),
            "invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue 'q' in vhost '/'"
        );
        // Checked before every validator (RabbitMQ's channel does it first).
        assert_eq!(
            err(args(&[("x-expires", Value::I32(0)), ("x-dead-letter-exchange", Value::Bool(true))])),
            "invalid type 'bool' for arg 'x-dead-letter-exchange' in queue 'q' in vhost '/'"
        );
        assert_eq!(
            err(args(&[("x-delivery-limit", Value::I32(1))])),
            "invalid arg 'x-delivery-limit' for queue 'q' in vhost '/' of queue type rabbit_classic_queue"
        );
    }

    #[test]
    fn the_legacy_leader_locators_are_taken_on_both_queue_types() {
        for kind in ["classic", "quorum"] {
            for locator in ["client-local", "balanced", "random", "least-leaders", "min-masters"] {
                let a = args(&[
                    ("x-queue-type", Value::long_str(kind)),
                    ("x-queue-leader-locator", Value::long_str(locator)),
                ]);
                assert!(validate_declare(&q(), &a).is_ok(), "{kind} {locator}");
            }
            let bogus =
                args(&[("x-queue-type", Value::long_str(kind)), ("x-queue-leader-locator", Value::long_str("bogus"))]);
            assert_eq!(
                validate_declare(&q(), &bogus).unwrap_err().to_string(),
                "invalid arg 'x-queue-leader-locator' for queue 'q' in vhost '/': invalid_queue_locator_arg"
            );
        }
    }

    #[test]
    fn validator_order_decides_which_error_wins() {
        let a = args(&[("x-overflow", Value::long_str("nope")), ("x-expires", Value::I32(0))]);
        assert!(validate_declare(&q(), &a).unwrap_err().to_string().contains("'x-expires'"));
    }

    #[test]
    fn equivalence_compares_integers_by_class_and_classic_equals_absent() {
        let a = args(&[("x-max-length", Value::I16(5)), ("x-queue-type", Value::long_str("classic"))]);
        let b = args(&[("x-max-length", Value::I64(5))]);
        assert!(assert_equivalent(&q(), QueueType::Classic, &a, &b).is_ok());
        let c = args(&[("x-max-length", Value::I64(6))]);
        let e = assert_equivalent(&q(), QueueType::Classic, &a, &c).unwrap_err();
        assert_eq!(
            e.to_string(),
            "inequivalent arg 'x-max-length' for queue 'q' in vhost '/': received '6' but current is '5'"
        );
    }
}
