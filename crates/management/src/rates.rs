//! Message rates for the management API, computed from the counts the queues keep: each read
//! of a queue's counts is a sample, and a rate is the change per second over the samples of
//! the last [`WINDOW`]. The sampler lives with the API: nothing is sampled unless someone
//! looks, and the message path never touches it.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use charon_engine::MessageCounters;

/// How far back a rate looks (RabbitMQ samples every 5 s).
const WINDOW: Duration = Duration::from_secs(5);
/// Samples closer together than this are not kept (bounds memory per queue).
const SPACING: Duration = Duration::from_millis(500);
/// A queue nobody asked about for this long is forgotten.
const FORGET: Duration = Duration::from_secs(60);

/// A queue as the sampler knows it: vhost, name, and the engine's id (a queue declared again
/// under the same name starts over).
pub(crate) type QueueKey = (String, String, u64);

/// A queue's samples, oldest first.
type Samples = VecDeque<(Instant, MessageCounters)>;

/// Recent samples of every queue read.
#[derive(Debug, Default)]
pub(crate) struct Sampler {
    state: Mutex<State>,
}

/// The samples, and when queues nobody reads were last forgotten (a sweep over all of them,
/// so at most once per [`FORGET`], not per read: a listing of 10,000 queues samples each).
#[derive(Debug, Default)]
struct State {
    queues: HashMap<QueueKey, Samples>,
    swept: Option<Instant>,
}

/// Per-second rates of a queue's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Rates {
    pub(crate) published: f64,
    pub(crate) delivered: f64,
    pub(crate) redelivered: f64,
    pub(crate) acked: f64,
}

impl Sampler {
    /// Records `counters` for a queue as read at `now` and returns its rates.
    pub(crate) fn sample(&self, key: QueueKey, now: Instant, counters: MessageCounters) -> Rates {
        let Ok(mut state) = self.state.lock() else { return Rates::default() };
        if state.swept.is_none_or(|at| now.duration_since(at) >= FORGET) {
            state.swept = Some(now);
            state.queues.retain(|_, samples| samples.back().is_some_and(|(at, _)| now.duration_since(*at) < FORGET));
        }
        let samples = state.queues.entry(key).or_default();
        while samples.len() > 1 && samples.front().is_some_and(|(at, _)| now.duration_since(*at) > WINDOW) {
            samples.pop_front();
        }
        let rates = match samples.front() {
            Some((at, old)) if now.duration_since(*at) >= Duration::from_millis(100) => {
                let seconds = now.duration_since(*at).as_secs_f64();
                let rate = |new: u64, old: u64| (new.saturating_sub(old) as f64 / seconds * 10.0).round() / 10.0;
                Rates {
                    published: rate(counters.published, old.published),
                    delivered: rate(counters.delivered, old.delivered),
                    redelivered: rate(counters.redelivered, old.redelivered),
                    acked: rate(counters.acked, old.acked),
                }
            }
            _ => Rates::default(),
        };
        if samples.back().is_none_or(|(at, _)| now.duration_since(*at) >= SPACING) {
            samples.push_back((now, counters));
        }
        rates
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn counts(published: u64, acked: u64) -> MessageCounters {
        MessageCounters { published, acked, ..MessageCounters::default() }
    }

    #[test]
    fn a_rate_is_the_change_per_second_over_the_window() {
        let sampler = Sampler::default();
        let key = || ("/".to_owned(), "q".to_owned(), 1);
        let start = Instant::now();
        assert_eq!(sampler.sample(key(), start, counts(0, 0)), Rates::default(), "one sample has no rate");
        let rates = sampler.sample(key(), start + Duration::from_secs(2), counts(10, 4));
        assert_eq!((rates.published, rates.acked, rates.delivered), (5.0, 2.0, 0.0));
        // Samples older than the window no longer count.
        let rates = sampler.sample(key(), start + Duration::from_secs(10), counts(26, 4));
        assert_eq!(rates.published, 2.0, "(26 - 10) over the 8 s since the sample at 2 s");
        let rates = sampler.sample(key(), start + Duration::from_secs(12), counts(26, 4));
        assert_eq!(rates.published, 0.0);
    }

    #[test]
    fn queues_nobody_reads_are_forgotten() {
        let sampler = Sampler::default();
        let start = Instant::now();
        sampler.sample(("/".to_owned(), "old".to_owned(), 1), start, counts(1, 0));
        sampler.sample(("/".to_owned(), "new".to_owned(), 2), start + FORGET * 2, counts(1, 0));
        let state = sampler.state.lock().unwrap();
        assert_eq!(state.queues.keys().map(|k| k.1.as_str()).collect::<Vec<_>>(), ["new"]);
    }
}
