//! The redrive layer's errors; the HTTP API maps each to a status.

/// Why a redrive request was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum RedriveError {
    /// The request is malformed or names something impossible (400).
    #[error("{0}")]
    Invalid(String),
    /// No such job, or its vhost or source queue does not exist (404).
    #[error("{0}")]
    NotFound(String),
    /// Another job runs on the source, or the job is not in a state that allows it (409).
    #[error("{0}")]
    Conflict(String),
    /// The metadata store failed (500).
    #[error("{0}")]
    Store(String),
    /// The node that runs the job is down or cannot be reached (503).
    #[error("{0}")]
    Unavailable(String),
}
