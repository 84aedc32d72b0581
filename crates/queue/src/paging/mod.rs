//! Long queues keep their messages on disk: only the head is in memory.
//!
//! A queue's ready messages lie in three runs, in sequence order:
//!
//! 1. the head ([`super::ready::Ready`]): whole messages, what dispatch, gets, expiry and
//!    limits work on — up to [`RESIDENT_MESSAGES`] ([`IDLE_RESIDENT_MESSAGES`] while nobody
//!    consumes) or [`RESIDENT_BYTES`] of bodies;
//! 2. `paged`: messages that are only in the log, 32 bytes each ([`PagedEntry`]), and only
//!    the two ends of the run (and the chunk after the front) in memory ([`run`]: the middle
//!    is in an index file, read and written off the queue task by [`disk`]);
//! 3. `incoming`: messages that arrived while the queue was long, still in memory until the
//!    log says where it wrote them. Persistent messages of durable queues are written anyway;
//!    the others are written as spills (no sync; never recovered). Once placed, they move to
//!    `paged` and their memory is freed.
//!
//! The [`Pager`] holds runs 2 and 3. When the head runs dry it is refilled from `paged` (one
//! read per few thousand messages; the log reads spans) and then from `incoming`. Requeued
//! messages go back into the head. Compaction can move a paged message; its new place reaches
//! the queue before the old segment is deleted, so a read that finds the segment gone is
//! retried after the queue has taken its placements.

pub(super) mod disk;
pub(super) mod packed;
pub(super) mod probe;
pub(super) mod removed;
mod run;

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::Notify;

use charon_store::codec::decode_message;
use charon_store::segment_log::{LogReader, Place, Placed, ReadError, RecoveredMessage, RecoveredQueue};

use charon_model::Message;

use super::entry::Entry;
use super::handle::QueueRef;
use super::journal::Journal;
use super::limits::body_size;
use packed::{Packed, PagedEntry};
pub(crate) use removed::Removed;
use run::PagedRun;

use super::browse::Collector;

/// Ready messages kept whole in memory before new ones wait on disk, while the queue has
/// consumers: enough to serve them without a read per message.
pub(super) const RESIDENT_MESSAGES: usize = 2048;
/// The same while nobody consumes: a backlog nobody takes from gains nothing from being in
/// memory (a message held whole costs hundreds of bytes beyond its body), and a consumer that
/// arrives reads it back [`REFILL_MESSAGES`] at a time.
pub(super) const IDLE_RESIDENT_MESSAGES: usize = 256;
/// Body bytes kept whole in memory before new messages wait on disk.
pub(super) const RESIDENT_BYTES: u64 = 4 * 1024 * 1024;
/// A message that expires this soon after it arrives (ms) is kept whole in memory while the
/// head is shorter than [`SHORT_LIVED_RESIDENT_MESSAGES`]: written out, it would be read back
/// at its expiry anyway (to be dead-lettered or dropped), a write, a sync-free spill and a
/// read for a message that never waits long. (A 100 ms queue TTL at 250k msg/s is 25k
/// messages; the body bytes stay bounded by [`RESIDENT_BYTES`].)
const SHORT_LIVED_MS: i64 = 1_000;
pub(super) const SHORT_LIVED_RESIDENT_MESSAGES: usize = 32_768;

/// How many ready messages the head may hold before a new message that arrives at `now` and
/// expires at `expires_at` waits on disk: fewer while nobody consumes (`idle`), more for a
/// message about to expire.
pub(super) fn resident_messages(idle: bool, expires_at: Option<i64>, now: i64) -> usize {
    if expires_at.is_some_and(|at| at.saturating_sub(now) <= SHORT_LIVED_MS) {
        SHORT_LIVED_RESIDENT_MESSAGES
    } else if idle {
        IDLE_RESIDENT_MESSAGES
    } else {
        RESIDENT_MESSAGES
    }
}

