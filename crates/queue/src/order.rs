//! In which order a queue hands out its ready messages: one FIFO run, a classic priority
//! queue's runs from the highest priority down, or a quorum queue's two weighted levels.
//!
//! Observed on RabbitMQ 4.0.5:
//! - a classic queue declared with `x-max-priority` N keeps N + 1 levels; a message's priority
//!   above N counts as N, none as 0; it hands out the highest level's oldest message first —
//!   also to a drop-head, which drops the message that would be delivered next (the highest
//!   priority's oldest), and to expiry, which only looks at that next message
//!   (`rabbit_priority_queue`'s `find2` over the levels). `x-max-priority` 0 is one level.
//! - every quorum queue has two levels (`rabbit_fifo_q`): priority above 4 is high, the rest
//!   (none included) normal. While both have messages it takes two high ones, then a normal
//!   one (the counter runs 0, 1, 2; at 2 the normal level goes first and the counter starts
//!   over). Returned messages come before both, in their own run (`rabbit_fifo`'s returns),
//!   and do not move the counter.

/// A queue's delivery order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Order {
    /// One run: first in, first out.
    Fifo,
    /// A classic priority queue with levels `0..=max`.
    Priority {
        /// The highest priority (`x-max-priority`).
        max: u8,
    },
    /// A quorum queue: normal, high and returned runs.
    Quorum {
        /// Messages taken since the normal level last went first.
        counter: u8,
    },
}

/// The quorum queue's runs.
const NORMAL: usize = 0;
const HIGH: usize = 1;
const RETURNED: usize = 2;
/// High-priority messages a quorum queue hands out before a normal one (`?WEIGHT`).
const WEIGHT: u8 = 2;
/// A quorum queue's priorities above this are high.
const QUORUM_NORMAL_MAX: u8 = 4;

impl Order {
    /// The order of a queue: `max_priority` is its `x-max-priority` (classic queues only).
    pub(super) fn new(quorum: bool, max_priority: Option<u8>) -> Self {
        match (quorum, max_priority) {
            (true, _) => Self::Quorum { counter: 0 },
            (false, Some(max)) if max > 0 => Self::Priority { max },
            (false, _) => Self::Fifo,
        }
    }

    /// How many runs the queue keeps.
    pub(super) fn runs(self) -> usize {
        match self {
            Self::Fifo => 1,
            Self::Priority { max } => usize::from(max) + 1,
            Self::Quorum { .. } => 3,
        }
    }

    /// The run a new message with this priority joins.
    pub(super) fn run_of(self, priority: Option<u8>) -> usize {
        let priority = priority.unwrap_or(0);
        match self {
            Self::Fifo => 0,
            Self::Priority { max } => usize::from(priority.min(max)),
            Self::Quorum { .. } if priority > QUORUM_NORMAL_MAX => HIGH,
            Self::Quorum { .. } => NORMAL,
        }
    }

    /// The run a message coming back from a consumer returns to.
    pub(super) fn returned_run_of(self, priority: Option<u8>) -> usize {
        match self {
            Self::Quorum { .. } => RETURNED,
            _ => self.run_of(priority),
        }
    }

    /// The run the next message comes from, given which runs hold messages.
    pub(super) fn next(self, holds: impl Fn(usize) -> bool) -> Option<usize> {
        match self {
            Self::Fifo => holds(0).then_some(0),
            Self::Priority { max } => (0..=usize::from(max)).rev().find(|&run| holds(run)),
            Self::Quorum { counter } => {
                let first = if counter == WEIGHT { [RETURNED, NORMAL, HIGH] } else { [RETURNED, HIGH, NORMAL] };
                first.into_iter().find(|&run| holds(run))
            }
        }
    }

    /// A message was taken from `run`.
    pub(super) fn took(&mut self, run: usize) {
        if let Self::Quorum { counter } = self {
            *counter = match run {
                RETURNED => *counter,
                _ if *counter == WEIGHT => 0,
                _ => *counter + 1,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Takes every message, given each one's run, and gives their indices in the order taken.
    fn drain(mut order: Order, runs: &[usize]) -> Vec<usize> {
        let mut queues: Vec<std::collections::VecDeque<usize>> = vec![Default::default(); order.runs()];
        for (index, &run) in runs.iter().enumerate() {
            queues[run].push_back(index);
        }
        let mut taken = Vec::new();
        while let Some(run) = order.next(|run| !queues[run].is_empty()) {
            taken.push(queues[run].pop_front().unwrap());
            order.took(run);
        }
        taken
    }

    #[test]
    fn a_classic_priority_queue_goes_highest_first_then_fifo_and_caps_at_its_maximum() {
        let order = Order::new(false, Some(10));
        let priorities = [Some(1), Some(9), Some(5), None, Some(0), Some(20), Some(9), Some(1)];
        let runs: Vec<usize> = priorities.iter().map(|&p| order.run_of(p)).collect();
        assert_eq!(runs, [1, 9, 5, 0, 0, 10, 9, 1]);
        // RabbitMQ 4.0.5: m5-p20, m1-p9, m6-p9, m2-p5, m0-p1, m7-p1, m3-pNone, m4-p0.
        assert_eq!(drain(order, &runs), [5, 1, 6, 2, 0, 7, 3, 4]);
    }

    #[test]
    fn max_priority_zero_is_fifo_and_one_has_two_levels() {
        assert_eq!(Order::new(false, Some(0)), Order::Fifo);
        let one = Order::new(false, Some(1));
        let runs: Vec<usize> = [0, 3, 1, 2, 0].iter().map(|&p| one.run_of(Some(p))).collect();
        // RabbitMQ 4.0.5: m1-p3, m2-p1, m3-p2, m0-p0, m4-p0.
        assert_eq!(drain(one, &runs), [1, 2, 3, 0, 4]);
    }

    #[test]
    fn a_quorum_queue_takes_two_high_then_one_normal() {
        let order = Order::new(true, None);
        let priorities = [Some(1), Some(9), Some(5), None, Some(0), Some(4), Some(5), Some(20), Some(3)];
        let runs: Vec<usize> = priorities.iter().map(|&p| order.run_of(p)).collect();
        // RabbitMQ 4.0.5: m1-p9, m2-p5, m0-p1, m6-p5, m7-p20, m3-pNone, m4-p0, m5-p4, m8-p3.
        assert_eq!(drain(order, &runs), [1, 2, 0, 6, 7, 3, 4, 5, 8]);
    }

    #[test]
    fn quorum_returns_come_first_and_leave_the_counter_alone() {
        let mut order = Order::new(true, None);
        assert_eq!(order.returned_run_of(Some(9)), RETURNED);
        order.took(HIGH);
        order.took(RETURNED);
        assert_eq!(order, Order::Quorum { counter: 1 });
        assert_eq!(order.next(|_| true), Some(RETURNED));
        order.took(HIGH);
        assert_eq!(order.next(|run| run != RETURNED), Some(NORMAL), "the third goes to the normal level");
        order.took(NORMAL);
        assert_eq!(order, Order::Quorum { counter: 0 });
        assert_eq!(Order::new(false, Some(3)).returned_run_of(Some(7)), 3, "classic returns go to their level");
    }
}
