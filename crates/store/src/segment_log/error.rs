//! Why the log could not be opened, written or closed.

use std::path::PathBuf;

/// Errors opening or closing the log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A file operation failed.
    #[error("message log {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A record or header that cannot be a torn tail does not read back.
    #[error("message log segment {segment} corrupt at byte {offset}: {what}")]
    Corrupt {
        /// The segment number.
        segment: u64,
        /// Where.
        offset: u64,
        /// What was wrong.
        what: &'static str,
    },
    /// The writer stopped before it could flush everything.
    #[error("message log: {0}")]
    Writer(String),
}

/// A failure the writer reports to completions that can no longer succeed.
#[derive(Clone, Debug, thiserror::Error)]
#[error("message log: {0}")]
pub struct LogFailure(pub String);