/// Messages (and body bytes) read back at once when the head runs dry.
const REFILL_MESSAGES: usize = 1024;
const REFILL_BYTES: u64 = 2 * 1024 * 1024;
/// Ready messages left in the head when the next page is read ahead, off the queue task, so
/// that a consumer finds the head refilled rather than waiting for the disk.
const PREFETCH_BELOW: usize = 256;
/// How long to wait before reading again after a read failed, ms.
const RETRY_MS: i64 = 200;
/// The runs behind the head, for a queue on a broker with a log.
#[derive(Debug)]
pub(super) struct Pager {
    reader: LogReader,
    paged: PagedRun,
    incoming: VecDeque<Entry>,
    /// A read failed: no new attempt before this moment.
    retry_at: Option<i64>,
    /// Whether anything was spilled (a non-durable queue then drops its records when it goes).
    spilled_any: bool,
    /// The queue's name, for the log.
    queue: String,
    /// A read of the first paged messages running on the runtime's blocking pool.
    in_flight: Option<InFlight>,
    /// Woken when a read in flight is done, so that its queue takes the messages.
    wake: Wake,
}

/// Wakes a queue when a read made off its task is done: a `resume` in its mailbox for a queue
/// that is taking commands, and a signal for one that waits for the read before it takes more
/// (a `basic.get` or a drop-head that needs the message being read; see the queue task). The
/// signal keeps one wake-up when nobody waits for it yet, so none is lost.
#[derive(Clone, Debug)]
pub(super) struct Wake {
    queue: QueueRef,
    signal: Arc<Notify>,
}

impl Wake {
    /// Signalled whenever a read made off the queue task is done.
    pub(super) fn signal(&self) -> Arc<Notify> {
        Arc::clone(&self.signal)
    }

    /// Wakes `queue`; one for all the pagers of a queue.
    pub(super) fn new(queue: &QueueRef) -> Self {
        Self { queue: Arc::clone(queue), signal: Arc::new(Notify::new()) }
    }

    /// Wakes the queue (a read made off its task is done).
    pub(super) fn wake_now(&self) {
        self.signal.notify_one();
        self.queue.resume();
    }
}

/// Wakes its queue when dropped: at the end of a read off the task, also one that panicked, so
/// a queue waiting for the read never waits forever.
struct WakeOnDrop(Wake);

impl Drop for WakeOnDrop {
    fn drop(&mut self) {
        self.0.wake_now();
    }
}

/// The places the log reported, packed (a place too far for the packed form is left out:
/// its message stays in memory).
pub(super) fn packed_places(placed: Vec<Placed>) -> Vec<(u64, Packed)> {
    placed.into_iter().filter_map(|Placed { seq, place, .. }| Some((seq, Packed::new(place)?))).collect()
}

/// Paged messages read back and decoded, in the order asked for.
type Read = Vec<Result<Arc<Message>, ReadFailure>>;

/// A read running off the queue task. Its messages stay at the front of the paged run (they
/// count, they can be relocated or purged) until the queue takes the result: only then do
/// they move into the head, in order, and only while they are still at the front.
#[derive(Debug)]
struct InFlight {
    /// The sequence numbers read, from the front of the run when the read started.
    seqs: Vec<u64>,
    done: std::sync::mpsc::Receiver<Read>,
}

/// What a refill brought into the head.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Refilled {
    /// Body bytes added to the head.
    pub(super) head_bytes: u64,
    /// Body bytes of messages that could not be read back and were dropped.
    pub(super) lost_bytes: u64,
}

/// What a restore brought back.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Restored {
    /// Body bytes put into the head.
    pub(super) head_bytes: u64,
    /// Body bytes left on disk.
    pub(super) paged_bytes: u64,
}

