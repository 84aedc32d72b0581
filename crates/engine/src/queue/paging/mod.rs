//! Long queues keep their messages on disk: only the head is in memory.
//!
//! A queue's ready messages lie in three runs, in sequence order:
//!
//! 1. the head (`QueueState::ready`): whole messages, what dispatch, gets, expiry and limits
//!    work on — up to [`RESIDENT_MESSAGES`] ([`IDLE_RESIDENT_MESSAGES`] while nobody consumes)
//!    or [`RESIDENT_BYTES`] of bodies;
//! 2. `paged`: messages that are only in the log, 32 bytes each ([`PagedEntry`]), and only
//!    the two ends of the run in memory ([`run`]: the middle is in an index file);
//! 3. `incoming`: messages that arrived while the queue was long, still in memory until the
//!    log says where it wrote them. Persistent messages of durable queues are written anyway;
//!    the others are written as spills (no sync; never recovered). Once placed, they move to
//!    `paged` and their memory is freed.
//!
//! When the head runs dry it is refilled from `paged` (one read per few thousand messages;
//! the log reads spans) and then from `incoming`. Requeued messages go back into the head:
//! a delivered message's sequence number is below every message that was never delivered.
//! Compaction can move a paged message; its new place reaches the queue before the old
//! segment is deleted, so a read that finds the segment gone is retried after the queue has
//! taken its placements.

mod run;

use std::collections::VecDeque;
use std::sync::Arc;

use charon_store::codec::decode_message;
use charon_store::segment_log::{LogReader, Place, Placed, ReadError, RecoveredMessage, RecoveredQueue};

use super::limits::body_size;
use super::state::{Entry, QueueState};
use run::PagedRun;

/// Ready messages kept whole in memory before new ones wait on disk, while the queue has
/// consumers: enough to serve them without a read per message.
pub(super) const RESIDENT_MESSAGES: usize = 2048;
/// The same while nobody consumes: a backlog nobody takes from gains nothing from being in
/// memory (a message held whole costs hundreds of bytes beyond its body), and a consumer that
/// arrives reads it back [`REFILL_MESSAGES`] at a time.
pub(super) const IDLE_RESIDENT_MESSAGES: usize = 256;
/// Body bytes kept whole in memory before new messages wait on disk.
const RESIDENT_BYTES: u64 = 4 * 1024 * 1024;
/// Messages (and body bytes) read back at once when the head runs dry.
const REFILL_MESSAGES: usize = 1024;
const REFILL_BYTES: u64 = 2 * 1024 * 1024;
/// How long to wait before reading again after a read failed, ms.
const RETRY_MS: i64 = 200;
/// Marks a paged message as a spill (transient) in [`PagedEntry::len`].
const SPILL_BIT: u32 = 1 << 31;

/// A place in the log, packed for entries that keep one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Packed {
    segment: u32,
    offset: u32,
    len: u32,
}

impl Packed {
    /// `None` for places beyond what the packed form holds (such messages stay in memory).
    pub(super) fn new(place: Place) -> Option<Self> {
        let len = place.len;
        (len & SPILL_BIT == 0).then_some(())?;
        Some(Self { segment: u32::try_from(place.segment).ok()?, offset: u32::try_from(place.offset).ok()?, len })
    }

    fn place(self) -> Place {
        Place { segment: u64::from(self.segment), offset: u64::from(self.offset), len: self.len }
    }
}

/// A ready message that is only in the log: 32 bytes.
#[derive(Clone, Copy, Debug)]
pub(super) struct PagedEntry {
    seq: u64,
    /// TTL deadline, ms since the epoch; `i64::MAX` for none.
    expires_at: i64,
    segment: u32,
    offset: u32,
    /// The framed record length; [`SPILL_BIT`] set for a spill.
    len: u32,
    /// Its size as length limits count it.
    size: u32,
}

