//! Publishes waiting for their queues' confirmations, for publishers whose answer needs every
//! queue a message was routed to (a 1.0 disposition, a redrive letting its source go).

use foldhash::{HashMap, HashMapExt};

/// Confirm numbers handed out, each with the queues yet to answer it and the caller's `T`.
///
/// Numbers count up from 1, or'ed with a fixed `mark` (a redrive's
/// [`crate::queue::REFUSED_TO_PUBLISHER_BIT`], which asks a full queue to refuse rather than
/// dead-letter). Unlike 0.9.1's channel confirms (a ring, answered mostly in order, acked as
/// `multiple`), these are looked up one by one, in a map hashed with foldhash: the keys are
/// ours, not an attacker's, and SipHash was a measurable share of a 1.0 publish.
#[derive(Debug)]
pub struct Outstanding<T> {
    mark: u64,
    next: u64,
    waiting: HashMap<u64, Waiting<T>>,
}

#[derive(Debug)]
struct Waiting<T> {
    queues: usize,
    refused_on: Option<u32>,
    value: T,
}

/// A publish every queue answered for.
#[derive(Debug, PartialEq, Eq)]
pub struct Answered<T> {
    /// What the caller kept with it.
    pub value: T,
    /// The channel of the first queue that refused it; `None` when all accepted.
    pub refused_on: Option<u32>,
}

impl<T> Outstanding<T> {
    /// Nothing outstanding; numbers will carry `mark`.
    #[must_use]
    pub fn new(mark: u64) -> Self {
        Self { mark, next: 1, waiting: HashMap::new() }
    }

    /// The number of a publish routed to `queues` queues (at least one), kept with `value`.
    pub fn expect(&mut self, queues: usize, value: T) -> u64 {
        let number = self.next | self.mark;
        self.next += 1;
        self.waiting.insert(number, Waiting { queues, refused_on: None, value });
        number
    }

    /// The queue on `channel` accepted or refused publish `number`: the publish once it was
    /// the last to answer. Unknown numbers (answered already) are ignored.
    pub fn answer(&mut self, number: u64, channel: u32, accepted: bool) -> Option<Answered<T>> {
        let waiting = self.waiting.get_mut(&number)?;
        waiting.queues = waiting.queues.saturating_sub(1);
        if !accepted && waiting.refused_on.is_none() {
            waiting.refused_on = Some(channel);
        }
        if waiting.queues > 0 {
            return None;
        }
        let Waiting { value, refused_on, .. } = self.waiting.remove(&number)?;
        Some(Answered { value, refused_on })
    }

    /// Forgets the publishes whose value `keep` refuses: their answers will be ignored.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        self.waiting.retain(|_, waiting| keep(&waiting.value));
    }

    /// How many publishes wait.
    #[must_use]
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether none waits.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}
