//! What a change to users, vhosts or permissions can fail with, shaped for the management API
//! (RabbitMQ answers these with 400 or 404 and a reason).

/// A change to users, vhosts or permissions failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// The request is malformed (bad regular expression, unknown hashing algorithm...).
    #[error("{0}")]
    BadRequest(String),
    /// No such user.
    #[error("no such user: {0}")]
    NoSuchUser(String),
    /// No such vhost.
    #[error("no such vhost: {0}")]
    NoSuchVhost(String),
    /// The durable store failed; nothing changed.
    #[error("{0}")]
    Store(String),
}
