//! Slowing down password guessing: each source address that failed to log in recently waits
//! before its next login attempt is answered, longer the more it failed. A few failures (a
//! mistyped password, a test suite's refused-login cases) cost nothing.
//!
//! The delay is applied to every attempt from that address, successful or not, so a client
//! cannot cut a slow answer short and read a fast one as success. The table is bounded: when it
//! is full the address with the least recent failure score makes room, so an attacker with many
//! addresses cannot grow it, and the one hammering hardest is the last to be forgotten.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Recent failures that cost no delay.
pub const FREE: f64 = 3.0;
/// The delay added per recent failure beyond [`FREE`].
pub const STEP: Duration = Duration::from_millis(250);
/// The longest delay.
pub const MAX_DELAY: Duration = Duration::from_secs(3);
/// A failure counts half as much after this long.
pub const HALF_LIFE: Duration = Duration::from_secs(60);
/// Addresses remembered at most.
pub const CAPACITY: usize = 16_384;
/// Below this score an address is forgotten.
const FORGOTTEN: f64 = 0.05;

/// Recent login failures per source address.
#[derive(Debug)]
pub struct Throttle {
    entries: Mutex<HashMap<IpAddr, Entry>>,
    capacity: usize,
    free: f64,
    step: Duration,
    max: Duration,
    half_life: Duration,
}

/// An address's failures, decayed to `at`.
#[derive(Clone, Copy, Debug)]
struct Entry {
    score: f64,
    at: Instant,
}

impl Entry {
    fn score_at(&self, now: Instant, half_life: Duration) -> f64 {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.score * 0.5f64.powf(elapsed / half_life.as_secs_f64().max(f64::MIN_POSITIVE))
    }
}

impl Default for Throttle {
    fn default() -> Self {
        Self::new(CAPACITY, FREE, STEP, MAX_DELAY, HALF_LIFE)
    }
}

impl Throttle {
    /// A throttle remembering at most `capacity` addresses, delaying `step` per recent failure
    /// beyond `free` ones, up to `max`, failures halving every `half_life`.
    #[must_use]
    pub fn new(capacity: usize, free: f64, step: Duration, max: Duration, half_life: Duration) -> Self {
        Self { entries: Mutex::new(HashMap::new()), capacity: capacity.max(1), free, step, max, half_life }
    }

    /// How long to wait before answering a login attempt from `address` at `now`.
    #[must_use]
    pub fn delay(&self, address: IpAddr, now: Instant) -> Duration {
        let score = self.entries.lock().get(&key(address)).map_or(0.0, |e| e.score_at(now, self.half_life));
        self.step.mul_f64((score - self.free).max(0.0)).min(self.max)
    }

