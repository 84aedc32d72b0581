//! A publisher's memory of the exchanges it may write to.

use super::action::Action;
use super::principal::Principal;
use crate::error::{EngineError, Resource};

/// Exchanges remembered before the list starts over, bounding a publisher that uses many.
const MAX_EXCHANGES: usize = 16;

/// The exchanges a channel or link was granted write on, valid while the permissions are
/// unchanged ([`super::Access::generation`]): a publish to a granted exchange costs an atomic
/// load and a short scan, not a lock and a regular expression. RabbitMQ's channel keeps such a
/// cache too; unlike RabbitMQ's, this one forgets at once when permissions change.
#[derive(Debug, Default)]
pub struct WriteGrants {
    generation: u64,
    exchanges: Vec<String>,
}

impl WriteGrants {
    /// Checks that `principal` may publish to `exchange` of `vhost`.
    ///
    /// # Errors
    /// ACCESS_REFUSED with RabbitMQ's text (`write access to exchange 'x' in vhost '/' refused
    /// for user 'u'`); a refusal is not remembered.
    pub fn check(&mut self, principal: Principal<'_>, vhost: &str, exchange: &str) -> Result<(), EngineError> {
        let generation = principal.generation();
        if generation != self.generation {
            self.exchanges.clear();
            self.generation = generation;
        }
        if self.exchanges.iter().any(|granted| granted == exchange) {
            return Ok(());
        }
        principal.check(Action::Write, &Resource::exchange(vhost, exchange))?;
        if self.exchanges.len() >= MAX_EXCHANGES {
            self.exchanges.clear();
        }
        self.exchanges.push(exchange.to_owned());
        Ok(())
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
        assert!(grants.check(Principal::new(&access, &user), "/", "x").is_ok());
        assert!(grants.check(Principal::new(&access, &user), "/", "").is_ok());
        access.set_permission("/", "u", Permission::new(".*", "^y$", ".*").unwrap()).await.unwrap();
        let refused = grants.check(Principal::new(&access, &user), "/", "x").unwrap_err();
        assert_eq!(refused.to_string(), "write access to exchange 'x' in vhost '/' refused for user 'u'");
        let refused = grants.check(Principal::new(&access, &user), "/", "").unwrap_err();
        assert_eq!(refused.to_string(), "write access to exchange 'amq.default' in vhost '/' refused for user 'u'");
        assert!(grants.check(Principal::new(&access, &user), "/", "y").is_ok());
        for n in 0..40 {
            access.set_permission("/", "u", Permission::full()).await.unwrap();
            assert!(grants.check(Principal::new(&access, &user), "/", &format!("e{n}")).is_ok());
        }
        assert!(grants.exchanges.len() <= MAX_EXCHANGES);
    }
}