impl Pager {
    /// A pager of queue `queue` (its run `name` in the queue's files), waking it through `wake`
    /// when a read is done. Reads run on the runtime's blocking pool when there is a runtime,
    /// on the caller's thread otherwise.
    pub(super) fn new(reader: LogReader, wake: Wake, name: String) -> Self {
        let on_read = wake.clone();
        let paged = PagedRun::new(reader.directory(), name, Arc::new(move || on_read.wake_now()));
        Self {
            reader,
            paged,
            incoming: VecDeque::new(),
            retry_at: None,
            spilled_any: false,
            queue: wake.queue.name().to_owned(),
            in_flight: None,
            wake,
        }
    }

    /// Messages behind the head.
    pub(super) fn len(&self) -> usize {
        self.paged.len() + self.incoming.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.paged.is_empty() && self.incoming.is_empty()
    }

    /// Hands the messages in the browse window to `collector`, in its order: the paged run,
    /// then those waiting for their places.
    pub(super) fn browse(&self, collector: &mut Collector) {
        if collector.newest_first() {
            for entry in self.incoming.iter().rev() {
                collector.entry(entry, false);
            }
            self.paged.browse(collector);
        } else {
            self.paged.browse(collector);
            for entry in self.incoming.iter() {
                if collector.done() {
                    break;
                }
                collector.entry(entry, false);
            }
        }
    }

    /// Removes the messages with sequence numbers `seqs` (sorted) that are at hand, recording
    /// each exit; those that may be in chunks of the index file come back as checks to make
    /// off the queue task ([`Self::remove_checked`]).
    pub(super) fn remove(&mut self, seqs: &[u64], run: usize, journal: &mut Journal, into: &mut Removed) {
        let removal = self.paged.remove(seqs);
        for paged in removal.removed {
            journal.left(paged.seq, !paged.spilled(), paged.spilled());
            into.note(paged.seq, u64::from(paged.size));
        }
        into.checks.extend(removal.to_check.into_iter().map(|check| (run, check)));
        for &seq in seqs {
            if let Ok(at) = self.incoming.binary_search_by_key(&seq, |e| e.seq)
                && let Some(entry) = self.incoming.remove(at)
            {
                journal.removed(&entry);
                into.note(seq, body_size(&entry.message));
            }
        }
    }

    /// Removes what a check of chunk `id` found in the index file.
    pub(super) fn remove_checked(
        &mut self,
        id: u64,
        found: Vec<PagedEntry>,
        journal: &mut Journal,
        into: &mut Removed,
    ) {
        for paged in self.paged.remove_checked(id, found) {
            journal.left(paged.seq, !paged.spilled(), paged.spilled());
            into.note(paged.seq, u64::from(paged.size));
        }
    }

    /// Adds a message at the tail; it waits in memory until the log says where it wrote it.
    pub(super) fn push(&mut self, entry: Entry) {
        self.spilled_any |= entry.spilled;
        self.incoming.push_back(entry);
    }

    /// The sequence number of the first message, when known without reading it.
    pub(super) fn first_seq(&self) -> Option<u64> {
        if self.in_flight.is_some() || self.paged.loading() {
            return None;
        }
        self.paged.front().map(|p| p.seq).or_else(|| self.incoming.front().map(|e| e.seq))
    }

    /// The TTL deadline of the first message (the head being empty), or when to read again
    /// after a failed read.
    pub(super) fn head_deadline(&self) -> Option<i64> {
        if self.in_flight.is_some() || self.paged.loading() {
            // The read's completion wakes the queue; its messages' deadlines count from then.
            return None;
        }
        match self.paged.front() {
            Some(_) if self.retry_at.is_some() => self.retry_at,
            Some(paged) => paged.expires_at(),
            None => self.incoming.front().and_then(|e| e.expires_at),
        }
    }

    /// Removes every message, oldest first, recording each exit; returns how many it removed
    /// and whether that was all. When it was not, the rest of the paged run is being read
    /// back (off the queue task, which this wakes once done): call again then.
    pub(super) fn take_all(&mut self, journal: &mut Journal) -> (usize, bool) {
        // A page being read is of no use now.
        self.in_flight = None;
        let mut count = 0;
        let all = self.paged.take_each(|paged| {
            journal.left(paged.seq, !paged.spilled(), paged.spilled());
            count += 1;
        });
        if !all {
            return (count, false);
        }
        for entry in std::mem::take(&mut self.incoming) {
            journal.removed(&entry);
            count += 1;
        }
        (count, true)
    }

