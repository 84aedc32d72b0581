//! RabbitMQ's at-least-once dead lettering (quorum queues, `rabbit_fifo_dlx`): a message that
//! dies stays in its queue — not ready, never delivered, counted in `messages` and against the
//! length limits — until every queue its dead letter was routed to confirmed the copy.
//!
//! The queue task forwards what is due ([`DlxPending::due`]) through the queue's outbox, one
//! confirm number per target, and reports each target's answer ([`DlxPending::answered`]). A
//! letter nobody routes, or that a target refused (a full `reject-publish` queue), stays and is
//! tried again when the topology or the queue's policy changes, and on a timer; targets that
//! confirmed are not sent it again.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use charon_model::{DeathReason, Message};
use foldhash::HashMap;

use super::entry::Entry;
use super::limits::{Size, body_size};

/// Confirm numbers of at-least-once copies carry this bit, so that they never collide with the
/// numbers of crash-safe forwards (`unconfirmed.rs`) the same queue waits for.
pub(super) const NUMBER_BIT: u64 = 1 << 63;

/// One dead letter waiting for its targets.
#[derive(Debug)]
struct Letter {
    entry: Entry,
    reason: DeathReason,
    /// The dead-lettered copy, made at the first attempt (its death is recorded once).
    copy: Option<Arc<Message>>,
    /// Target queues (by id) that confirmed the copy.
    confirmed: Vec<u64>,
    /// Copies sent and not answered yet.
    outstanding: usize,
    /// A target refused the copy since the last attempt.
    refused: bool,
    /// Waiting for the next attempt (new, or a retry was asked for).
    due: bool,
}

/// A letter to forward: the original message, why it died, the copy if one was made before,
/// and the targets that already have it.
#[derive(Debug)]
pub(super) struct Due {
    pub(super) id: u64,
    pub(super) message: Arc<Message>,
    pub(super) reason: DeathReason,
    pub(super) copy: Option<Arc<Message>>,
    pub(super) confirmed: Vec<u64>,
}

/// The dead letters of one at-least-once queue, in the order they died.
#[derive(Debug, Default)]
pub(super) struct DlxPending {
    letters: BTreeMap<u64, Letter>,
    next_id: u64,
    /// Confirm number → (letter, target queue id).
    numbers: HashMap<u64, (u64, u64)>,
    next_number: u64,
    bytes: u64,
    /// The letters marked due, in the order they became due: a pass looks at these only, not
    /// at every letter waiting for its targets' answers.
    due: VecDeque<u64>,
}

impl DlxPending {
    /// Keeps a message that died for `reason`; it is due at once.
    pub(super) fn hold(&mut self, entry: Entry, reason: DeathReason) {
        self.next_id += 1;
        self.bytes += body_size(&entry.message);
        let letter =
            Letter { entry, reason, copy: None, confirmed: Vec::new(), outstanding: 0, refused: false, due: true };
        self.letters.insert(self.next_id, letter);
        self.due.push_back(self.next_id);
    }

    /// The letters as length limits and `messages` count them.
    pub(super) fn size(&self) -> Size {
        Size { count: self.letters.len() as u64, bytes: self.bytes }
    }

    /// Whether any letter waits for an attempt.
    pub(super) fn any_due(&self) -> bool {
        !self.due.is_empty()
    }

