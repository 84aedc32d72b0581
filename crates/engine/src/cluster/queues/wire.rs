//! What nodes say about queues, sans-IO: a request for a queue that lives on the answering
//! node, from a node that reaches it through a proxy, and the answer.
//!
//! A body is `header length: u32`, the header (JSON: small, rare fields), `count: u32`, then
//! `count` messages, each `length: u32` and the store's encoding of it (the bounded decoder
//! that reads the log reads these too; bodies are slices of the frame, not copies). A peer's
//! bytes are as hostile as a client's: every length is checked against what is left, and a
//! message that does not decode fails the whole request.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use charon_model::Message;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::cluster::metadata::EncodedTable;
use crate::error::{EngineError, Resource};
use crate::queue::{QueueStats, Settle};
use crate::session::SessionId;

/// Most messages one body carries (a frame's size bounds them too).
const MAX_MESSAGES: usize = 1 << 16;

/// Who asks: the node, and which run of it (a node started again has new sessions that may
/// reuse the numbers of the old ones).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Envelope {
    /// The asking node's name.
    pub from: String,
    /// Drawn at the asking node's start.
    pub boot: u64,
    /// What it asks.
    pub request: Request,
}

/// A queue by vhost and name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct QueueName {
    /// The vhost.
    pub vhost: String,
    /// The queue.
    pub name: String,
}

/// One publisher's publishes in a batch: their messages follow in order (after those of the
/// runs before), each with its confirm number when the publisher asked for confirms.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Run {
    /// The publisher wants to know when the queue has them (on disk for persistent ones).
    pub confirm: bool,
    /// Per message, its confirm number.
    pub numbers: Vec<Option<u64>>,
}

/// What the queue said of a run's confirm numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Outcome {
    pub accepted: Vec<u64>,
    pub refused: Vec<u64>,
}

/// A request about a queue of the answering node. Sessions and consumers are the asking
/// node's numbers; the answering node keeps a session of its own for each.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Request {
    /// Enqueue the messages that follow, run by run; answered once the queue confirmed those
    /// of the runs that want confirms ([`Reply::Published`]), so that a confirm is never lost
    /// with the answering node: the asking node refuses what it did not get an answer for.
    Publish { queue: QueueName, runs: Vec<Run> },
    /// A consumer of session `session`.
    Consume {
        queue: QueueName,
        session: SessionId,
        consumer: u64,
        tag: String,
        channel: u32,
        no_ack: bool,
        prefetch: u32,
        link_credit: Option<u32>,
        exclusive: bool,
        arguments: EncodedTable,
    },
    /// Cancel a consumer.
    Cancel { queue: QueueName, session: SessionId, consumer: u64 },
    /// Settle deliveries.
    Settle { queue: QueueName, seqs: Vec<u64>, how: SettleHow },
    /// `modified` with annotations.
    SettleModified { queue: QueueName, seqs: Vec<u64>, failed: bool, annotations: EncodedTable },
    /// `basic.get`.
    Get { queue: QueueName, session: SessionId, channel: u32, no_ack: bool },
    /// Remove the ready messages.
    Purge { queue: QueueName },
    /// Its counters; `declared`: for a redeclare (resets `x-expires`).
    Stats { queue: QueueName, declared: bool },
    /// A channel (or link) of the session went away.
    OwnerClosed { queue: QueueName, session: SessionId, channel: u32 },
    /// A 1.0 receiver's credit.
    Credit {
        queue: QueueName,
        session: SessionId,
        consumer: u64,
        delivery_count: u32,
        link_credit: u32,
        drain: bool,
        echo: bool,
    },
    /// What the answering node has for the session (deliveries, confirms, cancels), waiting
    /// a moment for the first.
    Poll { session: SessionId },
    /// The session closed on the asking node.
    Close { session: SessionId },
    /// Replies for the direct reply-to consumers of the answering node at these addresses (the
    /// messages follow, one per address).
    Replies { addresses: Vec<String> },
    /// Whether a direct reply-to address of the answering node has its consumer.
    ReplyLive { address: String },
    /// An HTTP request for a service of the answering node ([`crate::cluster::forward`]).
    Http(crate::cluster::forward::HttpForward),
    /// Pause, resume or cancel a redrive job the answering node runs (asked on another node).
    Redrive { vhost: String, id: String, control: crate::redrive::job::Control },
    /// The answering node's member of a replicated queue's group: its Raft state.
    ReplicaStatus { group: u64 },
}

/// [`Settle`] on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum SettleHow {
    Ack,
    Requeue,
    RequeueFailed,
    Discard,
    DiscardUndeliverable,
}

