//! How a quorum queue's delivery counts show on messages, as in RabbitMQ 4.0.5
//! (`rabbit_fifo_client:add_delivery_count_header/2`, `rabbit_fifo:annotate_msg/2`):
//!
//! - A redelivered message carries the number of times it came back (every return counts in
//!   4.0.5) as the model's [`BrokerAnnotations::acquired_count`]; each protocol renders it as
//!   `x-delivery-count` where its consumers expect it (a long 0.9.1 header, a 1.0 message
//!   annotation), the way it renders the death history. The first delivery has none. The stored
//!   message is unchanged; only the delivered copy carries it.
//! - The failed deliveries (1.0 `header.delivery-count`) travel with a message that leaves the
//!   queue by dead lettering: the dead letter starts from that count.
//!
//! [`BrokerAnnotations::acquired_count`]: charon_model::BrokerAnnotations::acquired_count

use std::sync::Arc;

use charon_model::Message;

/// The message to hand to a consumer: the stored one, or for a message that came back before,
/// a copy carrying its return count.
pub(super) fn as_delivered(message: &Arc<Message>, returned: u32) -> Arc<Message> {
    if returned == 0 {
        return Arc::clone(message);
    }
    let mut copy = Message::clone(message);
    copy.broker.acquired_count = returned;
    Arc::new(copy)
}

/// The message leaving the queue other than by acknowledgement, carrying its failed deliveries.
pub(super) fn as_discarded(message: Arc<Message>, failed: u32) -> Arc<Message> {
    if failed == 0 {
        return message;
    }
    let mut message = Arc::unwrap_or_clone(message);
    message.broker.delivery_count = message.broker.delivery_count.saturating_add(failed);
    Arc::new(message)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use charon_model::{Body, Encoded, Origin, Routing};

    use super::super::entry::Entry;
    use super::*;

    fn entry(origin: Origin, returned: u32, failed: u32) -> Entry {
        let mut m = Message::new(Routing::default(), Body::Data("m".into()));
        m.origin = origin;
        if origin == Origin::Amqp091 {
            m.encoded = Encoded::Amqp091Properties(Bytes::from_static(&[0, 0]));
        }
        Entry {
            seq: 1,
            message: Arc::new(m),
            redelivered: returned > 0,
            returned,
            failed,
            expires_at: None,
            persisted: false,
            spilled: false,
            place: None,
        }
    }

    #[test]
    fn first_delivery_is_the_stored_message() {
        let e = entry(Origin::Amqp091, 0, 0);
        assert!(Arc::ptr_eq(&as_delivered(&e.message, e.returned), &e.message));
    }

    #[test]
    fn redeliveries_carry_their_return_count_whatever_the_publishing_protocol() {
        for origin in [Origin::Amqp091, Origin::Amqp10] {
            let e = entry(origin, 2, 1);
            let m = as_delivered(&e.message, e.returned);
            assert_eq!(m.broker.acquired_count, 2);
            // Nothing protocol-specific changes: the received encoding still matches.
            assert_eq!(
                (&m.headers, &m.annotations, &m.encoded),
                (&e.message.headers, &e.message.annotations, &e.message.encoded)
            );
            assert_eq!(e.message.broker.acquired_count, 0, "the stored message is unchanged");
        }
    }

    #[test]
    fn a_discarded_message_carries_its_failed_deliveries() {
        let mut e = entry(Origin::Amqp10, 3, 3);
        let mut m = Message::clone(&e.message);
        m.broker.delivery_count = 2;
        e.message = Arc::new(m);
        assert_eq!(as_discarded(e.message, e.failed).broker.delivery_count, 5);
        let e = entry(Origin::Amqp10, 1, 0);
        let stored = Arc::clone(&e.message);
        assert!(Arc::ptr_eq(&as_discarded(e.message, e.failed), &stored));
    }
}
