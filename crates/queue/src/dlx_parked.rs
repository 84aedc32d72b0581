//! At-least-once dead letters that wait — for a route, or for room in a full target — parked
//! on disk: 48 bytes of memory each instead of the whole message and its dead-lettered copy.
//!
//! A letter that found no target to take it keeps nothing in memory but its place in the log
//! and what rebuilds it exactly: its counts, why it died and when its copy was made (the copy
//! is made again with the same death time). Its message is in the log as its own spill, under
//! the queue's letter key ([`super::journal::LETTER_LOG_KEY`]), so that it never shares a key with the
//! message's own record; a letter recovered after a restart is parked at its original record.
//! A retry reads the parked letters back a batch at a time, off the queue task, so a million
//! letters waiting for a binding cost 48 MB, and the binding brings them back at the pace the
//! targets confirm them.

use std::collections::VecDeque;
use std::sync::Arc;

use charon_model::{DeathReason, Message};
use charon_store::codec::decode_message;
use charon_store::segment_log::{LogReader, Place, RecoveredMessage};

use super::entry::Entry;
use super::journal::{reason_code, reason_of};
use super::paging::Wake;
use super::paging::packed::Packed;

/// Letters read back at once.
const BATCH: usize = 1024;
/// Parked letters per chunk of memory (chunks rather than one deque: a deque doubles).
const CHUNK: usize = 4096;

const PERSISTED: u8 = 1;
const SPILLED: u8 = 1 << 1;
const REDELIVERED: u8 = 1 << 2;
/// Its place is its own spill, under the letter key; else the message's original record.
const OWN_PLACE: u8 = 1 << 3;

/// A letter parked on disk.
#[derive(Clone, Copy, Debug)]
pub(super) struct Parked {
    seq: u64,
    /// When its dead-lettered copy was first made (ms since the epoch); `i64::MIN`: never.
    copied_at: i64,
    segment: u32,
    offset: u32,
    len: u32,
    size: u32,
    returned: u32,
    failed: u32,
    reason: u8,
    flags: u8,
}

/// A letter read back: what the queue needs to hold it again.
#[derive(Debug)]
pub(super) struct Unparked {
    pub(super) entry: Entry,
    pub(super) reason: DeathReason,
    pub(super) copied_at: Option<i64>,
    /// Its place in the log, and whether that is its own spill.
    pub(super) place: (Packed, bool),
}

impl Parked {
    /// Parks `entry` (dead for `reason`, its copy made at `copied_at`) at `place`: its own
    /// spill when `own`, else its original record.
    pub(super) fn new(entry: &Entry, reason: DeathReason, copied_at: Option<i64>, place: (Packed, bool)) -> Self {
        let (packed, own) = place;
        let flag = |on: bool, bit: u8| if on { bit } else { 0 };
        Self {
            seq: entry.seq,
            copied_at: copied_at.unwrap_or(i64::MIN),
            segment: packed.segment,
            offset: packed.offset,
            len: packed.len,
            size: u32::try_from(super::limits::body_size(&entry.message)).unwrap_or(u32::MAX),
            returned: entry.returned,
            failed: entry.failed,
            reason: reason_code(reason),
            flags: flag(entry.persisted, PERSISTED)
                | flag(entry.spilled, SPILLED)
                | flag(entry.redelivered, REDELIVERED)
                | flag(own, OWN_PLACE),
        }
    }

    /// A letter the log recovered, parked at its original record.
    pub(super) fn recovered(recovered: &RecoveredMessage, reason: DeathReason, place: Packed) -> Self {
        Self {
            seq: recovered.seq,
            copied_at: i64::MIN,
            segment: place.segment,
            offset: place.offset,
            len: place.len,
            size: recovered.size,
            returned: recovered.returned,
            failed: recovered.failed,
            reason: reason_code(reason),
            flags: PERSISTED | if recovered.delivered { REDELIVERED } else { 0 },
        }
    }

