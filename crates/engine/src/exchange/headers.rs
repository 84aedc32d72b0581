//! Headers exchange bindings, matched as RabbitMQ's `rabbit_exchange_type_headers` does.
//!
//! `x-match` selects `all` (default), `any`, `all-with-x` or `any-with-x`. Plain `all`/`any`
//! skip binding arguments whose names start with `x-`; the `-with-x` variants compare them too
//! (always skipping `x-match` itself). A binding argument of type void only requires the header
//! to be present. Values compare as Erlang terms do: integers by value whatever their width,
//! strings by their bytes.

use charon_model::{Table, Value, erlang};

use super::binding::{Binding, Destination};
use crate::error::EngineError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MatchMode {
    All,
    Any,
    AllWithX,
    AnyWithX,
}

impl MatchMode {
    fn of(arguments: &Table) -> Self {
        match arguments.get("x-match").and_then(Value::as_str) {
            Some("any") => Self::Any,
            Some("any-with-x") => Self::AnyWithX,
            Some("all-with-x") => Self::AllWithX,
            _ => Self::All,
        }
    }
}

/// Checks the `x-match` argument of a new binding, with RabbitMQ's texts.
///
/// # Errors
/// A 406 text when `x-match` is not one of the four modes or not a string.
pub(crate) fn validate(arguments: &Table) -> Result<(), EngineError> {
    match arguments.get("x-match") {
        None => Ok(()),
        Some(Value::LongStr(_) | Value::String(_)) => match arguments.get("x-match").and_then(Value::as_str) {
            Some("all" | "any" | "all-with-x" | "any-with-x") => Ok(()),
            _ => {
                let shown = arguments.get("x-match").and_then(Value::as_str).map_or_else(String::new, erlang::text);
                Err(EngineError::Precondition(format!(
                    "Invalid x-match field value {shown}; expected all, any, all-with-x, or any-with-x"
                )))
            }
        },
        Some(other) => Err(EngineError::Precondition(format!(
            "Invalid x-match field type {} (value {}); expected longstr",
            other.rabbit_type_name(),
            erlang_term(other)
        ))),
    }
}

/// Booleans and integers as Erlang prints them; any other type as before this printed through
/// [`erlang`] (its Rust debug form), so the text stays what clients have seen.
fn erlang_term(value: &Value) -> String {
    if matches!(value, Value::Bool(_)) || value.as_i64().is_some() { erlang::term(value) } else { format!("{value:?}") }
}

/// Whether two header values are equal as Erlang terms.
fn same_value(a: &Value, b: &Value) -> bool {
    a.equivalent(b)
}

fn arg_matches(key: &str, expected: &Value, headers: &Table) -> bool {
    match expected {
        Value::Null => headers.contains(key),
        value => headers.get(key).is_some_and(|actual| same_value(actual, value)),
    }
}

/// Whether `headers` satisfy a binding with these arguments.
pub(crate) fn matches(arguments: &Table, headers: &Table) -> bool {
    let mode = MatchMode::of(arguments);
    let with_x = matches!(mode, MatchMode::AllWithX | MatchMode::AnyWithX);
    let considered =
        arguments.iter().filter(|(k, _)| if *k == "x-match" { false } else { with_x || !k.starts_with("x-") });
    let mut results = considered.map(|(k, v)| arg_matches(k, v, headers));
    match mode {
        MatchMode::All | MatchMode::AllWithX => results.all(|m| m),
        MatchMode::Any | MatchMode::AnyWithX => results.any(|m| m),
    }
}

#[derive(Debug, Default)]
pub(crate) struct HeadersBindings {
    bindings: Vec<Binding>,
}

impl HeadersBindings {
    pub(crate) fn add(&mut self, binding: Binding) -> bool {
        if self.contains(&binding) {
            return false;
        }
        self.bindings.push(binding);
        true
    }

    pub(crate) fn remove(&mut self, binding: &Binding) -> bool {
        let before = self.bindings.len();
        self.bindings.retain(|b| !b.same_as(binding));
        before != self.bindings.len()
    }

    pub(crate) fn remove_destination(&mut self, destination: &Destination) {
        self.bindings.retain(|b| &b.destination != destination);
    }

    pub(crate) fn contains(&self, binding: &Binding) -> bool {
        self.bindings.iter().any(|b| b.same_as(binding))
    }

    pub(crate) fn contains_destination(&self, destination: &Destination) -> bool {
        self.bindings.iter().any(|b| &b.destination == destination)
    }

    pub(crate) fn to_destination(&self, destination: &Destination) -> Vec<Binding> {
        self.bindings.iter().filter(|b| &b.destination == destination).cloned().collect()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }

    pub(crate) fn route<'a>(&'a self, headers: &Table, out: &mut Vec<&'a Destination>) {
        out.extend(self.bindings.iter().filter(|b| matches(&b.arguments, headers)).map(|b| &b.destination));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(entries: &[(&str, Value)]) -> Table {
        entries.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
    }

    #[test]
    fn all_requires_every_plain_argument() {
        let args = table(&[("a", Value::I32(1)), ("b", Value::long_str("x"))]);
        assert!(matches(&args, &table(&[("a", Value::I64(1)), ("b", Value::long_str("x")), ("c", Value::Bool(true))])));
        assert!(!matches(&args, &table(&[("a", Value::I64(1))])));
    }

    #[test]
    fn any_needs_one_and_plain_modes_skip_x_arguments() {
        let args = table(&[("x-match", Value::long_str("any")), ("x-k", Value::long_str("v")), ("a", Value::I32(1))]);
        assert!(!matches(&args, &table(&[("x-k", Value::long_str("v"))])));
        assert!(matches(&args, &table(&[("a", Value::I32(1))])));
        let with_x = table(&[("x-match", Value::long_str("any-with-x")), ("x-k", Value::long_str("v"))]);
        assert!(matches(&with_x, &table(&[("x-k", Value::long_str("v"))])));
    }

    #[test]
    fn void_argument_checks_presence_and_empty_all_matches_everything() {
        let args = table(&[("a", Value::Null)]);
        assert!(matches(&args, &table(&[("a", Value::long_str("anything"))])));
        assert!(!matches(&args, &Table::new()));
        assert!(matches(&Table::new(), &Table::new()));
        assert!(!matches(&table(&[("x-match", Value::long_str("any"))]), &Table::new()));
    }

    #[test]
    fn invalid_x_match_is_refused_with_rabbit_text() {
        let err = validate(&table(&[("x-match", Value::long_str("some"))])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Invalid x-match field value <<\"some\">>; expected all, any, all-with-x, or any-with-x"
        );
    }
}