    /// Makes every letter not waiting for an answer due again (the topology or the policy
    /// changed, or the retry timer fired).
    pub(super) fn retry_all(&mut self) {
        for (&id, letter) in self.letters.iter_mut().filter(|(_, l)| l.outstanding == 0 && !l.due) {
            letter.due = true;
            self.due.push_back(id);
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
                confirmed: letter.confirmed.clone(),
            });
        }
        due
    }

    /// The copy of letter `id` goes to `target`: returns its confirm number.
    pub(super) fn sent(&mut self, id: u64, copy: &Arc<Message>, target: u64) -> u64 {
        self.next_number += 1;
        let number = self.next_number | NUMBER_BIT;
        if let Some(letter) = self.letters.get_mut(&id) {
            letter.copy.get_or_insert_with(|| Arc::clone(copy));
            letter.outstanding += 1;
        }
        self.numbers.insert(number, (id, target));
        number
    }

    /// Letter `id` has no target left to send to: with targets that confirmed before (every
    /// route vanished after them) it is done, as RabbitMQ acks it then; without, it waits for
    /// the next attempt.
    pub(super) fn unroutable(&mut self, id: u64) -> Option<Entry> {
        let done = self.letters.get(&id).is_some_and(|l| !l.confirmed.is_empty() && l.outstanding == 0);
        done.then(|| self.remove(id)).flatten()
    }

    /// A target answered copy `number`: `accepted` or refused (or gone, which counts as
    /// accepted: a deleted target never confirms). Returns the letter once every target it was
    /// sent to accepted it.
    pub(super) fn answered(&mut self, number: u64, accepted: bool) -> Option<Entry> {
        let (id, target) = self.numbers.remove(&number)?;
        let letter = self.letters.get_mut(&id)?;
        letter.outstanding = letter.outstanding.saturating_sub(1);
        if accepted {
            letter.confirmed.push(target);
        } else {
            letter.refused = true;
        }
        if letter.outstanding > 0 || letter.refused {
            return None;
        }
        self.remove(id)
    }

    /// Takes every letter (the strategy was switched away: RabbitMQ deletes them).
    pub(super) fn take_all(&mut self) -> Vec<Entry> {
        self.numbers.clear();
        self.bytes = 0;
        self.due.clear();
        std::mem::take(&mut self.letters).into_values().map(|l| l.entry).collect()
    }

    fn remove(&mut self, id: u64) -> Option<Entry> {
        let letter = self.letters.remove(&id)?;
        self.bytes = self.bytes.saturating_sub(body_size(&letter.entry.message));
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
        pending.hold(entry(1), DeathReason::Rejected);
        assert_eq!(pending.size(), Size { count: 1, bytes: 2 });
        let due = pending.due();
        assert_eq!(due.len(), 1);
        assert!(pending.due().is_empty(), "taken once per attempt");
        let (a, b) = (pending.sent(due[0].id, &copy(), 10), pending.sent(due[0].id, &copy(), 11));
        assert_ne!(a & NUMBER_BIT, 0);
        assert!(pending.answered(a, true).is_none());
        assert_eq!(pending.answered(b, true).map(|e| e.seq), Some(1));
        assert_eq!(pending.size(), Size::default());
    }

    #[test]
    fn a_refused_copy_is_retried_without_the_targets_that_confirmed() {
        let mut pending = DlxPending::default();
        pending.hold(entry(1), DeathReason::Expired);
        let id = pending.due()[0].id;
        let (a, b) = (pending.sent(id, &copy(), 10), pending.sent(id, &copy(), 11));
        assert!(pending.answered(a, true).is_none());
        assert!(pending.answered(b, false).is_none(), "refused: it stays");
        assert!(pending.due().is_empty(), "not before a retry is asked for");
        pending.retry_all();
        let again = pending.due();
        assert_eq!(again[0].confirmed, [10]);
        assert!(again[0].copy.is_some(), "the same copy, its death recorded once");
        let c = pending.sent(id, &copy(), 11);
        assert_eq!(pending.answered(c, true).map(|e| e.seq), Some(1));
    }

    #[test]
    fn an_unroutable_letter_waits_unless_earlier_targets_have_it() {
        let mut pending = DlxPending::default();
        pending.hold(entry(1), DeathReason::Rejected);
        let id = pending.due()[0].id;
        assert!(pending.unroutable(id).is_none(), "no route yet: it waits");
        assert_eq!(pending.size().count, 1);
        pending.retry_all();
        let id = pending.due()[0].id;
        let a = pending.sent(id, &copy(), 10);
        let b = pending.sent(id, &copy(), 11);
        pending.answered(a, true);
        pending.answered(b, false);
        pending.retry_all();
        let id = pending.due()[0].id;
        assert_eq!(pending.unroutable(id).map(|e| e.seq), Some(1), "routes vanished after a confirm: done");
    }

    #[test]
    fn switching_away_takes_every_letter() {
        let mut pending = DlxPending::default();
        for seq in 1..=3 {
            pending.hold(entry(seq), DeathReason::Expired);
        }
        let id = pending.due()[0].id;
        let number = pending.sent(id, &copy(), 10);
        assert_eq!(pending.take_all().iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(pending.answered(number, true).is_none(), "late answers are ignored");
        assert_eq!(pending.size(), Size::default());
    }
}
