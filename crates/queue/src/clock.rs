//! The broker's wall clock, in the unit RabbitMQ's message TTLs, `x-death` times and expiry
//! deadlines use.
//!
//! A leaf module: queues, dead lettering and the broker's id allocation all read the time, and
//! none of them should have to import another to do so.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 before it, `i64::MAX` past the representable range).
#[must_use]
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_milliseconds_since_the_epoch() {
        let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis();
        let now = u128::try_from(now_ms()).unwrap();
        let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis();
        assert!((before..=after).contains(&now), "{before} <= {now} <= {after}");
        // 2020-01-01 in milliseconds: a clock in seconds or microseconds would miss this range.
        assert!((1_577_836_800_000..4_102_444_800_000).contains(&now));
    }
}
