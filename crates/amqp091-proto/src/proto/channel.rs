//! Per-channel protocol state: open/closing, and reassembly of `basic.publish` content from
//! header and body frames.

use bytes::{Bytes, BytesMut};

use crate::codec::{DecodedProperties, Publish};

/// Where a channel is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Frames arrived but no `channel.open` yet (RabbitMQ creates the channel on first sight).
    Starting,
    /// Open.
    Open,
    /// We sent `channel.close` and wait for `close-ok`; everything else is ignored.
    Closing,
    /// The client sent `channel.close`: its frames are ignored until the broker has released
    /// the channel and sent the confirms it owes, then `close-ok`
    /// ([`super::Connection::close_ok_channel`]).
    ClientClosing,
}

/// Content reassembly.
#[derive(Debug, Default)]
pub(super) enum Assembly {
    /// Expecting a method frame.
    #[default]
    Idle,
    /// A `basic.publish` arrived; expecting its content header.
    Header(Publish),
    /// Expecting body frames.
    Body(Box<PartialContent>),
}

#[derive(Debug)]
pub(super) struct PartialContent {
    pub(super) method: Publish,
    pub(super) raw_properties: Bytes,
    pub(super) properties: DecodedProperties,
    pub(super) size: u64,
    /// Signed: a body longer than announced drives it below zero, and then (as in RabbitMQ)
    /// the content never completes and the next method frame is a 505.
    pub(super) remaining: i128,
    /// The first body frame, kept as a zero-copy slice; only multi-frame bodies are copied.
    pub(super) first: Option<Bytes>,
    pub(super) rest: BytesMut,
    /// Over the size limit: frames are counted and dropped.
    pub(super) discard: bool,
}

impl PartialContent {
    pub(super) fn push(&mut self, chunk: Bytes) {
        self.remaining -= i128::try_from(chunk.len()).unwrap_or(i128::MAX);
        if self.discard {
            return;
        }
        match self.first.take() {
            None if self.rest.is_empty() => self.first = Some(chunk),
            Some(first) => {
                // The announced size is the client's word: reserve at most 1 MiB up front.
                self.rest.reserve(usize::try_from(self.size).unwrap_or(0).min(1 << 20));
                self.rest.extend_from_slice(&first);
                self.rest.extend_from_slice(&chunk);
            }
            None => self.rest.extend_from_slice(&chunk),
        }
    }

    pub(super) fn take_body(&mut self) -> Bytes {
        match self.first.take() {
            Some(only) => only,
            None => std::mem::take(&mut self.rest).freeze(),
        }
    }
}

#[derive(Debug)]
pub(super) struct ChannelSlot {
    pub(super) phase: Phase,
    pub(super) assembly: Assembly,
}

impl ChannelSlot {
    pub(super) fn new() -> Self {
        Self { phase: Phase::Starting, assembly: Assembly::Idle }
    }
}