    /// Takes the places the log reported for messages waiting in `incoming` out of `places`;
    /// they leave memory, in order, as far as the run is placed.
    pub(super) fn take_places(&mut self, places: &mut Vec<(u64, Packed)>) {
        self.paged.poll();
        if !self.incoming.is_empty() {
            let incoming = &mut self.incoming;
            places.retain(|&(seq, packed)| {
                let Ok(at) = incoming.binary_search_by_key(&seq, |e| e.seq) else {
                    return true;
                };
                if let Some(entry) = incoming.get_mut(at) {
                    entry.place = Some(packed);
                }
                false
            });
        }
        while let Some(entry) = self.incoming.front() {
            let paged = entry.place.and_then(|place| {
                PagedEntry::of(entry.seq, entry.expires_at, place, entry.spilled, body_size(&entry.message))
            });
            let Some(paged) = paged else {
                break;
            };
            self.incoming.pop_front();
            self.paged.push_back(paged);
        }
    }

    /// Paged messages that compaction moved get their new places (`moves` may name messages
    /// of other runs: those are not here and change nothing).
    pub(super) fn relocate(&mut self, moves: &[(u64, Packed)]) {
        if moves.is_empty() || self.paged.is_empty() {
            return;
        }
        self.paged.relocate(&mut moves.to_vec());
        self.retry_at = None;
    }

    /// Whether the log's places of this pass's messages are wanted: messages are waiting in
    /// `incoming` for them.
    pub(super) fn wants_places(&self) -> bool {
        !self.incoming.is_empty()
    }

    /// Whether a non-durable queue wrote spills, which it must drop from the log when it goes.
    pub(super) fn spilled_any(&self) -> bool {
        self.spilled_any
    }

    /// Refills the empty `head`: from `paged`, else from `incoming`. A read of `paged` runs
    /// off the queue task (when there is a runtime) and the head stays empty until it is done:
    /// the queue is woken then, and [`Self::reading`] tells a caller that cannot answer
    /// without the messages to wait for it. A message whose segment is gone or unreadable for now stops the refill until `now` is
    /// past a pause; one that cannot be decoded is dropped (its exit recorded in `journal`).
    pub(super) fn refill(&mut self, head: &mut VecDeque<Entry>, now: i64, journal: &mut Journal) -> Refilled {
        self.paged.poll();
        let mut refilled = Refilled::default();
        if self.paged.is_empty() {
            while head.len() < REFILL_MESSAGES {
                let Some(entry) = self.incoming.pop_front() else {
                    break;
                };
                refilled.head_bytes += body_size(&entry.message);
                head.push_back(entry);
            }
            return refilled;
        }
        self.collect(head, now, journal, &mut refilled);
        if head.is_empty() && self.in_flight.is_none() {
            self.start_read(head, now, journal, &mut refilled);
        }
        refilled
    }

    /// Keeps a head that is running low fed: takes a finished read, and reads the next page
    /// ahead when fewer than [`PREFETCH_BELOW`] messages are left.
    pub(super) fn top_up(&mut self, head: &mut VecDeque<Entry>, now: i64, journal: &mut Journal) -> Refilled {
        let mut refilled = Refilled::default();
        if head.len() >= PREFETCH_BELOW || self.paged.is_empty() {
            return refilled;
        }
        self.paged.poll();
        self.collect(head, now, journal, &mut refilled);
        if self.in_flight.is_none() && tokio::runtime::Handle::try_current().is_ok() {
            self.start_read(head, now, journal, &mut refilled);
        }
        refilled
    }

