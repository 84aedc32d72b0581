//! RabbitMQ's at-least-once dead lettering (quorum queues, `rabbit_fifo_dlx`): a message that
//! dies stays in its queue — not ready, never delivered, counted in `messages` and against the
//! length limits — until every queue its dead letter was routed to confirmed the copy.
//!
//! The queue task forwards what is due ([`DlxPending::due`]) through the queue's outbox, one
//! confirm number per target, and reports each target's answer ([`DlxPending::answered`]). The
//! number names the letter and its target itself (see [`Number`]), so no map from numbers to
//! letters is kept: a map insert and remove per copy was the largest part of what this mode
//! costs over at-most-once in S5 (bench/history/until-2026-11-29.md). A
//! letter nobody routes, or that a target refused (a full `reject-publish` queue), stays and is
//! tried again when the topology or the queue's policy changes, and on a timer; targets that
//! confirmed are not sent it again.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use charon_model::{DeathReason, Message};
use charon_store::segment_log::{LogReader, RecoveredMessage};
use foldhash::HashMap;
use smallvec::SmallVec;

use super::dlx_parked::{Parked, ParkedLetters, Unparked};
use super::entry::Entry;
use super::journal::Journal;
use super::limits::{Size, body_size};
use super::paging::Wake;
use super::paging::packed::Packed;

/// Confirm numbers of at-least-once copies carry this bit, so that they never collide with the
/// numbers of crash-safe forwards (`unconfirmed.rs`) the same queue waits for.
pub(super) const NUMBER_BIT: u64 = 1 << 63;

/// Bits of a confirm number for the target's slot in its letter (a dead letter routed to more
/// than 2^20 queues reaches the first 2^20).
const SLOT_BITS: u32 = 20;
/// Bits for the letter's id: below bit 62, which redrive jobs use (`REFUSED_TO_PUBLISHER_BIT`).
const ID_BITS: u32 = 62 - SLOT_BITS;
const ID_MASK: u64 = (1 << ID_BITS) - 1;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;

/// A confirm number: [`NUMBER_BIT`], the low [`ID_BITS`] of the letter's id and the target's
/// slot in the letter. Ids only grow, and every letter in memory is far younger than 2^42
/// letters, so the full id is the latest id that has those low bits (serial-number
/// arithmetic, as for AMQP 1.0's counters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Number {
    id: u64,
    slot: usize,
}

impl Number {
    fn encode(self) -> u64 {
        NUMBER_BIT | ((self.id & ID_MASK) << SLOT_BITS) | self.slot as u64
    }

    /// The number `number` names, given the latest id handed out.
    fn decode(number: u64, latest_id: u64) -> Self {
        let low = (number >> SLOT_BITS) & ID_MASK;
        let id = latest_id.wrapping_sub(latest_id.wrapping_sub(low) & ID_MASK);
        Self { id, slot: (number & SLOT_MASK) as usize }
    }
}

/// Where a letter's copy stands with one target queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sent {
    /// Sent, no answer yet.
    Outstanding,
    /// The target has it: it is not sent there again.
    Confirmed,
    /// The target refused it (full): it is sent there again at the next attempt.
    Refused,
}

/// Letters read back from the parked ones only while fewer than this are in memory.
const UNPARK_BELOW: usize = 4096;

/// One dead letter waiting for its targets, in memory.
#[derive(Debug)]
struct Letter {
    entry: Entry,
    reason: DeathReason,
    /// The dead-lettered copy, made at the first attempt (its death is recorded once).
    copy: Option<Arc<Message>>,
    /// When the copy was first made: a letter parked without it makes it again with this
    /// death time.
    copied_at: Option<i64>,
    /// Target queues (by id) the copy was sent to, each at its slot (see [`Number`]): most
    /// letters have one target, so none of this allocates.
    sent: SmallVec<[(u64, Sent); 1]>,
    /// Copies sent and not answered yet.
    outstanding: usize,
    /// A target refused the copy since the last attempt.
    refused: bool,
    /// Waiting for the next attempt (new, or a retry was asked for).
    due: bool,
    /// Where the log has its message for parking, and whether that is its own spill.
    place: Option<(Packed, bool)>,
    /// Its own spill was written (its place may still be on its way).
    spilled: bool,
}

impl Letter {
    fn new(entry: Entry, reason: DeathReason) -> Self {
        Self {
            entry,
            reason,
            copy: None,
            copied_at: None,
            sent: SmallVec::new(),
            outstanding: 0,
            refused: false,
            due: true,
            place: None,
            spilled: false,
        }
    }

