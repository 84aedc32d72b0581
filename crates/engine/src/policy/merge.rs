//! The definition a queue runs with when a user policy and an operator policy both apply to it:
//! RabbitMQ 4.0.5's `rabbit_policy:merge_operator_definitions/2` with the merge strategies of
//! `rabbit_policies` and `rabbit_quorum_queue`. Every key of either definition is kept; a key
//! both set takes the stricter value.

use std::cmp::Ordering;

use charon_model::{Table, Value};

/// The two definitions merged (keys in sorted order, as RabbitMQ's `lists:umerge` of the two
/// maps' keys gives them); `None` when neither policy applies. A definition alone is returned
/// as it is.
#[must_use]
pub fn merge(user: Option<&Table>, operator: Option<&Table>) -> Option<Table> {
    let (user, operator) = match (user, operator) {
        (None, None) => return None,
        (Some(one), None) | (None, Some(one)) => return Some(one.clone()),
        (Some(user), Some(operator)) => (user, operator),
    };
    let mut keys: Vec<&str> = user.iter().chain(operator.iter()).map(|(key, _)| key).collect();
    keys.sort_unstable();
    keys.dedup();
    let merged = keys
        .into_iter()
        .filter_map(|key| {
            let value = match (user.get(key), operator.get(key)) {
                (Some(mine), Some(theirs)) => merge_value(key, mine, theirs),
                (mine, theirs) => mine.or(theirs)?.clone(),
            };
            Some((key.to_owned(), value))
        })
        .collect();
    Some(merged)
}

/// `merge_policy_value/3`: one key both policies set.
///
/// Keys without a strategy (only `queue-master-locator` can be in both, and it is a string)
/// make 4.0.5 crash (`function_clause`) where it computes the effective definition; Charon
/// takes the operator's value there, as RabbitMQ does for booleans.
fn merge_value(key: &str, user: &Value, operator: &Value) -> Value {
    let pick = |ordering: Ordering| if ordering == Ordering::Greater { operator } else { user };
    match key {
        "message-ttl"
        | "max-length"
        | "max-length-bytes"
        | "max-in-memory-length"
        | "max-in-memory-bytes"
        | "expires" => pick(compare(user, operator)),
        // An unlimited (negative) limit on either side: the larger, "the more conservative".
        "delivery-limit" if negative(user) || negative(operator) => pick(compare(operator, user)),
        "delivery-limit" => pick(compare(user, operator)),
        "target-group-size" => pick(compare(operator, user)),
        _ => operator,
    }
    .clone()
}

fn negative(value: &Value) -> bool {
    matches!(value, Value::I64(n) if *n < 0)
}

/// Erlang's term order for the values a valid definition holds: numbers by value, and every
/// number before anything else.
fn compare(a: &Value, b: &Value) -> Ordering {
    let number = |v: &Value| match v {
        Value::I64(n) => Some(*n as f64),
        Value::F64(f) => Some(*f),
        _ => None,
    };
    match (number(a), number(b)) {
        (Some(a), Some(b)) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(entries: &[(&str, Value)]) -> Table {
        entries.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
    }

    #[test]
    fn the_stricter_value_wins_and_every_key_is_kept() {
        let user = def(&[
            ("max-length", Value::I64(10)),
            ("message-ttl", Value::I64(30_000)),
            ("dead-letter-exchange", Value::long_str("dlx")),
            ("overflow", Value::long_str("drop-head")),
        ]);
        let operator = def(&[
            ("max-length", Value::I64(5)),
            ("message-ttl", Value::I64(60_000)),
            ("overflow", Value::long_str("reject-publish")),
            ("expires", Value::I64(9000)),
        ]);
        let merged = merge(Some(&user), Some(&operator)).unwrap();
        assert_eq!(
            merged,
            def(&[
                ("dead-letter-exchange", Value::long_str("dlx")),
                ("expires", Value::I64(9000)),
                ("max-length", Value::I64(5)),
                ("message-ttl", Value::I64(30_000)),
                // The operator's, whatever it is.
                ("overflow", Value::long_str("reject-publish")),
            ])
        );
        assert_eq!(merge(Some(&user), None), Some(user.clone()));
        assert_eq!(merge(None, Some(&operator)), Some(operator));
        assert_eq!(merge(None, None), None);
    }

    #[test]
    fn delivery_limits_take_the_lower_unless_one_is_unlimited_and_group_sizes_the_larger() {
        let one = |key: &str, user: i64, operator: i64| {
            let merged = merge(Some(&def(&[(key, Value::I64(user))])), Some(&def(&[(key, Value::I64(operator))])));
            merged.and_then(|t| t.get(key).and_then(Value::as_i64))
        };
        assert_eq!(one("delivery-limit", 5, 3), Some(3));
        assert_eq!(one("delivery-limit", -1, 3), Some(3));
        assert_eq!(one("delivery-limit", 7, -1), Some(7));
        assert_eq!(one("target-group-size", 3, 5), Some(5));
        assert_eq!(one("queue-version", 1, 2), Some(2));
        assert_eq!(one("queue-version", 2, 1), Some(1));
        assert_eq!(one("expires", 1000, 5000), Some(1000));
        assert_eq!(one("max-length-bytes", 700, 600), Some(600));
    }
}
