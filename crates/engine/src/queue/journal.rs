//! What a durable queue writes to the message log, collected by the pure [`QueueState`] and
//! handed to the log by the task once per pass (one append, so one group commit covers it).
//!
//! - A persistent message (0.9.1 delivery-mode 2; 1.0 unless `header.durable` is false, as
//!   RabbitMQ 4.0.5's `mc_amqp:get_property(durable, _)` defaults it to true) entering a durable
//!   queue is an `Enqueue` record; a quorum queue records every message. Its publisher's
//!   confirmation is held back until the log has synced the pass's records.
//! - Handing it to a consumer writes `Delivered` (so it comes back redelivered after a crash,
//!   with its quorum counts); a quorum return writes the new counts.
//! - Leaving the queue for good (ack, dead letter, expiry, overflow, purge) writes `Remove`.
//!   These are not waited for: after a crash an acked message may come back, redelivered —
//!   at least once, never lost.

use bytes::BytesMut;
use charon_model::Message;
use charon_store::codec::encode_message;
use charon_store::segment_log::{LogReader, Record, RecoveredQueue};

use super::limits::body_size;
use super::paging::Pager;
use super::state::{Entry, QueueState};
use crate::session::{SessionEvent, SessionSink};

/// Records and held-back confirmations of one pass.
#[derive(Debug, Default)]
pub(crate) struct Journal {
    /// Whether this queue persists anything (a durable queue on a broker with a store).
    pub(crate) enabled: bool,
    /// Records for the log, in order.
    pub(crate) records: Vec<Record>,
    /// Confirmations to send once `records` are on disk.
    pub(crate) confirms: Vec<(SessionSink, SessionEvent)>,
    /// Where messages are encoded: one allocation serves many payloads, each split off as
    /// its own `Bytes` (freed once the log has written all of them).
    buffer: BytesMut,
}

/// Fresh room reserved for encoding when less than [`ENCODE_LOW_WATER`] is left.
const ENCODE_CHUNK: usize = 64 * 1024;
const ENCODE_LOW_WATER: usize = 4 * 1024;

impl Journal {
    /// A persisted message of queue `queue` went to a consumer (or came back with new counts).
    pub(super) fn delivered(&mut self, queue: u64, entry: &Entry) {
        if entry.persisted {
            let (seq, returned, failed) = (entry.seq, entry.returned, entry.failed);
            self.records.push(Record::Delivered { queue, seq, returned, failed });
        }
    }

    /// A message of queue `queue` left it for good.
    pub(super) fn removed(&mut self, queue: u64, entry: &Entry) {
        self.left(queue, entry.seq, entry.persisted, entry.spilled);
    }

    /// Message `seq` of queue `queue` left it for good: a persisted one is removed from the
    /// log, a spilled one released.
    pub(super) fn left(&mut self, queue: u64, seq: u64, persisted: bool, spilled: bool) {
        if persisted {
            self.records.push(Record::Remove { queue, seq });
        } else if spilled {
            self.records.push(Record::Released { queue, seq });
        }
    }

    /// Encodes a message into the shared buffer.
    fn encode(&mut self, message: &Message) -> bytes::Bytes {
        if self.buffer.capacity() < ENCODE_LOW_WATER {
            self.buffer.reserve(ENCODE_CHUNK);
        }
        encode_message(message, &mut self.buffer);
        self.buffer.split().freeze()
    }
}

impl QueueState {
    /// Whether a message entering this queue is written to the log.
    pub(super) fn persists(&self, message: &Message) -> bool {
        self.journal.enabled && (self.quorum() || message.is_persistent())
    }

    /// Records a newly enqueued message.
    pub(super) fn journal_enqueue(&mut self, entry: &Entry) {
        let payload = self.journal.encode(&entry.message);
        self.journal.records.push(Record::Enqueue {
            queue: self.handle.id,
            seq: entry.seq,
            expires_at: entry.expires_at,
            size: u32::try_from(body_size(&entry.message)).unwrap_or(u32::MAX),
            payload,
        });
    }

    /// Writes a transient message of a long queue to the log so that it can leave memory.
    pub(super) fn journal_spill(&mut self, entry: &mut Entry) {
        let payload = self.journal.encode(&entry.message);
        self.journal.records.push(Record::Spill { queue: self.handle.id, seq: entry.seq, payload });
        entry.spilled = true;
    }

    /// Records that a message went to a consumer (or came back with new quorum counts).
    pub(super) fn journal_delivered(&mut self, entry: &Entry) {
        self.journal.delivered(self.handle.id, entry);
    }

    /// Records that a message left the queue for good.
    pub(super) fn journal_removed(&mut self, entry: &Entry) {
        self.journal.removed(self.handle.id, entry);
    }

