//! What a durable queue writes to the message log during one pass, handed to the log by the
//! task once per pass (one append, so one group commit covers it).
//!
//! - A persistent message (0.9.1 delivery-mode 2; 1.0 unless `header.durable` is false, as
//!   RabbitMQ 4.0.5's `mc_amqp:get_property(durable, _)` defaults it to true) entering a durable
//!   queue is an `Enqueue` record; a quorum queue records every message. Its publisher's
//!   confirmation is held back until the log has synced the pass's records.
//! - A quorum queue writes `Delivered` when it hands a message to a consumer and when the
//!   message comes back (with its counts). A classic queue writes it only when the message
//!   comes back: RabbitMQ 4.0.5's classic queues keep no delivery marks, and after a crash
//!   bring every recovered message back redelivered, as Charon does (see
//!   `charon_store::segment_log::MessageLog::close`; observed, see
//!   `conformance/OBSERVED-0.9.1.md`). After a clean stop the messages that came back, the
//!   unsettled ones of the closed connections included, are redelivered and no others.
//! - Leaving the queue for good (ack, dead letter, expiry, overflow, purge) writes `Remove`.
//!   These are not waited for: after a crash an acked message may come back, redelivered —
//!   at least once, never lost.
//! - A transient message of a long queue is written as a `Spill` so that it can leave memory
//!   (any queue on a broker with a log); its exit writes `Released`.

use bytes::{Bytes, BytesMut};
use charon_model::{DeathReason, Message};
use charon_store::codec::encode_message;
use charon_store::segment_log::Record;

use super::entry::Entry;
use super::limits::body_size;
use crate::session::{SessionEvent, SessionSink};

/// Fresh room reserved for encoding when less than [`ENCODE_LOW_WATER`] is left.
const ENCODE_CHUNK: usize = 64 * 1024;
const ENCODE_LOW_WATER: usize = 4 * 1024;
/// The most records a pass's vector starts with room for (see [`Journal::take`]).
const RECORDS_CAPACITY_CAP: usize = 1024;

/// Added to a queue's id to key its dead letters' spills in the log (see
/// [`super::dlx_parked`]): never a queue id (those count up from 1), and the broker strips it
/// to find the queue a relocation is for.
pub const LETTER_LOG_KEY: u64 = 1 << 62;

/// Where a [`Journal`] stood when a publish began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Mark {
    records: usize,
    kept: usize,
}

/// One queue's log records of a pass and the confirmations that wait for them.
#[derive(Debug)]
pub(super) struct Journal {
    /// The queue's id: the log's key for its records.
    queue: u64,
    /// Whether this queue persists anything (a durable queue on a broker with a store).
    enabled: bool,
    /// Records for the log, in order.
    records: Vec<Record>,
    /// How many of `records` a crash must find: all but spills and their releases, which only
    /// let transient messages leave memory (nothing recovers them).
    kept: usize,
    /// Confirmations to send once `records` are on disk.
    confirms: Vec<(SessionSink, SessionEvent)>,
    /// Where messages are encoded: one allocation serves many payloads, each split off as
    /// its own `Bytes` (freed once the log has written all of them).
    buffer: BytesMut,
}

impl Journal {
    /// An empty journal for queue `queue`, persisting nothing until [`Self::enable`].
    pub(super) fn new(queue: u64) -> Self {
        Self { queue, enabled: false, records: Vec::new(), kept: 0, confirms: Vec::new(), buffer: BytesMut::new() }
    }

    /// The queue is durable and the broker has a store: messages are persisted from now on.
    pub(super) fn enable(&mut self) {
        self.enabled = true;
    }

    /// Whether a message entering the queue is written to the log: every message of a quorum
    /// queue, the persistent ones of a classic queue.
    pub(super) fn persists(&self, message: &Message, quorum: bool) -> bool {
        self.enabled && (quorum || message.is_persistent())
    }

    /// Where the journal stands, taken before a publish (see [`Self::holds`]).
    pub(super) fn mark(&self) -> Mark {
        Mark { records: self.records.len(), kept: self.kept }
    }

    /// Whether the confirmation of a publish begun at `mark` waits for the log: when it added
    /// records a crash must find; when it only spilled, if `paced`. A publisher's confirmation
    /// of a spilled message then means that it left memory, which paces a flood into a long
    /// queue (the memory alarm, reading resident memory, reacts too late for 1 MiB messages).
    /// A queue's own dead letters are not paced: their source frees its letter on the confirm,
    /// and waiting for a write that no crash needs kept ~20k letters at a time in memory (S5
    /// under the guarantee).
    pub(super) fn holds(&self, mark: Mark, paced: bool) -> bool {
        self.kept != mark.kept || (paced && self.records.len() != mark.records)
    }

