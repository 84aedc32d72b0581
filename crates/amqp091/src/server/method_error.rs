//! What a failed channel method answers: a 0.9.1 reply code and RabbitMQ's text for it.

use charon_engine::EngineError;

use super::reply_code;
use crate::mapping::IngestError;
use crate::proto::ReplyCode;

/// A failed channel method: the reply code and RabbitMQ's explanation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MethodError {
    pub(crate) code: ReplyCode,
    pub(crate) explanation: String,
}

/// What a channel method's handler answers.
pub(crate) type MethodResult = Result<(), MethodError>;

impl MethodError {
    pub(crate) fn new(code: ReplyCode, explanation: impl Into<String>) -> Self {
        Self { code, explanation: explanation.into() }
    }

    /// A method on a channel that is not open: RabbitMQ's 504 CHANNEL_ERROR.
    pub(crate) fn no_channel() -> Self {
        Self::new(ReplyCode::ChannelError, "expected 'channel.open'")
    }

    /// Any method on a channel whose `tx.commit` is still waiting for its queues: RabbitMQ
    /// closes the connection (`rabbit_channel` allows pipelining everywhere else).
    pub(crate) fn commit_in_progress() -> Self {
        Self::new(ReplyCode::ChannelError, "unexpected command while processing 'tx.commit'")
    }

    /// A `tx.commit` or `tx.rollback` on a channel without `tx.select`.
    pub(crate) fn not_transactional() -> Self {
        Self::new(ReplyCode::PreconditionFailed, "channel is not transactional")
    }
}

impl From<EngineError> for MethodError {
    fn from(error: EngineError) -> Self {
        Self { code: reply_code(&error), explanation: error.to_string() }
    }
}

/// A publish whose properties RabbitMQ refuses (a `user-id` not the user's, a bad
/// `expiration`).
impl From<IngestError> for MethodError {
    fn from(error: IngestError) -> Self {
        Self::new(ReplyCode::PreconditionFailed, error.to_string())
    }
}