impl From<Settle> for SettleHow {
    fn from(how: Settle) -> Self {
        match how {
            Settle::Ack => Self::Ack,
            Settle::Requeue => Self::Requeue,
            Settle::RequeueFailed => Self::RequeueFailed,
            Settle::Discard => Self::Discard,
            Settle::DiscardUndeliverable => Self::DiscardUndeliverable,
        }
    }
}

impl From<SettleHow> for Settle {
    fn from(how: SettleHow) -> Self {
        match how {
            SettleHow::Ack => Self::Ack,
            SettleHow::Requeue => Self::Requeue,
            SettleHow::RequeueFailed => Self::RequeueFailed,
            SettleHow::Discard => Self::Discard,
            SettleHow::DiscardUndeliverable => Self::DiscardUndeliverable,
        }
    }
}

/// A delivered message's facts; the message follows in the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Delivered {
    pub seq: u64,
    pub redelivered: bool,
    pub delivery_count: u32,
}

/// What a queue told a remote session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Event {
    /// Messages for a consumer (they follow in the body, in order).
    Deliveries { consumer: u64, items: Vec<Delivered> },
    /// The consumer is gone (its queue was deleted).
    Cancelled { consumer: u64 },
    /// A credit consumer's state.
    CreditState { consumer: u64, delivery_count: u32, credit: u32, available: u32, drain: bool },
    /// The session must close.
    ForceClose { reason: String },
}

/// A queue's counters as a remote node shows them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Counters {
    pub ready: u32,
    pub unacked: u32,
    pub consumers: u32,
    pub bytes_ready: u64,
    pub bytes_unacked: u64,
}

impl From<&QueueStats> for Counters {
    fn from(stats: &QueueStats) -> Self {
        Self {
            ready: stats.ready,
            unacked: stats.unacked,
            consumers: stats.consumers,
            bytes_ready: stats.message_bytes_ready,
            bytes_unacked: stats.message_bytes_unacknowledged,
        }
    }
}

impl From<Counters> for QueueStats {
    fn from(c: Counters) -> Self {
        Self {
            ready: c.ready,
            unacked: c.unacked,
            consumers: c.consumers,
            message_bytes_ready: c.bytes_ready,
            message_bytes_unacknowledged: c.bytes_unacked,
            ..Self::default()
        }
    }
}

/// Why a request failed, as the asking node answers its client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Refusal {
    /// No such queue on the answering node.
    NotFound,
    /// A consumer conflicts with an exclusive one.
    ExclusiveUse,
    /// Any other refusal, with its class and RabbitMQ's text.
    Other { precondition: bool, text: String },
}

impl Refusal {
    /// The refusal of `error`.
    pub(crate) fn of(error: &EngineError) -> Self {
        match error {
            EngineError::NotFound(_) | EngineError::QueueGone(_) => Self::NotFound,
            EngineError::ExclusiveConsumeUnavailable(_) => Self::ExclusiveUse,
            other => Self::Other {
                precondition: other.kind() == crate::error::ErrorKind::PreconditionFailed,
                text: other.to_string(),
            },
        }
    }

    /// The error the asking node gives for queue `resource`.
    pub(crate) fn error(self, resource: Resource) -> EngineError {
        match self {
            Self::NotFound => EngineError::NotFound(resource),
            Self::ExclusiveUse => EngineError::ExclusiveConsumeUnavailable(resource),
            Self::Other { precondition: true, text } => EngineError::Precondition(text),
            Self::Other { precondition: false, text } => EngineError::Store(text),
        }
    }
}

/// An answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Reply {
    /// Done.
    Done,
    /// Refused.
    Refused(Refusal),
    /// A `basic.get`: the message (which follows) and how many are left, or nothing.
    Got(Option<(Delivered, u32)>),
    /// A count (purged messages, a cancel that found its consumer: 1).
    Count(u32),
    /// A queue's counters.
    Stats(Counters),
    /// A publish's outcome, run by run (empty for a run that did not want confirms).
    Published(Vec<Outcome>),
    /// What a session was told (deliveries' messages follow, in order).
    Events(Vec<Event>),
    /// A forwarded HTTP request's answer.
    Http(crate::cluster::forward::HttpAnswer),
    /// A redrive job's view (its JSON) after the control, or why it was refused.
    Redrive(Result<String, crate::redrive::RedriveError>),
    /// A member's Raft state (`None`: the node has no member of that group).
    ReplicaStatus(Option<crate::cluster::replicas::MemberStatus>),
}

/// Why a body cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum WireError {
    /// A length runs past the end, or the count is over [`MAX_MESSAGES`].
    #[error("queue request: {0}")]
    Bounds(&'static str),
    /// The header is no request or answer.
    #[error("queue request header: {0}")]
    Header(String),
    /// A message does not decode.
    #[error("queue request message: {0}")]
    Message(String),
}

