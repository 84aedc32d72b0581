//! What a queue counts when it dead-letters (or drops) a message: RabbitMQ's global counters
//! (`rabbit_global_counters.erl`, through the `metrics` facade) and Charon's per-queue counts,
//! which live on the queue's handle and are rendered by the Prometheus endpoint
//! (`gateway/src/prometheus/charon.rs`).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use charon_model::DeathReason;
use metrics::{Counter, counter};

use crate::args::QueueType;

/// The reasons a message is dead-lettered, in the order the counters are kept.
pub const REASONS: [DeathReason; 4] =
    [DeathReason::Maxlen, DeathReason::Expired, DeathReason::Rejected, DeathReason::DeliveryLimit];

/// The strategies a queue's counts are kept under, in order.
pub const STRATEGIES: [DeadLetterStrategy; 3] =
    [DeadLetterStrategy::Disabled, DeadLetterStrategy::AtMostOnce, DeadLetterStrategy::AtLeastOnce];

/// Messages one queue dead-lettered (or dropped for want of a dead-letter exchange), by reason
/// and strategy; and the queue's handles on the global counters it adds to.
#[derive(Debug, Default)]
pub struct DeadLetterCounts {
    counts: [[AtomicU64; 3]; 4],
    /// Made at the queue's first dead letter (the recorder is installed long before): looking
    /// a labelled counter up by name at every dead letter cost more than the rest of counting.
    globals: OnceLock<GlobalCounters>,
}

/// One queue's handles on RabbitMQ's global dead-letter counters (its type is fixed).
#[derive(Debug)]
struct GlobalCounters {
    by_reason: [[Counter; 3]; 4],
    confirmed: Counter,
}

impl GlobalCounters {
    fn new(queue_type: QueueType) -> Self {
        let by_strategy = |reason: DeathReason| {
            STRATEGIES.map(|strategy| {
                counter!(global_name(reason), "queue_type" => queue_type.module(), "dead_letter_strategy" => strategy.label())
            })
        };
        let confirmed = counter!(
            "rabbitmq_global_messages_dead_lettered_confirmed_total",
            "queue_type" => queue_type.module(),
            "dead_letter_strategy" => DeadLetterStrategy::AtLeastOnce.label()
        );
        Self { by_reason: REASONS.map(by_strategy), confirmed }
    }
}

/// The slot of `strategy` and `reason` in an array laid out as [`REASONS`] × [`STRATEGIES`].
fn pick<T>(by_reason: &[[T; 3]; 4], strategy: DeadLetterStrategy, reason: DeathReason) -> &T {
    let [maxlen, expired, rejected, delivery_limit] = by_reason;
    let by_strategy = match reason {
        DeathReason::Maxlen => maxlen,
        DeathReason::Expired => expired,
        DeathReason::Rejected => rejected,
        DeathReason::DeliveryLimit => delivery_limit,
    };
    let [disabled, at_most_once, at_least_once] = by_strategy;
    match strategy {
        DeadLetterStrategy::Disabled => disabled,
        DeadLetterStrategy::AtMostOnce => at_most_once,
        DeadLetterStrategy::AtLeastOnce => at_least_once,
    }
}

impl DeadLetterCounts {
    fn slot(&self, strategy: DeadLetterStrategy, reason: DeathReason) -> &AtomicU64 {
        pick(&self.counts, strategy, reason)
    }

    fn globals(&self, queue_type: QueueType) -> &GlobalCounters {
        self.globals.get_or_init(|| GlobalCounters::new(queue_type))
    }

    /// Counts one message.
    pub fn add(&self, strategy: DeadLetterStrategy, reason: DeathReason) {
        self.slot(strategy, reason).fetch_add(1, Ordering::Relaxed);
    }

    /// The count for `reason` under `strategy`.
    #[must_use]
    pub fn get(&self, strategy: DeadLetterStrategy, reason: DeathReason) -> u64 {
        self.slot(strategy, reason).load(Ordering::Relaxed)
    }

    /// Every (reason, strategy) that counted at least one message, with its count, reasons in
    /// the order RabbitMQ lists them: a series appears on its first count.
    pub fn counted(&self) -> impl Iterator<Item = (DeathReason, DeadLetterStrategy, u64)> + '_ {
        REASONS.into_iter().flat_map(move |reason| {
            STRATEGIES.into_iter().filter_map(move |strategy| {
                let count = self.get(strategy, reason);
                (count > 0).then_some((reason, strategy, count))
            })
        })
    }
}

/// The `dead_letter_strategy` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadLetterStrategy {
    /// No dead-letter exchange configured, or it does not exist: the message was dropped.
    Disabled,
    /// Dead-lettered without confirmation.
    AtMostOnce,
    /// Kept until every target confirmed (quorum queues, RabbitMQ's `at-least-once`).
    AtLeastOnce,
}

impl DeadLetterStrategy {
    /// The label's value.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Disabled => "disabled",
            Self::AtMostOnce => "at_most_once",
            Self::AtLeastOnce => "at_least_once",
        }
    }
}

/// RabbitMQ's global counter for messages dead-lettered for `reason`.
#[must_use]
pub fn global_name(reason: DeathReason) -> &'static str {
    match reason {
        DeathReason::Maxlen => "rabbitmq_global_messages_dead_lettered_maxlen_total",
        DeathReason::Expired => "rabbitmq_global_messages_dead_lettered_expired_total",
        DeathReason::Rejected => "rabbitmq_global_messages_dead_lettered_rejected_total",
        DeathReason::DeliveryLimit => "rabbitmq_global_messages_dead_lettered_delivery_limit_total",
    }
}

/// Counts one message dead-lettered (or dropped) by a queue.
pub fn count_dead_letter(
    queue_type: QueueType,
    strategy: DeadLetterStrategy,
    reason: DeathReason,
    queue: &DeadLetterCounts,
) {
    pick(&queue.globals(queue_type).by_reason, strategy, reason).increment(1);
    queue.add(strategy, reason);
}

/// Counts one at-least-once dead letter that every target confirmed
/// (`rabbitmq_global_messages_dead_lettered_confirmed_total`; a classic queue's only under
/// Charon's guarantee).
pub(crate) fn count_confirmed(queue_type: QueueType, queue: &DeadLetterCounts) {
    queue.globals(queue_type).confirmed.increment(1);
}
