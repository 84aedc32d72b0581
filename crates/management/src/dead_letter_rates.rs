//! Dead-lettering rates by reason for the dead-letters overview, sampled like the queues'
//! message rates ([`crate::rates`]): each read of a queue's counts is a sample, a rate is the
//! change per second over the last [`WINDOW`], and nothing is sampled unless someone looks.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::rates::QueueKey;

/// How far back a rate looks.
const WINDOW: Duration = Duration::from_secs(5);
/// Samples closer together than this are not kept.
const SPACING: Duration = Duration::from_millis(500);
/// A queue nobody asked about for this long is forgotten.
const FORGET: Duration = Duration::from_secs(60);

/// Counts by reason, in the order of [`REASONS`].
pub(crate) type Counts = [u64; 4];

/// The reasons, in the order of [`Counts`].
pub(crate) const REASONS: [&str; 4] = ["rejected", "expired", "maxlen", "delivery_limit"];

/// Recent samples of every queue read.
#[derive(Debug, Default)]
pub(crate) struct DeadLetterRates {
    queues: Mutex<HashMap<QueueKey, VecDeque<(Instant, Counts)>>>,
}

impl DeadLetterRates {
    /// Records `counts` for a queue at `now` and returns the per-second rates by reason.
    pub(crate) fn sample(&self, key: QueueKey, now: Instant, counts: Counts) -> [f64; 4] {
        let Ok(mut queues) = self.queues.lock() else { return [0.0; 4] };
        queues.retain(|_, samples| samples.back().is_some_and(|(at, _)| now.duration_since(*at) < FORGET));
        let samples = queues.entry(key).or_default();
        while samples.len() > 1 && samples.front().is_some_and(|(at, _)| now.duration_since(*at) > WINDOW) {
            samples.pop_front();
        }
        let rates = match samples.front() {
            Some((at, old)) if now.duration_since(*at) >= Duration::from_millis(100) => {
                let seconds = now.duration_since(*at).as_secs_f64();
                #[allow(clippy::cast_precision_loss)]
                let rate = |new: u64, old: u64| (new.saturating_sub(old) as f64 / seconds * 10.0).round() / 10.0;
                let mut out = [0.0; 4];
                for ((slot, new), old) in out.iter_mut().zip(counts).zip(*old) {
                    *slot = rate(new, old);
                }
                out
            }
            _ => [0.0; 4],
        };
        if samples.back().is_none_or(|(at, _)| now.duration_since(*at) >= SPACING) {
            samples.push_back((now, counts));
        }
        rates
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn rates_by_reason_are_the_change_per_second() {
        let rates = DeadLetterRates::default();
        let key = || ("/".to_owned(), "q".to_owned(), 1);
        let start = Instant::now();
        assert_eq!(rates.sample(key(), start, [0, 0, 0, 0]), [0.0; 4]);
        assert_eq!(rates.sample(key(), start + Duration::from_secs(2), [10, 4, 0, 2]), [5.0, 2.0, 0.0, 1.0]);
    }
}
