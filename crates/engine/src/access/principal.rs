//! A user acting in a vhost: what an operation is checked against.

use super::Access;
use super::user::User;
use crate::error::{EngineError, Resource};
use charon_queue::action::Action;

/// The user an operation acts for, with the registry that holds its permissions.
///
/// Operations whose checks depend on the state they find (a queue declare checks the
/// dead-letter rule only when it creates the queue) take one and check at that point; the
/// others are checked by their caller first.
#[derive(Clone, Copy, Debug)]
pub struct Principal<'a> {
    access: &'a Access,
    user: &'a User,
}

impl<'a> Principal<'a> {
    /// `user`, checked against `access`.
    #[must_use]
    pub fn new(access: &'a Access, user: &'a User) -> Self {
        Self { access, user }
    }

    /// The user.
    #[must_use]
    pub fn user(&self) -> &User {
        self.user
    }

    /// The registry's generation (see [`Access::generation`]).
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.access.generation()
    }

    /// Checks a routing key on a topic exchange (see [`Access::authorize_topic`]).
    ///
    /// # Errors
    /// ACCESS_REFUSED with RabbitMQ's text.
    pub fn check_topic(
        &self,
        action: Action,
        vhost: &str,
        exchange: &str,
        routing_key: &str,
    ) -> Result<(), EngineError> {
        self.access.authorize_topic(self.user, action, vhost, exchange, routing_key)
    }

    /// Whether routing keys on `exchange` of `vhost` are checked for this user.
    #[must_use]
    pub fn has_topic_permission(&self, vhost: &str, exchange: &str) -> bool {
        self.access.has_topic_permission(self.user, vhost, exchange)
    }

    /// Checks one action on one resource.
    ///
    /// # Errors
    /// ACCESS_REFUSED with RabbitMQ's text.
    pub fn check(&self, action: Action, resource: &Resource) -> Result<(), EngineError> {
        self.access.authorize(self.user, action, resource)
    }
}
