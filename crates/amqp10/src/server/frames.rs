//! The link-level frames a session's handlers take, as the sans-IO core reports them: which
//! link (session channel and link handle) and what the frame says, in one value each so that a
//! handler's arguments stay the frame, the payload and the connection.

use bytes::Bytes;
use fe2o3_amqp_types::messaging::DeliveryState;

/// A transfer: one message arriving on a publisher (or management request) link.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arrival<'a> {
    /// Session channel.
    pub(crate) channel: u16,
    /// Link handle.
    pub(crate) handle: u32,
    /// Delivery id, for the disposition.
    pub(crate) delivery_id: u32,
    /// Delivery tag (an anonymous terminus's refusal names it).
    pub(crate) delivery_tag: &'a Bytes,
    /// Sent pre-settled (at most once): no outcome goes back.
    pub(crate) settled: bool,
}

/// A flow naming a link: the credit the client grants a consumer link.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Credit {
    /// Session channel.
    pub(crate) channel: u16,
    /// Link handle.
    pub(crate) handle: u32,
    /// The client's delivery-count (absent on a first flow).
    pub(crate) delivery_count: Option<u32>,
    /// Credit granted.
    pub(crate) link_credit: u32,
    /// Drain: use the credit or give it up.
    pub(crate) drain: bool,
    /// Echo: answer with the link's state.
    pub(crate) echo: bool,
}

/// A disposition from the client: the deliveries `first..=last` we sent, settled or given an
/// outcome.
#[derive(Clone, Debug)]
pub(crate) struct Disposition {
    /// Session channel.
    pub(crate) channel: u16,
    /// First delivery id.
    pub(crate) first: u32,
    /// Last delivery id (inclusive).
    pub(crate) last: u32,
    /// Whether the client gave `last` (RabbitMQ echoes the disposition as it came).
    pub(crate) last_given: bool,
    /// Settled by the client.
    pub(crate) settled: bool,
    /// The outcome.
    pub(crate) state: Option<DeliveryState>,
}
