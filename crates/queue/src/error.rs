//! Engine errors, each rendering RabbitMQ's exact reply text.
//!
//! The engine knows no protocol, so an error carries an [`ErrorKind`] (which an adapter maps to
//! an AMQP 0.9.1 reply code or an AMQP 1.0 error condition) and a text that matches what
//! RabbitMQ 4.0.5 puts after the `CODE - ` prefix, because clients and operators match on it.

use std::fmt;

/// The class of failure, independent of protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// 0.9.1 404 NOT_FOUND, 1.0 `amqp:not-found`.
    NotFound,
    /// 0.9.1 403 ACCESS_REFUSED, 1.0 `amqp:unauthorized-access`.
    AccessRefused,
    /// 0.9.1 405 RESOURCE_LOCKED, 1.0 `amqp:resource-locked`.
    ResourceLocked,
    /// 0.9.1 406 PRECONDITION_FAILED, 1.0 `amqp:precondition-failed`.
    PreconditionFailed,
    /// 0.9.1 530 NOT_ALLOWED (a connection error).
    NotAllowed,
    /// 0.9.1 540 NOT_IMPLEMENTED, 1.0 `amqp:not-implemented`.
    NotImplemented,
    /// 0.9.1 541 INTERNAL_ERROR, 1.0 `amqp:internal-error`.
    InternalError,
}

/// What kind of resource an error names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResourceKind {
    /// A queue.
    Queue,
    /// An exchange.
    Exchange,
}

impl fmt::Display for ResourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Queue => "queue",
            Self::Exchange => "exchange",
        })
    }
}

/// A named resource in a vhost, displayed as RabbitMQ's `rabbit_misc:rs/1` does:
/// `queue 'q' in vhost '/'`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resource {
    /// Queue or exchange.
    pub kind: ResourceKind,
    /// Virtual host name.
    pub vhost: String,
    /// Resource name.
    pub name: String,
}

impl Resource {
    /// A queue resource.
    #[must_use]
    pub fn queue(vhost: &str, name: &str) -> Self {
        Self { kind: ResourceKind::Queue, vhost: vhost.to_owned(), name: name.to_owned() }
    }

    /// An exchange resource.
    #[must_use]
    pub fn exchange(vhost: &str, name: &str) -> Self {
        Self { kind: ResourceKind::Exchange, vhost: vhost.to_owned(), name: name.to_owned() }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} '{}' in vhost '{}'", self.kind, self.name, self.vhost)
    }
}

/// The details of an inequivalent redeclare.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("inequivalent arg '{field}' for {resource}: received {received} but current is {current}")]
pub struct Inequivalence {
    /// The entity.
    pub resource: Resource,
    /// The differing field or argument.
    pub field: String,
    /// The requested value, formatted as RabbitMQ does.
    pub received: String,
    /// The existing value, formatted as RabbitMQ does.
    pub current: String,
}

impl EngineError {
    /// An inequivalence error.
    #[must_use]
    pub fn inequivalent(resource: Resource, field: &str, received: String, current: String) -> Self {
        Self::Inequivalent(Box::new(Inequivalence { resource, field: field.to_owned(), received, current }))
    }
}

