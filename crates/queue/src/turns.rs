//! Whose turn it is among a queue's consumers: consumer priorities (`x-priority`) and single
//! active consumer (`x-single-active-consumer`), as RabbitMQ 4.0.5 was observed to do them.
//!
//! - Consumers are kept highest priority first, in registration order within a priority. The
//!   highest group takes messages round-robin while any of its members can (prefetch, credit,
//!   windows); a lower group only gets what the higher ones cannot take.
//! - With a single active consumer only one consumer receives. A classic queue keeps the first
//!   registered active until it goes (priorities do not count); a quorum queue makes the
//!   highest-priority consumer active, and when a higher one arrives the active one first
//!   settles what it holds — it gets nothing new meanwhile — before the other takes over
//!   (`rabbit_fifo`'s waiting consumers).

use crate::session::ConsumerId;

/// Which consumer a single-active-consumer queue makes active.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SingleActive {
    /// A classic queue: the first registered.
    FirstRegistered,
    /// A quorum queue: the highest priority, the first registered among equals.
    HighestPriority,
}

/// One priority's consumers: a run of the consumer list, and where its round-robin is.
#[derive(Debug)]
struct Group {
    priority: i64,
    start: usize,
    len: usize,
    cursor: usize,
}

/// One consumer, as the turns see it: its id, priority and unsettled deliveries.
pub(super) type Seat = (ConsumerId, i64, u32);

/// The turns of a queue's consumers.
#[derive(Debug, Default)]
pub(super) struct Turns {
    groups: Vec<Group>,
    single_active: Option<SingleActive>,
    /// The active consumer and its place in the list (single active consumer only).
    active: Option<(ConsumerId, usize)>,
    /// A higher-priority consumer waits for the active one to settle what it holds.
    switching: bool,
}

impl Turns {
    /// Turns for a queue, with or without a single active consumer.
    pub(super) fn new(single_active: Option<SingleActive>) -> Self {
        Self { single_active, ..Self::default() }
    }

    /// The priority a consumer asking for `priority` is ordered by (a classic queue's single
    /// active consumer ignores priorities).
    pub(super) fn rank(&self, priority: i64) -> i64 {
        if self.single_active == Some(SingleActive::FirstRegistered) { 0 } else { priority }
    }

    /// Whether an active consumer waits to hand over (see [`Self::regroup`] after settling).
    pub(super) fn switching(&self) -> bool {
        self.switching
    }

    /// Whether one consumer at a time receives.
    pub(super) fn single_active(&self) -> bool {
        self.single_active.is_some()
    }

    /// The active consumer of a single-active-consumer queue.
    pub(super) fn active(&self) -> Option<ConsumerId> {
        self.active.map(|(id, _)| id)
    }

    /// Takes the consumer list as it is now, ordered by [`Self::rank`] (highest first), in
    /// registration order within a rank; keeps each priority's round-robin place and chooses
    /// the active consumer.
    pub(super) fn regroup(&mut self, seats: &[Seat]) {
        let old = std::mem::take(&mut self.groups);
        let mut start = 0;
        while let Some(&(_, priority, _)) = seats.get(start) {
            let len = seats.iter().skip(start).take_while(|seat| seat.1 == priority).count();
            let cursor = old.iter().find(|g| g.priority == priority).map_or(0, |g| g.cursor % len);
            self.groups.push(Group { priority, start, len, cursor });
            start += len;
        }
        if self.single_active.is_none() {
            return;
        }
        let top = seats.first().map(|seat| seat.0);
        let current = self.active.and_then(|(id, _)| seats.iter().find(|seat| seat.0 == id));
        let active = match current {
            Some(&(id, _, unacked)) if Some(id) != top && unacked > 0 => Some(id),
            _ => top,
        };
        self.switching = active.is_some() && active != top;
        self.active = active.and_then(|id| Some((id, seats.iter().position(|seat| seat.0 == id)?)));
    }