    /// Whether it only waits (no attempt running or asked for, no target has it): then it can
    /// wait on disk.
    fn idle(&self) -> bool {
        !self.due && self.outstanding == 0 && !self.any_confirmed()
    }

    fn any_confirmed(&self) -> bool {
        self.sent.iter().any(|&(_, sent)| sent == Sent::Confirmed)
    }

    /// The targets that have the copy.
    fn confirmed(&self) -> Vec<u64> {
        self.sent.iter().filter(|&&(_, sent)| sent == Sent::Confirmed).map(|&(target, _)| target).collect()
    }

    /// The slot of `target` for a new attempt: the one it refused at, else a new one (`None`
    /// past [`SLOT_BITS`]).
    fn slot_for(&mut self, target: u64) -> Option<usize> {
        if let Some(slot) = self.sent.iter().position(|&(t, sent)| t == target && sent == Sent::Refused) {
            return Some(slot);
        }
        let slot = self.sent.len();
        (slot as u64 <= SLOT_MASK).then(|| {
            self.sent.push((target, Sent::Refused));
            slot
        })
    }
}

/// A letter to forward: the original message, why it died, the copy if one was made before
/// (or when the first one was made), and the targets that already have it.
#[derive(Debug)]
pub(super) struct Due {
    pub(super) id: u64,
    pub(super) message: Arc<Message>,
    pub(super) reason: DeathReason,
    pub(super) copy: Option<Arc<Message>>,
    pub(super) copied_at: Option<i64>,
    pub(super) confirmed: Vec<u64>,
}

/// The dead letters of one at-least-once queue, in the order they died.
#[derive(Debug, Default)]
pub(super) struct DlxPending {
    letters: BTreeMap<u64, Letter>,
    next_id: u64,
    bytes: u64,
    /// The letters marked due, in the order they became due: a pass looks at these only, not
    /// at every letter waiting for its targets' answers.
    due: VecDeque<u64>,
    /// Letters waiting on disk, once the broker has a log.
    parked: Option<ParkedLetters>,
    /// Letters whose own spill was written, by sequence number, until its place comes.
    placing: HashMap<u64, u64>,
    /// Whether letters wait at their messages' original records (recovered after a restart):
    /// only then do compaction's moves of the queue's own records concern the letters.
    at_originals: bool,
}

impl DlxPending {
    /// Lets waiting letters wait on disk: the broker has a log (`reader`); `wake` wakes the
    /// queue when letters were read back.
    pub(super) fn enable_parking(&mut self, reader: LogReader, wake: Wake) {
        self.parked = Some(ParkedLetters::new(reader, wake));
    }

    /// Keeps a message that died for `reason`; it is due at once.
    pub(super) fn hold(&mut self, entry: Entry, reason: DeathReason) {
        self.insert(Letter::new(entry, reason));
    }

    fn insert(&mut self, letter: Letter) {
        self.next_id += 1;
        self.bytes += body_size(&letter.entry.message);
        self.letters.insert(self.next_id, letter);
        self.due.push_back(self.next_id);
    }

    /// Parks a letter the log recovered at its original record, to be read back and tried
    /// at the next attempt (see [`Self::retry_all`]). Without a log to read it from, `false`.
    pub(super) fn park_recovered(&mut self, recovered: &RecoveredMessage, reason: DeathReason) -> bool {
        let (Some(parked), Some(place)) = (&mut self.parked, Packed::new(recovered.place)) else {
            return false;
        };
        parked.push(Parked::recovered(recovered, reason, place));
        self.at_originals = true;
        true
    }

    /// Whether moves of the queue's own records can concern letters (see [`Self::placed`]).
    pub(super) fn at_originals(&self) -> bool {
        self.at_originals
    }

    /// The letters as length limits and `messages` count them.
    pub(super) fn size(&self) -> Size {
        let (count, bytes) = self.parked.as_ref().map_or((0, 0), ParkedLetters::size);
        Size { count: self.letters.len() as u64 + count, bytes: self.bytes + bytes }
    }

    /// Letters held whole in memory with their body bytes, and letters parked on disk.
    pub(super) fn resident(&self) -> (Size, u64) {
        let whole = Size { count: self.letters.len() as u64, bytes: self.bytes };
        (whole, self.parked.as_ref().map_or(0, |p| p.size().0))
    }

    /// Whether any letter waits for an attempt.
    pub(super) fn any_due(&self) -> bool {
        !self.due.is_empty()
    }

