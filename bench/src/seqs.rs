//! What each message carries — its sequence number and the time it was meant to be sent — and
//! the receiving side's bookkeeping of lost and duplicated messages.

use std::time::Instant;

/// Bodies are 16 bytes: a sequence number and a send time, both little-endian u64.
pub(crate) const BODY_LEN: usize = 16;

/// A body for message `seq`, scheduled `sent_ns` after the run's epoch.
pub(crate) fn body(seq: u64, sent_ns: u64) -> [u8; BODY_LEN] {
    let mut body = [0u8; BODY_LEN];
    let (a, b) = body.split_at_mut(8);
    a.copy_from_slice(&seq.to_le_bytes());
    b.copy_from_slice(&sent_ns.to_le_bytes());
    body
}

/// The sequence number and send time of a body (of at least 16 bytes).
pub(crate) fn read(body: &[u8]) -> Option<(u64, u64)> {
    let seq = u64::from_le_bytes(body.get(..8)?.try_into().ok()?);
    let sent = u64::from_le_bytes(body.get(8..16)?.try_into().ok()?);
    Some((seq, sent))
}

/// When message `seq` is sent, in nanoseconds since `epoch`: at full speed (`interval_ns` is
/// `None`) now. At a fixed rate, a sender more than a millisecond (the timer's resolution)
/// ahead of the schedule sleeps until then and counts from when it woke: the timer's lateness
/// is the sender's, not the broker's. A sender less than that ahead sends at once and counts
/// from now, not from the later scheduled time, which would hide up to a millisecond of
/// latency. A sender behind the schedule counts from the scheduled time, so a stalled broker
/// shows as latency rather than as a slower sender (no coordinated omission).
pub(crate) async fn send_time(seq: u64, interval_ns: Option<u64>, epoch: Instant) -> u64 {
    let now = since(epoch);
    let Some(interval) = interval_ns else { return now };
    let scheduled = seq * interval;
    if scheduled > now + 1_000_000 {
        tokio::time::sleep(std::time::Duration::from_nanos(scheduled - now)).await;
        return since(epoch).max(scheduled);
    }
    scheduled.min(now)
}

/// Nanoseconds since `epoch`.
pub(crate) fn since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Which of `expected` messages arrived, and how many twice.
#[derive(Debug)]
pub(crate) struct Tracker {
    seen: Vec<u64>,
    expected: u64,
    distinct: u64,
    /// Deliveries of a message already seen.
    pub(crate) duplicates: u64,
    /// Deliveries that are no message of this run.
    pub(crate) foreign: u64,
}

impl Tracker {
    pub(crate) fn new(expected: u64) -> Self {
        let words = usize::try_from(expected.div_ceil(64)).unwrap_or(0);
        Self { seen: vec![0; words], expected, distinct: 0, duplicates: 0, foreign: 0 }
    }

    /// Records a delivery; true when it was new.
    pub(crate) fn saw(&mut self, seq: u64) -> bool {
        let word = usize::try_from(seq / 64).unwrap_or(usize::MAX);
        let Some(bits) = self.seen.get_mut(word).filter(|_| seq < self.expected) else {
            self.foreign += 1;
            return false;
        };
        let bit = 1u64 << (seq % 64);
        if *bits & bit != 0 {
            self.duplicates += 1;
            return false;
        }
        *bits |= bit;
        self.distinct += 1;
        true
    }

    /// Whether every expected message arrived.
    pub(crate) fn complete(&self) -> bool {
        self.distinct == self.expected
    }

    /// Messages that never arrived.
    pub(crate) fn lost(&self) -> u64 {
        self.expected - self.distinct
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MS: u64 = 1_000_000;

    #[tokio::test]
    async fn a_sender_behind_its_schedule_counts_from_the_scheduled_time() {
        let epoch = Instant::now().checked_sub(Duration::from_millis(50)).expect("an instant 50 ms ago");
        assert_eq!(send_time(1, Some(10 * MS), epoch).await, 10 * MS);
    }

    #[tokio::test]
    async fn a_sender_just_ahead_sends_at_once_and_counts_from_now() {
        // An epoch half a second ahead keeps `now` at zero for the test's duration.
        let epoch = Instant::now() + Duration::from_millis(500);
        assert_eq!(send_time(1, Some(MS / 2), epoch).await, 0, "not the scheduled 0.5 ms");
    }

    #[tokio::test]
    async fn a_sender_far_ahead_sleeps_and_counts_from_when_it_woke() {
        let epoch = Instant::now();
        let sent = send_time(1, Some(20 * MS), epoch).await;
        let after = since(epoch);
        assert!(sent > 20 * MS && sent <= after, "woke at {sent} ns, after the scheduled 20 ms, before {after}");
    }

    #[tokio::test]
    async fn at_full_speed_a_sender_counts_from_now() {
        let epoch = Instant::now() + Duration::from_millis(500);
        assert_eq!(send_time(7, None, epoch).await, 0);
    }
}