    /// Takes the reads made off the queue task that are done (of messages, and of the paged
    /// run's front), whether or not the head needs them now.
    ///
    /// A read's completion wakes the queue once. A pass that does not look at the head (its
    /// expiry had no room: the outbox was full) used that wake-up without taking the read;
    /// the head's deadline stayed unknown ([`Self::head_deadline`]), no timer was set, and once
    /// the outbox had room the queue slept with expired messages until another command came
    /// (S5: up to 79,168 of 200,000 messages never reached the dead-letter queue).
    pub(super) fn collect_finished(&mut self, head: &mut VecDeque<Entry>, now: i64, journal: &mut Journal) -> Refilled {
        let mut refilled = Refilled::default();
        self.paged.poll();
        self.collect(head, now, journal, &mut refilled);
        refilled
    }

    /// Takes the result of the read in flight, if it is done. Never waits: the queue task
    /// must not block on the disk.
    fn collect(&mut self, head: &mut VecDeque<Entry>, now: i64, journal: &mut Journal, into: &mut Refilled) {
        let Some(flight) = self.in_flight.take() else {
            return;
        };
        let read = match flight.done.try_recv() {
            Ok(read) => read,
            Err(std::sync::mpsc::TryRecvError::Empty) => {
                self.in_flight = Some(flight);
                return;
            }
            // The read panicked: the front is read again by the next refill.
            Err(std::sync::mpsc::TryRecvError::Disconnected) => return,
        };
        self.apply(flight.seqs, read, head, now, journal, into);
    }

    /// Reads the next page: on the blocking pool when there is a runtime (always, in the
    /// broker: the queue task never reads the disk), here otherwise (tests of the state alone).
    fn start_read(&mut self, head: &mut VecDeque<Entry>, now: i64, journal: &mut Journal, into: &mut Refilled) {
        if self.retry_at.is_some_and(|at| at > now) {
            return;
        }
        let mut seqs = Vec::new();
        let mut places = Vec::new();
        let mut bytes = 0u64;
        for paged in self.paged.first(REFILL_MESSAGES) {
            if bytes >= REFILL_BYTES {
                break;
            }
            seqs.push(paged.seq);
            places.push(paged.place());
            bytes += u64::from(paged.size);
        }
        if seqs.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            let read = read_back(&self.reader, &places);
            self.apply(seqs, read, head, now, journal, into);
            return;
        };
        let (done, rx) = std::sync::mpsc::sync_channel(1);
        let reader = self.reader.clone();
        let wake = WakeOnDrop(self.wake.clone());
        drop(runtime.spawn_blocking(move || {
            let _wake = wake;
            // The queue may be gone by now; then nobody wants the messages.
            let _ = done.send(read_back(&reader, &places));
        }));
        self.in_flight = Some(InFlight { seqs, done: rx });
    }

    /// Moves what a read brought back from the front of `paged` into `head`, as long as the
    /// front is still what was read (a purge or a drop while it ran makes the rest stale).
    fn apply(
        &mut self,
        seqs: Vec<u64>,
        read: Read,
        head: &mut VecDeque<Entry>,
        now: i64,
        journal: &mut Journal,
        into: &mut Refilled,
    ) {
        for (seq, result) in seqs.into_iter().zip(read) {
            let Some(paged) = self.paged.front().copied().filter(|p| p.seq == seq) else {
                break;
            };
            match result {
                Ok(message) => {
                    self.retry_at = None;
                    self.paged.pop_front();
                    into.head_bytes += u64::from(paged.size);
                    head.push_back(from_paged(&paged, message));
                }
                Err(ReadFailure::Read(error @ (ReadError::Gone { .. } | ReadError::Io { .. }))) => {
                    // Gone: compaction moved it and the new place is in the placements.
                    tracing::warn!(queue = self.queue, seq = paged.seq, %error, "reading a paged message; retrying");
                    self.retry_at = Some(now.saturating_add(RETRY_MS));
                    break;
                }
                Err(error) => {
                    tracing::error!(queue = self.queue, seq = paged.seq, %error, "a paged message cannot be read back; dropped");
                    self.paged.pop_front();
                    into.lost_bytes += u64::from(paged.size);
                    journal.left(paged.seq, !paged.spilled(), paged.spilled());
                }
            }
        }
    }

    /// Whether a read is running off the queue task (of messages, or of the paged run's
    /// front): the head stays empty until it is done.
    pub(super) fn reading(&self) -> bool {
        (self.in_flight.is_some() || self.paged.loading()) && !self.paged.is_empty()
    }

    /// Restores messages the log recovered: the head (every message that had been delivered,
    /// and a window after them) read back into `head` now, the rest left on disk.
    pub(super) fn restore(
        &mut self,
        restored: RecoveredQueue,
        head: &mut VecDeque<Entry>,
        journal: &mut Journal,
    ) -> Restored {
        let mut totals = Restored::default();
        let mut restored = restored.into_iter().peekable();
        let mut window = Vec::new();
        while let Some(message) = restored.next_if(|m| m.delivered || window.len() < REFILL_MESSAGES) {
            window.push(message);
        }
        let places: Vec<Place> = window.iter().map(|m| m.place).collect();
        let mut unreadable = Vec::new();
        probe::note_io();
        for (recovered, result) in window.into_iter().zip(self.reader.read(&places)) {
            match result.map_err(ReadFailure::Read).and_then(decode) {
                Ok(message) => {
                    totals.head_bytes += body_size(&message);
                    head.push_back(from_recovered(&recovered, message));
                }
                Err(error) => {
                    tracing::error!(queue = self.queue, seq = recovered.seq, %error, "unreadable logged message");
                    unreadable.push(recovered.seq);
                }
            }
        }
        for seq in unreadable {
            journal.left(seq, true, false);
        }
        for recovered in restored {
            let paged = Packed::new(recovered.place).and_then(|place| {
                PagedEntry::of(recovered.seq, recovered.expires_at, place, false, recovered.size.into())
            });
            match paged {
                Some(paged) => {
                    totals.paged_bytes += u64::from(paged.size);
                    self.paged.push_back(paged);
                }
                None => tracing::error!(queue = self.queue, seq = recovered.seq, "logged message out of reach"),
            }
        }
        totals
    }

    /// The lengths of the paged run and of the messages waiting for their places.
    #[cfg(test)]
    pub(super) fn runs(&self) -> (usize, usize) {
        (self.paged.len(), self.incoming.len())
    }
}

