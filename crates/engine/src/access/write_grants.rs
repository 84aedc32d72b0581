//! A publisher's memory of the exchanges it may write to.

use super::principal::Principal;
use crate::error::{EngineError, Resource};
use charon_queue::action::Action;

/// Exchanges remembered before the list starts over, bounding a publisher that uses many.
const MAX_EXCHANGES: usize = 16;

/// The exchanges a channel or link was granted write on, valid while the permissions are
/// unchanged ([`super::Access::generation`]): a publish to a granted exchange costs an atomic
/// load and a short scan, not a lock and a regular expression. RabbitMQ's channel keeps such a
/// cache too; unlike RabbitMQ's, this one forgets at once when permissions change.
#[derive(Debug, Default)]
pub struct WriteGrants {
    generation: u64,
    /// Granted exchanges, each with whether its routing keys are checked (a topic exchange on
    /// which the user has topic permissions).
    exchanges: Vec<(String, bool)>,
}

impl WriteGrants {
    /// Checks that `principal` may publish to `exchange` of `vhost`; returns whether the
    /// message's routing keys must then be checked ([`Principal::check_topic`]): when the user
    /// has topic permissions on it and `is_topic` says it is a topic exchange.
    ///
    /// # Errors
    /// ACCESS_REFUSED with RabbitMQ's text (`write access to exchange 'x' in vhost '/' refused
    /// for user 'u'`); a refusal is not remembered.
    pub fn check(
        &mut self,
        principal: Principal<'_>,
        vhost: &str,
        exchange: &str,
        is_topic: impl FnOnce() -> bool,
    ) -> Result<bool, EngineError> {
        let generation = principal.generation();
        if generation != self.generation {
            self.exchanges.clear();
            self.generation = generation;
        }
        if let Some((_, topic)) = self.exchanges.iter().find(|(granted, _)| charon_model::text::same(granted, exchange))
        {
            return Ok(*topic);
        }
        principal.check(Action::Write, &Resource::exchange(vhost, exchange))?;
        let topic = principal.has_topic_permission(vhost, exchange) && is_topic();
        if self.exchanges.len() >= MAX_EXCHANGES {
            self.exchanges.clear();
        }
        self.exchanges.push((exchange.to_owned(), topic));
        Ok(topic)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::access::{Access, Account, PasswordHash, Permission, Seed, Tags};

    #[tokio::test]
    async fn a_grant_is_remembered_until_permissions_change() {
        let account = Account::new("u".into(), Some(PasswordHash::new("p")), Tags::default());
        let access = Access::in_memory(Seed { users: vec![(account, None)], vhosts: vec!["/".into()] });
        let user = access.user("u").unwrap();
        let mut grants = WriteGrants::default();
        let topic = || true;
        assert_eq!(grants.check(Principal::new(&access, &user), "/", "x", topic), Ok(false));
        assert_eq!(grants.check(Principal::new(&access, &user), "/", "", topic), Ok(false));
        access.set_permission("/", "u", Permission::new(".*", "^y$", ".*").unwrap()).await.unwrap();
        let refused = grants.check(Principal::new(&access, &user), "/", "x", topic).unwrap_err();
        assert_eq!(refused.to_string(), "write access to exchange 'x' in vhost '/' refused for user 'u'");
        let refused = grants.check(Principal::new(&access, &user), "/", "", topic).unwrap_err();
        assert_eq!(refused.to_string(), "write access to exchange 'amq.default' in vhost '/' refused for user 'u'");
        assert_eq!(grants.check(Principal::new(&access, &user), "/", "y", topic), Ok(false));
        // Topic permissions on y: its routing keys are checked from now on, on a topic exchange.
        access.set_topic_permission("/", "u", "y", "^u\\.", "").await.unwrap();
        assert_eq!(grants.check(Principal::new(&access, &user), "/", "y", topic), Ok(true));
        let principal = Principal::new(&access, &user);
        assert!(principal.check_topic(Action::Write, "/", "y", "u.1").is_ok());
        let refused = principal.check_topic(Action::Write, "/", "y", "v.1").unwrap_err();
        assert_eq!(
            refused.to_string(),
            "write access to topic 'v.1' in exchange 'y' in vhost '/' refused for user 'u'"
        );
        for n in 0..40 {
            access.set_permission("/", "u", Permission::full()).await.unwrap();
            assert_eq!(grants.check(Principal::new(&access, &user), "/", &format!("e{n}"), || false), Ok(false));
        }
        assert!(grants.exchanges.len() <= MAX_EXCHANGES);
    }
}
