//! A queue's limits — message TTL, length limits, delivery limit, `x-expires` — as RabbitMQ
//! 4.0.5 applies them (rabbitmq-dlx.md §1.3–1.4). [`Limits`] decides; the queue's state acts
//! on its decisions (drops the head, dead-letters what expired):
//!
//! - A message's expiry is fixed at enqueue: now + min(queue TTL, its own TTL). Only the head
//!   of the queue expires, so expiry never scans the queue; the task's timer wakes up for the
//!   head's deadline.
//! - Length limits count ready messages only. `drop-head` enqueues and then drops from the head;
//!   classic `reject-publish(-dlx)` refuses a message that would not fit; quorum
//!   `reject-publish` is approximate: the message that crosses the limit is accepted, and
//!   publishes are refused until the queue is back to 80 % of the limit.

use charon_model::{Encoded, Message};

use super::settings::{Overflow, QueueSettings};

/// Bytes as length limits count them: the body of a 0.9.1 message, the whole bare message
/// (properties through footer) of a 1.0 message, as RabbitMQ's `mc:size/1` does.
pub(super) fn body_size(message: &Message) -> u64 {
    let size = match &message.encoded {
        Encoded::Amqp10Bare(bare) => bare.len(),
        _ => message.body_len(),
    };
    u64::try_from(size).unwrap_or(u64::MAX)
}

/// Quorum queues stop refusing publishes once back at 8/10 of their limit (`?LOW_LIMIT` 0.8 in
/// rabbit_fifo: `Num =< trunc(Max * 0.8)`).
const LOW_LIMIT_TENTHS: u128 = 8;

/// The ready messages as length limits see them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Size {
    /// Ready messages.
    pub(super) count: u64,
    /// Their bytes, as [`body_size`] counts them.
    pub(super) bytes: u64,
}

/// Ready messages and at-least-once dead letters both count against a quorum queue's limits.
impl std::ops::Add for Size {
    type Output = Self;

    fn add(self, other: Self) -> Self {
        Self { count: self.count + other.count, bytes: self.bytes + other.bytes }
    }
}

/// A queue's effective settings and the state its limits keep.
#[derive(Debug)]
pub(super) struct Limits {
    /// Effective settings: arguments merged with the applicable policy.
    settings: QueueSettings,
    /// Quorum semantics (TTL 0, approximate `reject-publish`, delivery limit, `x-expires`).
    quorum: bool,
    /// Quorum `reject-publish`: refusing publishes until back under 80 % of the limit.
    refusing: bool,
    /// When the queue was last used (consumers, gets, declares), for `x-expires`.
    last_used: i64,
    /// How many more messages expiry may dead-letter before the queue's dead letters waiting
    /// for their targets have drained (see [`Limits::set_expiry_room`]).
    expiry_room: usize,
}

impl Limits {
    /// The limits of a queue created at `now`.
    pub(super) fn new(settings: QueueSettings, quorum: bool, now: i64) -> Self {
        Self { settings, quorum, refusing: false, last_used: now, expiry_room: usize::MAX }
    }

    /// The effective settings.
    pub(super) fn settings(&self) -> &QueueSettings {
        &self.settings
    }

    /// The effective TTL of a message entering the queue at `now`, as a deadline.
    pub(super) fn expiry_of(&self, message: &Message, now: i64) -> Option<i64> {
        let own = message.properties().ttl;
        let ttl = match (self.settings.message_ttl, own) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        // Quorum queues treat a TTL of 0 as 1 ms (`update_expiry_header`).
        let ttl = if ttl == 0 && self.quorum { 1 } else { ttl };
        Some(now.saturating_add(i64::try_from(ttl).unwrap_or(i64::MAX)))
    }

    /// Whether a publish is refused by the length limit, the queue holding `ready`.
    pub(super) fn refuses(&self, message: &Message, ready: Size) -> bool {
        let overflow = self.settings.overflow;
        if overflow == Overflow::DropHead || !self.settings.is_limited() {
            return false;
        }
        if self.quorum {
            return self.refusing;
        }
        let too_many = self.settings.max_length.is_some_and(|max| ready.count + 1 > max);
        let too_big = self.settings.max_length_bytes.is_some_and(|max| ready.bytes + body_size(message) > max);
        too_many || too_big
    }

    /// Whether a refused publish is dead-lettered (classic `reject-publish-dlx`).
    pub(super) fn dead_letters_refused(&self) -> bool {
        self.settings.overflow == Overflow::RejectPublishDlx
    }

    /// Whether the head must be dropped (`drop-head`) while the queue holds `ready`.
    pub(super) fn drops_head(&self, ready: Size) -> bool {
        self.settings.overflow == Overflow::DropHead && self.over_limit(ready)
    }

