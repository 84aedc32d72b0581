//! The three kinds of access RabbitMQ's permissions grant.

use std::fmt;

/// What an operation does to a resource, as RabbitMQ's permissions name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Declare and delete.
    Configure,
    /// Publish to, and bind to.
    Write,
    /// Consume, get and purge from, and bind from.
    Read,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Configure => "configure",
            Self::Write => "write",
            Self::Read => "read",
        })
    }
}