    /// Makes every letter not waiting for an answer due again (the topology or the policy
    /// changed, or the retry timer fired); parked ones are read back for it in batches.
    pub(super) fn retry_all(&mut self) {
        for (&id, letter) in self.letters.iter_mut().filter(|(_, l)| l.outstanding == 0 && !l.due) {
            letter.due = true;
            self.due.push_back(id);
        }
        if let Some(parked) = &mut self.parked {
            parked.retry();
        }
    }

    /// Takes the parked letters a read brought back (they are due), and reads the next batch
    /// of a retry when few letters are in memory.
    pub(super) fn unpark(&mut self) {
        let room = self.letters.len() < UNPARK_BELOW;
        let Some(parked) = &mut self.parked else {
            return;
        };
        for Unparked { entry, reason, copied_at, place } in parked.poll(room) {
            let mut letter = Letter::new(entry, reason);
            (letter.copied_at, letter.place, letter.spilled) = (copied_at, Some(place), place.1);
            self.insert(letter);
        }
    }

    /// Takes the letters due for an attempt, oldest first; each stays held until
    /// [`Self::sent`] / [`Self::unroutable`] says what came of it.
    pub(super) fn due(&mut self) -> Vec<Due> {
        let mut ids = std::mem::take(&mut self.due);
        // New letters come in order; a retry appends older ones after them.
        if !ids.iter().is_sorted() {
            ids.make_contiguous().sort_unstable();
        }
        let mut due = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(letter) = self.letters.get_mut(&id).filter(|l| l.due) else {
                continue;
            };
            letter.due = false;
            letter.refused = false;
            due.push(Due {
                id,
                message: Arc::clone(&letter.entry.message),
                reason: letter.reason,
                copy: letter.copy.clone(),
                copied_at: letter.copied_at,
                confirmed: letter.confirmed(),
            });
        }
        due
    }

    /// The copy of letter `id` (made at `copied_at`) goes to `target`: returns its confirm
    /// number (`None`: the letter is gone, or has 2^20 targets already; it is not sent).
    pub(super) fn sent(&mut self, id: u64, copy: &Arc<Message>, copied_at: i64, target: u64) -> Option<u64> {
        let letter = self.letters.get_mut(&id)?;
        let slot = letter.slot_for(target)?;
        if let Some(entry) = letter.sent.get_mut(slot) {
            entry.1 = Sent::Outstanding;
        }
        letter.copy.get_or_insert_with(|| Arc::clone(copy));
        letter.copied_at.get_or_insert(copied_at);
        letter.outstanding += 1;
        Some(Number { id, slot }.encode())
    }

    /// Letter `id` has no target left to send to: with targets that confirmed before (every
    /// route vanished after them) it is done, as RabbitMQ acks it then; without, it waits for
    /// the next attempt, on disk when it can.
    pub(super) fn unroutable(&mut self, id: u64, journal: &mut Journal) -> Option<Entry> {
        let done = self.letters.get(&id).is_some_and(|l| l.any_confirmed() && l.outstanding == 0);
        if done {
            return self.remove(id, journal);
        }
        self.park(id, journal);
        None
    }

    /// A target answered copy `number`: `accepted` or refused (or gone, which counts as
    /// accepted: a deleted target never confirms). Returns the letter once every target it was
    /// sent to accepted it; one that was refused waits, on disk when it can.
    pub(super) fn answered(&mut self, number: u64, accepted: bool, journal: &mut Journal) -> Option<Entry> {
        let Number { id, slot } = Number::decode(number, self.next_id);
        let letter = self.letters.get_mut(&id)?;
        // An answer for a slot not waiting for one (the letters were taken meanwhile) is late.
        let sent = letter.sent.get_mut(slot).filter(|(_, sent)| *sent == Sent::Outstanding)?;
        sent.1 = if accepted { Sent::Confirmed } else { Sent::Refused };
        letter.outstanding = letter.outstanding.saturating_sub(1);
        letter.refused |= !accepted;
        if letter.outstanding > 0 {
            return None;
        }
        if letter.refused {
            self.park(id, journal);
            return None;
        }
        self.remove(id, journal)
    }

    /// Parks letter `id` if it only waits: at once when its message's place is known, else
    /// once the spill written now is placed (see [`Self::placed`]).
    fn park(&mut self, id: u64, journal: &mut Journal) {
        let Some(parked) = &mut self.parked else {
            return;
        };
        let Some(letter) = self.letters.get_mut(&id).filter(|l| l.idle()) else {
            return;
        };
        match letter.place {
            Some(place) => {
                if let Some(letter) = self.letters.remove(&id) {
                    self.bytes = self.bytes.saturating_sub(body_size(&letter.entry.message));
                    parked.push(Parked::new(&letter.entry, letter.reason, letter.copied_at, place));
                }
            }
            None if !letter.spilled => {
                journal.spill_letter(letter.entry.seq, &letter.entry.message);
                letter.spilled = true;
                parked.spilled();
                self.placing.insert(letter.entry.seq, id);
            }
            None => {}
        }
    }

    /// Whether spills of letters wait for their places.
    pub(super) fn wants_places(&self) -> bool {
        !self.placing.is_empty()
    }

    /// Whether letters were spilled under the queue's letter key (dropped with the queue).
    pub(super) fn spilled_any(&self) -> bool {
        self.parked.as_ref().is_some_and(ParkedLetters::spilled_any)
    }

    /// The log placed or moved records of letters (sorted by sequence number): `own`, spills
    /// under the letter key (a first place parks its letter if it still only waits); else the
    /// messages' original records (compaction).
    pub(super) fn placed(&mut self, own: bool, places: &[(u64, Packed)], journal: &mut Journal) {
        let mut ready_to_park = Vec::new();
        for &(seq, place) in places {
            if let Some(id) = own.then(|| self.placing.remove(&seq)).flatten()
                && let Some(letter) = self.letters.get_mut(&id)
            {
                letter.place = Some((place, true));
                ready_to_park.push(id);
            }
        }
        if places.len() > ready_to_park.len() {
            for letter in self.letters.values_mut() {
                if let Some((at, mine)) = &mut letter.place
                    && *mine == own
                    && let Ok(i) = places.binary_search_by_key(&letter.entry.seq, |&(seq, _)| seq)
                    && let Some(&(_, place)) = places.get(i)
                {
                    *at = place;
                }
            }
            if let Some(parked) = &mut self.parked {
                parked.relocate(own, places);
            }
        }
        for id in ready_to_park {
            self.park(id, journal);
        }
        // A storm of letters placed at once leaves a large, empty map behind.
        if self.placing.capacity() > 1024 && self.placing.len() < self.placing.capacity() / 4 {
            self.placing.shrink_to_fit();
        }
    }

    /// Takes every letter (the strategy was switched away: RabbitMQ deletes them), recording
    /// each exit; returns how many there were.
    pub(super) fn take_all(&mut self, journal: &mut Journal) -> usize {
        self.bytes = 0;
        self.due.clear();
        self.placing.clear();
        let letters = std::mem::take(&mut self.letters);
        let mut count = letters.len();
        for letter in letters.into_values() {
            journal.removed(&letter.entry);
            if letter.spilled {
                journal.release_letter(letter.entry.seq);
            }
        }
        if let Some(parked) = &mut self.parked {
            for letter in parked.take_all() {
                let (seq, persisted, spilled, own) = letter.exit();
                journal.left(seq, persisted, spilled);
                if own {
                    journal.release_letter(seq);
                }
                count += 1;
            }
        }
        count
    }

    /// Letter `id` is done: its own spill, if it has one, is released here; the caller
    /// records the message's exit.
    fn remove(&mut self, id: u64, journal: &mut Journal) -> Option<Entry> {
        let letter = self.letters.remove(&id)?;
        self.bytes = self.bytes.saturating_sub(body_size(&letter.entry.message));
        if letter.spilled {
            self.placing.remove(&letter.entry.seq);
            journal.release_letter(letter.entry.seq);
        }
        Some(letter.entry)
    }
}

