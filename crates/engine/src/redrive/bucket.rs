//! A token bucket for a job's rate limit: tokens refill continuously at the rate, up to one
//! second's worth, and a job that has none sleeps exactly until enough have refilled — no
//! busy-waiting.

use std::time::{Duration, Instant};

/// Messages per second, with a burst of at most one second's worth.
#[derive(Debug)]
pub struct TokenBucket {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A bucket for `rate` messages per second, starting with one token (so a job starts at
    /// once, then keeps its rate).
    #[must_use]
    pub fn new(rate: u32, now: Instant) -> Self {
        Self { rate: f64::from(rate.max(1)), tokens: 1.0, last: now }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.rate.max(1.0));
        self.last = now;
    }

    /// Takes up to `wanted` tokens at `now`: how many were taken (possibly 0), and when none
    /// were, how long until the next one refills.
    pub fn take(&mut self, wanted: u32, now: Instant) -> (u32, Option<Duration>) {
        self.refill(now);
        let available = self.tokens.floor().min(f64::from(wanted));
        if available >= 1.0 {
            self.tokens -= available;
            // Whole numbers no larger than `wanted`: the conversion is exact.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            return (available as u32, None);
        }
        let missing = 1.0 - self.tokens;
        (0, Some(Duration::from_secs_f64(missing / self.rate)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_keeps_the_rate_and_says_how_long_to_wait() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(10, start);
        assert_eq!(bucket.take(5, start), (1, None));
        let (taken, wait) = bucket.take(5, start);
        assert_eq!(taken, 0);
        let wait = wait.unwrap();
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "{wait:?}");
        // Half a second later five more have refilled.
        assert_eq!(bucket.take(100, start + Duration::from_millis(500)), (5, None));
        // Ten seconds of idleness give at most one second's worth.
        assert_eq!(bucket.take(100, start + Duration::from_secs(11)), (10, None));
    }
}