    fn over_limit(&self, ready: Size) -> bool {
        self.settings.max_length.is_some_and(|max| ready.count > max)
            || self.settings.max_length_bytes.is_some_and(|max| ready.bytes > max)
    }

    fn below_soft_limit(&self, ready: Size) -> bool {
        let below = |limit: Option<u64>, value: u64| {
            limit.is_none_or(|max| u128::from(value) * 10 <= u128::from(max) * LOW_LIMIT_TENTHS)
        };
        below(self.settings.max_length, ready.count) && below(self.settings.max_length_bytes, ready.bytes)
    }

    /// After an enqueue or a settings change (once the head was dropped): quorum
    /// `reject-publish` starts refusing when over the limit; no limit, no refusal.
    pub(super) fn enforced(&mut self, ready: Size) {
        if !self.settings.is_limited() {
            self.refusing = false;
        } else if self.settings.overflow == Overflow::RejectPublish && self.quorum && self.over_limit(ready) {
            self.refusing = true;
        }
    }

    /// Ends a quorum queue's refusal once it is back under 80 % of its limit.
    pub(super) fn refresh_refusing(&mut self, ready: Size) {
        if self.refusing && (!self.settings.is_limited() || self.below_soft_limit(ready)) {
            self.refusing = false;
        }
    }

    /// Whether publishes are being refused (quorum `reject-publish`).
    #[cfg(test)]
    pub(super) fn refusing(&self) -> bool {
        self.refusing
    }

    /// The delivery limit a returned message is checked against (quorum queues only).
    pub(super) fn delivery_limit(&self) -> Option<u64> {
        if self.quorum { self.settings.delivery_limit } else { None }
    }

    /// Whether a message returned `returned` times is past the delivery limit (4.0.5 counts
    /// every return).
    pub(super) fn past_delivery_limit(&self, returned: u32) -> bool {
        self.delivery_limit().is_some_and(|limit| u64::from(returned) > limit)
    }

    /// Bounds what expiry dead-letters until the next pass. Paged messages cost the queue
    /// 32 bytes each, but once expired they are read back whole and wait in the queue's
    /// outbox until their target takes them: a million messages expiring faster than their
    /// dead-letter queue could take them held 1.5 GB there. The task gives expiry only the
    /// room its outbox has left.
    pub(super) fn set_expiry_room(&mut self, room: usize) {
        self.expiry_room = room;
    }

    /// Whether expiry may dead-letter one more message this pass.
    pub(super) fn has_expiry_room(&self) -> bool {
        self.expiry_room > 0
    }

    /// Expiry dead-lettered one message.
    pub(super) fn expired_one(&mut self) {
        self.expiry_room = self.expiry_room.saturating_sub(1);
    }

    /// When `x-expires` deletes the queue, while it has no consumer (`idle`).
    pub(super) fn unused_deadline(&self, idle: bool) -> Option<i64> {
        let expires = self.settings.expires?;
        idle.then(|| self.last_used.saturating_add(i64::try_from(expires).unwrap_or(i64::MAX)))
    }

    /// Consumers and gets count as use of any queue.
    pub(super) fn used(&mut self, now: i64) {
        self.last_used = now;
    }

    /// A declare (also a passive one) counts as use of a classic queue. A quorum queue counts
    /// only gets and consumers (`last_active` in rabbit_fifo), so a declare does not keep it.
    pub(super) fn declared(&mut self, now: i64) {
        if !self.quorum {
            self.last_used = now;
        }
    }

    /// New settings (a policy changed); a changed `x-expires` counts from now. The caller
    /// drops the head if a lowered limit asks for it.
    pub(super) fn apply(&mut self, settings: QueueSettings, now: i64) {
        if settings.expires != self.settings.expires {
            self.last_used = now;
        }
        self.settings = settings;
    }
}

#[cfg(test)]
mod tests {
    use charon_model::{Body, Properties, Routing};

    use super::*;

    fn message(body: &str, ttl: Option<u64>) -> Message {
        let mut m = Message::new(Routing::default(), Body::Data(body.to_owned().into()));
        m.set_properties(Properties { ttl, ..Properties::default() });
        m
    }

    fn size(count: u64, bytes: u64) -> Size {
        Size { count, bytes }
    }

    fn limited(max_length: u64, overflow: Overflow) -> QueueSettings {
        QueueSettings { max_length: Some(max_length), overflow, ..QueueSettings::default() }
    }

