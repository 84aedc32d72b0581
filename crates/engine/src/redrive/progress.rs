//! A job's progress as the API shows it, and what a dry run counted.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Counts of a job, readable while it runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Messages the destination confirmed and the source let go.
    pub moved: u64,
    /// Messages the filter left in the source (in the current pass over it).
    pub skipped: u64,
    /// Messages the destination refused or that could not be addressed (they stay in the
    /// source).
    pub failed: u64,
    /// Messages of the current pass not yet looked at (bounded by what `max_messages` leaves).
    pub remaining: u64,
    /// Messages moved per second, recently.
    pub rate: f64,
    /// Seconds until done at that rate; `None` while nothing moves.
    pub eta_seconds: Option<f64>,
}

/// What a dry run counted: the messages that would move, by death reason and by the queue
/// they died in (their last death).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DryRunResult {
    /// Messages that would move.
    pub total: u64,
    /// By reason.
    pub by_reason: BTreeMap<String, u64>,
    /// By source queue.
    pub by_source: BTreeMap<String, u64>,
}

impl DryRunResult {
    /// Counts one message whose last death was `reason` in `queue` (`None`: it never died).
    pub fn count(&mut self, death: Option<(&str, &str)>) {
        self.total += 1;
        if let Some((reason, queue)) = death {
            *self.by_reason.entry(reason.to_owned()).or_default() += 1;
            *self.by_source.entry(queue.to_owned()).or_default() += 1;
        }
    }
}

/// The moving rate, from the moved count sampled about once a second: an exponentially
/// weighted average, so a short stall or burst shows without jumping.
#[derive(Debug)]
pub struct RateMeter {
    last: Instant,
    last_moved: u64,
    rate: f64,
}

impl RateMeter {
    /// A meter starting at `now` with `moved` already counted.
    #[must_use]
    pub fn new(now: Instant, moved: u64) -> Self {
        Self { last: now, last_moved: moved, rate: 0.0 }
    }

    /// Samples `moved` at `now` (at most once per second counts) and returns the rate.
    pub fn sample(&mut self, now: Instant, moved: u64) -> f64 {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        if elapsed >= 1.0 {
            #[allow(clippy::cast_precision_loss)]
            let instant = moved.saturating_sub(self.last_moved) as f64 / elapsed;
            self.rate = if self.rate == 0.0 { instant } else { 0.5 * self.rate + 0.5 * instant };
            self.last = now;
            self.last_moved = moved;
        }
        self.rate
    }
}

impl Progress {
    /// Sets the rate and the ETA it gives for what remains.
    pub fn set_rate(&mut self, rate: f64) {
        self.rate = rate;
        #[allow(clippy::cast_precision_loss)]
        let eta = (rate > 0.0).then(|| (self.remaining as f64 / rate * 10.0).round() / 10.0);
        self.eta_seconds = eta;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_rate_averages_per_second_samples_and_gives_an_eta() {
        let start = Instant::now();
        let mut meter = RateMeter::new(start, 0);
        assert_eq!(meter.sample(start + Duration::from_millis(500), 50), 0.0);
        assert_eq!(meter.sample(start + Duration::from_secs(1), 100), 100.0);
        assert_eq!(meter.sample(start + Duration::from_secs(2), 300), 150.0);
        let mut p = Progress { remaining: 300, ..Progress::default() };
        p.set_rate(150.0);
        assert_eq!(p.eta_seconds, Some(2.0));
        p.set_rate(0.0);
        assert_eq!(p.eta_seconds, None);
    }

    #[test]
    fn a_dry_run_counts_by_reason_and_source() {
        let mut dry = DryRunResult::default();
        dry.count(Some(("rejected", "orders")));
        dry.count(Some(("rejected", "billing")));
        dry.count(Some(("expired", "orders")));
        dry.count(None);
        assert_eq!(dry.total, 4);
        assert_eq!(dry.by_reason.get("rejected"), Some(&2));
        assert_eq!(dry.by_source.get("orders"), Some(&2));
    }
}
