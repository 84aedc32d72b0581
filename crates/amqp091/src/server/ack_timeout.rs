//! RabbitMQ 4.0.5's consumer (delivery acknowledgement) timeout on 0.9.1 channels
//! (`rabbit_channel:evaluate_consumer_timeout/1`): when a channel's oldest unacknowledged
//! delivery — to a consumer or by `basic.get` — is older than the timeout of the queue it came
//! from, the channel is closed with 406 PRECONDITION_FAILED, which requeues what it held.
//!
//! As in RabbitMQ only the oldest delivery of each channel is looked at, and the queue's
//! timeout is read when it is checked (a policy may change it meanwhile). RabbitMQ checks on
//! its 60-second channel tick, so it closes up to a minute after the deadline; Charon keeps
//! one timer per connection, armed for the earliest deadline, and closes at it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use charon_engine::ConsumerTimeout;

use super::MethodError;
use super::channel::{ChannelState, PendingAck};
use crate::proto::ReplyCode;

/// Longest the timer sleeps while a channel holds unacknowledged deliveries: a policy may
/// shorten a queue's timeout meanwhile (RabbitMQ re-reads it on every 60-second tick).
const RESCAN: Duration = Duration::from_secs(60);

/// When a delivery made at `delivered_at` from a queue with `timeout` expires, with the
/// timeout in ms that the close reports; `None`: never. A zero or negative timeout expires at
/// once.
pub(crate) fn deadline(
    delivered_at: Instant,
    timeout: ConsumerTimeout,
    broker_default: Option<u64>,
) -> Option<(Instant, i64)> {
    let ms = timeout.millis(broker_default)?;
    let at = match u64::try_from(ms) {
        Ok(ms) => delivered_at.checked_add(Duration::from_millis(ms))?,
        Err(_) => delivered_at,
    };
    Some((at, ms))
}

/// The close text RabbitMQ 4.0.5 sends.
pub(crate) fn explanation(channel: u16, timeout_ms: i64) -> String {
    format!(
        "delivery acknowledgement on channel {channel} timed out. Timeout value used: {timeout_ms} ms. \
         This timeout value can be configured, see consumers doc guide to learn more"
    )
}

/// What one check of a channel's oldest delivery found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// Past its deadline: close the channel, reporting this timeout (ms).
    Expired(i64),
    /// Check again by then.
    Later(Instant),
}

/// Checks a channel's oldest delivery at `now`.
pub(crate) fn check(oldest: &PendingAck, now: Instant, broker_default: Option<u64>) -> Check {
    match deadline(oldest.delivered_at, oldest.queue.consumer_timeout.get(), broker_default) {
        Some((at, ms)) if now >= at => Check::Expired(ms),
        Some((at, _)) => Check::Later(at.min(now + RESCAN)),
        None => Check::Later(now + RESCAN),
    }
}

/// The connection's one timer for its channels' oldest deliveries. It may fire early (an ack
/// removed the delivery it was armed for): the check then re-arms it. It must never fire late.
#[derive(Debug)]
pub(crate) struct AckTimer {
    next: Option<Instant>,
    /// The broker's `consumer_timeout` in ms (`None`: off), for queues that set none.
    broker_default: Option<u64>,
}

impl AckTimer {
    /// A timer not armed yet, for a broker whose `consumer_timeout` is `broker_default`.
    pub(crate) fn new(broker_default: Option<u64>) -> Self {
        Self { next: None, broker_default }
    }

