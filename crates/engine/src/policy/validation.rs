//! Validating a policy as RabbitMQ 4.0.5 does (`rabbit_policy:validate/5`, through
//! `rabbit_parameter_validation:proplist/3`): every field is checked and every failure reported,
//! one line each, in RabbitMQ's order (unrecognised fields, definition, apply-to, pattern,
//! priority). A definition is checked by its validator modules in turn, the first failure
//! winning; the keys no module knows are reported only when every check passed.
//!
//! User and operator policies differ only in the keys their definitions may hold (and the
//! order of the modules, as 4.0.5's registry returns them, observed).

use charon_model::{Table, Value, erlang};
use regex::Regex;

use super::{ApplyTo, PolicyKind};

/// A key, its check, and the text after the offending value when the check fails.
type Validator = (&'static str, fn(&Value) -> bool, &'static str);

/// `rabbit_policies`' keys for user policies (`validate_policy0/2`).
const USER_KEYS: &[Validator] = &[
    ("alternate-exchange", is_text, "is not a valid alternate exchange name"),
    ("consumer-timeout", |v| at_least(v, 0), "is not a valid consumer timeout"),
    ("dead-letter-exchange", is_text, "is not a valid dead letter exchange name"),
    ("dead-letter-routing-key", is_text, "is not a valid dead letter routing key"),
    ("dead-letter-strategy", |v| one_of(v, &["at-most-once", "at-least-once"]), "is not a valid dead letter strategy"),
    MESSAGE_TTL,
    EXPIRES,
    MAX_LENGTH,
    MAX_LENGTH_BYTES,
    MAX_IN_MEMORY_LENGTH,
    MAX_IN_MEMORY_BYTES,
    ("queue-mode", |v| one_of(v, &["default", "lazy"]), "is not a valid queue-mode value"),
    QUEUE_VERSION,
    OVERFLOW,
    DELIVERY_LIMIT,
    (
        "queue-leader-locator",
        |v| one_of(v, &["client-local", "balanced", "random", "least-leaders"]),
        "is not a valid queue leader locator value",
    ),
    ("initial-cluster-size", |v| at_least(v, 0), "is not a valid cluster size"),
    ("max-age", is_text, "is not a valid max age"),
];

/// `rabbit_policies`' keys for operator policies: the limits an operator may impose.
const OPERATOR_KEYS: &[Validator] = &[
    EXPIRES,
    MESSAGE_TTL,
    MAX_LENGTH,
    MAX_LENGTH_BYTES,
    MAX_IN_MEMORY_LENGTH,
    MAX_IN_MEMORY_BYTES,
    DELIVERY_LIMIT,
    QUEUE_VERSION,
    OVERFLOW,
];

const MESSAGE_TTL: Validator = ("message-ttl", |v| at_least(v, 0), "is not a valid message TTL");
const EXPIRES: Validator = ("expires", |v| at_least(v, 1), "is not a valid queue expiry");
const MAX_LENGTH: Validator = ("max-length", |v| at_least(v, 0), "is not a valid maximum length");
const MAX_LENGTH_BYTES: Validator = ("max-length-bytes", |v| at_least(v, 0), "is not a valid maximum length in bytes");
const MAX_IN_MEMORY_LENGTH: Validator =
    ("max-in-memory-length", |v| at_least(v, 0), "is not a valid maximum memory in bytes");
const MAX_IN_MEMORY_BYTES: Validator =
    ("max-in-memory-bytes", |v| at_least(v, 0), "is not a valid maximum memory in bytes");
const QUEUE_VERSION: Validator =
    ("queue-version", |v| matches!(v, Value::I64(1 | 2)), "is not a valid queue-version value");
const OVERFLOW: Validator = (
    "overflow",
    |v| one_of(v, &["drop-head", "reject-publish", "reject-publish-dlx"]),
    "is not a valid overflow value",
);
const DELIVERY_LIMIT: Validator = ("delivery-limit", |v| matches!(v, Value::I64(_)), "is not a valid delivery limit");

/// `rabbit_quorum_queue`'s key: a cluster-placement target (no effect on one node, as on a
/// single RabbitMQ node).
const QUORUM_KEYS: &[Validator] =
    &[("target-group-size", |v| matches!(v, Value::I64(n) if *n > 0), "is not a valid qq target count value")];

/// `rabbit_classic_queue`'s deprecated key (no effect on one node, as on a single RabbitMQ node).
const CLASSIC_KEYS: &[Validator] = &[(
    "queue-master-locator",
    |v| one_of(v, &["client-local", "balanced", "random", "least-leaders", "min-masters"]),
    "is not a valid master locator",
)];

