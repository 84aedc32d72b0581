//! TTL, length limits and queue expiry on [`QueueState`], with RabbitMQ 4.0.5's semantics
//! (rabbitmq-dlx.md §1.3–1.4):
//!
//! - A message's expiry is fixed at enqueue: now + min(queue TTL, its own TTL). Only the head
//!   of the queue expires, so expiry never scans the queue; the task's timer wakes up for the
//!   head's deadline.
//! - Length limits count ready messages only. `drop-head` enqueues and then drops from the head;
//!   classic `reject-publish(-dlx)` refuses a message that would not fit; quorum
//!   `reject-publish` is approximate: the message that crosses the limit is accepted, and
//!   publishes are refused until the queue is back to 80 % of the limit.

use charon_model::{DeathReason, Encoded, Message};

use super::settings::{Overflow, QueueSettings};
use super::state::QueueState;

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

impl QueueState {
    /// The effective TTL of a message entering this queue, as a deadline.
    pub(super) fn expiry_of(&self, message: &Message) -> Option<i64> {
        let own = message.properties().ttl;
        let ttl = match (self.settings.message_ttl, own) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        // Quorum queues treat a TTL of 0 as 1 ms (`update_expiry_header`).
        let ttl = if ttl == 0 && self.quorum() { 1 } else { ttl };
        Some(self.now.saturating_add(i64::try_from(ttl).unwrap_or(i64::MAX)))
    }

    /// Whether a publish is refused by the queue's length limit.
    pub(super) fn refuses(&self, message: &Message) -> bool {
        let overflow = self.settings.overflow;
        if overflow == Overflow::DropHead || !self.settings.is_limited() {
            return false;
        }
        if self.quorum() {
            return self.refusing;
        }
        let count = u64::try_from(self.ready_len()).unwrap_or(u64::MAX);
        let too_many = self.settings.max_length.is_some_and(|max| count + 1 > max);
        let too_big = self.settings.max_length_bytes.is_some_and(|max| self.ready_bytes + body_size(message) > max);
        too_many || too_big
    }

    fn over_limit(&self) -> bool {
        let count = u64::try_from(self.ready_len()).unwrap_or(u64::MAX);
        self.settings.max_length.is_some_and(|max| count > max)
            || self.settings.max_length_bytes.is_some_and(|max| self.ready_bytes > max)
    }

    fn below_soft_limit(&self) -> bool {
        let below = |limit: Option<u64>, value: u64| {
            limit.is_none_or(|max| u128::from(value) * 10 <= u128::from(max) * LOW_LIMIT_TENTHS)
        };
        let count = u64::try_from(self.ready_len()).unwrap_or(u64::MAX);
        below(self.settings.max_length, count) && below(self.settings.max_length_bytes, self.ready_bytes)
    }

    /// After an enqueue or a settings change: `drop-head` drops (and dead-letters) the oldest
    /// messages while over the limit; quorum `reject-publish` starts refusing.
    pub(super) fn enforce_limits(&mut self) {
        if !self.settings.is_limited() {
            self.refusing = false;
            return;
        }
        match self.settings.overflow {
            Overflow::DropHead => {
                while self.over_limit() {
                    let Some(entry) = self.pop_ready() else {
                        break;
                    };
                    self.discard(entry, DeathReason::Maxlen);
                }
            }
            Overflow::RejectPublish if self.quorum() && self.over_limit() => self.refusing = true,
            _ => {}
        }
    }

    /// Ends a quorum queue's refusal once it is back under 80 % of its limit.
    pub(crate) fn refresh_refusing(&mut self) {
        if self.refusing && (!self.settings.is_limited() || self.below_soft_limit()) {
            self.refusing = false;
        }
    }

    /// Dead-letters expired messages at the head. `inclusive` also expires messages whose
    /// deadline is exactly now: a message with TTL 0 survives until the dispatch pass after its
    /// publish (a consumer that can take it at once gets it) and expires right after.
    ///
    /// At most [`QueueState::set_expiry_room`] messages per pass: the rest wait, past their
    /// deadline but never delivered (see [`QueueState::head_expired`]), until the dead letters
    /// already made have room in their targets.
    pub(crate) fn expire(&mut self, inclusive: bool) {
        let now = self.now;
        while self.expiry_room > 0
            && let Some(deadline) = self.head().and_then(|e| e.expires_at)
        {
            let expired = if inclusive { deadline <= now } else { deadline < now };
            if !expired {
                break;
            }
            if let Some(entry) = self.pop_ready() {
                self.discard(entry, DeathReason::Expired);
                self.expiry_room -= 1;
            }
        }
    }