    fn keep(&mut self, record: Record) {
        self.kept += 1;
        self.records.push(record);
    }

    /// Records a newly enqueued message; `replaces` names the `(queue, seq)` it was moved out
    /// of, which the same record removes.
    pub(super) fn enqueue(&mut self, entry: &Entry, replaces: Option<(u64, u64)>) {
        let payload = self.encode(&entry.message);
        self.keep(Record::Enqueue {
            queue: self.queue,
            seq: entry.seq,
            expires_at: entry.expires_at,
            size: u32::try_from(body_size(&entry.message)).unwrap_or(u32::MAX),
            priority: entry.message.properties().priority.unwrap_or(0),
            not_before: entry.message.broker.not_before,
            replaces,
            payload,
        });
    }

    /// Writes a transient message of a long queue to the log so that it can leave memory.
    pub(super) fn spill(&mut self, entry: &mut Entry) {
        let payload = self.encode(&entry.message);
        self.records.push(Record::Spill { queue: self.queue, seq: entry.seq, payload });
        entry.spilled = true;
    }

    /// A persisted message went to a quorum queue's consumer, or came back from a consumer.
    pub(super) fn delivered(&mut self, entry: &Entry) {
        if entry.persisted {
            let (seq, returned, failed) = (entry.seq, entry.returned, entry.failed);
            self.keep(Record::Delivered { queue: self.queue, seq, returned, failed });
        }
    }

    /// A persisted message died in an at-least-once queue and waits there for its dead
    /// letter's targets: a restart recovers it waiting, not ready.
    pub(super) fn dead_lettered(&mut self, entry: &Entry, reason: DeathReason) {
        if entry.persisted {
            self.keep(Record::DeadLettered { queue: self.queue, seq: entry.seq, reason: reason_code(reason) });
        }
    }

    /// A message left the queue for good.
    pub(super) fn removed(&mut self, entry: &Entry) {
        self.left(entry.seq, entry.persisted, entry.spilled);
    }

    /// Message `seq` left the queue for good: a persisted one is removed from the log, a
    /// spilled one released.
    pub(super) fn left(&mut self, seq: u64, persisted: bool, spilled: bool) {
        if persisted {
            self.keep(Record::Remove { queue: self.queue, seq });
        } else if spilled {
            self.records.push(Record::Released { queue: self.queue, seq });
        }
    }

    /// Writes a dead letter's message to the log so that it can wait there (see
    /// [`super::dlx_parked`]): a spill under the queue's letter key.
    pub(super) fn spill_letter(&mut self, seq: u64, message: &Message) {
        let payload = self.encode(message);
        self.records.push(Record::Spill { queue: self.queue | LETTER_LOG_KEY, seq, payload });
    }

    /// A dead letter that was spilled left the queue: its spill is garbage.
    pub(super) fn release_letter(&mut self, seq: u64) {
        self.records.push(Record::Released { queue: self.queue | LETTER_LOG_KEY, seq });
    }

    /// Holds a confirmation until this pass's records are on disk.
    pub(super) fn hold(&mut self, session: SessionSink, event: SessionEvent) {
        self.confirms.push((session, event));
    }

    /// Takes the pass's records and the confirmations that wait for them.
    pub(super) fn take(&mut self) -> (Vec<Record>, Vec<(SessionSink, SessionEvent)>) {
        self.kept = 0;
        // The records go to the log's writer; the next pass likely writes as many, and starting
        // at that size spares the vector's growth by doubling (1 % of S10's CPU in reallocs).
        let next = Vec::with_capacity(self.records.len().min(RECORDS_CAPACITY_CAP));
        (std::mem::replace(&mut self.records, next), std::mem::take(&mut self.confirms))
    }

    /// Encodes a message into the shared buffer.
    fn encode(&mut self, message: &Message) -> Bytes {
        if self.buffer.capacity() < ENCODE_LOW_WATER {
            self.buffer.reserve(ENCODE_CHUNK);
        }
        encode_message(message, &mut self.buffer);
        self.buffer.split().freeze()
    }
}

/// The log's code for a death reason (the store keeps it as a byte).
pub(super) fn reason_code(reason: DeathReason) -> u8 {
    match reason {
        DeathReason::Rejected => 1,
        DeathReason::Expired => 2,
        DeathReason::Maxlen => 3,
        DeathReason::DeliveryLimit => 4,
    }
}

