//! Charon's queue machine: one task per queue owns its messages and consumers; everything else
//! talks to it through a [`QueueHandle`].
//!
//! The crate knows no protocol, no vhost and no broker: a queue is spawned with its
//! [`QueueLinks`] (the message log of `charon-store`, the [`dead_letter::DeadLetterSink`] its
//! vhost routes dead letters through, whom to tell when it deletes itself) and talks to
//! connections through [`session::SessionSink`]. Besides the queue itself it holds what moves
//! a message out of one: [`dead_letter`] (the copy and its death history, counts, drops,
//! events), [`session`] (deliveries and confirms to connections), [`gate`] (shared capacity),
//! [`clock`], and the [`error`] every layer above returns ([`action`]: the permission an error
//! names).
//!
//! The task loop ([`task`]) is thin: it receives commands in batches, applies them to the
//! queue's [`state::QueueState`], runs one dispatch pass and sends the resulting events. The
//! state awaits nothing, so it is testable without a runtime, and one dispatch pass per batch
//! of commands turns many publishes into one delivery event per consumer. The state is made
//! of parts that each own one job, in their own files:
//!
//! - [`entry`]: one message in the queue, with its sequence number, counts and log place;
//! - [`ready`]: the ready messages in the [`order`] they are handed out (FIFO, by priority,
//!   or a quorum queue's two levels), each run ([`level`]) with its head in memory and the rest
//!   with the pager ([`paging`]);
//! - [`consumers`]: consumers, their credit and their unsettled deliveries, taking [`turns`]
//!   by consumer priority or as a single active consumer;
//! - [`limits`]: TTL, length limits, delivery limit and `x-expires`;
//! - [`effects`]: what a pass produces — session events, dead letters, and the [`journal`]
//!   of log records with the confirmations that wait for them;
//! - [`counts`]: how a quorum queue's delivery counts show on the messages it hands out;
//! - [`delayed`]: messages whose "not before" time has not come, out of the ready runs.
//!
//! Every message carries a queue-local sequence number (the store's key); enqueue / settle /
//! requeue are the only ways messages move; every path on which a message leaves other than by
//! an acknowledgement goes through `QueueState::discard`, where dead lettering hooks in. Dead
//! letters on their way to their targets wait in the task's [`outbox`].

pub mod action;
mod admission;
pub mod args;
mod arrivals;
pub mod browse;
pub mod clock;
/// Public for the proxies of a cluster's queues of other nodes, which send each command there.
pub mod command;
pub mod connection_info;
mod consumer_timeout;
mod consumers;
mod counts;
pub mod dead_letter;
mod delayed;
mod dlx_parked;
#[cfg(test)]
mod dlx_parked_tests;
mod dlx_pending;
mod effects;
mod entry;
pub mod error;
mod flow;
pub mod gate;
mod gauges;
pub(crate) mod handle;
mod journal;
mod level;
mod limits;
mod links;
#[cfg(test)]
mod log_fixture;
mod order;
mod outbox;
mod paging;
mod ready;
/// Public for the cluster, whose replicated quorum queues' members keep it.
pub mod replica;
#[cfg(test)]
mod replica_tests;
pub(crate) mod requests;
pub mod session;
pub mod settings;
mod state;
mod task;
mod turns;
mod unconfirmed;
mod utilisation;

use std::sync::Arc;

use charon_store::segment_log::RecoveredQueue;
use tokio::sync::mpsc;

pub use admission::{Admission, until_admitted};
pub use args::QueueType;
pub use browse::{BrowsePage, BrowseRequest, BrowsedMessage};
pub use consumer_timeout::{ConsumerTimeout, DEFAULT_CONSUMER_TIMEOUT_MS, TimeoutCell};
pub use gauges::{GaugeValues, QueueGauges};
pub use handle::{QueueHandle, QueueRef};
pub use journal::LETTER_LOG_KEY;
pub use links::{OnSelfDelete, QueueLinks, Replicate, Replicated, TakingOver};
pub use requests::{
    ConfirmTo, ConsumeSpec, ConsumerReport, CreditGrant, Enqueue, GetOk, MessageCounters, MovedFrom, QueueConfig,
    QueueStats, REFUSED_TO_PUBLISHER_BIT, Settle, SettleSeqs,
};
pub use settings::{Overflow, QueueSettings};

/// Commands buffered per queue before publishers wait: bounds memory when a queue falls behind
/// while keeping batches flowing.
const MAILBOX_CAPACITY: usize = 256;

/// Starts a queue task, with the messages recovered from the log for it, and returns its
/// handle.
pub fn spawn(
    id: u64,
    config: QueueConfig,
    settings: QueueSettings,
    links: QueueLinks,
    restored: RecoveredQueue,
) -> QueueRef {
    let (tx, rx) = mpsc::channel(MAILBOX_CAPACITY);
    let handle = Arc::new(QueueHandle::new(id, config, tx));
    handle.consumer_timeout.set(settings.consumer_timeout);
    task::spawn(Arc::clone(&handle), rx, settings, links, restored);
    handle
}