/// Charon's own keys (docs/dead-lettering.md): in user policies only.
const CHARON_KEYS: &[Validator] = &[
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

/// The validator modules of a kind, in the order 4.0.5 consults them (observed: with both
/// modules' keys failing, a user policy reports the quorum queue's, an operator policy the
/// classic queue's).
fn modules(kind: PolicyKind) -> &'static [&'static [Validator]] {
    match kind {
        PolicyKind::User => &[USER_KEYS, QUORUM_KEYS, CLASSIC_KEYS, CHARON_KEYS],
        PolicyKind::Operator => &[OPERATOR_KEYS, CLASSIC_KEYS, QUORUM_KEYS],
    }
}

fn is_text(value: &Value) -> bool {
    matches!(value, Value::LongStr(_) | Value::String(_))
}

fn at_least(value: &Value, min: i64) -> bool {
    matches!(value, Value::I64(n) if *n >= min)
}

fn one_of(value: &Value, allowed: &[&str]) -> bool {
    is_text(value) && value.as_str().is_some_and(|s| allowed.contains(&s))
}

/// The name of a kind's key validators, as RabbitMQ's parse error names them.
fn validator_name(kind: PolicyKind) -> &'static str {
    match kind {
        PolicyKind::User => "policy_validator",
        PolicyKind::Operator => "operator_policy_validator",
    }
}

/// Checks a definition (`validation/3`): empty, then each module's keys in the definition's
/// order, then the keys no module knows.
pub(super) fn definition(kind: PolicyKind, definition: &Table) -> Result<(), String> {
    if definition.is_empty() {
        return Err("no policy provided".to_owned());
    }
    let mut known = vec![false; definition.len()];
    for module in modules(kind) {
        for ((key, value), known) in definition.iter().zip(known.iter_mut()) {
            if let Some((_, check, text)) = module.iter().find(|(name, _, _)| *name == key) {
                *known = true;
                if !check(value) {
                    return Err(format!("{} {text}", erlang::term(value)));
                }
            }
        }
    }
    let unknown: Vec<String> = definition
        .iter()
        .zip(known)
        .filter(|(_, known)| !known)
        .map(|((key, value), _)| erlang::tuple(&[erlang::text(key), erlang::term(value)]))
        .collect();
    if unknown.is_empty() { Ok(()) } else { Err(format!("[{}] are not recognised policy settings", unknown.join(","))) }
}

/// A policy's fields as given, each absent or of any type, before validation.
#[derive(Clone, Debug, Default)]
pub struct PolicyFields {
    /// `pattern`.
    pub pattern: Option<Value>,
    /// `definition`.
    pub definition: Option<Value>,
    /// `priority`.
    pub priority: Option<Value>,
    /// `apply-to` (optional: `all`).
    pub apply_to: Option<Value>,
    /// Any other fields, which RabbitMQ refuses (`Unrecognised terms`).
    pub unrecognised: Table,
}

/// The fields of a valid policy.
pub(super) struct Checked {
    pub(super) pattern: String,
    pub(super) regex: Regex,
    pub(super) apply_to: ApplyTo,
    pub(super) priority: i64,
    pub(super) definition: Table,
}