impl PagedEntry {
    fn of(seq: u64, expires_at: Option<i64>, place: Packed, spilled: bool, size: u64) -> Option<Self> {
        Some(Self {
            seq,
            expires_at: expires_at.unwrap_or(i64::MAX),
            segment: place.segment,
            offset: place.offset,
            len: place.len | if spilled { SPILL_BIT } else { 0 },
            size: u32::try_from(size).ok()?,
        })
    }

    fn spilled(&self) -> bool {
        self.len & SPILL_BIT != 0
    }

    /// Compaction moved the message to `place`.
    fn moved_to(&mut self, place: Packed) {
        let spilled = if self.spilled() { SPILL_BIT } else { 0 };
        (self.segment, self.offset, self.len) = (place.segment, place.offset, place.len | spilled);
    }

    fn place(&self) -> Place {
        Packed { segment: self.segment, offset: self.offset, len: self.len & !SPILL_BIT }.place()
    }

    fn expires_at(&self) -> Option<i64> {
        (self.expires_at != i64::MAX).then_some(self.expires_at)
    }
}

/// The runs behind the head, for a queue on a broker with a log.
#[derive(Debug)]
pub(crate) struct Pager {
    reader: LogReader,
    paged: PagedRun,
    incoming: VecDeque<Entry>,
    /// A read failed: no new attempt before this moment.
    retry_at: Option<i64>,
    /// Whether anything was spilled (a non-durable queue then drops its records when it goes).
    pub(super) spilled_any: bool,
}

impl Pager {
    pub(crate) fn new(reader: LogReader, queue_id: u64) -> Self {
        let paged = PagedRun::new(reader.directory(), queue_id.to_string());
        Self { reader, paged, incoming: VecDeque::new(), retry_at: None, spilled_any: false }
    }

    fn is_empty(&self) -> bool {
        self.paged.is_empty() && self.incoming.is_empty()
    }
}

impl QueueState {
    /// Ready messages in all runs.
    pub(super) fn ready_len(&self) -> usize {
        self.ready.len() + self.pager.as_ref().map_or(0, |p| p.paged.len() + p.incoming.len())
    }

    /// Adds a new ready message at the tail: into the head while the queue is short, else
    /// behind it, written to the log if it is not already (a spill).
    pub(super) fn push_ready(&mut self, mut entry: Entry) {
        let size = body_size(&entry.message);
        self.ready_bytes += size;
        let resident = if self.consumers.is_empty() { IDLE_RESIDENT_MESSAGES } else { RESIDENT_MESSAGES };
        let long = self.ready.len() >= resident || self.head_bytes >= RESIDENT_BYTES;
        if !self.pager.as_ref().is_some_and(|pager| long || !pager.is_empty()) {
            self.head_bytes += size;
            self.ready.push_back(entry);
            return;
        }
        if !entry.persisted {
            self.journal_spill(&mut entry);
        }
        if let Some(pager) = &mut self.pager {
            pager.spilled_any |= entry.spilled;
            pager.incoming.push_back(entry);
        }
    }

    /// Puts a message back into the head (requeue), at its sequence position.
    pub(super) fn insert_ready(&mut self, entry: Entry) {
        let size = body_size(&entry.message);
        self.ready_bytes += size;
        self.head_bytes += size;
        let at = self.ready.partition_point(|e| e.seq < entry.seq);
        self.ready.insert(at, entry);
    }

    /// Takes the next ready message, reading the head back from the log when it ran dry.
    pub(super) fn pop_ready(&mut self) -> Option<Entry> {
        if self.ready.is_empty() {
            self.fill_head();
        }
        let entry = self.ready.pop_front()?;
        let size = body_size(&entry.message);
        self.ready_bytes = self.ready_bytes.saturating_sub(size);
        self.head_bytes = self.head_bytes.saturating_sub(size);
        Some(entry)
    }

    /// The next ready message, read back first if need be.
    pub(super) fn head(&mut self) -> Option<&Entry> {
        if self.ready.is_empty() {
            self.fill_head();
        }
        self.ready.front()
    }