    #[test]
    fn ttl_is_the_smaller_of_queue_and_message_and_quorum_gives_zero_a_millisecond() {
        let classic = Limits::new(QueueSettings { message_ttl: Some(100), ..QueueSettings::default() }, false, 0);
        assert_eq!(classic.expiry_of(&message("m", Some(500)), 1_000), Some(1_100));
        assert_eq!(classic.expiry_of(&message("m", Some(10)), 1_000), Some(1_010));
        let plain = Limits::new(QueueSettings::default(), false, 0);
        assert_eq!(plain.expiry_of(&message("m", None), 1_000), None);
        assert_eq!(plain.expiry_of(&message("m", Some(0)), 1_000), Some(1_000));
        let quorum = Limits::new(QueueSettings::default(), true, 0);
        assert_eq!(quorum.expiry_of(&message("m", Some(0)), 1_000), Some(1_001));
    }

    #[test]
    fn classic_reject_publish_refuses_what_would_not_fit() {
        let by_count = Limits::new(limited(2, Overflow::RejectPublish), false, 0);
        assert!(!by_count.refuses(&message("m", None), size(1, 0)));
        assert!(by_count.refuses(&message("m", None), size(2, 0)));
        let bytes = QueueSettings {
            max_length_bytes: Some(5),
            overflow: Overflow::RejectPublishDlx,
            ..QueueSettings::default()
        };
        let by_bytes = Limits::new(bytes, false, 0);
        assert!(!by_bytes.refuses(&message("ab", None), size(1, 3)));
        assert!(by_bytes.refuses(&message("abc", None), size(1, 3)));
        assert!(by_bytes.dead_letters_refused());
        let drop_head = Limits::new(limited(1, Overflow::DropHead), false, 0);
        assert!(!drop_head.refuses(&message("m", None), size(9, 9)));
        assert!(drop_head.drops_head(size(2, 0)) && !drop_head.drops_head(size(1, 0)));
    }

    #[test]
    fn quorum_reject_publish_refuses_after_crossing_until_back_at_80_percent() {
        let mut q = Limits::new(limited(10, Overflow::RejectPublish), true, 0);
        assert!(!q.refuses(&message("m", None), size(10, 0)), "the crossing message is accepted");
        q.enforced(size(11, 0));
        assert!(q.refusing() && q.refuses(&message("m", None), size(11, 0)));
        q.refresh_refusing(size(9, 0));
        assert!(q.refusing(), "9 of 10 is above 80 %");
        q.refresh_refusing(size(8, 0));
        assert!(!q.refusing());
        // Removing the limit ends a refusal.
        q.enforced(size(11, 0));
        q.apply(QueueSettings::default(), 0);
        q.enforced(size(11, 0));
        assert!(!q.refusing());
    }

    #[test]
    fn only_quorum_queues_have_a_delivery_limit() {
        let settings = QueueSettings { delivery_limit: Some(2), ..QueueSettings::default() };
        let quorum = Limits::new(settings.clone(), true, 0);
        assert!(!quorum.past_delivery_limit(2) && quorum.past_delivery_limit(3));
        let classic = Limits::new(settings, false, 0);
        assert!(!classic.past_delivery_limit(100));
    }

    #[test]
    fn x_expires_counts_from_the_last_use_while_idle_and_a_declare_keeps_only_classic_queues() {
        let settings = QueueSettings { expires: Some(1_000), ..QueueSettings::default() };
        let mut classic = Limits::new(settings.clone(), false, 1_000);
        assert_eq!(classic.unused_deadline(true), Some(2_000));
        assert_eq!(classic.unused_deadline(false), None, "a consumer keeps it");
        classic.declared(1_500);
        assert_eq!(classic.unused_deadline(true), Some(2_500));
        let mut quorum = Limits::new(settings.clone(), true, 1_000);
        quorum.declared(1_500);
        assert_eq!(quorum.unused_deadline(true), Some(2_000));
        quorum.used(1_500);
        assert_eq!(quorum.unused_deadline(true), Some(2_500));
        // A new x-expires counts from now; the same one does not restart the clock.
        quorum.apply(settings, 1_800);
        assert_eq!(quorum.unused_deadline(true), Some(2_500));
        quorum.apply(QueueSettings { expires: Some(100), ..QueueSettings::default() }, 1_800);
        assert_eq!(quorum.unused_deadline(true), Some(1_900));
    }

    #[test]
    fn expiry_room_is_used_up_one_message_at_a_time() {
        let mut limits = Limits::new(QueueSettings::default(), false, 0);
        assert!(limits.has_expiry_room());
        limits.set_expiry_room(1);
        limits.expired_one();
        assert!(!limits.has_expiry_room());
        limits.expired_one();
        assert!(!limits.has_expiry_room());
    }
}