    pub(super) fn size(&self) -> u64 {
        u64::from(self.size)
    }

    fn own_place(&self) -> bool {
        self.flags & OWN_PLACE != 0
    }

    fn place(&self) -> Place {
        Packed { segment: self.segment, offset: self.offset, len: self.len }.place()
    }

    /// The log records its exit needs: the message's own (`persisted`, `spilled`), and the
    /// release of its spill if it has one.
    pub(super) fn exit(&self) -> (u64, bool, bool, bool) {
        (self.seq, self.flags & PERSISTED != 0, self.flags & SPILLED != 0, self.own_place())
    }

    /// The letter again, with its message read back.
    fn unpark(self, message: Arc<Message>) -> Unparked {
        let mut entry = Entry::new(self.seq, message, None, self.flags & PERSISTED != 0);
        entry.spilled = self.flags & SPILLED != 0;
        entry.redelivered = self.flags & REDELIVERED != 0;
        (entry.returned, entry.failed) = (self.returned, self.failed);
        Unparked {
            entry,
            reason: reason_of(self.reason).unwrap_or(DeathReason::Rejected),
            copied_at: (self.copied_at != i64::MIN).then_some(self.copied_at),
            place: (Packed { segment: self.segment, offset: self.offset, len: self.len }, self.own_place()),
        }
    }

    /// Compaction moved the record its place points at (`own`: a spill under the letter key).
    fn relocate(&mut self, own: bool, moves: &[(u64, Packed)]) {
        if self.own_place() != own {
            return;
        }
        if let Ok(at) = moves.binary_search_by_key(&self.seq, |&(seq, _)| seq)
            && let Some(&(_, place)) = moves.get(at)
        {
            (self.segment, self.offset, self.len) = (place.segment, place.offset, place.len);
        }
    }
}

/// A read of parked letters running off the queue task.
#[derive(Debug)]
struct Reading {
    letters: Vec<Parked>,
    done: std::sync::mpsc::Receiver<Vec<Option<Message>>>,
}

/// The parked letters of a queue, in the order they were parked, and the read bringing some
/// back.
#[derive(Debug)]
pub(super) struct ParkedLetters {
    chunks: VecDeque<Vec<Parked>>,
    /// Letters taken from the first chunk.
    taken: usize,
    len: usize,
    bytes: u64,
    reader: LogReader,
    wake: Wake,
    reading: Option<Reading>,
    /// Letters still to be read back in the current retry.
    round: usize,
    /// Whether letters were spilled (their spills are dropped with the queue).
    spilled_any: bool,
}

impl ParkedLetters {
    pub(super) fn new(reader: LogReader, wake: Wake) -> Self {
        Self {
            chunks: VecDeque::new(),
            taken: 0,
            len: 0,
            bytes: 0,
            reader,
            wake,
            reading: None,
            round: 0,
            spilled_any: false,
        }
    }

    /// Parked letters, those being read back included, and their body bytes.
    pub(super) fn size(&self) -> (u64, u64) {
        let reading = self.reading.as_ref().map_or(0, |r| r.letters.len());
        ((self.len + reading) as u64, self.bytes)
    }

    /// Whether letters were spilled under the letter key.
    pub(super) fn spilled_any(&self) -> bool {
        self.spilled_any
    }

    /// Notes that a letter was spilled under the letter key.
    pub(super) fn spilled(&mut self) {
        self.spilled_any = true;
    }

