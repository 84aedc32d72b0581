//! One message in a queue, with what the queue knows about it beyond the message itself:
//! its sequence number, return counts, TTL deadline and where the log keeps it.
//!
//! An entry moves between the parts of the queue's state — the ready run, a consumer's
//! unacknowledged deliveries, the log records — as a plain record: each part decides what
//! happens to it, none owns its fields.

use std::sync::Arc;

use charon_model::Message;

use super::paging::packed::Packed;
use crate::session::Delivery;

/// A message in the queue.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) seq: u64,
    pub(super) message: Arc<Message>,
    pub(super) redelivered: bool,
    /// Times the message came back from a consumer (RabbitMQ 4.0.5's quorum-queue
    /// acquired count, which its delivery limit checks: every return counts).
    pub(super) returned: u32,
    /// Returns that counted as failed deliveries (AMQP 1.0 `modified{delivery-failed}`, or
    /// the consumer's connection going away): a quorum queue's AMQP 1.0 `delivery-count`.
    pub(super) failed: u32,
    /// When its TTL runs out (ms since epoch), fixed at enqueue and kept across requeues.
    pub(super) expires_at: Option<i64>,
    /// Whether it is in the message log (its exit must be recorded there).
    pub(super) persisted: bool,
    /// Whether it was written to the log as a spill, to leave memory (its exit is reported to
    /// the log, never written).
    pub(super) spilled: bool,
    /// Where the log wrote it, once known (while it waits to leave memory).
    pub(super) place: Option<Packed>,
}

impl Entry {
    /// A message just published to the queue.
    pub(super) fn new(seq: u64, message: Arc<Message>, expires_at: Option<i64>, persisted: bool) -> Self {
        Self {
            seq,
            message,
            redelivered: false,
            returned: 0,
            failed: 0,
            expires_at,
            persisted,
            spilled: false,
            place: None,
        }
    }

    /// The message as a consumer gets it: a quorum queue shows its counts.
    pub(super) fn delivery(&self, quorum: bool) -> Delivery {
        Delivery {
            seq: self.seq,
            message: if quorum {
                super::counts::as_delivered(&self.message, self.returned)
            } else {
                Arc::clone(&self.message)
            },
            redelivered: self.redelivered,
            delivery_count: if quorum { self.failed } else { 0 },
        }
    }

    /// Comes back from a consumer: marked redelivered, one more return, and one more failed
    /// delivery when `failed`.
    pub(super) fn returned(&mut self, failed: bool) {
        self.redelivered = true;
        self.returned = self.returned.saturating_add(1);
        if failed {
            self.failed = self.failed.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use charon_model::{Body, Routing};

    use super::*;

    fn entry() -> Entry {
        Entry::new(5, Arc::new(Message::new(Routing::default(), Body::Data("m".into()))), Some(9), true)
    }

    #[test]
    fn a_new_entry_is_fresh_and_delivers_the_stored_message() {
        let e = entry();
        assert_eq!((e.seq, e.redelivered, e.returned, e.failed, e.expires_at), (5, false, 0, 0, Some(9)));
        assert!(e.persisted && !e.spilled && e.place.is_none());
        let d = e.delivery(true);
        assert!(Arc::ptr_eq(&d.message, &e.message));
        assert_eq!((d.seq, d.redelivered, d.delivery_count), (5, false, 0));
    }

    #[test]
    fn returns_count_and_only_quorum_deliveries_show_them() {
        let mut e = entry();
        e.returned(false);
        e.returned(true);
        assert_eq!((e.redelivered, e.returned, e.failed), (true, 2, 1));
        let quorum = e.delivery(true);
        assert_eq!((quorum.delivery_count, quorum.message.broker.acquired_count, quorum.redelivered), (1, 2, true));
        let classic = e.delivery(false);
        assert_eq!(classic.delivery_count, 0);
        assert!(Arc::ptr_eq(&classic.message, &e.message), "a classic queue shows no counts");
    }
}