    /// The TTL deadline of the next ready message (without reading it), or when to read again
    /// after a failed read.
    pub(super) fn head_deadline(&self) -> Option<i64> {
        if let Some(entry) = self.ready.front() {
            return entry.expires_at;
        }
        let pager = self.pager.as_ref()?;
        match pager.paged.front() {
            Some(_) if pager.retry_at.is_some() => pager.retry_at,
            Some(paged) => paged.expires_at(),
            None => pager.incoming.front().and_then(|e| e.expires_at),
        }
    }

    /// Removes every ready message, recording each exit; returns how many there were.
    pub(super) fn take_all_ready(&mut self) -> usize {
        let mut count = 0;
        for entry in std::mem::take(&mut self.ready) {
            self.journal_removed(&entry);
            count += 1;
        }
        if let Some(pager) = &mut self.pager {
            let (journal, queue) = (&mut self.journal, self.handle.id);
            pager.paged.take_each(|paged| {
                journal.left(queue, paged.seq, !paged.spilled(), paged.spilled());
                count += 1;
            });
            for entry in std::mem::take(&mut pager.incoming) {
                self.journal.removed(self.handle.id, &entry);
                count += 1;
            }
        }
        self.ready_bytes = 0;
        self.head_bytes = 0;
        count
    }

    /// Takes the places the log reported: messages waiting in `incoming` get theirs (and leave
    /// memory, in order, as far as the run is placed); paged messages compaction moved get
    /// their new ones.
    pub(crate) fn placed(&mut self, placed: Vec<Placed>) {
        let Some(pager) = &mut self.pager else {
            return;
        };
        let mut moved = Vec::new();
        for Placed { seq, place, .. } in placed {
            let Some(packed) = Packed::new(place) else {
                continue;
            };
            if let Ok(at) = pager.incoming.binary_search_by_key(&seq, |e| e.seq) {
                if let Some(entry) = pager.incoming.get_mut(at) {
                    entry.place = Some(packed);
                }
            } else {
                moved.push((seq, packed));
            }
        }
        if !moved.is_empty() {
            pager.paged.relocate(&mut moved);
            pager.retry_at = None;
        }
        while let Some(entry) = pager.incoming.front() {
            let paged = entry.place.and_then(|place| {
                PagedEntry::of(entry.seq, entry.expires_at, place, entry.spilled, body_size(&entry.message))
            });
            let Some(paged) = paged else {
                break;
            };
            pager.incoming.pop_front();
            pager.paged.push_back(paged);
        }
    }

    /// Whether the log's places of this pass's messages are wanted: messages are waiting in
    /// `incoming` for them.
    pub(crate) fn wants_places(&self) -> bool {
        self.pager.as_ref().is_some_and(|p| !p.incoming.is_empty())
    }

    /// Whether a non-durable queue wrote spills, which it must drop from the log when it goes.
    pub(crate) fn spilled_any(&self) -> bool {
        self.pager.as_ref().is_some_and(|p| p.spilled_any)
    }

