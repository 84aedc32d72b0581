//! Why an attach fails: RabbitMQ ends the session with an error whose condition says what kind
//! of refusal it is and whose description is RabbitMQ's text.

use charon_engine::{EngineError, ErrorKind};

/// An attach refused, ending its session (`rabbit_amqp_session:handle_attach`'s errors).
#[derive(Debug, thiserror::Error)]
pub(crate) enum AttachError {
    /// A coordinator target: `amqp:not-implemented`.
    #[error("Transactions not supported")]
    Transactions,
    /// A malformed or unsupported address or link property: `amqp:invalid-field`.
    #[error("{0}")]
    InvalidField(String),
    /// The exchange or queue does not exist: `amqp:not-found`.
    #[error("{0}")]
    NotFound(String),
    /// A permission refused, or an internal exchange: `amqp:unauthorized-access`.
    #[error("{0}")]
    Unauthorized(String),
    /// Another connection's exclusive queue: `amqp:resource-locked`.
    #[error("{0}")]
    ResourceLocked(String),
    /// A queue limit reached: `amqp:resource-limit-exceeded`.
    #[error("{0}")]
    LimitExceeded(String),
    /// Anything else: `amqp:internal-error`.
    #[error("{0}")]
    Internal(String),
}

impl AttachError {
    /// The AMQP error condition the session ends with.
    pub(crate) fn condition(&self) -> &'static str {
        match self {
            Self::Transactions => "amqp:not-implemented",
            Self::InvalidField(_) => "amqp:invalid-field",
            Self::NotFound(_) => "amqp:not-found",
            Self::Unauthorized(_) => "amqp:unauthorized-access",
            Self::ResourceLocked(_) => "amqp:resource-locked",
            Self::LimitExceeded(_) => "amqp:resource-limit-exceeded",
            Self::Internal(_) => "amqp:internal-error",
        }
    }

    /// A permission check's refusal.
    pub(crate) fn unauthorized(error: EngineError) -> Self {
        Self::Unauthorized(error.to_string())
    }

    /// An engine error by its kind: a queue limit, a refused permission, or an internal error.
    pub(crate) fn refused(error: EngineError) -> Self {
        match (&error, error.kind()) {
            (EngineError::QueueLimit { .. }, _) => Self::LimitExceeded(error.to_string()),
            (_, ErrorKind::AccessRefused) => Self::Unauthorized(error.to_string()),
            _ => Self::Internal(error.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use charon_engine::{Action, Resource, ResourceKind};

    use super::*;

    #[test]
    fn engine_errors_end_the_session_with_rabbitmqs_conditions() {
        let limit = EngineError::QueueLimit { queue: "q".into(), vhost: "/".into(), max: 1 };
        assert_eq!(AttachError::refused(limit).condition(), "amqp:resource-limit-exceeded");
        let resource = Resource { kind: ResourceKind::Exchange, vhost: "/".into(), name: "x".into() };
        let refused = EngineError::PermissionRefused { action: Action::Read, resource, user: "u".into() };
        let text = refused.to_string();
        let error = AttachError::refused(refused);
        assert_eq!((error.condition(), error.to_string()), ("amqp:unauthorized-access", text));
        let store = AttachError::refused(EngineError::Store("disk".into()));
        assert_eq!((store.condition(), store.to_string().as_str()), ("amqp:internal-error", "disk"));
        assert_eq!(
            (AttachError::Transactions.condition(), AttachError::Transactions.to_string().as_str()),
            ("amqp:not-implemented", "Transactions not supported")
        );
    }
}