/// An engine operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The named queue or exchange does not exist.
    #[error("no {0}")]
    NotFound(Resource),
    /// An exclusive queue belongs to another connection.
    #[error(
        "cannot obtain exclusive access to locked {0}. It could be originally declared on another \
         connection or the exclusive property value does not match that of the original declaration."
    )]
    ExclusiveLocked(Resource),
    /// A queue has an exclusive consumer, or a consumer asked for exclusivity on a queue with
    /// consumers.
    #[error("{0} in exclusive use")]
    ExclusiveConsumeUnavailable(Resource),
    /// A delete with `if-unused` found consumers or bindings.
    #[error("{0} in use")]
    InUse(Resource),
    /// A delete with `if-empty` found messages.
    #[error("{0} not empty")]
    NotEmpty(Resource),
    /// A name starts with the reserved `amq.` prefix.
    #[error("{kind} name '{name}' contains reserved prefix 'amq.*'")]
    ReservedName {
        /// Queue or exchange.
        kind: ResourceKind,
        /// The refused name.
        name: String,
    },
    /// An operation on the default exchange that RabbitMQ forbids (binding, deleting).
    #[error("operation not permitted on the default exchange")]
    DefaultExchange,
    /// Deleting one of the predeclared `amq.*` exchanges.
    #[error("deletion of system {0} not allowed")]
    SystemExchange(Resource),
    /// Publishing to an internal exchange.
    #[error("cannot publish to internal {0}")]
    InternalExchange(Resource),
    /// A redeclare disagrees with the existing entity (`rabbit_misc:assert_field_equivalence`).
    #[error("{0}")]
    Inequivalent(Box<Inequivalence>),
    /// A generic precondition failure whose text was formatted by the caller (argument
    /// validation, unknown exchange types, ...).
    #[error("{0}")]
    Precondition(String),
    /// The virtual host does not exist.
    #[error("vhost {0} not found")]
    VhostNotFound(String),
    /// The user may not use the virtual host.
    #[error("access to vhost '{vhost}' refused for user '{user}'")]
    VhostAccessRefused {
        /// Virtual host.
        vhost: String,
        /// User.
        user: String,
    },
    /// The user's permissions do not grant this action on this resource.
    #[error("{action} access to {resource} refused for user '{user}'")]
    PermissionRefused {
        /// Configure, write or read.
        action: crate::action::Action,
        /// The resource (the default exchange named `amq.default`, as RabbitMQ does).
        resource: Resource,
        /// The user.
        user: String,
    },
    /// The user's topic permissions do not grant this routing key on a topic exchange.
    #[error("{action} access to topic '{routing_key}' in {exchange} refused for user '{user}'")]
    TopicRefused {
        /// Write (publish) or read (bind).
        action: crate::action::Action,
        /// The routing or binding key.
        routing_key: String,
        /// The topic exchange.
        exchange: Resource,
        /// The user.
        user: String,
    },
    /// A vhost's `max-queues` refuses a new queue (0.9.1: 406; the 1.0 management node: 403).
    #[error("cannot declare queue '{queue}': queue limit in vhost '{vhost}' ({max}) is reached")]
    QueueLimit {
        /// The refused queue.
        queue: String,
        /// Its vhost.
        vhost: String,
        /// The limit.
        max: u64,
    },
    /// A vhost or user limit refuses a connection or a channel (NOT_ALLOWED; the text says
    /// which limit).
    #[error("{0}")]
    LimitReached(String),
    /// A feature RabbitMQ reports as not implemented.
    #[error("{0}")]
    NotImplemented(String),
    /// The queue stopped while the operation was in flight.
    #[error("{0} is stopping")]
    QueueGone(Resource),
    /// The durable store could not record a change (disk full, I/O error); nothing changed.
    #[error("{0}")]
    Store(String),
    /// The queue lives on another node of the cluster, which does not answer (RabbitMQ's
    /// words for a classic queue whose node is down, 404).
    #[error("home node '{node}' of durable {queue} is down or inaccessible")]
    HomeNodeDown {
        /// The queue's node.
        node: String,
        /// The queue.
        queue: Resource,
    },
}

impl EngineError {
    /// The protocol-independent class of this error.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::NotFound(_) | Self::QueueGone(_) | Self::HomeNodeDown { .. } => ErrorKind::NotFound,
            Self::ExclusiveLocked(_) => ErrorKind::ResourceLocked,
            Self::ExclusiveConsumeUnavailable(_)
            | Self::ReservedName { .. }
            | Self::DefaultExchange
            | Self::SystemExchange(_)
            | Self::InternalExchange(_)
            | Self::PermissionRefused { .. }
            | Self::TopicRefused { .. } => ErrorKind::AccessRefused,
            Self::InUse(_)
            | Self::NotEmpty(_)
            | Self::Inequivalent(_)
            | Self::Precondition(_)
            | Self::QueueLimit { .. } => ErrorKind::PreconditionFailed,
            Self::VhostNotFound(_) | Self::VhostAccessRefused { .. } | Self::LimitReached(_) => ErrorKind::NotAllowed,
            Self::NotImplemented(_) => ErrorKind::NotImplemented,
            Self::Store(_) => ErrorKind::InternalError,
        }
    }
}

/// Formats a value for an inequivalence error the way RabbitMQ's `rabbit_misc:val/1` does for a
/// plain field: `'true'`.
#[must_use]
pub fn quoted(value: impl fmt::Display) -> String {
    format!("'{value}'")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_match_rabbitmq() {
        let q = Resource::queue("/", "q");
        assert_eq!(EngineError::NotFound(q.clone()).to_string(), "no queue 'q' in vhost '/'");
        assert_eq!(EngineError::InUse(q.clone()).to_string(), "queue 'q' in vhost '/' in use");
        let e = EngineError::inequivalent(q, "durable", quoted(true), quoted(false));
        assert_eq!(
            e.to_string(),
            "inequivalent arg 'durable' for queue 'q' in vhost '/': received 'true' but current is 'false'"
        );
        assert_eq!(e.kind(), ErrorKind::PreconditionFailed);
    }
}
