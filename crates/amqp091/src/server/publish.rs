//! `basic.publish`: build the message (`crate::mapping`), route it, batch it per queue,
//! confirm it.

use std::sync::Arc;

use amq_protocol::protocol::AMQPClass;
use amq_protocol::protocol::basic::{AMQPMethod, Return};
use charon_engine::metrics::Counter;
use charon_engine::reply_to::is_address;
use charon_engine::{Action, ExchangeKind, Flush, Principal};
use charon_model::Message;

use super::grants::Grants;
use super::reply_to::{self, rewrite_reply_to};
use super::session::Session;
use super::tx::HeldPublish;
use super::{MethodError, MethodResult};
use crate::mapping;
use crate::proto::{Connection, PublishCommand, ReplyCode};

impl Session {
    /// The model message of a publish on `channel`, after RabbitMQ's checks in its order:
    /// `immediate`, then the direct reply-to rewrite of `reply_to`, then the properties.
    fn build_message(&self, channel: u16, command: PublishCommand) -> Result<Arc<Message>, MethodError> {
        if command.method.immediate {
            return Err(MethodError::new(ReplyCode::NotImplemented, "immediate=true"));
        }
        let reply_to = command.properties.properties.as_ref().and_then(|p| p.reply_to.as_deref());
        let reply = || self.channels.get(&channel).and_then(|state| state.reply.as_ref());
        let reply_address = reply_to::address(reply_to, reply)?;
        let mut message = mapping::to_model(command, self.client.user().map(|u| u.name.as_str()))?;
        if let Some(address) = reply_address {
            // Not shared yet: `make_mut` copies nothing.
            rewrite_reply_to(Arc::make_mut(&mut message), address);
        }
        Ok(message)
    }

    /// Routes one publish and queues it for its queues; unroutable mandatory messages are
    /// returned at once.
    pub(crate) fn publish(&mut self, channel: u16, command: PublishCommand, conn: &mut Connection) -> MethodResult {
        let topic = self.authorize_publish(channel, command.method.exchange.as_str())?;
        let mandatory = command.method.mandatory;
        let message = self.build_message(channel, command)?;
        self.client.counters().add(Counter::Received, 1);
        if topic {
            // Every routing key (CC and BCC too), as RabbitMQ's check_write_permitted_on_topics.
            let principal = self.grants().principal()?;
            let vhost = self.client.vhost().map_or("", |v| v.name());
            for key in message.routing.all_keys() {
                principal.check_topic(Action::Write, vhost, &message.routing.exchange, key)?;
            }
        }
        // The vhost borrowed, not cloned, and the channel looked up once: per message.
        let vhost = Grants { broker: &self.broker, client: &self.client }.vhost()?;
        let queues = self.publisher.route(vhost, &message)?;
        let state = self.channels.get_mut(&channel).ok_or_else(MethodError::no_channel)?;
        // Direct reply-to: the default exchange delivers to a reply consumer's address with no
        // queue. Ordinary publishes pay a prefix check of their keys, nothing more.
        let replies = message.routing.exchange.is_empty() && message.routing.all_keys().any(is_address);
        let outcome = match (queues.is_empty() && !replies, mandatory) {
            (false, _) => Counter::Routed,
            (true, false) => Counter::UnroutableDropped,
            (true, true) => Counter::UnroutableReturned,
        };
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
        if queues.is_empty() && !replies {
            if mandatory {
                send_return(conn, channel, &message);
            }
            return Ok(());
        }
        if replies {
            reply_to::deliver_replies(&self.broker, &message);
            if queues.is_empty() {
                if mandatory {
                    send_return(conn, channel, &message);
                }
                return Ok(());
            }
        }
        self.publisher.push(&queues, u32::from(channel), &message, confirm);
        Ok(())
    }

    /// Write on the exchange, checked first as RabbitMQ's `basic.publish` does (before the
    /// exchange is looked up and `user-id` validated); true when the routing keys are to be
    /// checked against topic permissions too.
    fn authorize_publish(&mut self, channel: u16, exchange: &str) -> Result<bool, MethodError> {
        let user = self.client.user().ok_or_else(|| MethodError::new(ReplyCode::InternalError, "no user"))?;
        let vhost = self.client.vhost();
        let state = self.channels.get_mut(&channel).ok_or_else(MethodError::no_channel)?;
        let is_topic = || vhost.and_then(|v| v.exchange(exchange)).is_some_and(|x| x.kind == ExchangeKind::Topic);
        let name = vhost.map_or("", |v| v.name());
        Ok(state.write_grants.check(Principal::new(self.broker.access(), user), name, exchange, is_topic)?)
    }

    /// Hands the routed publishes to their queues ([`Flush::Hold`]: a queue holding its
    /// publishers stops them, and the connection holds its socket and what the client sent
    /// after them until the queue admits them, [`Self::resume`]; [`Flush::Force`] when the
    /// channel or connection goes away, or a transaction commits); true when all went. A
    /// queue gone between routing and enqueueing confirms its messages, as RabbitMQ does for
    /// unroutable ones.
    pub(crate) async fn flush_publishes(&mut self, conn: &mut Connection, mode: Flush) -> bool {
        for (channel, seqs) in self.publisher.flush(mode).await {
            let state = u16::try_from(channel).ok().and_then(|channel| self.channels.get_mut(&channel));
            if let Some(state) = state {
                for seq in seqs {
                    state.answer_confirm(seq, true);
                }
            }
        }
        self.emit_confirms(conn);
        !self.publisher.held()
    }

    /// Whether a queue holds this connection's publishes (flow): the socket is not read
    /// meanwhile, and the management API shows the connection in `flow`.
    pub(crate) fn held(&self) -> bool {
        self.publisher.held()
    }

    /// Goes on where a hold stopped: the held publishes, then the event it deferred. False
    /// while a queue still holds them.
    pub(crate) async fn resume(&mut self, conn: &mut Connection) -> bool {
        if !self.held() {
            return true;
        }
        if !self.flush_publishes(conn, Flush::Hold).await {
            return false;
        }
        if let Some(event) = self.deferred.take() {
            Box::pin(self.handle_event(event, conn)).await;
        }
        !self.held()
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
