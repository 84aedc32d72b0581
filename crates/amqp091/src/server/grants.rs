//! What a channel method checks before it acts: the connection's vhost and user against the
//! broker's permissions, with RabbitMQ's 0.9.1 reply codes.

use std::sync::Arc;

use charon_engine::{Action, Broker, Client, ExchangeKind, Principal, Resource, VHost};

use super::{MethodError, MethodResult};
use crate::proto::ReplyCode;

/// The connection's broker and client, borrowed for one method's checks.
#[derive(Clone, Copy)]
pub(crate) struct Grants<'a> {
    pub(crate) broker: &'a Broker,
    pub(crate) client: &'a Client,
}

impl<'a> Grants<'a> {
    /// The vhost; every channel method runs after `connection.open`, so it is set.
    pub(crate) fn vhost(&self) -> Result<&'a Arc<VHost>, MethodError> {
        self.client.vhost().ok_or_else(|| MethodError::new(ReplyCode::InternalError, "no vhost"))
    }

    /// The logged-in user, checked against the broker's permissions.
    pub(crate) fn principal(&self) -> Result<Principal<'a>, MethodError> {
        let user = self.client.user().ok_or_else(|| MethodError::new(ReplyCode::InternalError, "no user"))?;
        Ok(Principal::new(self.broker.access(), user))
    }

    /// Checks one action on a queue or exchange of the connection's vhost.
    pub(crate) fn authorize(&self, action: Action, resource: &Resource) -> MethodResult {
        Ok(self.principal()?.check(action, resource)?)
    }

    /// A queue of the connection's vhost, to check.
    pub(crate) fn queue_resource(&self, name: &str) -> Resource {
        Resource::queue(self.client.vhost().map_or("", |v| v.name()), name)
    }

    /// An exchange of the connection's vhost, to check.
    pub(crate) fn exchange_resource(&self, name: &str) -> Resource {
        Resource::exchange(self.client.vhost().map_or("", |v| v.name()), name)
    }

    /// RabbitMQ's `binding_action` checks: write on the destination, then read on the source
    /// exchange — unless an end is the default exchange, which the engine refuses with
    /// RabbitMQ's own error first — then, on a topic exchange, the binding key against the
    /// user's topic permissions.
    pub(crate) fn authorize_binding(&self, destination: &Resource, source: &str, key: &str) -> MethodResult {
        self.authorize(Action::Write, destination)?;
        if source.is_empty() || destination.name.is_empty() {
            return Ok(());
        }
        self.authorize(Action::Read, &self.exchange_resource(source))?;
        let vhost = self.vhost()?;
        if vhost.exchange(source).is_some_and(|x| x.kind == ExchangeKind::Topic) {
            self.principal()?.check_topic(Action::Read, vhost.name(), source, key)?;
        }
        Ok(())
    }
}