/// Encodes `header` and `messages`.
pub(crate) fn encode(header: &impl Serialize, messages: &[Arc<Message>]) -> Vec<u8> {
    let header = serde_json::to_vec(header).unwrap_or_default();
    let mut out = BytesMut::with_capacity(header.len() + 8 + messages.len() * 64);
    out.put_u32(u32::try_from(header.len()).unwrap_or(u32::MAX));
    out.put_slice(&header);
    out.put_u32(u32::try_from(messages.len()).unwrap_or(u32::MAX));
    for message in messages {
        // Encoded in place after room for its length, which is filled in once known.
        let at = out.len();
        out.put_u32(0);
        charon_store::codec::encode_message(message, &mut out);
        let length = u32::try_from(out.len() - at - 4).unwrap_or(u32::MAX);
        if let Some(prefix) = out.get_mut(at..at + 4) {
            prefix.copy_from_slice(&length.to_be_bytes());
        }
    }
    out.into()
}

/// Decodes a header of type `T` and the messages after it.
///
/// # Errors
/// The body is cut short, too long, or holds what is no header or message.
pub(crate) fn decode<T: DeserializeOwned>(body: Vec<u8>) -> Result<(T, Vec<Message>), WireError> {
    let mut body = Bytes::from(body);
    let header_length = take_u32(&mut body)?;
    if header_length > body.len() {
        return Err(WireError::Bounds("header longer than the body"));
    }
    let header = body.split_to(header_length);
    let header: T = serde_json::from_slice(&header).map_err(|e| WireError::Header(e.to_string()))?;
    let count = take_u32(&mut body)?;
    // Each message takes at least its length's four bytes.
    if count > MAX_MESSAGES || count > body.len() / 4 {
        return Err(WireError::Bounds("message count out of bounds"));
    }
    let mut messages = Vec::with_capacity(count);
    for _ in 0..count {
        let length = take_u32(&mut body)?;
        if length > body.len() {
            return Err(WireError::Bounds("message longer than the body"));
        }
        let message = charon_store::codec::decode_message(body.split_to(length))
            .map_err(|e| WireError::Message(e.to_string()))?;
        messages.push(message);
    }
    if !body.is_empty() {
        return Err(WireError::Bounds("trailing bytes"));
    }
    Ok((header, messages))
}

fn take_u32(body: &mut Bytes) -> Result<usize, WireError> {
    if body.len() < 4 {
        return Err(WireError::Bounds("cut short"));
    }
    let word = body.split_to(4);
    let mut bytes = [0; 4];
    bytes.copy_from_slice(&word);
    Ok(usize::try_from(u32::from_be_bytes(bytes)).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use charon_model::{Body, Routing};

    use super::*;

    fn message(body: &'static [u8]) -> Arc<Message> {
        let routing = Routing { exchange: "x".into(), routing_key: "k".into(), ..Routing::default() };
        Arc::new(Message::new(routing, Body::Data(Bytes::from_static(body))))
    }

    #[test]
    fn requests_and_their_messages_come_back_as_they_went() {
        let request = Envelope {
            from: "charon-2@localhost".into(),
            boot: 7,
            request: Request::Publish {
                queue: QueueName { vhost: "/".into(), name: "q".into() },
                runs: vec![Run { confirm: true, numbers: vec![Some(10)] }, Run { confirm: false, numbers: vec![None] }],
            },
        };
        let body = encode(&request, &[message(b"one"), message(b"")]);
        let (back, messages): (Envelope, _) = decode(body).unwrap();
        assert_eq!(back, request);
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0].body.bytes().as_ref(), b"one");
        assert_eq!(messages[1].routing.routing_key, "k");
    }

    #[test]
    fn hostile_bodies_are_refused_not_trusted() {
        let body = encode(&Reply::Done, &[message(b"abc")]);
        // Every cut is refused.
        for end in 0..body.len() {
            assert!(decode::<Reply>(body[..end].to_vec()).is_err(), "cut at {end}");
        }
        let mut trailing = body.clone();
        trailing.push(0);
        assert_eq!(decode::<Reply>(trailing).unwrap_err(), WireError::Bounds("trailing bytes"));
        // A count the body cannot hold is refused before anything is allocated for it.
        let mut counted = encode(&Reply::Done, &[]);
        let at = counted.len() - 4;
        counted[at..].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(decode::<Reply>(counted).unwrap_err(), WireError::Bounds("message count out of bounds"));
        let mut huge = vec![0xff; 8];
        huge.extend_from_slice(b"{}");
        assert_eq!(decode::<Reply>(huge).unwrap_err(), WireError::Bounds("header longer than the body"));
        // A message whose bytes are no message.
        let mut garbage = encode(&Reply::Done, &[message(b"abc")]);
        let first = garbage.len() - 20;
        garbage[first] = 0xee;
        assert!(decode::<Reply>(garbage).is_err());
    }
}
