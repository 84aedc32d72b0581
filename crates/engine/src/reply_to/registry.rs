//! The live reply consumers of the broker, by address.
//!
//! Kept broker-wide, as RabbitMQ does: a reply is routed by its address alone, whatever vhost
//! the replying connection uses (the address is the capability). A consumer is registered
//! while its [`ReplyConsumer`] lives; the adapter keeps that in its channel state, so cancelling
//! the consumer or closing its channel or connection forgets the address at once.

use std::collections::HashMap;
use std::sync::Arc;

use charon_model::Message;
use parking_lot::RwLock;

use super::token::Token;
use crate::session::{ConsumerId, Owner, SessionEvent, SessionSink};

/// Where replies to one address go.
#[derive(Debug)]
struct Live {
    token: Token,
    consumer: ConsumerId,
    sink: SessionSink,
}

/// Every live reply consumer, by the channel it lives on (one per channel, as in RabbitMQ).
#[derive(Debug, Default)]
pub struct ReplyConsumers {
    live: RwLock<HashMap<Owner, Live>>,
}

impl ReplyConsumers {
    /// Registers consumer `consumer` of channel `owner`, whose connection's inbox is `sink`,
    /// under a fresh address. It stays registered until the returned value is dropped.
    #[must_use]
    pub fn register(self: &Arc<Self>, owner: Owner, consumer: ConsumerId, sink: SessionSink) -> ReplyConsumer {
        let token = Token::random(owner);
        self.live.write().insert(owner, Live { token, consumer, sink });
        ReplyConsumer { registry: Arc::clone(self), token, consumer, address: token.encode() }
    }

    /// The consumer an address names, when it is live.
    fn find<T>(&self, address: &str, then: impl FnOnce(&Live) -> T) -> Option<T> {
        let token = Token::decode(address)?;
        let live = self.live.read();
        live.get(&token.owner()).filter(|l| l.token.same_secret(&token)).map(then)
    }

    /// The node a well-formed `address` names when it is another node's (its consumer is
    /// there); `None` for this node's and for what is no address.
    #[must_use]
    pub fn remote_node(&self, address: &str) -> Option<u64> {
        Token::decode(address).map(|token| token.node()).filter(|node| *node != super::token::this_node())
    }

    /// Whether `address` names a live consumer (a passive `queue.declare` of it succeeds).
    #[must_use]
    pub fn is_live(&self, address: &str) -> bool {
        self.find(address, |_| ()).is_some()
    }

    /// Hands `message` to the consumer at `address`. False when there is none (the message is
    /// dropped, as RabbitMQ drops it) or when its connection already has a full window of
    /// deliveries not yet written: replies are fire-and-forget, and a connection that does
    /// not read must not make the broker hold an unbounded backlog for it.
    pub fn deliver(&self, address: &str, message: &Arc<Message>) -> bool {
        self.find(address, |live| {
            if !live.sink.outbound.try_acquire() {
                return false;
            }
            live.sink.send(SessionEvent::Reply {
                channel: live.token.owner().channel,
                consumer: live.consumer,
                message: Arc::clone(message),
            });
            true
        })
        .unwrap_or(false)
    }

    /// Forgets a consumer, unless its channel registered another since.
    fn forget(&self, token: &Token) {
        let mut live = self.live.write();
        if live.get(&token.owner()).is_some_and(|l| l.token.same_secret(token)) {
            live.remove(&token.owner());
        }
    }

    /// How many consumers are registered.
    #[must_use]
    pub fn len(&self) -> usize {
        self.live.read().len()
    }

