//! `basic.publish`: build the message (`crate::mapping`), route it, batch it per queue,
//! confirm it.

use std::sync::Arc;

use amq_protocol::protocol::AMQPClass;
use amq_protocol::protocol::basic::{AMQPMethod, Return};
use charon_engine::metrics::Counter;
use charon_engine::reply_to::is_address;
use charon_engine::{Action, Broker, Client, ExchangeKind, Principal, Publisher};
use charon_model::Message;

use super::channel::ChannelState;
use super::grants::Grants;
use super::reply_to::{self, rewrite_reply_to};
use super::tx::HeldPublish;
use super::{MethodError, MethodResult};
use crate::mapping;
use crate::proto::{Connection, PublishCommand, ReplyCode};

/// `basic.publish` on one channel, over what it touches: the channel (confirms, transaction,
/// write grants, reply consumer), the connection's client and its publisher, which holds what
/// was routed until the session flushes it.
pub(crate) struct Publishing<'a> {
    pub(crate) channel: u16,
    pub(crate) state: &'a mut ChannelState,
    pub(crate) broker: &'a Broker,
    pub(crate) client: &'a mut Client,
    pub(crate) publisher: &'a mut Publisher,
}

impl Publishing<'_> {
    /// The model message of a publish, after RabbitMQ's checks in its order: `immediate`,
    /// then the direct reply-to rewrite of `reply_to`, then the properties.
    fn build_message(&self, command: PublishCommand) -> Result<Arc<Message>, MethodError> {
        if command.method.immediate {
            return Err(MethodError::new(ReplyCode::NotImplemented, "immediate=true"));
        }
        let reply_to = command.properties.properties.as_ref().and_then(|p| p.reply_to.as_deref());
        let reply_address = reply_to::address(reply_to, || self.state.reply.as_ref())?;
        let mut message = mapping::to_model(command, self.client.user().map(|u| u.name.as_str()))?;
        if let Some(address) = reply_address {
            // Not shared yet: `make_mut` copies nothing.
            rewrite_reply_to(Arc::make_mut(&mut message), address);
        }
        Ok(message)
    }

    /// Routes one publish and queues it for its queues; unroutable mandatory messages are
    /// returned at once.
    pub(crate) fn publish(mut self, command: PublishCommand, conn: &mut Connection) -> MethodResult {
        let channel = self.channel;
        let topic = self.authorize_publish(command.method.exchange.as_str())?;
        let mandatory = command.method.mandatory;
        let message = self.build_message(command)?;
        self.client.counters().add(Counter::Received, 1);
        let grants = Grants { broker: self.broker, client: self.client };
        if topic {
            // Every routing key (CC and BCC too), as RabbitMQ's check_write_permitted_on_topics.
            let principal = grants.principal()?;
            let vhost = grants.vhost()?.name();
            for key in message.routing.all_keys() {
                principal.check_topic(Action::Write, vhost, &message.routing.exchange, key)?;
            }
        }
        // The vhost borrowed, not cloned: per message.
        let queues = self.publisher.route(grants.vhost()?, &message)?;
        // Direct reply-to: the default exchange delivers to a reply consumer's address with no
        // queue. Ordinary publishes pay a prefix check of their keys, nothing more.
        let replies = message.routing.exchange.is_empty() && message.routing.all_keys().any(is_address);
        let outcome = match (queues.is_empty() && !replies, mandatory) {
            (false, _) => Counter::Routed,
            (true, false) => Counter::UnroutableDropped,
            (true, true) => Counter::UnroutableReturned,
        };
        let state = self.state;
        if !std::mem::replace(&mut state.published, true) {
            self.client.publisher_added();
        }
        self.client.counters().add(outcome, 1);
        if state.confirms.is_some() {
            self.client.counters().add(Counter::ReceivedConfirm, 1);
        }
        if let Some(tx) = state.tx.as_mut() {
            tx.hold_publish(HeldPublish { message, queues, mandatory });
            return Ok(());
        }
        let confirm = state.confirms.as_mut().map(|t| t.publish(queues.len()));
        if replies {
            reply_to::deliver_replies(self.broker, &message);
        }
        if queues.is_empty() {
            // Returned even when a reply consumer took it, as RabbitMQ does.
            if mandatory {
                send_return(conn, channel, &message);
            }
            return Ok(());
        }
        self.publisher.push(&queues, u32::from(channel), &message, confirm);
        Ok(())
    }

    /// Write on the exchange, checked first as RabbitMQ's `basic.publish` does (before the
    /// exchange is looked up and `user-id` validated); true when the routing keys are to be
    /// checked against topic permissions too.
    fn authorize_publish(&mut self, exchange: &str) -> Result<bool, MethodError> {
        let user = self.client.user().ok_or_else(|| MethodError::new(ReplyCode::InternalError, "no user"))?;
        let vhost = self.client.vhost();
        let is_topic = || vhost.and_then(|v| v.exchange(exchange)).is_some_and(|x| x.kind == ExchangeKind::Topic);
        let name = vhost.map_or("", |v| v.name());
        Ok(self.state.write_grants.check(Principal::new(self.broker.access(), user), name, exchange, is_topic)?)
    }
}

pub(crate) fn send_return(conn: &mut Connection, channel: u16, message: &Message) {
    let ret = Return {
        reply_code: ReplyCode::NoRoute.code(),
        reply_text: ReplyCode::NoRoute.name().into(),
        exchange: message.routing.exchange.as_str().into(),
        routing_key: message.routing.routing_key.as_str().into(),
    };
    conn.send_method(channel, &AMQPClass::Basic(AMQPMethod::Return(ret)));
    super::deliver::send_content(conn, channel, message);
}
