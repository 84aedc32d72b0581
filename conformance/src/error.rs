//! The failure type of a case: a sentence saying what was expected and what was seen.

use std::fmt;

/// Result type every case returns.
pub type CaseResult = Result<(), CaseError>;

/// Why a case failed.
///
/// The message is meant for a human reading the run output, so it always says what was
/// expected and what the broker actually did (`expected 3 got 2`). Client-library errors are
/// converted with their `Display` text so the original reply text survives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseError {
    message: String,
}

impl CaseError {
    /// Builds an error from a message.
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into() }
    }

    /// The human-readable explanation.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Prefixes the message with the step that failed (`"declare queue: ..."`).
    #[must_use]
    pub fn context(self, step: &str) -> Self {
        Self::new(format!("{step}: {}", self.message))
    }
}

impl fmt::Display for CaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CaseError {}

impl From<lapin::Error> for CaseError {
    fn from(e: lapin::Error) -> Self {
        Self::new(format!("lapin error: {e}"))
    }
}

impl From<amqprs::error::Error> for CaseError {
    fn from(e: amqprs::error::Error) -> Self {
        Self::new(format!("amqprs error: {e}"))
    }
}

impl From<std::io::Error> for CaseError {
    fn from(e: std::io::Error) -> Self {
        Self::new(format!("io error: {e}"))
    }
}

impl From<tokio::time::error::Elapsed> for CaseError {
    fn from(_: tokio::time::error::Elapsed) -> Self {
        Self::new("timed out")
    }
}

/// Fails the case unless `$got == $expected`, naming what was compared.
#[macro_export]
#[doc(hidden)]
macro_rules! check_eq {
    ($got:expr, $expected:expr, $($what:tt)+) => {{
        let got = $got;
        let expected = $expected;
        if got != expected {
            return Err($crate::CaseError::new(format!(
                "{}: expected {:?} got {:?}",
                format!($($what)+),
                expected,
                got
            )));
        }
    }};
}

/// Fails the case with the formatted message unless the condition holds.
#[macro_export]
#[doc(hidden)]
macro_rules! check {
    ($cond:expr, $($msg:tt)+) => {{
        if !$cond {
            return Err($crate::CaseError::new(format!($($msg)+)));
        }
    }};
}

/// A reply text as RabbitMQ puts it on the wire: texts longer than a shortstr's 255 bytes are
/// cut to 252 bytes plus `...` (the broker never fails the close for a long text).
pub fn wire_text(text: &str) -> String {
    if text.len() <= 255 {
        return text.to_owned();
    }
    let mut cut = 252;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", text.get(..cut).unwrap_or_default())
}