    /// Counts a failed login from `address` at `now`.
    pub fn record_failure(&self, address: IpAddr, now: Instant) {
        let key = key(address);
        let half_life = self.half_life;
        let mut entries = self.entries.lock();
        if let Some(entry) = entries.get_mut(&key) {
            *entry = Entry { score: entry.score_at(now, half_life) + 1.0, at: now };
            return;
        }
        if entries.len() >= self.capacity {
            entries.retain(|_, e| e.score_at(now, half_life) >= FORGOTTEN);
        }
        if entries.len() >= self.capacity {
            let weakest = entries
                .iter()
                .map(|(k, e)| (*k, e.score_at(now, half_life)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(k, _)| k);
            if let Some(weakest) = weakest {
                entries.remove(&weakest);
            }
        }
        entries.insert(key, Entry { score: 1.0, at: now });
    }

    /// Addresses remembered now.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// Whether no address is remembered.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The key an address is counted under: IPv4 (also when mapped into IPv6) as is, other IPv6
/// addresses by their /64, which one host usually owns whole.
fn key(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX))),
        },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn throttle(capacity: usize) -> Throttle {
        Throttle::new(capacity, 0.0, Duration::from_millis(100), Duration::from_secs(1), Duration::from_secs(10))
    }

    #[test]
    fn the_first_failures_are_free() {
        let t = Throttle::new(8, 2.0, Duration::from_millis(100), Duration::from_secs(1), Duration::from_secs(10));
        let now = Instant::now();
        let a = ip("10.0.0.1");
        t.record_failure(a, now);
        t.record_failure(a, now);
        assert_eq!(t.delay(a, now), Duration::ZERO);
        t.record_failure(a, now);
        assert_eq!(t.delay(a, now), Duration::from_millis(100));
    }

    #[test]
    fn the_delay_grows_with_failures_up_to_the_cap() {
        let t = throttle(8);
        let now = Instant::now();
        let a = ip("10.0.0.1");
        assert_eq!(t.delay(a, now), Duration::ZERO);
        t.record_failure(a, now);
        assert_eq!(t.delay(a, now), Duration::from_millis(100));
        t.record_failure(a, now);
        t.record_failure(a, now);
        assert_eq!(t.delay(a, now), Duration::from_millis(300));
        for _ in 0..20 {
            t.record_failure(a, now);
        }
        assert_eq!(t.delay(a, now), Duration::from_secs(1));
        assert_eq!(t.delay(ip("10.0.0.2"), now), Duration::ZERO, "other addresses are not slowed");
    }

    #[test]
    fn failures_decay_over_time() {
        let t = throttle(8);
        let now = Instant::now();
        let a = ip("10.0.0.1");
        for _ in 0..4 {
            t.record_failure(a, now);
        }
        assert_eq!(t.delay(a, now + Duration::from_secs(10)), Duration::from_millis(200));
        assert_eq!(t.delay(a, now + Duration::from_secs(20)), Duration::from_millis(100));
        assert!(t.delay(a, now + Duration::from_secs(300)) < Duration::from_millis(1));
    }

    #[test]
    fn the_table_is_bounded_and_keeps_the_worst_offender() {
        let t = throttle(4);
        let now = Instant::now();
        let hammer = ip("10.9.9.9");
        for _ in 0..5 {
            t.record_failure(hammer, now);
        }
        for n in 0..1000u32 {
            t.record_failure(IpAddr::V4(std::net::Ipv4Addr::from(0x0b00_0000 + n)), now);
        }
        assert_eq!(t.len(), 4);
        assert_eq!(t.delay(hammer, now), Duration::from_millis(500));
    }

    #[test]
    fn faded_addresses_make_room_first() {
        let t = throttle(2);
        let now = Instant::now();
        t.record_failure(ip("10.0.0.1"), now);
        for _ in 0..3 {
            t.record_failure(ip("10.0.0.2"), now);
        }
        let later = now + Duration::from_secs(600);
        t.record_failure(ip("10.0.0.3"), later);
        assert_eq!(t.len(), 1, "both faded below the floor and were dropped");
        assert_eq!(t.delay(ip("10.0.0.3"), later), Duration::from_millis(100));
    }

    #[test]
    fn ipv6_counts_per_64_and_mapped_ipv4_as_ipv4() {
        let t = throttle(8);
        let now = Instant::now();
        t.record_failure(ip("2001:db8::1"), now);
        assert_eq!(t.delay(ip("2001:db8::ffff:2"), now), Duration::from_millis(100));
        assert_eq!(t.delay(ip("2001:db8:0:1::1"), now), Duration::ZERO);
        t.record_failure(ip("::ffff:10.0.0.1"), now);
        assert_eq!(t.delay(ip("10.0.0.1"), now), Duration::from_millis(100));
    }

    #[tokio::test(start_paused = true)]
    async fn works_with_tokios_paused_clock() {
        let t = Throttle::default();
        let a = ip("10.0.0.1");
        for _ in 0..5 {
            t.record_failure(a, tokio::time::Instant::now().into_std());
        }
        assert_eq!(t.delay(a, tokio::time::Instant::now().into_std()), STEP * 2);
        tokio::time::advance(HALF_LIFE).await;
        // 5 failures decayed to 2.5: within the free allowance.
        assert_eq!(t.delay(a, tokio::time::Instant::now().into_std()), Duration::ZERO);
    }
}
