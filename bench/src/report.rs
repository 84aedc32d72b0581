//! What one run measured, how it is printed, and how two brokers' runs compare.

use std::fmt::Write as _;

/// Latency percentiles, microseconds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Percentiles {
    pub(crate) p50: u64,
    pub(crate) p99: u64,
    pub(crate) p999: u64,
}

impl Percentiles {
    pub(crate) fn of(histogram: &hdrhistogram::Histogram<u64>) -> Option<Self> {
        (!histogram.is_empty()).then(|| Self {
            p50: histogram.value_at_quantile(0.50),
            p99: histogram.value_at_quantile(0.99),
            p999: histogram.value_at_quantile(0.999),
        })
    }
}

/// The figure two brokers are compared on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Score {
    /// Messages per second: more is better.
    Throughput,
    /// Bytes of broker memory per queued message: less is better.
    BytesPerMessage,
    /// Milliseconds one management listing takes (`messages` counts the objects listed): less
    /// is better.
    ListingMillis,
    /// Milliseconds one declare takes, the median (`messages` counts the declares): less is
    /// better.
    DeclareMillis,
}

/// One run of one scenario against one broker.
#[derive(Clone, Debug)]
pub(crate) struct Outcome {
    /// Messages the rate counts.
    pub(crate) messages: u64,
    /// Seconds the run took (what the rate divides by).
    pub(crate) seconds: f64,
    /// What is compared.
    pub(crate) score: Score,
    /// The compared value (msg/s, or bytes per message).
    pub(crate) value: f64,
    pub(crate) latency: Option<Percentiles>,
    /// Broker CPU seconds over the run.
    pub(crate) cpu_seconds: Option<f64>,
    /// Broker resident memory at its peak during the run, bytes.
    pub(crate) peak_rss: Option<u64>,
    pub(crate) lost: u64,
    pub(crate) duplicates: u64,
    /// Scenario-specific figures.
    pub(crate) notes: Vec<String>,
}

impl Outcome {
    /// A throughput outcome: `messages` in `seconds`.
    pub(crate) fn throughput(messages: u64, seconds: f64) -> Self {
        let value = if seconds > 0.0 { messages as f64 / seconds } else { 0.0 };
        Self {
            messages,
            seconds,
            score: Score::Throughput,
            value,
            latency: None,
            cpu_seconds: None,
            peak_rss: None,
            lost: 0,
            duplicates: 0,
            notes: Vec::new(),
        }
    }

    /// One line for the terminal.
    pub(crate) fn line(&self) -> String {
        let mut out = match self.score {
            Score::Throughput => {
                format!("{} msgs in {:.2} s = {:.0} msg/s", self.messages, self.seconds, self.value)
            }
            Score::BytesPerMessage => format!("{} msgs queued: {:.1} B/msg", self.messages, self.value),
            Score::ListingMillis => format!("{} objects listed in {:.0} ms", self.messages, self.value),
            Score::DeclareMillis => format!("{} declares: median {:.2} ms", self.messages, self.value),
        };
        if let Some(l) = self.latency {
            let _ = write!(out, "  latency p50 {} µs p99 {} µs p99.9 {} µs", l.p50, l.p99, l.p999);
        }
        if let Some(cpu) = self.cpu_seconds {
            let per_million = cpu / (self.messages.max(1) as f64) * 1e6;
            let _ = write!(out, "  cpu {cpu:.2} s ({per_million:.1} s/1M)");
        }
        if let Some(rss) = self.peak_rss {
            let _ = write!(out, "  peak rss {:.1} MB", rss as f64 / 1e6);
        }
        let _ = write!(out, "  lost {} dup {}", self.lost, self.duplicates);
        for note in &self.notes {
            let _ = write!(out, "  {note}");
        }
        out
    }
}

/// The median of some values (the mean of the middle two for an even count).
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match (sorted.get(n / 2), n % 2) {
        (Some(mid), 1) => *mid,
        (Some(high), _) => sorted.get(n / 2 - 1).map_or(*high, |low| (low + high) / 2.0),
        (None, _) => 0.0,
    }
}

/// How many times better A is than B on `score` (above 1: A is better).
pub(crate) fn advantage(score: Score, a: f64, b: f64) -> f64 {
    match score {
        Score::Throughput if b > 0.0 => a / b,
        Score::BytesPerMessage | Score::ListingMillis | Score::DeclareMillis if a > 0.0 => b / a,
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_advantage() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(advantage(Score::Throughput, 300.0, 100.0), 3.0);
        assert_eq!(advantage(Score::BytesPerMessage, 50.0, 500.0), 10.0);
    }
}
