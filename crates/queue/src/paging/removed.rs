//! What a removal by sequence number took: apart from the pager so that the queue's commands
//! can name it without depending on the pager.

use super::run::ChunkCheck;

/// What a removal by sequence number took, over the runs of a queue.
#[derive(Debug, Default)]
pub(crate) struct Removed {
    /// The sequence numbers removed.
    pub(crate) seqs: Vec<u64>,
    /// Their body bytes.
    pub(crate) bytes: u64,
    /// Chunks of index files to read off the queue task for the rest, each with its run.
    pub(crate) checks: Vec<(usize, ChunkCheck)>,
}

impl Removed {
    pub(crate) fn note(&mut self, seq: u64, bytes: u64) {
        self.seqs.push(seq);
        self.bytes += bytes;
    }
}
