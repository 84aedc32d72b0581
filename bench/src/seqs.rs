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
/// `None`) now; at a fixed rate its scheduled time, after sleeping until then. The scheduled
/// time, not the actual one, so a stalled broker shows as latency rather than as a slower
/// sender (no coordinated omission).
pub(crate) async fn send_time(seq: u64, interval_ns: Option<u64>, epoch: Instant) -> u64 {
    let Some(interval) = interval_ns else { return since(epoch) };
    let scheduled = seq * interval;
    let now = since(epoch);
    if scheduled > now + 1_000_000 {
        tokio::time::sleep(std::time::Duration::from_nanos(scheduled - now)).await;
    }
    scheduled
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