    /// Turns journalling on (the queue is durable and the broker has a store) and restores the
    /// messages the log recovered for it, in their order (paging must be on: they are read
    /// back from the log). Sequence numbers continue above anything an earlier run can have
    /// written (the log's accounting relies on a queue's sequence numbers growing): the larger
    /// of the last recovered one and the clock in ms × 2^20.
    pub(crate) fn enable_journal(&mut self, restored: RecoveredQueue) {
        self.journal.enabled = true;
        let clock_floor = u64::try_from(self.now).unwrap_or(0) << 20;
        let last = restored.last().map_or(0, |m| m.seq);
        self.restore_ready(restored);
        self.next_seq = clock_floor.max(last.saturating_add(1));
    }

    /// Turns paging on: the broker has a log that long queues can keep their messages in.
    pub(crate) fn enable_paging(&mut self, reader: LogReader) {
        self.pager = Some(Pager::new(reader, self.handle.id));
    }

    /// Takes the pass's records and the confirmations that wait for them.
    pub(crate) fn take_journal(&mut self) -> (Vec<Record>, Vec<(SessionSink, SessionEvent)>) {
        (std::mem::take(&mut self.journal.records), std::mem::take(&mut self.journal.confirms))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use charon_model::{Body, Properties, Routing, Table};
    use std::sync::Arc;

    use tokio::sync::mpsc;

    use super::*;
    use crate::queue::settings::QueueSettings;
    use crate::queue::{ConfirmTo, Enqueue, QueueConfig, QueueHandle, QueueType, Settle};
    use crate::session::{Owner, SessionSink};

    fn durable_queue() -> QueueState {
        let (tx, _rx) = mpsc::channel(1);
        let config = QueueConfig {
            name: "d".into(),
            vhost: "/".into(),
            durable: true,
            auto_delete: false,
            exclusive_owner: None,
            arguments: Table::new(),
            queue_type: QueueType::Classic,
        };
        let mut state = QueueState::new(Arc::new(QueueHandle::new(7, config, tx)), QueueSettings::default(), 1_000);
        state.enable_journal(RecoveredQueue::default());
        state
    }

    fn message(delivery_mode: u8) -> Arc<Message> {
        let mut m = Message::new(Routing::default(), Body::Data("m".into()));
        m.origin = charon_model::Origin::Amqp091;
        m.set_properties(Properties { delivery_mode: Some(delivery_mode), ..Properties::default() });
        Arc::new(m)
    }

    fn kinds(records: &[Record]) -> Vec<&'static str> {
        records
            .iter()
            .map(|r| match r {
                Record::Enqueue { .. } => "enqueue",
                Record::Remove { .. } => "remove",
                Record::Delivered { .. } => "delivered",
                Record::DropQueue { .. } => "drop",
                Record::Spill { .. } => "spill",
                Record::Released { .. } => "released",
            })
            .collect()
    }

    #[test]
    fn persistent_messages_are_journalled_and_their_confirms_wait_for_the_log() {
        let mut state = durable_queue();
        let (session, _events) = SessionSink::new(1, 0);
        let to = ConfirmTo { session: session.clone(), channel: 1 };
        // A transient message alone: nothing to write, confirmed at once.
        state.publish(vec![Enqueue { message: message(1), confirm: Some(1) }], Some(to.clone()));
        assert_eq!(state.take_outbox().len(), 1);
        let (records, confirms) = state.take_journal();
        assert!(records.is_empty() && confirms.is_empty());
        // A persistent one: an Enqueue record, the confirmation held for it.
        state.publish(vec![Enqueue { message: message(2), confirm: Some(2) }], Some(to));
        assert!(state.take_outbox().is_empty());
        let (records, confirms) = state.take_journal();
        assert_eq!(kinds(&records), ["enqueue"]);
        let Some(Record::Enqueue { queue, seq, .. }) = records.first() else { panic!("{records:?}") };
        assert_eq!(*queue, 7);
        assert!(*seq >= 1_000 << 20, "sequence numbers start above the clock floor: {seq}");
        assert_eq!(confirms.len(), 1);
        // Fetching both: only the persistent one is marked delivered, then removed on ack.
        let owner = Owner { session: 1, channel: 1 };
        let transient = state.get(owner, false).unwrap();
        let persistent = state.get(owner, false).unwrap();
        assert_eq!(kinds(&state.take_journal().0), ["delivered"]);
        state.settle(&[transient.delivery.seq, persistent.delivery.seq], Settle::Ack);
        assert_eq!(kinds(&state.take_journal().0), ["remove"]);
    }
}
