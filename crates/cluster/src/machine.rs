//! What a group replicates, as the layer that owns it sees it.

use std::future::Future;
use std::pin::Pin;

/// A machine refused a snapshot it was given.
#[derive(Debug, thiserror::Error)]
#[error("snapshot refused: {0}")]
pub struct MachineError(pub String);

/// A deterministic state that every member of a group applies in the same order: the same
/// commands give the same state and the same answers on every node, so nothing in
/// [`Machine::apply`] may read a clock, a random source or the node it runs on — time and
/// randomness come inside the commands, chosen by the proposer.
pub trait Machine: Send + Sync + 'static {
    /// Applies the command committed at log index `index`; the answer goes back to the node
    /// that proposed it (and is dropped elsewhere).
    fn apply(&mut self, index: u64, command: &[u8]) -> Vec<u8>;

    /// The whole state, for a snapshot (taken between two applies).
    fn snapshot(&self) -> Vec<u8>;

    /// Replaces the whole state with a snapshot's: this node's own at start, or the leader's
    /// when it fell too far behind.
    ///
    /// # Errors
    /// The snapshot does not decode; the state is left as it was.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), MachineError>;
}

/// What one node does with a committed command besides applying it to the machine: the layer
/// that owns the machine changes its own state to match (creates the vhost the command
/// recorded). Runs after the machine applied the command and outside its lock, in log order,
/// before a write waiting on this node is answered; again for every command applied again at
/// start, so it must be idempotent.
pub trait Effects: Send + Sync + 'static {
    /// Acts on `command`, which the machine answered with `answer`.
    fn apply<'a>(&'a self, command: &'a [u8], answer: &'a [u8]) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

    /// Acts on a snapshot the machine was given instead of the commands it sums up (this node
    /// fell behind the leader's log, or joined): makes the layer's state match `after`'s, the
    /// machine having been `before` (both as [`Machine::snapshot`] writes them), so that what
    /// the commands it missed removed is removed here too.
    fn restored<'a>(&'a self, before: &'a [u8], after: &'a [u8]) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;
}