    /// Bounds what expiry dead-letters until the next pass. Paged messages cost the queue
    /// 32 bytes each, but once expired they are read back whole and wait in the queue's
    /// outbox until their target takes them: a million messages expiring faster than their
    /// dead-letter queue could take them held 1.5 GB there. The task gives expiry only the
    /// room its outbox has left.
    pub(crate) fn set_expiry_room(&mut self, room: usize) {
        self.expiry_room = room;
    }

    /// Whether the next ready message's TTL has run out (its expiry waits for room): it must
    /// not be delivered.
    pub(crate) fn head_expired(&mut self) -> bool {
        let now = self.now;
        self.head().and_then(|e| e.expires_at).is_some_and(|deadline| deadline < now)
    }

    /// The next moment the queue must act without a command: the head's expiry (unless
    /// expiry has no room: the outbox's room wakes the queue then), or the deadline of
    /// `x-expires` when the queue is unused.
    pub(crate) fn next_deadline(&self) -> Option<i64> {
        let head = if self.expiry_room > 0 { self.head_deadline() } else { None };
        let unused = self.expiry_deadline();
        match (head, unused) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn expiry_deadline(&self) -> Option<i64> {
        let expires = self.settings.expires?;
        self.consumers.is_empty().then(|| self.last_used.saturating_add(i64::try_from(expires).unwrap_or(i64::MAX)))
    }

    /// Whether `x-expires` has run out: the queue is deleted, its messages are not
    /// dead-lettered.
    pub(crate) fn has_expired(&self) -> bool {
        self.expiry_deadline().is_some_and(|deadline| deadline <= self.now)
    }

    /// A declare (also a passive one) counts as use of a classic queue. A quorum queue counts
    /// only gets and consumers (`last_active` in rabbit_fifo), so a declare does not keep it.
    pub(crate) fn touch(&mut self) {
        if !self.quorum() {
            self.last_used = self.now;
        }
    }

    /// Applies new settings (a policy changed): a lowered limit drops the head at once.
    pub(crate) fn apply_settings(&mut self, settings: QueueSettings) {
        if settings.expires != self.settings.expires {
            self.last_used = self.now;
        }
        self.settings = settings;
        self.enforce_limits();
        self.refresh_refusing();
    }

    /// The clock for this pass.
    pub(crate) fn set_now(&mut self, now: i64) {
        self.now = now;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use charon_model::{Body, Properties, Routing, Table};
    use tokio::sync::mpsc;

    use super::super::{ConfirmTo, Enqueue, QueueConfig, QueueHandle, QueueType, Settle};
    use super::*;
    use crate::session::{Owner, SessionEvent, SessionSink};

    fn state(queue_type: QueueType, settings: QueueSettings) -> QueueState {
        let (tx, _rx) = mpsc::channel(1);
        let config = QueueConfig {
            name: "q".into(),
            vhost: "/".into(),
            durable: true,
            auto_delete: false,
            exclusive_owner: None,
            arguments: Table::new(),
            queue_type,
        };
        QueueState::new(Arc::new(QueueHandle::new(1, config, tx)), settings, 1_000)
    }

    fn msg(body: &str, ttl: Option<u64>, confirm: u64) -> Enqueue {
        let mut m = Message::new(Routing::default(), Body::Data(body.to_owned().into()));
        m.set_properties(Properties { ttl, ..Properties::default() });
        Enqueue { message: Arc::new(m), confirm: Some(confirm) }
    }

    fn bodies(state: &QueueState) -> Vec<String> {
        state.ready.iter().map(|e| String::from_utf8_lossy(e.message.body.bytes()).into_owned()).collect()
    }

    fn discarded(state: &mut QueueState) -> Vec<(String, DeathReason)> {
        state
            .take_discarded()
            .into_iter()
            .map(|(m, r)| (String::from_utf8_lossy(m.body.bytes()).into_owned(), r))
            .collect()
    }

    /// Publishes each message in its own batch, returning (accepted, refused) confirm numbers.
    fn publish(state: &mut QueueState, items: Vec<Enqueue>) -> (Vec<u64>, Vec<u64>) {
        let (session, _rx) = SessionSink::new(1, 0);
        let (mut ok, mut no) = (Vec::new(), Vec::new());
        for item in items {
            state.publish(vec![item], Some(ConfirmTo { session: session.clone(), channel: 1 }));
            for (_, event) in state.take_outbox() {
                if let SessionEvent::Confirms { accepted, refused, .. } = event {
                    ok.extend(accepted);
                    no.extend(refused);
                }
            }
        }
        (ok, no)
    }

    fn limited(max_length: u64, overflow: Overflow) -> QueueSettings {
        QueueSettings { max_length: Some(max_length), overflow, ..QueueSettings::default() }
    }

    #[test]
    fn drop_head_keeps_the_newest_and_dead_letters_the_oldest_in_order() {
        let mut s = state(QueueType::Classic, limited(1, Overflow::DropHead));
        let (ok, no) = publish(&mut s, vec![msg("p1", None, 1), msg("p2", None, 2), msg("p3", None, 3)]);
        assert_eq!((ok, no), (vec![1, 2, 3], vec![]));
        assert_eq!(bodies(&s), ["p3"]);
        assert_eq!(discarded(&mut s), [("p1".into(), DeathReason::Maxlen), ("p2".into(), DeathReason::Maxlen)]);
    }

    #[test]
    fn classic_reject_publish_refuses_and_reject_publish_dlx_also_dead_letters() {
        let mut s = state(QueueType::Classic, limited(1, Overflow::RejectPublish));
        let (ok, no) = publish(&mut s, vec![msg("p1", None, 1), msg("p2", None, 2)]);
        assert_eq!((ok, no), (vec![1], vec![2]));
        assert!(discarded(&mut s).is_empty());
        let mut s = state(QueueType::Classic, limited(1, Overflow::RejectPublishDlx));
        let (ok, no) = publish(&mut s, vec![msg("p1", None, 1), msg("p2", None, 2), msg("p3", None, 3)]);
        assert_eq!((ok, no), (vec![1], vec![2, 3]));
        assert_eq!(bodies(&s), ["p1"]);
        assert_eq!(discarded(&mut s), [("p2".into(), DeathReason::Maxlen), ("p3".into(), DeathReason::Maxlen)]);
    }

    #[test]
    fn max_length_bytes_counts_ready_body_bytes() {
        let settings =
            QueueSettings { max_length_bytes: Some(5), overflow: Overflow::RejectPublish, ..QueueSettings::default() };
        let mut s = state(QueueType::Classic, settings);
        let (ok, no) = publish(&mut s, vec![msg("abc", None, 1), msg("de", None, 2), msg("f", None, 3)]);
        assert_eq!((ok, no), (vec![1, 2], vec![3]));
    }

    #[test]
    fn quorum_reject_publish_accepts_the_crossing_message_then_refuses_until_80_percent() {
        let mut s = state(QueueType::Quorum, limited(1, Overflow::RejectPublish));
        let (ok, no) = publish(&mut s, vec![msg("p1", None, 1), msg("p2", None, 2), msg("p3", None, 3)]);
        assert_eq!((ok, no), (vec![1, 2], vec![3]));
        // Below 80 % of 1 means empty.
        let owner = Owner { session: 1, channel: 1 };
        s.get(owner, true);
        s.refresh_refusing();
        assert!(s.refusing);
        s.get(owner, true);
        s.refresh_refusing();
        assert!(!s.refusing);
        // Quorum queues treat reject-publish-dlx as drop-head.
        let settings = QueueSettings::resolve(
            QueueType::Quorum,
            &[
                ("x-max-length".to_owned(), charon_model::Value::I64(1)),
                ("x-overflow".to_owned(), charon_model::Value::long_str("reject-publish-dlx")),
            ]
            .into_iter()
            .collect(),
            None,
        );
        assert_eq!(settings.overflow, Overflow::DropHead);
    }

    #[test]
    fn ttl_is_the_smaller_of_queue_and_message_and_expires_only_at_the_head() {
        let settings = QueueSettings { message_ttl: Some(100), ..QueueSettings::default() };
        let mut s = state(QueueType::Classic, settings);
        publish(&mut s, vec![msg("long", Some(500), 1), msg("short", Some(10), 2)]);
        assert_eq!(s.next_deadline(), Some(1_100));
        s.set_now(1_050);
        s.expire(true);
        // "short" has expired but waits behind "long".
        assert!(discarded(&mut s).is_empty());
        s.set_now(1_100);
        s.expire(true);
        assert_eq!(discarded(&mut s), [("long".into(), DeathReason::Expired), ("short".into(), DeathReason::Expired)]);
        assert_eq!(s.next_deadline(), None);
    }

    #[test]
    fn ttl_zero_survives_until_dispatch_then_expires() {
        let mut s = state(QueueType::Classic, QueueSettings::default());
        publish(&mut s, vec![msg("now-or-never", Some(0), 1)]);
        s.expire(false);
        assert_eq!(bodies(&s), ["now-or-never"]);
        s.expire(true);
        assert_eq!(discarded(&mut s), [("now-or-never".into(), DeathReason::Expired)]);
        // Quorum queues give TTL 0 one millisecond.
        let mut q = state(QueueType::Quorum, QueueSettings::default());
        publish(&mut q, vec![msg("m", Some(0), 1)]);
        assert_eq!(q.next_deadline(), Some(1_001));
    }

    #[test]
    fn expiry_dead_letters_only_what_the_outbox_has_room_for_and_never_delivers_the_rest() {
        let settings = QueueSettings { message_ttl: Some(10), ..QueueSettings::default() };
        let mut s = state(QueueType::Classic, settings);
        publish(&mut s, vec![msg("a", None, 1), msg("b", None, 2), msg("c", None, 3)]);
        s.set_now(1_050);
        s.set_expiry_room(2);
        s.expire(false);
        assert_eq!(discarded(&mut s), [("a".into(), DeathReason::Expired), ("b".into(), DeathReason::Expired)]);
        // "c" is past its deadline: no get hands it out, and with no room left the queue does
        // not wake for it (its outbox's room does).
        assert!(s.head_expired());
        assert!(s.get(Owner { session: 1, channel: 1 }, true).is_none());
        s.set_expiry_room(0);
        assert_eq!(s.next_deadline(), None);
        assert_eq!(bodies(&s), ["c"]);
        s.set_expiry_room(1);
        assert_eq!(s.next_deadline(), Some(1_010));
        s.expire(false);
        assert_eq!(discarded(&mut s), [("c".into(), DeathReason::Expired)]);
    }

    #[test]
    fn quorum_delivery_limit_dead_letters_on_the_return_past_the_limit() {
        let settings = QueueSettings { delivery_limit: Some(1), ..QueueSettings::default() };
        let mut s = state(QueueType::Quorum, settings);
        publish(&mut s, vec![msg("m", None, 1)]);
        let owner = Owner { session: 1, channel: 1 };
        let first = s.get(owner, false).unwrap();
        assert_eq!(first.delivery.delivery_count, 0);
        s.settle(&[first.delivery.seq], Settle::Requeue);
        let second = s.get(owner, false).unwrap();
        // A plain return counts towards the limit (4.0.5's acquired count) but is no failed
        // delivery, so the AMQP 1.0 delivery-count stays 0.
        assert_eq!((second.delivery.delivery_count, second.delivery.redelivered), (0, true));
        s.settle(&[second.delivery.seq], Settle::Requeue);
        assert_eq!(discarded(&mut s), [("m".into(), DeathReason::DeliveryLimit)]);
        assert!(s.ready.is_empty());
    }

    #[test]
    fn quorum_delivery_count_counts_failed_returns_only() {
        let mut s = state(QueueType::Quorum, QueueSettings::default());
        publish(&mut s, vec![msg("m", None, 1)]);
        let owner = Owner { session: 1, channel: 1 };
        let first = s.get(owner, false).unwrap();
        s.settle(&[first.delivery.seq], Settle::RequeueFailed);
        let second = s.get(owner, false).unwrap();
        assert_eq!(second.delivery.delivery_count, 1);
        s.owner_closed(owner);
        let third = s.get(owner, false).unwrap();
        assert_eq!(third.delivery.delivery_count, 2);
        s.settle(&[third.delivery.seq], Settle::Requeue);
        assert_eq!(s.get(owner, false).unwrap().delivery.delivery_count, 2);
    }

    #[test]
    fn a_quorum_discard_counts_a_failed_delivery_unless_only_undeliverable() {
        let mut s = state(QueueType::Quorum, QueueSettings::default());
        publish(&mut s, vec![msg("rejected", None, 1), msg("undeliverable", None, 2)]);
        let owner = Owner { session: 1, channel: 1 };
        let first = s.get(owner, false).unwrap();
        let second = s.get(owner, false).unwrap();
        s.settle(&[first.delivery.seq], Settle::Discard);
        s.settle(&[second.delivery.seq], Settle::DiscardUndeliverable);
        let counts: Vec<u32> = s.take_discarded().iter().map(|(m, _)| m.broker.delivery_count).collect();
        assert_eq!(counts, [1, 0]);
        // Classic queues keep no count.
        let mut c = state(QueueType::Classic, QueueSettings::default());
        publish(&mut c, vec![msg("m", None, 1)]);
        let got = c.get(owner, false).unwrap();
        c.settle(&[got.delivery.seq], Settle::Discard);
        assert_eq!(c.take_discarded().first().map(|(m, _)| m.broker.delivery_count), Some(0));
    }

    #[test]
    fn x_expires_counts_from_the_last_use_while_there_is_no_consumer() {
        let settings = QueueSettings { expires: Some(1_000), ..QueueSettings::default() };
        let mut s = state(QueueType::Classic, settings);
        assert_eq!(s.next_deadline(), Some(2_000));
        s.set_now(1_500);
        s.touch();
        s.set_now(2_100);
        assert!(!s.has_expired());
        s.set_now(2_500);
        assert!(s.has_expired());
    }

    #[test]
    fn a_declare_keeps_a_classic_queue_but_not_a_quorum_queue() {
        let settings = QueueSettings { expires: Some(1_000), ..QueueSettings::default() };
        let mut q = state(QueueType::Quorum, settings);
        q.set_now(1_900);
        q.touch();
        q.set_now(2_100);
        assert!(q.has_expired());
        // A get counts.
        q.set_now(1_900);
        q.get(Owner { session: 1, channel: 1 }, true);
        q.set_now(2_100);
        assert!(!q.has_expired());
    }

    #[test]
    fn a_1_0_message_counts_its_bare_message_against_max_length_bytes() {
        let settings = QueueSettings { max_length_bytes: Some(14), ..QueueSettings::default() };
        let mut s = state(QueueType::Classic, settings);
        let items = ["aa", "bb", "cc"].map(|body| {
            let mut m = Message::new(Routing::default(), Body::Data(body.to_owned().into()));
            // One data section: 5 bytes of section header, then the 2 body bytes.
            let mut bare = vec![0x00, 0x53, 0x75, 0xa0, 0x02];
            bare.extend_from_slice(body.as_bytes());
            m.encoded = charon_model::Encoded::Amqp10Bare(bare.into());
            Enqueue { message: Arc::new(m), confirm: None }
        });
        s.publish(items.into_iter().collect(), None);
        assert_eq!(bodies(&s), ["bb", "cc"]);
        assert_eq!(discarded(&mut s), [("aa".into(), DeathReason::Maxlen)]);
    }

    #[test]
    fn a_lowered_limit_drops_the_head_at_once() {
        let mut s = state(QueueType::Classic, QueueSettings::default());
        publish(&mut s, vec![msg("a", None, 1), msg("b", None, 2), msg("c", None, 3)]);
        s.apply_settings(limited(1, Overflow::DropHead));
        assert_eq!(bodies(&s), ["c"]);
        assert_eq!(discarded(&mut s).len(), 2);
    }
}
