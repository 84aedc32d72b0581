//! Flow control, the queue's side: when to hold its publishers back so that a fast publisher
//! cannot outrun the queue's consumers and starve them.
//!
//! RabbitMQ keeps a queue and its publishers in balance with credit flow: a publisher's
//! connection gets credit from the queue process as it works through the messages, and stops
//! reading its socket when it has none. Charon's queue tasks take publishes far faster than
//! connections can deliver them, so without a bound a publisher fills the queue, the queue
//! pages, and its consumer then reads from the log ever further behind.
//!
//! A queue holds its publishers (closes its [`super::Admission`]: they stop reading their
//! sockets, or withhold link credit) while it has more than [`FLOW_HIGH`] ready messages and a
//! consumer that its own prefetch or credit does not stop (a hungry one): the delivery
//! pipeline, not an application, is what falls behind. It lets them go once no more than
//! [`FLOW_LOW`] are ready or no such consumer is left. A queue whose consumers are held by
//! their prefetch or credit (an application working slowly), and a queue without consumers,
//! never hold: their backlog pages as before, bounded by the memory and disk alarms.
//!
//! The queue decides after each pass; what its mailbox already holds then (at most its 256
//! commands, a publisher's socket read each) still comes in. The backlog behind a hungry
//! consumer is therefore bounded by the mark plus one mailbox, whatever the run's length; in a
//! queue task that keeps up with its mailbox, by little more than the mark.

use super::paging::RESIDENT_MESSAGES;

/// Ready messages above which a queue with a hungry consumer holds its publishers: half of
/// what it keeps whole in memory, so that what arrives before the hold takes (a mailbox's
/// worth) still fits and a balanced pipeline does not page.
pub(super) const FLOW_HIGH: usize = RESIDENT_MESSAGES / 2;
/// Ready messages at or below which it lets them go again.
pub(super) const FLOW_LOW: usize = RESIDENT_MESSAGES / 4;

/// Whether a queue holds its publishers for flow.
#[derive(Debug, Default)]
pub(super) struct Flow {
    held: bool,
}

impl Flow {
    /// Decides after a pass, from the queue's `ready` messages and whether a consumer is
    /// `hungry`; true while held.
    pub(super) fn update(&mut self, ready: usize, hungry: bool) -> bool {
        let bound = if self.held { FLOW_LOW } else { FLOW_HIGH };
        self.held = hungry && ready > bound;
        self.held
    }

    /// Whether the publishers are held now.
    pub(super) fn held(&self) -> bool {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_above_the_high_mark_while_a_consumer_is_hungry_until_down_to_the_low() {
        let mut flow = Flow::default();
        assert!(!flow.update(FLOW_HIGH, true), "at the mark, not above");
        assert!(!flow.update(FLOW_HIGH + 1, false), "no hungry consumer: an application is slow");
        assert!(flow.update(FLOW_HIGH + 1, true));
        assert!(flow.update(FLOW_LOW + 1, true), "held down to the low mark");
        assert!(!flow.update(FLOW_LOW, true));
        assert!(!flow.update(FLOW_HIGH, true), "and held again only above the high one");
        assert!(flow.update(FLOW_HIGH + 1, true));
        assert!(!flow.update(FLOW_HIGH * 10, false), "let go when no consumer is hungry");
        assert!(!flow.held());
    }
}
