//! Dead letters whose source record stays in the log until their targets have them.
//!
//! A persisted message that dies is removed from its queue at once (nothing on the wire
//! changes), but its record in the log is removed only once every target queue confirmed the
//! dead-lettered copy, i.e. wrote it to the log and synced it. A crash in between therefore
//! leaves the message in the source, in the target or in both — never in neither: on restart
//! the source recovers it and dead-letters it again. (Before, the source's removal could be
//! synced, along with any other record, before the target had written its copy: a `kill -9`
//! there lost the dead letter.)

use foldhash::HashMap;

/// How a message that left the queue is removed from the log once its dead letter is safe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Removal {
    /// The message's sequence number in the source queue.
    pub(super) seq: u64,
    /// It has an enqueue record in the log.
    pub(super) persisted: bool,
    /// It was written to the log to leave memory (a spill).
    pub(super) spilled: bool,
}

/// Dead letters waiting for their targets' confirms, by the confirm number their copies were
/// published with.
#[derive(Debug, Default)]
pub(super) struct Unconfirmed {
    next: u64,
    waiting: HashMap<u64, Waiting>,
}

#[derive(Debug)]
struct Waiting {
    removal: Removal,
    /// Targets that have not answered yet.
    targets: usize,
}

impl Unconfirmed {
    /// Starts waiting for `targets` confirms of one copy; returns the number to publish it with.
    pub(super) fn track(&mut self, removal: Removal, targets: usize) -> u64 {
        self.next += 1;
        self.waiting.insert(self.next, Waiting { removal, targets: targets.max(1) });
        self.next
    }

    /// A target answered for the copies `numbers` (accepted it, refused it, or is gone: in
    /// each case it will never answer again); returns the removals now due, in order.
    pub(super) fn answered(&mut self, numbers: impl IntoIterator<Item = u64>) -> Vec<Removal> {
        let mut due = Vec::new();
        for number in numbers {
            let Some(waiting) = self.waiting.get_mut(&number) else {
                continue;
            };
            waiting.targets -= 1;
            if waiting.targets == 0
                && let Some(done) = self.waiting.remove(&number)
            {
                due.push(done.removal);
            }
        }
        due
    }

    /// Dead letters still waiting.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether no dead letter waits for its targets' confirms.
    pub(super) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn removal(seq: u64) -> Removal {
        Removal { seq, persisted: true, spilled: false }
    }

    #[test]
    fn a_removal_is_due_once_every_target_answered() {
        let mut unconfirmed = Unconfirmed::default();
        let two = unconfirmed.track(removal(7), 2);
        let one = unconfirmed.track(removal(8), 1);
        assert_ne!(two, one);
        assert_eq!(unconfirmed.len(), 2);
        assert_eq!(unconfirmed.answered([two]), []);
        assert_eq!(unconfirmed.answered([one]), [removal(8)]);
        assert_eq!(unconfirmed.answered([two]), [removal(7)]);
        assert_eq!(unconfirmed.len(), 0);
    }

    #[test]
    fn unknown_and_repeated_answers_are_ignored() {
        let mut unconfirmed = Unconfirmed::default();
        let number = unconfirmed.track(removal(1), 1);
        assert_eq!(unconfirmed.answered([number + 100]), []);
        assert_eq!(unconfirmed.answered([number, number]), [removal(1)]);
        assert_eq!(unconfirmed.answered([number]), []);
    }

    #[test]
    fn removals_come_out_in_the_order_of_the_answers() {
        let mut unconfirmed = Unconfirmed::default();
        let numbers: Vec<u64> = (10..15).map(|seq| unconfirmed.track(removal(seq), 1)).collect();
        let answered: Vec<u64> = numbers.iter().rev().copied().collect();
        let seqs: Vec<u64> = unconfirmed.answered(answered).iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [14, 13, 12, 11, 10]);
    }
}