    /// Whether no consumer is registered.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A registered reply consumer; dropping it unregisters the address.
#[derive(Debug)]
pub struct ReplyConsumer {
    registry: Arc<ReplyConsumers>,
    token: Token,
    consumer: ConsumerId,
    address: String,
}

impl ReplyConsumer {
    /// The address publishers reply to, `amq.rabbitmq.reply-to.<token>`.
    #[must_use]
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The consumer's id, which its [`SessionEvent::Reply`] events carry.
    #[must_use]
    pub fn consumer(&self) -> ConsumerId {
        self.consumer
    }
}

impl Drop for ReplyConsumer {
    fn drop(&mut self) {
        self.registry.forget(&self.token);
    }
}

#[cfg(test)]
mod tests {
    use charon_model::{Body, Routing};

    use super::*;

    fn message(key: &str) -> Arc<Message> {
        let routing = Routing { routing_key: key.to_owned(), ..Routing::default() };
        Arc::new(Message::new(routing, Body::Data(bytes::Bytes::from_static(b"reply"))))
    }

    #[test]
    fn a_reply_reaches_the_consumer_behind_its_address() {
        let registry = Arc::new(ReplyConsumers::default());
        let (sink, mut inbox) = SessionSink::new(9, 10);
        let owner = Owner { session: 9, channel: 3 };
        let consumer = registry.register(owner, 42, sink);
        assert!(consumer.address().starts_with("amq.rabbitmq.reply-to."));
        assert!(registry.is_live(consumer.address()));
        assert!(registry.deliver(consumer.address(), &message(consumer.address())));
        match inbox.try_recv() {
            Ok(SessionEvent::Reply { channel, consumer: id, message }) => {
                assert_eq!((channel, id), (3, 42));
                assert_eq!(message.body.bytes().as_ref(), b"reply");
            }
            other => panic!("expected a reply event, got {other:?}"),
        }
    }

    #[test]
    fn a_forged_or_stale_address_delivers_nothing() {
        let registry = Arc::new(ReplyConsumers::default());
        let (sink, mut inbox) = SessionSink::new(9, 10);
        let owner = Owner { session: 9, channel: 3 };
        let consumer = registry.register(owner, 42, sink);
        // Right connection and channel, wrong secret.
        let forged = Token::random(owner).encode();
        assert!(!registry.is_live(&forged));
        assert!(!registry.deliver(&forged, &message(&forged)));
        assert!(!registry.deliver("amq.rabbitmq.reply-to.garbage", &message("x")));
        assert!(inbox.try_recv().is_err());
        // Gone once dropped (cancel, channel or connection closed).
        let address = consumer.address().to_owned();
        drop(consumer);
        assert!(registry.is_empty());
        assert!(!registry.is_live(&address));
        assert!(!registry.deliver(&address, &message(&address)));
        assert!(inbox.try_recv().is_err());
    }

    #[test]
    fn an_old_registration_does_not_unregister_its_successor() {
        let registry = Arc::new(ReplyConsumers::default());
        let (sink, _inbox) = SessionSink::new(9, 10);
        let owner = Owner { session: 9, channel: 3 };
        let first = registry.register(owner, 1, sink.clone());
        let second = registry.register(owner, 2, sink);
        assert!(!registry.is_live(first.address()));
        drop(first);
        assert!(registry.is_live(second.address()));
        assert_eq!(registry.len(), 1);
    }

    #[test]
    fn replies_stop_at_a_full_outbound_window() {
        let registry = Arc::new(ReplyConsumers::default());
        let (sink, mut inbox) = SessionSink::new(9, 2);
        let outbound = Arc::clone(&sink.outbound);
        let consumer = registry.register(Owner { session: 9, channel: 1 }, 5, sink);
        let address = consumer.address().to_owned();
        assert!(registry.deliver(&address, &message(&address)));
        assert!(registry.deliver(&address, &message(&address)));
        assert!(!registry.deliver(&address, &message(&address)), "the third exceeds the window of 2");
        assert_eq!(outbound.used(), 2);
        outbound.release(1);
        assert!(registry.deliver(&address, &message(&address)));
        let mut events = 0;
        while inbox.try_recv().is_ok() {
            events += 1;
        }
        assert_eq!(events, 3);
    }
}