    /// Refills the empty head: from `paged` (reading the log), else from `incoming`.
    fn fill_head(&mut self) {
        let Some(pager) = &mut self.pager else {
            return;
        };
        if pager.paged.is_empty() {
            while self.ready.len() < REFILL_MESSAGES {
                let Some(entry) = pager.incoming.pop_front() else {
                    break;
                };
                self.head_bytes += body_size(&entry.message);
                self.ready.push_back(entry);
            }
            return;
        }
        if pager.retry_at.is_some_and(|at| at > self.now) {
            return;
        }
        let mut places = Vec::new();
        let mut bytes = 0u64;
        for paged in pager.paged.first(REFILL_MESSAGES) {
            if bytes >= REFILL_BYTES {
                break;
            }
            places.push(paged.place());
            bytes += u64::from(paged.size);
        }
        for result in pager.reader.read(&places) {
            let Some(paged) = pager.paged.front().copied() else {
                break;
            };
            match result.map_err(ReadFailure::Read).and_then(decode) {
                Ok(message) => {
                    pager.retry_at = None;
                    pager.paged.pop_front();
                    self.head_bytes += u64::from(paged.size);
                    self.ready.push_back(Entry::from_paged(&paged, message));
                }
                Err(ReadFailure::Read(error @ (ReadError::Gone { .. } | ReadError::Io { .. }))) => {
                    // Gone: compaction moved it and the new place is in the placements.
                    tracing::warn!(queue = self.handle.name(), seq = paged.seq, %error, "reading a paged message; retrying");
                    pager.retry_at = Some(self.now.saturating_add(RETRY_MS));
                    break;
                }
                Err(error) => {
                    tracing::error!(queue = self.handle.name(), seq = paged.seq, %error, "a paged message cannot be read back; dropped");
                    pager.paged.pop_front();
                    self.ready_bytes = self.ready_bytes.saturating_sub(u64::from(paged.size));
                    self.journal.left(self.handle.id, paged.seq, !paged.spilled(), paged.spilled());
                }
            }
        }
    }

    /// Restores messages the log recovered: the head (every message that had been delivered,
    /// and a window after them) read back now, the rest left on disk.
    pub(super) fn restore_ready(&mut self, restored: RecoveredQueue) {
        if restored.is_empty() {
            return;
        }
        let mut restored = restored.into_iter().peekable();
        let mut head = Vec::new();
        while let Some(message) = restored.next_if(|m| m.delivered || head.len() < REFILL_MESSAGES) {
            head.push(message);
        }
        let Some(pager) = &mut self.pager else {
            tracing::error!(queue = self.handle.name(), "recovered messages but no log to read them from");
            return;
        };
        let places: Vec<Place> = head.iter().map(|m| m.place).collect();
        let mut rest = Vec::new();
        for (recovered, result) in head.into_iter().zip(pager.reader.read(&places)) {
            match result.map_err(ReadFailure::Read).and_then(decode) {
                Ok(message) => {
                    let size = body_size(&message);
                    self.ready_bytes += size;
                    self.head_bytes += size;
                    self.ready.push_back(Entry::recovered(&recovered, message));
                }
                Err(error) => {
                    tracing::error!(queue = self.handle.name(), seq = recovered.seq, %error, "unreadable logged message");
                    rest.push(recovered.seq);
                }
            }
        }
        for seq in rest {
            self.journal.left(self.handle.id, seq, true, false);
        }
        let Some(pager) = &mut self.pager else {
            return;
        };
        for recovered in restored {
            let paged = Packed::new(recovered.place).and_then(|place| {
                PagedEntry::of(recovered.seq, recovered.expires_at, place, false, recovered.size.into())
            });
            match paged {
                Some(paged) => {
                    self.ready_bytes += u64::from(paged.size);
                    pager.paged.push_back(paged);
                }
                None => tracing::error!(queue = self.handle.name(), seq = recovered.seq, "logged message out of reach"),
            }
        }
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

fn decode(payload: bytes::Bytes) -> Result<Arc<charon_model::Message>, ReadFailure> {
    decode_message(payload).map(Arc::new).map_err(|e| ReadFailure::Decode(e.to_string()))
}

impl Entry {
    fn from_paged(paged: &PagedEntry, message: Arc<charon_model::Message>) -> Self {
        let spilled = paged.spilled();
        Self {
            seq: paged.seq,
            message,
            redelivered: false,
            returned: 0,
            failed: 0,
            expires_at: paged.expires_at(),
            persisted: !spilled,
            spilled,
            place: None,
        }
    }

    fn recovered(recovered: &RecoveredMessage, message: Arc<charon_model::Message>) -> Self {
        Self {
            seq: recovered.seq,
            message,
            redelivered: recovered.delivered,
            returned: recovered.returned,
            failed: recovered.failed,
            expires_at: recovered.expires_at,
            persisted: true,
            spilled: false,
            place: None,
        }
    }
}

#[cfg(test)]
mod tests;