    /// When the next check is due.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.next
    }

    /// Whether a check is due at `now`.
    pub(crate) fn is_due(&self, now: Instant) -> bool {
        self.next.is_some_and(|at| now >= at)
    }

    /// A channel's oldest delivery changed to `oldest`: its check is due by its deadline, or
    /// by the rescan interval after it went out.
    pub(crate) fn watch(&mut self, oldest: &PendingAck) {
        let rescan = oldest.delivered_at + RESCAN;
        let at = deadline(oldest.delivered_at, oldest.queue.consumer_timeout.get(), self.broker_default)
            .map_or(rescan, |(at, _)| at.min(rescan));
        self.next = Some(self.next.map_or(at, |next| next.min(at)));
    }

    /// After a check: the earliest of the channels' next checks, if any holds a delivery.
    pub(crate) fn rearm(&mut self, next: Option<Instant>) {
        self.next = next;
    }

    /// Checks every channel's oldest delivery at `now` and re-arms for the ones not expired;
    /// the channels to close, in order, with RabbitMQ's 406 (the close requeues what they
    /// hold).
    pub(crate) fn expire(&mut self, channels: &HashMap<u16, ChannelState>, now: Instant) -> Vec<(u16, MethodError)> {
        let mut next: Option<Instant> = None;
        let mut expired: Vec<(u16, i64)> = Vec::new();
        for (channel, state) in channels {
            let Some(oldest) = state.unacked.oldest() else {
                continue;
            };
            match check(oldest, now, self.broker_default) {
                Check::Expired(ms) => expired.push((*channel, ms)),
                Check::Later(at) => next = Some(next.map_or(at, |n| n.min(at))),
            }
        }
        self.rearm(next);
        expired.sort_unstable();
        let close = |(channel, ms): (u16, i64)| {
            tracing::warn!(channel, timeout_ms = ms, "consumer timed out waiting for a delivery acknowledgement");
            (channel, MethodError::new(ReplyCode::PreconditionFailed, explanation(channel, ms)))
        };
        expired.into_iter().map(close).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use charon_engine::{QueueRef, QueueSettings, QueueType};
    use charon_model::{Table, Value};

    use super::*;

    use super::super::test_queue::queue_with as queue;

    fn pending(queue: &QueueRef, delivered_at: Instant) -> PendingAck {
        PendingAck { queue: Arc::clone(queue), seq: 1, consumed: true, delivered_at }
    }

    #[test]
    fn deadlines_add_the_timeout_and_never_come_early() {
        let t0 = Instant::now();
        let ms = |n| Duration::from_millis(n);
        assert_eq!(deadline(t0, ConsumerTimeout::Millis(1000), None), Some((t0 + ms(1000), 1000)));
        assert_eq!(
            deadline(t0, ConsumerTimeout::BrokerDefault, Some(charon_engine::queue::DEFAULT_CONSUMER_TIMEOUT_MS)),
            Some((t0 + ms(1_800_000), 1_800_000))
        );
        assert_eq!(deadline(t0, ConsumerTimeout::BrokerDefault, None), None, "consumer_timeout = false");
        assert_eq!(deadline(t0, ConsumerTimeout::Never, Some(1000)), None);
        assert_eq!(deadline(t0, ConsumerTimeout::Millis(-5), None), Some((t0, -5)));
    }

    #[test]
    fn the_close_text_is_rabbitmqs() {
        assert_eq!(
            explanation(1, 1000),
            "delivery acknowledgement on channel 1 timed out. Timeout value used: 1000 ms. This timeout value \
             can be configured, see consumers doc guide to learn more"
        );
    }

    #[tokio::test]
    async fn a_check_expires_at_the_deadline_and_rescans_otherwise() {
        let q = queue(Table::from_iter([("x-consumer-timeout".to_owned(), Value::I32(1000))])).await;
        let t0 = Instant::now();
        let oldest = pending(&q, t0);
        assert_eq!(check(&oldest, t0 + Duration::from_millis(999), None), Check::Later(t0 + Duration::from_secs(1)));
        assert_eq!(check(&oldest, t0 + Duration::from_millis(1000), None), Check::Expired(1000));
        // A policy that lifts the timeout is read at the check.
        q.apply_settings(QueueSettings::resolve(QueueType::Classic, &Table::new(), None, false)).await;
        let now = t0 + Duration::from_secs(5);
        assert_eq!(check(&oldest, now, None), Check::Later(now + RESCAN));
        assert_eq!(check(&oldest, now, Some(3000)), Check::Expired(3000));
    }

    #[tokio::test]
    async fn the_timer_takes_the_earliest_deadline_capped_by_the_rescan() {
        let short = queue(Table::from_iter([("x-consumer-timeout".to_owned(), Value::I32(1000))])).await;
        let long = queue(Table::new()).await;
        let t0 = Instant::now();
        let mut timer = AckTimer::new(Some(charon_engine::queue::DEFAULT_CONSUMER_TIMEOUT_MS));
        assert_eq!(timer.next(), None);
        timer.watch(&pending(&long, t0));
        assert_eq!(timer.next(), Some(t0 + RESCAN), "30 minutes away: rescanned after a minute");
        timer.watch(&pending(&short, t0 + Duration::from_millis(10)));
        assert_eq!(timer.next(), Some(t0 + Duration::from_millis(1010)));
        // A later watch never pushes it back.
        timer.watch(&pending(&long, t0 + Duration::from_secs(2)));
        assert_eq!(timer.next(), Some(t0 + Duration::from_millis(1010)));
        assert!(!timer.is_due(t0 + Duration::from_millis(1009)));
        assert!(timer.is_due(t0 + Duration::from_millis(1010)));
        timer.rearm(None);
        assert!(!timer.is_due(t0 + Duration::from_secs(3600)));
    }
}
