//! A user's permissions in one vhost: three regular expressions over resource names.

use regex::Regex;

use super::error::AccessError;
use charon_queue::action::Action;

/// Configure, write and read patterns, kept as given (the API shows them) and compiled.
///
/// As RabbitMQ's `rabbit_auth_backend_internal`, a pattern matches anywhere in the name
/// (`re:run` without anchors: `.*` grants everything, `^q-` names that start with `q-`), and
/// the empty pattern grants nothing. Patterns are Rust `regex` syntax, which is PCRE's without
/// look-around and back-references: a pattern it cannot compile is refused when set, never
/// accepted and then matched differently.
#[derive(Clone, Debug)]
pub struct Permission {
    configure: Pattern,
    write: Pattern,
    read: Pattern,
}

/// One pattern, as given and compiled.
#[derive(Clone, Debug)]
pub(super) struct Pattern {
    text: String,
    compiled: Regex,
}

impl Pattern {
    pub(super) fn new(text: &str) -> Result<Self, AccessError> {
        Self::expanded(text, text)
    }

    /// `text` as given, matching as `effective` (a topic pattern with its variables filled).
    pub(super) fn expanded(text: &str, effective: &str) -> Result<Self, AccessError> {
        let effective = if effective.is_empty() { "^$" } else { effective };
        let compiled = Regex::new(effective)
            .map_err(|e| AccessError::BadRequest(format!("invalid regular expression '{text}': {e}")))?;
        Ok(Self { text: text.to_owned(), compiled })
    }

    pub(super) fn text(&self) -> &str {
        &self.text
    }

    pub(super) fn is_match(&self, name: &str) -> bool {
        self.compiled.is_match(name)
    }
}

impl PartialEq for Permission {
    fn eq(&self, other: &Self) -> bool {
        self.patterns() == other.patterns()
    }
}

impl Eq for Permission {}

impl Permission {
    /// Permissions from three patterns.
    ///
    /// # Errors
    /// A pattern that does not compile.
    pub fn new(configure: &str, write: &str, read: &str) -> Result<Self, AccessError> {
        Ok(Self { configure: Pattern::new(configure)?, write: Pattern::new(write)?, read: Pattern::new(read)? })
    }

    /// Everything: `.*` three times, what the configuration's users get.
    #[must_use]
    pub fn full() -> Self {
        let all = || Pattern { text: ".*".into(), compiled: Regex::new(".*").unwrap_or_else(|_| unreachable!()) };
        Self { configure: all(), write: all(), read: all() }
    }

    /// The three patterns as given: configure, write, read.
    #[must_use]
    pub fn patterns(&self) -> (&str, &str, &str) {
        (&self.configure.text, &self.write.text, &self.read.text)
    }

    /// Whether `action` on the resource `name` is granted.
    #[must_use]
    pub fn allows(&self, action: Action, name: &str) -> bool {
        let pattern = match action {
            Action::Configure => &self.configure,
            Action::Write => &self.write,
            Action::Read => &self.read,
        };
        pattern.compiled.is_match(name)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn patterns_match_anywhere_and_empty_grants_nothing() {
        let p = Permission::new("^cfg-", "", "q").unwrap();
        assert!(p.allows(Action::Configure, "cfg-1"));
        assert!(!p.allows(Action::Configure, "x-cfg-1"));
        assert!(!p.allows(Action::Write, "anything"));
        assert!(p.allows(Action::Read, "aqa"), "unanchored, as re:run");
        assert!(!p.allows(Action::Read, "abc"));
        assert_eq!(p.patterns(), ("^cfg-", "", "q"));
        let full = Permission::full();
        assert!(full.allows(Action::Write, "amq.default"));
        assert_eq!(full, Permission::new(".*", ".*", ".*").unwrap());
    }

    #[test]
    fn a_pattern_that_does_not_compile_is_refused() {
        let error = Permission::new("(", ".*", ".*").unwrap_err();
        assert!(matches!(error, AccessError::BadRequest(text) if text.starts_with("invalid regular expression '('")));
        assert!(Permission::new(".*", "(?=x)", ".*").is_err(), "look-around is not Rust regex syntax");
    }
}