/// Why a paged message did not come back.
#[derive(Debug, thiserror::Error)]
enum ReadFailure {
    #[error(transparent)]
    Read(ReadError),
    #[error("it does not decode: {0}")]
    Decode(String),
}

fn decode(payload: bytes::Bytes) -> Result<Arc<Message>, ReadFailure> {
    decode_message(payload).map(Arc::new).map_err(|e| ReadFailure::Decode(e.to_string()))
}

/// Reads messages at `places` from the log and decodes them (the disk and CPU work of a
/// refill, done on the blocking pool).
fn read_back(reader: &LogReader, places: &[Place]) -> Read {
    probe::note_io();
    reader.read(places).into_iter().map(|result| result.map_err(ReadFailure::Read).and_then(decode)).collect()
}

/// A paged message read back from the log.
fn from_paged(paged: &PagedEntry, message: Arc<Message>) -> Entry {
    let spilled = paged.spilled();
    let mut entry = Entry::new(paged.seq, message, paged.expires_at(), !spilled);
    entry.spilled = spilled;
    entry
}

/// A message recovered from the log after a restart, with its counts.
fn from_recovered(recovered: &RecoveredMessage, message: Arc<Message>) -> Entry {
    let mut entry = Entry::new(recovered.seq, message, recovered.expires_at, true);
    entry.redelivered = recovered.delivered;
    entry.returned = recovered.returned;
    entry.failed = recovered.failed;
    entry
}

#[cfg(test)]
mod tests;