#[cfg(test)]
mod tests {
    use charon_model::{Body, Routing};

    use super::*;

    fn entry(seq: u64) -> Entry {
        let message = Message::new(Routing::default(), Body::Data(format!("m{seq}").into()));
        Entry::new(seq, Arc::new(message), None, true)
    }

    fn copy() -> Arc<Message> {
        Arc::new(Message::default())
    }

    #[test]
    fn a_letter_leaves_once_every_target_confirmed() {
        let mut pending = DlxPending::default();
        let mut j = Journal::new(1);
        pending.hold(entry(1), DeathReason::Rejected);
        assert_eq!(pending.size(), Size { count: 1, bytes: 2 });
        let due = pending.due();
        assert_eq!(due.len(), 1);
        assert!(pending.due().is_empty(), "taken once per attempt");
        let (a, b) =
            (pending.sent(due[0].id, &copy(), 0, 10).unwrap(), pending.sent(due[0].id, &copy(), 0, 11).unwrap());
        assert_ne!(a & NUMBER_BIT, 0);
        assert!(pending.answered(a, true, &mut j).is_none());
        assert_eq!(pending.answered(b, true, &mut j).map(|e| e.seq), Some(1));
        assert_eq!(pending.size(), Size::default());
    }

    #[test]
    fn a_refused_copy_is_retried_without_the_targets_that_confirmed() {
        let mut pending = DlxPending::default();
        let mut j = Journal::new(1);
        pending.hold(entry(1), DeathReason::Expired);
        let id = pending.due()[0].id;
        let (a, b) = (pending.sent(id, &copy(), 0, 10).unwrap(), pending.sent(id, &copy(), 0, 11).unwrap());
        assert!(pending.answered(a, true, &mut j).is_none());
        assert!(pending.answered(b, false, &mut j).is_none(), "refused: it stays");
        assert!(pending.due().is_empty(), "not before a retry is asked for");
        pending.retry_all();
        let again = pending.due();
        assert_eq!(again[0].confirmed, [10]);
        assert!(again[0].copy.is_some(), "the same copy, its death recorded once");
        let c = pending.sent(id, &copy(), 0, 11).unwrap();
        assert_eq!(pending.answered(c, true, &mut j).map(|e| e.seq), Some(1));
    }

