//! When a queue's oldest ready message arrived, for
//! `charon_queue_oldest_message_age_seconds`, without a timestamp on every message.
//!
//! A queue's sequence numbers grow with arrival, and a requeued message keeps its number, so
//! the oldest ready message is the one with the lowest number: the head. The queue marks, at
//! most once a second, the number of the message arriving then; the mark with the greatest
//! number not above the head's tells (to within a second, never younger than it is) when the
//! head arrived. Marks below the head are dropped as it moves on: one mark per second of the
//! ready backlog's age stays, 16 bytes each.

use std::collections::VecDeque;

/// How far apart marks are, ms: the age's resolution.
const MARK_EVERY_MS: i64 = 1_000;

/// Arrival marks of a queue's ready messages.
#[derive(Debug, Default)]
pub(super) struct Arrivals {
    /// `(sequence number, arrival time)`, both increasing.
    marks: VecDeque<(u64, i64)>,
}

impl Arrivals {
    /// Message `seq` arrived at `now` (ms since epoch).
    pub(super) fn arrived(&mut self, seq: u64, now: i64) {
        if self.marks.back().is_none_or(|&(_, at)| now.saturating_sub(at) >= MARK_EVERY_MS) {
            self.marks.push_back((seq, now));
        }
    }

    /// When the oldest ready message arrived, the head being `head` (its sequence number when
    /// known without reading it); `None` when nothing is ready.
    pub(super) fn oldest(&mut self, head: Option<u64>, any_ready: bool) -> Option<i64> {
        if !any_ready {
            self.marks.clear();
            return None;
        }
        if let Some(head) = head {
            while self.marks.get(1).is_some_and(|&(seq, _)| seq <= head) {
                self.marks.pop_front();
            }
        }
        self.marks.front().map(|&(_, at)| at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_is_the_mark_at_or_below_the_head_and_marks_are_a_second_apart() {
        let mut arrivals = Arrivals::default();
        arrivals.arrived(1, 10_000);
        arrivals.arrived(2, 10_500); // within the second: no new mark
        arrivals.arrived(3, 11_000);
        arrivals.arrived(4, 12_500);
        assert_eq!(arrivals.marks.len(), 3);
        assert_eq!(arrivals.oldest(Some(1), true), Some(10_000));
        assert_eq!(arrivals.oldest(Some(2), true), Some(10_000), "2 arrived between the first two marks");
        assert_eq!(arrivals.oldest(Some(3), true), Some(11_000));
        assert_eq!(arrivals.marks.len(), 2, "marks below the head are gone");
        // A head not known (being read): the oldest mark kept stands.
        assert_eq!(arrivals.oldest(None, true), Some(11_000));
        assert_eq!(arrivals.oldest(Some(4), true), Some(12_500));
        assert_eq!(arrivals.oldest(None, false), None);
        assert!(arrivals.marks.is_empty());
    }
}
