//! What the log last said about live messages beyond their being live: which were delivered
//! (and their counts) and which wait as at-least-once dead letters (and why). Compaction
//! re-appends that state with the messages it moves.
//!
//! Per queue in bitmaps, because it can cover a queue's whole backlog: a storm of rejections
//! leaves a million dead letters waiting in their quorum queue, every one delivered once. As
//! hash-map entries that was about 100 bytes per letter; as bitmaps of dense sequence numbers it
//! is a bit or two. Only deliveries with counts (a quorum queue's returns) keep an entry.

use foldhash::HashMap;
use roaring::RoaringTreemap;

/// The marks of one queue.
#[derive(Debug, Default)]
struct QueueMarks {
    /// Delivered, no counts.
    delivered: RoaringTreemap,
    /// Delivered, with `(returned, failed)` counts.
    counted: HashMap<u64, (u32, u32)>,
    /// Waiting as dead letters, per reason code.
    dead: Vec<(u8, RoaringTreemap)>,
}

impl QueueMarks {
    fn is_empty(&self) -> bool {
        self.delivered.is_empty() && self.counted.is_empty() && self.dead.is_empty()
    }

    fn unmark_dead(&mut self, seq: u64) {
        for (_, seqs) in &mut self.dead {
            if seqs.remove(seq) {
                break;
            }
        }
        self.dead.retain(|(_, seqs)| !seqs.is_empty());
    }
}

/// The marks of every queue.
#[derive(Debug, Default)]
pub(super) struct Marks {
    queues: HashMap<u64, QueueMarks>,
}

impl Marks {
    /// Message `seq` of `queue` was delivered, with these counts.
    pub(super) fn delivered(&mut self, queue: u64, seq: u64, returned: u32, failed: u32) {
        let marks = self.queues.entry(queue).or_default();
        if (returned, failed) == (0, 0) {
            marks.counted.remove(&seq);
            marks.delivered.insert(seq);
        } else {
            marks.delivered.remove(seq);
            marks.counted.insert(seq, (returned, failed));
        }
    }

    /// The delivery state of a message, once it was delivered.
    pub(super) fn delivery(&self, queue: u64, seq: u64) -> Option<(u32, u32)> {
        let marks = self.queues.get(&queue)?;
        if marks.delivered.contains(seq) {
            return Some((0, 0));
        }
        marks.counted.get(&seq).copied()
    }

    /// Message `seq` of `queue` waits as a dead letter for `reason`.
    pub(super) fn dead_lettered(&mut self, queue: u64, seq: u64, reason: u8) {
        let marks = self.queues.entry(queue).or_default();
        marks.unmark_dead(seq);
        match marks.dead.iter_mut().find(|(code, _)| *code == reason) {
            Some((_, seqs)) => {
                seqs.insert(seq);
            }
            None => marks.dead.push((reason, RoaringTreemap::from_iter([seq]))),
        }
    }

    /// Why a message waits as a dead letter, if it does.
    pub(super) fn dead_letter_reason(&self, queue: u64, seq: u64) -> Option<u8> {
        let marks = self.queues.get(&queue)?;
        marks.dead.iter().find(|(_, seqs)| seqs.contains(seq)).map(|(code, _)| *code)
    }

    /// Message `seq` of `queue` is gone.
    pub(super) fn removed(&mut self, queue: u64, seq: u64) {
        let Some(marks) = self.queues.get_mut(&queue) else {
            return;
        };
        marks.delivered.remove(seq);
        marks.counted.remove(&seq);
        marks.unmark_dead(seq);
        if marks.is_empty() {
            self.queues.remove(&queue);
        }
    }

    /// `queue` is gone.
    pub(super) fn dropped(&mut self, queue: u64) {
        self.queues.remove(&queue);
    }

    /// Bytes of memory the marks take, roughly (for the memory tests).
    #[cfg(test)]
    pub(super) fn bytes(&self) -> u64 {
        let bitmaps = |m: &QueueMarks| {
            m.delivered.serialized_size() + m.dead.iter().map(|(_, s)| s.serialized_size()).sum::<usize>()
        };
        self.queues.values().map(|m| (bitmaps(m) + m.counted.len() * 24) as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliveries_and_dead_letters_read_back_and_leave_with_their_message() {
        let mut marks = Marks::default();
        marks.delivered(1, 10, 0, 0);
        marks.delivered(1, 11, 2, 1);
        marks.delivered(2, 10, 0, 0);
        assert_eq!(
            (marks.delivery(1, 10), marks.delivery(1, 11), marks.delivery(1, 12)),
            (Some((0, 0)), Some((2, 1)), None)
        );
        marks.delivered(1, 10, 1, 0);
        assert_eq!(marks.delivery(1, 10), Some((1, 0)), "counts replace the plain mark");
        marks.dead_lettered(1, 11, 3);
        marks.dead_lettered(1, 12, 1);
        assert_eq!((marks.dead_letter_reason(1, 11), marks.dead_letter_reason(1, 12)), (Some(3), Some(1)));
        marks.dead_lettered(1, 11, 2);
        assert_eq!(marks.dead_letter_reason(1, 11), Some(2), "one reason per letter");
        marks.removed(1, 11);
        assert_eq!((marks.delivery(1, 11), marks.dead_letter_reason(1, 11)), (None, None));
        marks.dropped(2);
        assert_eq!(marks.delivery(2, 10), None);
    }

    #[test]
    fn a_million_waiting_letters_cost_a_few_bits_each() {
        let mut marks = Marks::default();
        let base = 1_700_000_000_000u64 << 20;
        for seq in base..base + 1_000_000 {
            marks.delivered(7, seq, 0, 0);
            marks.dead_lettered(7, seq, 1);
        }
        assert_eq!(marks.dead_letter_reason(7, base + 999_999), Some(1));
        assert!(marks.bytes() < 1_000_000, "{} bytes", marks.bytes());
    }
}