    #[test]
    fn an_unroutable_letter_waits_unless_earlier_targets_have_it() {
        let mut pending = DlxPending::default();
        let mut j = Journal::new(1);
        pending.hold(entry(1), DeathReason::Rejected);
        let id = pending.due()[0].id;
        assert!(pending.unroutable(id, &mut j).is_none(), "no route yet: it waits");
        assert_eq!(pending.size().count, 1);
        pending.retry_all();
        let id = pending.due()[0].id;
        let a = pending.sent(id, &copy(), 0, 10).unwrap();
        let b = pending.sent(id, &copy(), 0, 11).unwrap();
        pending.answered(a, true, &mut j);
        pending.answered(b, false, &mut j);
        pending.retry_all();
        let id = pending.due()[0].id;
        assert_eq!(pending.unroutable(id, &mut j).map(|e| e.seq), Some(1), "routes vanished after a confirm: done");
    }

    #[test]
    fn a_number_names_its_letter_across_the_wrap_of_its_id_bits() {
        for (id, latest) in
            [(1, 1), (5, 9), (ID_MASK - 2, ID_MASK + 3), (ID_MASK + 1, ID_MASK + 1), (u64::MAX - 3, u64::MAX)]
        {
            for slot in [0, 1, SLOT_MASK as usize] {
                let number = Number { id, slot }.encode();
                assert_eq!(number & (NUMBER_BIT | super::super::requests::REFUSED_TO_PUBLISHER_BIT), NUMBER_BIT);
                assert_eq!(Number::decode(number, latest), Number { id, slot }, "id {id}, latest {latest}");
            }
        }
    }

    #[test]
    fn a_refusing_target_keeps_its_slot_and_late_answers_are_ignored() {
        let mut pending = DlxPending::default();
        let mut j = Journal::new(1);
        pending.hold(entry(1), DeathReason::Rejected);
        let id = pending.due()[0].id;
        let a = pending.sent(id, &copy(), 0, 10).unwrap();
        assert!(pending.answered(a, false, &mut j).is_none());
        assert!(pending.answered(a, true, &mut j).is_none(), "answered already: ignored");
        for _ in 0..3 {
            pending.retry_all();
            let id = pending.due()[0].id;
            let again = pending.sent(id, &copy(), 0, 10).unwrap();
            assert_eq!(again, a, "the same slot each attempt");
            assert!(pending.answered(again, false, &mut j).is_none());
        }
        pending.retry_all();
        let id = pending.due()[0].id;
        let b = pending.sent(id, &copy(), 0, 11).unwrap();
        assert_ne!(a, b);
        let a = pending.sent(id, &copy(), 0, 10).unwrap();
        assert!(pending.answered(b, true, &mut j).is_none());
        assert_eq!(pending.answered(a, true, &mut j).map(|e| e.seq), Some(1));
        assert!(pending.answered(a, true, &mut j).is_none(), "the letter is gone");
    }

    #[test]
    fn switching_away_takes_every_letter() {
        let mut pending = DlxPending::default();
        let mut j = Journal::new(1);
        for seq in 1..=3 {
            pending.hold(entry(seq), DeathReason::Expired);
        }
        let id = pending.due()[0].id;
        let number = pending.sent(id, &copy(), 0, 10).unwrap();
        assert_eq!(pending.take_all(&mut j), 3);
        assert!(pending.answered(number, true, &mut j).is_none(), "late answers are ignored");
        assert_eq!(pending.size(), Size::default());
    }
}