/// Checks every field; the failures, one line each, in RabbitMQ's order.
pub(super) fn fields(kind: PolicyKind, name: &str, fields: PolicyFields) -> Result<Checked, String> {
    let missing = |key: &str| format!("Key \"{key}\" not found in {name}");
    let mut errors = Vec::new();
    if !fields.unrecognised.is_empty() {
        let terms = fields.unrecognised.iter().map(|(k, v)| erlang::tuple(&[erlang::text(k), erlang::term(v)]));
        errors.push(format!("Unrecognised terms {} in {name}", erlang::list(terms)));
    }
    let definition = match fields.definition {
        None => Err(missing("definition")),
        Some(Value::Table(table)) => definition(kind, &table).map(|()| table),
        Some(Value::List(items)) if items.is_empty() => Err("no policy provided".to_owned()),
        Some(list @ Value::List(_)) => Err(format!("definition must be a dictionary: {}", erlang::term(&list))),
        Some(other) => Err(format!(
            "parse error while reading policy {name}: {}. Validator: {}.",
            erlang::term(&other),
            validator_name(kind)
        )),
    };
    let apply_to = match &fields.apply_to {
        None => Ok(ApplyTo::All),
        Some(value) => {
            let text = value.as_str().map_or_else(|| erlang::term(value), str::to_owned);
            ApplyTo::parse(&text).ok_or_else(|| {
                format!(
                    "apply-to '{text}' unrecognised; should be one of: 'queues', 'classic_queues',  \
                     'quorum_queues', 'streams', 'exchanges', or 'all'"
                )
            })
        }
    };
    let pattern = match fields.pattern {
        None => Err(missing("pattern")),
        Some(value) => match value.as_str().filter(|_| is_text(&value)) {
            Some(text) => regex(text).map(|regex| (text.to_owned(), regex)),
            None => Err(format!("pattern should be a binary but was {}", erlang::term(&value))),
        },
    };
    let priority = match &fields.priority {
        None => Err(missing("priority")),
        Some(Value::I64(n)) => Ok(*n),
        // RabbitMQ keeps a float priority; Charon orders by its integer part.
        #[allow(clippy::cast_possible_truncation)]
        Some(Value::F64(f)) => Ok(*f as i64),
        Some(other) => Err(format!("priority should be a number, actually was {}", erlang::term(other))),
    };
    // Reported in RabbitMQ's order: the results are gathered last field first.
    errors.extend(definition.as_ref().err().cloned());
    errors.extend(apply_to.as_ref().err().cloned());
    errors.extend(pattern.as_ref().err().cloned());
    errors.extend(priority.as_ref().err().cloned());
    match (errors.is_empty(), definition, apply_to, pattern, priority) {
        (true, Ok(definition), Ok(apply_to), Ok((pattern, regex)), Ok(priority)) => {
            Ok(Checked { pattern, regex, apply_to, priority, definition })
        }
        _ => Err(errors.join("\n")),
    }
}

/// A pattern as a regular expression, or RabbitMQ's refusal: PCRE's message and offset as
/// `~tp` prints them after the text (the tuple on two lines when it would pass column 80).
/// The common syntax errors get PCRE's words (observed on 4.0.5); others name the `regex`
/// crate's message at offset 0.
fn regex(pattern: &str) -> Result<Regex, String> {
    const PREFIX: &str = "pattern should be regular expression but is invalid: ";
    Regex::new(pattern).map_err(|e| {
        let (message, offset) = pcre_error(pattern).unwrap_or_else(|| {
            let last = e.to_string().lines().last().unwrap_or_default().trim().to_owned();
            (last, 0)
        });
        let term = format!("{{{},{offset}}}", erlang_string(&message));
        // The tuple starts at column 53: it stays on the line while it ends before column 80,
        // else its second element goes under its first.
        if PREFIX.len() + term.len() < 80 {
            format!("{PREFIX}{term}")
        } else {
            format!("{PREFIX}{{{},\n{}{offset}}}", erlang_string(&message), " ".repeat(PREFIX.len() + 1))
        }
    })
}

/// PCRE's message and offset for a syntax error the `regex` crate's parser also finds.
fn pcre_error(pattern: &str) -> Option<(String, usize)> {
    use regex_syntax::ast::ErrorKind;
    let error = regex_syntax::ast::parse::Parser::new().parse(pattern).err()?;
    let span = error.span();
    let (message, offset) = match error.kind() {
        ErrorKind::GroupUnclosed => ("missing )", pattern.len()),
        ErrorKind::ClassUnclosed => ("missing terminating ] for character class", pattern.len()),
        ErrorKind::GroupUnopened => ("unmatched parentheses", span.start.offset),
        ErrorKind::RepetitionMissing => ("nothing to repeat", span.start.offset),
        ErrorKind::RepetitionCountInvalid => {
            ("numbers out of order in {} quantifier", span.end.offset.saturating_sub(1))
        }
        ErrorKind::ClassRangeInvalid => ("range out of order in character class", span.end.offset.saturating_sub(1)),
        _ => return None,
    };
    Some((message.to_owned(), offset))
}

