//! Why a stored message or table was not read back.

/// A stored message or table that does not decode.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// Written by a newer (or unknown) layout.
    #[error("unknown message format version {0}")]
    UnknownVersion(u8),
    /// Short, corrupt or inconsistent bytes.
    #[error("malformed {what} at byte {offset}")]
    Malformed {
        /// What was being read.
        what: &'static str,
        /// Where, from the start of the input.
        offset: usize,
    },
}
