//! Building AMQP 1.0 errors.

use fe2o3_amqp_types::definitions::{AmqpError, ConnectionError, Error, ErrorCondition, LinkError, SessionError};

/// An error with a description, from a condition symbol such as `amqp:not-found`.
#[must_use]
pub fn error(condition: &str, description: impl Into<String>) -> Error {
    Error { condition: condition_from(condition), description: Some(description.into()), info: None }
}

fn condition_from(symbol: &str) -> ErrorCondition {
    let amqp = match symbol {
        "amqp:internal-error" => Some(AmqpError::InternalError),
        "amqp:not-found" => Some(AmqpError::NotFound),
        "amqp:unauthorized-access" => Some(AmqpError::UnauthorizedAccess),
        "amqp:decode-error" => Some(AmqpError::DecodeError),
        "amqp:resource-limit-exceeded" => Some(AmqpError::ResourceLimitExceeded),
        "amqp:not-allowed" => Some(AmqpError::NotAllowed),
        "amqp:invalid-field" => Some(AmqpError::InvalidField),
        "amqp:not-implemented" => Some(AmqpError::NotImplemented),
        "amqp:resource-locked" => Some(AmqpError::ResourceLocked),
        "amqp:precondition-failed" => Some(AmqpError::PreconditionFailed),
        "amqp:resource-deleted" => Some(AmqpError::ResourceDeleted),
        "amqp:illegal-state" => Some(AmqpError::IllegalState),
        "amqp:frame-size-too-small" => Some(AmqpError::FrameSizeTooSmall),
        _ => None,
    };
    if let Some(condition) = amqp {
        return ErrorCondition::AmqpError(condition);
    }
    match symbol {
        "amqp:connection:forced" => ErrorCondition::ConnectionError(ConnectionError::ConnectionForced),
        "amqp:connection:framing-error" => ErrorCondition::ConnectionError(ConnectionError::FramingError),
        "amqp:session:window-violation" => ErrorCondition::SessionError(SessionError::WindowViolation),
        "amqp:session:errant-link" => ErrorCondition::SessionError(SessionError::ErrantLink),
        "amqp:session:handle-in-use" => ErrorCondition::SessionError(SessionError::HandleInUse),
        "amqp:session:unattached-handle" => ErrorCondition::SessionError(SessionError::UnattachedHandle),
        "amqp:link:detach-forced" => ErrorCondition::LinkError(LinkError::DetachForced),
        "amqp:link:transfer-limit-exceeded" => ErrorCondition::LinkError(LinkError::TransferLimitExceeded),
        "amqp:link:message-size-exceeded" => ErrorCondition::LinkError(LinkError::MessageSizeExceeded),
        other => ErrorCondition::Custom(other.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::encode_value;

    #[test]
    fn conditions_encode_as_their_symbols() {
        for symbol in ["amqp:not-found", "amqp:connection:framing-error", "amqp:session:unattached-handle"] {
            let bytes = encode_value(&error(symbol, "x"));
            let needle = symbol.as_bytes();
            assert!(bytes.windows(needle.len()).any(|w| w == needle), "{symbol}");
        }
    }
}