/// An Erlang string as `~tp` prints it.
fn erlang_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(entries: &[(&str, Value)]) -> Table {
        entries.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
    }

    #[test]
    fn operator_policies_take_only_the_limits() {
        let op = |d: Table| definition(PolicyKind::Operator, &d);
        for (key, value) in [
            ("expires", Value::I64(1000)),
            ("message-ttl", Value::I64(0)),
            ("max-length", Value::I64(5)),
            ("max-length-bytes", Value::I64(5)),
            ("max-in-memory-length", Value::I64(5)),
            ("max-in-memory-bytes", Value::I64(5)),
            ("delivery-limit", Value::I64(-1)),
            ("queue-version", Value::I64(2)),
            ("overflow", Value::long_str("reject-publish")),
            ("target-group-size", Value::I64(3)),
            ("queue-master-locator", Value::long_str("min-masters")),
        ] {
            assert_eq!(op(def(&[(key, value)])), Ok(()), "{key}");
        }
        assert_eq!(
            op(def(&[("dead-letter-exchange", Value::long_str("d")), ("foo", Value::I64(2))])),
            Err("[{<<\"dead-letter-exchange\">>,<<\"d\">>},{<<\"foo\">>,2}] are not recognised policy settings".into())
        );
        let charon = def(&[(crate::queue::settings::GUARANTEE_KEY, Value::long_str("at-least-once"))]);
        assert!(op(charon.clone()).unwrap_err().ends_with("are not recognised policy settings"));
        assert_eq!(definition(PolicyKind::User, &charon), Ok(()));
    }

    #[test]
    fn the_first_failing_module_wins_and_unknown_keys_come_last() {
        let check = |kind, d: &[(&str, Value)]| definition(kind, &def(d)).unwrap_err();
        let bad_size = ("target-group-size", Value::I64(0));
        let bad_locator = ("queue-master-locator", Value::long_str("x"));
        assert_eq!(
            check(PolicyKind::User, &[bad_size.clone(), bad_locator.clone()]),
            "0 is not a valid qq target count value"
        );
        assert_eq!(check(PolicyKind::Operator, &[bad_size, bad_locator]), "<<\"x\">> is not a valid master locator");
        // Within a module, the definition's order.
        let both = [("max-length", Value::I64(-1)), ("message-ttl", Value::I64(-1))];
        assert_eq!(check(PolicyKind::Operator, &both), "-1 is not a valid maximum length");
        let unknown_first = [("foo", Value::I64(1)), ("max-length", Value::I64(-1))];
        assert_eq!(check(PolicyKind::User, &unknown_first), "-1 is not a valid maximum length");
    }

    #[test]
    fn pattern_errors_are_pcres_as_rabbitmq_prints_them() {
        let error = |pattern: &str| regex(pattern).err().unwrap();
        let prefix = "pattern should be regular expression but is invalid: ";
        assert_eq!(error("("), format!("{prefix}{{\"missing )\",1}}"));
        assert_eq!(error("a(b"), format!("{prefix}{{\"missing )\",3}}"));
        assert_eq!(error("*a"), format!("{prefix}{{\"nothing to repeat\",0}}"));
        let wrapped = |message: &str, offset: usize| format!("{prefix}{{\"{message}\",\n{}{offset}}}", " ".repeat(54));
        assert_eq!(error("[a"), wrapped("missing terminating ] for character class", 2));
        assert_eq!(error("a)"), wrapped("unmatched parentheses", 1));
        assert_eq!(error("a{2,1}"), wrapped("numbers out of order in {} quantifier", 5));
        assert_eq!(error("[z-a]"), wrapped("range out of order in character class", 3));
        assert!(regex("^q\\.").is_ok());
    }

    #[test]
    fn every_failing_field_is_reported_last_field_first() {
        let fields = PolicyFields {
            pattern: Some(Value::I64(5)),
            definition: Some(Value::Table(def(&[("max-length", Value::I64(-1))]))),
            priority: Some(Value::long_str("x")),
            apply_to: Some(Value::long_str("bogus")),
            unrecognised: def(&[("foo", Value::I64(1))]),
        };
        let error = super::fields(PolicyKind::Operator, "p", fields).err().unwrap();
        let lines: Vec<&str> = error.lines().collect();
        assert_eq!(lines.len(), 5, "{error}");
        assert_eq!(lines[0], "Unrecognised terms [{<<\"foo\">>,1}] in p");
        assert_eq!(lines[1], "-1 is not a valid maximum length");
        assert!(lines[2].starts_with("apply-to 'bogus' unrecognised"));
        assert_eq!(lines[3], "pattern should be a binary but was 5");
        assert_eq!(lines[4], "priority should be a number, actually was <<\"x\">>");
        let missing = super::fields(PolicyKind::Operator, "m", PolicyFields::default()).err().unwrap();
        assert_eq!(
            missing,
            "Key \"definition\" not found in m\nKey \"pattern\" not found in m\nKey \"priority\" not found in m"
        );
    }
}
