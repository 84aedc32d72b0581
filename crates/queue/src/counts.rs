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

    use super::*;

    /// A stored message as published over `origin` (the counts live with the queue's entry,
    /// so the functions take them as plain numbers).
    fn stored(origin: Origin) -> Arc<Message> {
        let mut m = Message::new(Routing::default(), Body::Data("m".into()));
        m.origin = origin;
        if origin == Origin::Amqp091 {
            m.encoded = Encoded::Amqp091Properties(Bytes::from_static(&[0, 0]));
        }
        Arc::new(m)
    }

    #[test]
    fn first_delivery_is_the_stored_message() {
        let message = stored(Origin::Amqp091);
        assert!(Arc::ptr_eq(&as_delivered(&message, 0), &message));
    }

    #[test]
    fn redeliveries_carry_their_return_count_whatever_the_publishing_protocol() {
        for origin in [Origin::Amqp091, Origin::Amqp10] {
            let message = stored(origin);
            let m = as_delivered(&message, 2);
            assert_eq!(m.broker.acquired_count, 2);
            // Nothing protocol-specific changes: the received encoding still matches.
            assert_eq!(
                (&m.headers, &m.annotations, &m.encoded),
                (&message.headers, &message.annotations, &message.encoded)
            );
            assert_eq!(message.broker.acquired_count, 0, "the stored message is unchanged");
        }
    }

    #[test]
    fn a_discarded_message_carries_its_failed_deliveries() {
        let mut m = Message::clone(&stored(Origin::Amqp10));
        m.broker.delivery_count = 2;
        assert_eq!(as_discarded(Arc::new(m), 3).broker.delivery_count, 5);
        let message = stored(Origin::Amqp10);
        assert!(Arc::ptr_eq(&as_discarded(Arc::clone(&message), 0), &message));
    }
}
