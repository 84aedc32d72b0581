//! Charon's cluster: Raft groups on [openraft], kept behind types of our own so that an
//! upgrade of the (pinned, alpha) engine touches this crate only.
//!
//! - [`Machine`]: what a group replicates, as the layer that owns it sees it — a deterministic
//!   state that applies opaque [`Command`]s in log order and snapshots itself. The metadata
//!   store and, later, each quorum queue are machines; Raft never looks inside a command.
//! - [`LogStore`]: a group's Raft log, vote and commit point, durable in a redb database
//!   (fsync'd copy-on-write commits, as the metadata store uses), read and written on the
//!   blocking pool, never on a runtime worker.
//! - [`MachineStore`]: the machine as openraft applies it, with its last snapshot kept in the
//!   same database; what was applied after that snapshot is applied again from the log at
//!   start (the log keeps the commit point for that).
//!
//! openraft's own storage suite (`openraft::testing::log::Suite`) runs against both in this
//! crate's tests.

mod current;
mod group;
mod log_store;
mod machine;
mod machine_store;
pub mod transport;
mod types;

pub use current::Current;
pub use group::{Group, GroupError, MAX_VOTERS, Member, Network, PeerClient, Status, Timing};
pub use log_store::LogStore;
pub use machine::{Effects, Machine, MachineError};
pub use machine_store::MachineStore;
pub use types::{Answer, Command, Peer, TypeConfig};

#[cfg(test)]
mod tests;

/// A node's Raft id, the same on every node for the same name: the first eight bytes of the
/// SHA-256 of its name (ids are never configured, so a node keeps its id across restarts and
/// every member agrees on it).
#[must_use]
pub fn node_id(name: &str) -> u64 {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(name.as_bytes());
    let mut id = [0; 8];
    id.copy_from_slice(digest.get(..8).unwrap_or(&[0; 8]));
    u64::from_be_bytes(id)
}