    /// Parks a letter at the back.
    pub(super) fn push(&mut self, letter: Parked) {
        self.bytes += letter.size();
        self.len += 1;
        match self.chunks.back_mut().filter(|chunk| chunk.len() < CHUNK) {
            Some(chunk) => chunk.push(letter),
            None => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(letter);
                self.chunks.push_back(chunk);
            }
        }
    }

    fn pop(&mut self) -> Option<Parked> {
        let chunk = self.chunks.front()?;
        let letter = *chunk.get(self.taken)?;
        self.taken += 1;
        if self.taken == chunk.len() {
            self.chunks.pop_front();
            self.taken = 0;
        }
        self.len -= 1;
        self.bytes = self.bytes.saturating_sub(letter.size());
        Some(letter)
    }

    /// Every letter parked now gets one more attempt: they are read back in batches.
    pub(super) fn retry(&mut self) {
        self.round = self.len;
    }

    /// Takes the letters a finished read brought back, and starts reading the next batch of
    /// the retry when `room` (few enough letters are in memory). A letter that could not be
    /// read is parked again at the back (a moved record waits for its relocation; it is
    /// tried at the next retry).
    pub(super) fn poll(&mut self, room: bool) -> Vec<Unparked> {
        let mut back = Vec::new();
        if let Some(reading) = self.reading.take() {
            match reading.done.try_recv() {
                Ok(read) => {
                    self.bytes = self.bytes.saturating_sub(reading.letters.iter().map(Parked::size).sum());
                    for (letter, message) in reading.letters.into_iter().zip(read) {
                        match message {
                            Some(message) => back.push(letter.unpark(Arc::new(message))),
                            None => {
                                tracing::warn!(
                                    seq = letter.seq,
                                    "a parked dead letter could not be read back; it waits"
                                );
                                self.push(letter);
                            }
                        }
                    }
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    self.reading = Some(reading);
                    return back;
                }
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    self.bytes = self.bytes.saturating_sub(reading.letters.iter().map(Parked::size).sum());
                    for letter in reading.letters {
                        self.push(letter);
                    }
                }
            }
        }
        if room && self.round > 0 && self.reading.is_none() {
            self.start_read();
            if tokio::runtime::Handle::try_current().is_err() {
                // No runtime (tests of the state alone): the read ran here.
                back.extend(self.poll(false));
            }
        }
        back
    }

    /// Reads the next batch of the retry back, off the queue task when there is a runtime.
    fn start_read(&mut self) {
        let mut letters = Vec::with_capacity(BATCH.min(self.round));
        while letters.len() < BATCH && self.round > 0 {
            let Some(letter) = self.pop() else {
                self.round = 0;
                break;
            };
            self.round -= 1;
            // Counted while being read (see `size`).
            self.bytes += letter.size();
            letters.push(letter);
        }
        if letters.is_empty() {
            return;
        }
        let places: Vec<Place> = letters.iter().map(Parked::place).collect();
        let (tx, done) = std::sync::mpsc::sync_channel(1);
        let reader = self.reader.clone();
        let read = move || {
            let read = reader.read(&places).into_iter().map(|r| r.ok().and_then(|b| decode_message(b).ok()));
            let _ = tx.send(read.collect());
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let wake = self.wake.clone();
                drop(runtime.spawn_blocking(move || {
                    read();
                    wake.wake_now();
                }));
            }
            Err(_) => read(),
        }
        self.reading = Some(Reading { letters, done });
    }

    /// Compaction moved records: parked letters follow theirs (`own`: moves of spills under
    /// the letter key; else of the messages' original records). `moves` sorted by sequence
    /// number.
    pub(super) fn relocate(&mut self, own: bool, moves: &[(u64, Packed)]) {
        if moves.is_empty() {
            return;
        }
        for chunk in &mut self.chunks {
            for letter in chunk.iter_mut() {
                letter.relocate(own, moves);
            }
        }
        if let Some(reading) = &mut self.reading {
            for letter in &mut reading.letters {
                letter.relocate(own, moves);
            }
        }
    }

    /// Takes every letter (the queue left the strategy).
    pub(super) fn take_all(&mut self) -> Vec<Parked> {
        let mut all: Vec<Parked> = self.reading.take().map(|r| r.letters).unwrap_or_default();
        while let Some(letter) = self.pop() {
            all.push(letter);
        }
        (self.round, self.bytes) = (0, 0);
        all
    }
}