/// The death reason a log code stands for.
pub(super) fn reason_of(code: u8) -> Option<DeathReason> {
    [DeathReason::Rejected, DeathReason::Expired, DeathReason::Maxlen, DeathReason::DeliveryLimit]
        .into_iter()
        .find(|reason| reason_code(*reason) == code)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_death_reason_has_a_log_code_that_reads_back() {
        use charon_model::DeathReason::*;
        for reason in [Rejected, Expired, Maxlen, DeliveryLimit] {
            assert_eq!(super::reason_of(super::reason_code(reason)), Some(reason));
        }
        assert_eq!(super::reason_of(0), None);
    }

    use std::sync::Arc;

    use charon_model::{Body, Origin, Properties, Routing};

    use super::*;

    fn message(delivery_mode: u8) -> Arc<Message> {
        let mut m = Message::new(Routing::default(), Body::Data("m".into()));
        m.origin = Origin::Amqp091;
        m.set_properties(Properties { delivery_mode: Some(delivery_mode), ..Properties::default() });
        Arc::new(m)
    }

    fn kinds(records: &[Record]) -> Vec<(&'static str, u64, u64)> {
        records
            .iter()
            .map(|r| match r {
                Record::Enqueue { queue, seq, .. } => ("enqueue", *queue, *seq),
                Record::Remove { queue, seq } => ("remove", *queue, *seq),
                Record::Delivered { queue, seq, .. } => ("delivered", *queue, *seq),
                Record::DropQueue { queue } => ("drop", *queue, 0),
                Record::Spill { queue, seq, .. } => ("spill", *queue, *seq),
                Record::Released { queue, seq } => ("released", *queue, *seq),
                Record::DeadLettered { queue, seq, .. } => ("dead-lettered", *queue, *seq),
            })
            .collect()
    }

    #[test]
    fn only_an_enabled_journal_persists_and_a_classic_queue_only_persistent_messages() {
        let mut journal = Journal::new(7);
        assert!(!journal.persists(&message(2), true));
        journal.enable();
        assert!(journal.persists(&message(2), false));
        assert!(!journal.persists(&message(1), false));
        assert!(journal.persists(&message(1), true), "a quorum queue persists every message");
    }

    #[test]
    fn records_follow_a_message_through_the_queue_under_its_queue_id() {
        let mut journal = Journal::new(7);
        journal.enable();
        let mut persisted = Entry::new(1, message(2), Some(5), true);
        journal.enqueue(&persisted, None);
        journal.delivered(&persisted);
        persisted.returned(true);
        journal.delivered(&persisted);
        journal.removed(&persisted);
        let mut transient = Entry::new(2, message(1), None, false);
        journal.delivered(&transient);
        journal.removed(&transient);
        journal.spill(&mut transient);
        assert!(transient.spilled);
        journal.removed(&transient);
        assert!(journal.holds(Mark { records: 6, kept: 3 }, false), "a record a crash must find");
        assert!(!journal.holds(Mark { records: 5, kept: 4 }, false), "only the release: not for a dead letter");
        assert!(journal.holds(Mark { records: 5, kept: 4 }, true), "paced: a publisher's confirm waits for it");
        let (records, confirms) = journal.take();
        assert_eq!(
            kinds(&records),
            [
                ("enqueue", 7, 1),
                ("delivered", 7, 1),
                ("delivered", 7, 1),
                ("remove", 7, 1),
                ("spill", 7, 2),
                ("released", 7, 2)
            ]
        );
        assert!(matches!(records.get(2), Some(Record::Delivered { returned: 1, failed: 1, .. })));
        assert!(matches!(records.first(), Some(Record::Enqueue { expires_at: Some(5), size: 1, .. })));
        assert!(confirms.is_empty());
        assert_eq!(journal.mark(), Mark { records: 0, kept: 0 }, "taken");
    }

    #[test]
    fn held_confirmations_come_out_with_the_records() {
        let mut journal = Journal::new(1);
        let (session, _rx) = SessionSink::new(1, 0);
        journal.hold(session, SessionEvent::Confirms { channel: 3, accepted: vec![1], refused: vec![] });
        let (records, confirms) = journal.take();
        assert!(records.is_empty());
        assert!(matches!(confirms.as_slice(), [(_, SessionEvent::Confirms { channel: 3, .. })]));
    }
}
