//! Per-link protocol state.

use bytes::{Bytes, BytesMut};

/// Which way messages flow on a link, from the broker's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkRole {
    /// The client sends, we receive (a publisher).
    Incoming,
    /// We send, the client receives (a consumer).
    Outgoing,
}

/// A message arriving in several transfer frames.
#[derive(Debug)]
pub(super) struct Partial {
    pub(super) delivery_id: u32,
    pub(super) delivery_tag: Bytes,
    pub(super) settled: bool,
    pub(super) first: Option<Bytes>,
    pub(super) rest: BytesMut,
    pub(super) size: usize,
}

impl Partial {
    pub(super) fn push(&mut self, chunk: Bytes) {
        self.size += chunk.len();
        match self.first.take() {
            None if self.rest.is_empty() => self.first = Some(chunk),
            Some(first) => {
                self.rest.extend_from_slice(&first);
                self.rest.extend_from_slice(&chunk);
            }
            None => self.rest.extend_from_slice(&chunk),
        }
    }

    pub(super) fn take(&mut self) -> Bytes {
        match self.first.take() {
            Some(only) => only,
            None => std::mem::take(&mut self.rest).freeze(),
        }
    }
}

#[derive(Debug)]
pub(super) struct Link {
    pub(super) role: LinkRole,
    /// Incoming: transfers the sender may still send. Outgoing: unused.
    pub(super) credit: u32,
    /// Incoming: the sender's delivery-count as we track it. Outgoing: ours.
    pub(super) delivery_count: u32,
    pub(super) partial: Option<Partial>,
}
