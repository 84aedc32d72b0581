//! Topic permissions: routing-key patterns per user, vhost and topic exchange, on top of the
//! resource permissions (RabbitMQ's `set_topic_permissions`).

use super::error::AccessError;
use super::permission::Pattern;
use charon_queue::action::Action;

/// Write and read patterns over routing keys for one exchange.
///
/// As RabbitMQ's: `{username}` and `{vhost}` in a pattern are replaced by the user's and the
/// vhost's names before it is compiled; an exchange without topic permissions for the user is
/// not restricted; the checks apply to topic exchanges only.
#[derive(Clone, Debug)]
pub struct TopicPermission {
    write: Pattern,
    read: Pattern,
}

impl TopicPermission {
    /// Patterns for `user` in `vhost`.
    ///
    /// # Errors
    /// A pattern that does not compile.
    pub fn new(user: &str, vhost: &str, write: &str, read: &str) -> Result<Self, AccessError> {
        let expand = |text: &str| text.replace("{username}", user).replace("{vhost}", vhost);
        Ok(Self { write: Pattern::expanded(write, &expand(write))?, read: Pattern::expanded(read, &expand(read))? })
    }

    /// The patterns as given: write, read.
    #[must_use]
    pub fn patterns(&self) -> (&str, &str) {
        (self.write.text(), self.read.text())
    }

    /// Whether `action` (write: publish, read: bind) with `routing_key` is granted; configure
    /// is not a topic permission and is always granted here.
    #[must_use]
    pub fn allows(&self, action: Action, routing_key: &str) -> bool {
        match action {
            Action::Write => self.write.is_match(routing_key),
            Action::Read => self.read.is_match(routing_key),
            Action::Configure => true,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn variables_are_filled_before_matching() {
        let p = TopicPermission::new("ann", "dev", "^{username}\\.", "^{vhost}\\.|^public\\.").unwrap();
        assert!(p.allows(Action::Write, "ann.orders"));
        assert!(!p.allows(Action::Write, "bob.orders"));
        assert!(p.allows(Action::Read, "dev.x") && p.allows(Action::Read, "public.y"));
        assert!(!p.allows(Action::Read, "prod.x"));
        assert_eq!(p.patterns(), ("^{username}\\.", "^{vhost}\\.|^public\\."));
        let none = TopicPermission::new("ann", "dev", "", "").unwrap();
        assert!(!none.allows(Action::Write, "a"), "the empty pattern grants nothing");
        assert!(TopicPermission::new("ann", "dev", "(", "").is_err());
    }
}
