//! The Raft types every Charon group shares.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A command for a group's machine, encoded by the layer that owns the machine: Raft carries
/// the bytes and never looks inside.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command(pub Vec<u8>);

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "command of {} bytes", self.0.len())
    }
}

/// A machine's answer to a command, for the node that proposed it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer(pub Vec<u8>);

/// A cluster node as Raft knows it: its RabbitMQ-style name (`charon-1@localhost`) and the
/// address of its cluster listener.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    /// The node's name, as `--node-name` gives it.
    pub name: String,
    /// Where its cluster listener is (`host:port`).
    pub address: String,
}

openraft::declare_raft_types!(
    /// The Raft type configuration of every Charon group: opaque commands and answers, nodes
    /// numbered by `u64` and described by [`Peer`].
    pub TypeConfig:
        D = Command,
        R = Answer,
        Node = Peer,
);
