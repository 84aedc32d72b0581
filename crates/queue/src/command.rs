//! The mailbox protocol between a [`super::QueueHandle`] and its task (or, for a queue of
//! another node of the cluster, the proxy task that sends each command there).
// Each command and its fields are documented at the `QueueHandle` method that sends it.
#![allow(missing_docs)]

use std::sync::Arc;

use charon_model::{DeathCause, Table};
use tokio::sync::oneshot;

use super::browse::{BrowseRequest, Plan};
use super::paging::packed::PagedEntry;
use super::paging::removed::Removed;
use super::requests::{ConfirmTo, ConsumeSpec, CreditGrant, Enqueue, GetOk, MovedFrom, QueueStats, Settle};
use super::settings::QueueSettings;
use crate::error::EngineError;
use crate::session::{ConsumerId, Owner};

/// One command to a queue task.
// What the paging commands carry stays this crate's: a proxy does not forward them.
#[allow(private_interfaces)]
pub enum QueueCmd {
    Publish {
        items: Vec<Enqueue>,
        confirm_to: Option<ConfirmTo>,
    },
    /// A publish told the sequence number each message got (see
    /// [`super::QueueRef::publish_numbered`]).
    PublishNumbered {
        items: Vec<Enqueue>,
        confirm_to: ConfirmTo,
        numbers: oneshot::Sender<Vec<Option<u64>>>,
    },
    /// A publish of messages moved out of another queue (see [`super::QueueRef::publish_moved`]).
    PublishMoved {
        items: Vec<Enqueue>,
        from: MovedFrom,
        confirm_to: ConfirmTo,
    },
    Consume(Box<ConsumeSpec>, oneshot::Sender<Result<(), EngineError>>),
    Cancel(ConsumerId, oneshot::Sender<bool>),
    Settle {
        seqs: super::requests::SettleSeqs,
        how: Settle,
    },
    SettleModified {
        seqs: Vec<u64>,
        failed: bool,
        annotations: Table,
    },
    /// A discarding settle with what the consumer said about the messages.
    SettleRefused {
        seqs: Vec<u64>,
        how: Settle,
        cause: Arc<DeathCause>,
    },
    Get {
        owner: Owner,
        no_ack: bool,
        reply: oneshot::Sender<Option<GetOk>>,
    },
    Purge(oneshot::Sender<u32>),
    /// Answered once everything the queue was asked before is applied and its log records
    /// are handed to the log (a clean stop waits for it before it closes the log): true when
    /// no dead letter of the queue is still on its way to a target.
    Flush(oneshot::Sender<bool>),
    /// Plans a page of its messages, resolved by the caller off the task.
    Browse {
        request: BrowseRequest,
        reply: oneshot::Sender<Plan>,
    },
    /// Removes ready messages by sequence number.
    Remove {
        seqs: Vec<u64>,
        reply: oneshot::Sender<Removed>,
    },
    /// Removes what the caller found in chunk `id` of run `run`'s index file.
    RemoveChecked {
        run: usize,
        id: u64,
        found: Vec<PagedEntry>,
        reply: oneshot::Sender<Removed>,
    },
    Stats(oneshot::Sender<QueueStats>),
    /// Its consumers, for the management API.
    Consumers(oneshot::Sender<Vec<super::requests::ConsumerReport>>),
    /// Stats for a (re)declare, which also counts as use for `x-expires`.
    Declared(oneshot::Sender<QueueStats>),
    Settings(QueueSettings),
    OwnerClosed(Owner),
    Delete {
        if_unused: bool,
        if_empty: bool,
        reply: oneshot::Sender<Result<u32, EngineError>>,
    },
    Resume,
    Credit(CreditGrant),
    /// A binding or a queue was added in the vhost: at-least-once dead letters nobody could
    /// take are tried again.
    TopologyChanged,
}