    /// The consumer that gets the next message: the first, in turn, that `take` accepts (it
    /// reserves the room for one delivery).
    pub(super) fn next(&mut self, mut take: impl FnMut(usize) -> bool) -> Option<usize> {
        if self.single_active.is_some() {
            let (_, index) = self.active.filter(|_| !self.switching)?;
            return take(index).then_some(index);
        }
        for group in &mut self.groups {
            for step in 0..group.len {
                let index = group.start + (group.cursor + step) % group.len;
                if take(index) {
                    group.cursor = (group.cursor + step + 1) % group.len;
                    return Some(index);
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asks for `n` turns; `room[i]` is how many more consumer `i` can take.
    fn deal(turns: &mut Turns, room: &mut [u32], n: usize) -> Vec<usize> {
        (0..n)
            .filter_map(|_| {
                turns.next(|i| {
                    let left = &mut room[i];
                    (*left > 0).then(|| *left -= 1).is_some()
                })
            })
            .collect()
    }

    #[test]
    fn the_highest_priority_takes_round_robin_and_lower_ones_get_what_it_cannot() {
        let mut turns = Turns::new(None);
        // high (two consumers, room 2 and 1), then mid, then low.
        turns.regroup(&[(1, 10, 0), (2, 10, 0), (3, 5, 0), (4, 0, 0)]);
        let mut room = [2, 1, u32::MAX, u32::MAX];
        assert_eq!(deal(&mut turns, &mut room, 6), [0, 1, 0, 2, 2, 2]);
    }

    #[test]
    fn round_robin_goes_on_where_it_was_after_the_list_changes() {
        let mut turns = Turns::new(None);
        turns.regroup(&[(1, 0, 0), (2, 0, 0), (3, 0, 0)]);
        let mut room = [9, 9, 9];
        assert_eq!(deal(&mut turns, &mut room, 2), [0, 1]);
        turns.regroup(&[(1, 0, 0), (2, 0, 0), (3, 0, 0), (4, 0, 0)]);
        assert_eq!(deal(&mut turns, &mut [9, 9, 9, 9], 3), [2, 3, 0]);
    }

    #[test]
    fn a_classic_single_active_consumer_is_the_first_registered_whatever_the_priorities() {
        let mut turns = Turns::new(Some(SingleActive::FirstRegistered));
        assert_eq!(turns.rank(10), 0);
        turns.regroup(&[(1, turns.rank(0), 0), (2, turns.rank(10), 0)]);
        assert_eq!(turns.active(), Some(1));
        assert_eq!(deal(&mut turns, &mut [1, 9], 3), [0], "only the active one, within its room");
        turns.regroup(&[(2, 0, 0)]);
        assert_eq!((turns.active(), deal(&mut turns, &mut [9], 1)), (Some(2), vec![0]));
    }

    #[test]
    fn a_quorum_single_active_consumer_hands_over_to_a_higher_priority_once_settled() {
        let mut turns = Turns::new(Some(SingleActive::HighestPriority));
        turns.regroup(&[(1, 0, 0)]);
        assert_eq!(turns.active(), Some(1));
        // A higher-priority consumer arrives while consumer 1 holds a message.
        turns.regroup(&[(2, 10, 0), (1, 0, 1)]);
        assert_eq!((turns.active(), turns.switching()), (Some(1), true));
        assert_eq!(deal(&mut turns, &mut [9, 9], 1), Vec::<usize>::new(), "nobody gets anything meanwhile");
        turns.regroup(&[(2, 10, 0), (1, 0, 0)]);
        assert_eq!((turns.active(), turns.switching()), (Some(2), false));
        assert_eq!(deal(&mut turns, &mut [9, 9], 1), [0]);
        // Arriving while the active one holds nothing: it takes over at once.
        turns.regroup(&[(3, 20, 0), (2, 10, 0), (1, 0, 0)]);
        assert_eq!(turns.active(), Some(3));
        turns.regroup(&[]);
        assert_eq!((turns.active(), deal(&mut turns, &mut [], 1)), (None, vec![]));
    }
}
