//! Direct reply-to over 0.9.1, as RabbitMQ 4.0.5's `rabbit_channel` does it: a no-ack
//! consumer on the pseudo-queue `amq.rabbitmq.reply-to`, the `reply_to` of its channel's
//! requests rewritten to the consumer's address, and replies published to that address on the
//! default exchange delivered straight to it. The engine keeps the addresses
//! ([`charon_engine::reply_to`]); this file holds the protocol's rules and texts.

use std::sync::Arc;

use amq_protocol::protocol::{AMQPClass, basic};
use charon_engine::reply_to::{PSEUDO_QUEUE, is_address};
use charon_engine::{Broker, ConsumerId, Owner, ReplyConsumer};
use charon_model::{Encoded, Message};

use super::channel::ChannelState;
use super::grants::Grants;
use super::{MethodError, MethodResult};
use crate::codec::put_deliver;
use crate::proto::{Connection, ReplyCode};

/// The reply consumer of one channel (a channel has at most one).
#[derive(Debug)]
pub(crate) struct ChannelReply {
    tag: Arc<str>,
    /// Registered with the engine while this lives.
    registered: ReplyConsumer,
}

/// `basic.consume` on `amq.rabbitmq.reply-to` on `channel` (its state `state`), with
/// RabbitMQ's checks in its order: a tag taken by one of the channel's queue consumers, an
/// acknowledging consumer, a second reply consumer. `exclusive` and the arguments are ignored,
/// as RabbitMQ ignores them.
pub(crate) fn consume(
    grants: Grants<'_>,
    channel: u16,
    state: &mut ChannelState,
    c: &basic::Consume,
    conn: &mut Connection,
) -> MethodResult {
    let requested = c.consumer_tag.as_str();
    if state.consumers.contains_key(requested) {
        return Err(MethodError::new(ReplyCode::NotAllowed, format!("attempt to reuse consumer tag '{requested}'")));
    }
    if !c.no_ack {
        return Err(MethodError::new(ReplyCode::PreconditionFailed, "reply consumer cannot acknowledge"));
    }
    if state.reply.is_some() {
        return Err(MethodError::new(ReplyCode::PreconditionFailed, "reply consumer already set"));
    }
    let tag = if requested.is_empty() { super::basic::generated_tag() } else { requested.to_owned() };
    let Grants { broker, client } = grants;
    let owner = Owner { session: client.id(), channel: u32::from(channel) };
    let registered = broker.reply_consumers().register(owner, broker.next_id(), client.sink().clone());
    state.reply = Some(ChannelReply { tag: Arc::from(tag.as_str()), registered });
    if !c.nowait {
        let ok = basic::ConsumeOk { consumer_tag: tag.into() };
        conn.send_method(channel, &AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(ok)));
    }
    Ok(())
}

/// `basic.cancel` of the reply consumer: true when `tag` named it (RabbitMQ looks at the
/// reply consumer first, so it wins over a queue consumer with the same tag). Its address is
/// forgotten at once; replies already on their way are dropped.
pub(crate) fn cancel(state: &mut ChannelState, tag: &str) -> bool {
    if state.reply.as_ref().is_some_and(|r| &*r.tag == tag) {
        state.reply = None;
        return true;
    }
    false
}

/// The `reply_to` a publish goes out with: `amq.rabbitmq.reply-to` becomes the address of the
/// channel's reply consumer, which `reply` looks up only then (`None` when it stays as sent:
/// an ordinary publish pays one comparison).
///
/// # Errors
/// RabbitMQ's 406 when the channel has no reply consumer.
pub(crate) fn address<'a>(
    reply_to: Option<&str>,
    reply: impl FnOnce() -> Option<&'a ChannelReply>,
) -> Result<Option<String>, MethodError> {
    if reply_to != Some(PSEUDO_QUEUE) {
        return Ok(None);
    }
    match reply() {
        Some(reply) => Ok(Some(reply.registered.address().to_owned())),
        None => Err(MethodError::new(ReplyCode::PreconditionFailed, "fast reply consumer does not exist")),
    }
}

/// Hands a message published to the default exchange to the reply consumers its routing keys
/// (CC and BCC included) name, each once; no queue counts them, so a mandatory message is
/// still returned, as RabbitMQ 4.0.5 returns it.
pub(crate) fn deliver_replies(broker: &Broker, message: &Arc<Message>) {
    let keys = &message.routing;
    for (i, key) in keys.all_keys().enumerate() {
        if is_address(key) && !keys.all_keys().take(i).any(|earlier| earlier == key) {
            broker.deliver_reply(key, message);
        }
    }
}

/// Writes a reply to its consumer on `channel` (state `state`), unless the consumer was
/// cancelled since.
pub(crate) fn deliver(
    channel: u16,
    state: &ChannelState,
    consumer: ConsumerId,
    message: &Message,
    conn: &mut Connection,
) {
    let Some(reply) = state.reply.as_ref().filter(|r| r.registered.consumer() == consumer) else {
        return;
    };
    // RabbitMQ 4.0.5 stamps a reply with the channel's next delivery tag without taking it
    // (observed: replies after one basic.get all carry tag 2). The consumer is no-ack, so the
    // tag is never settled.
    put_deliver(
        conn.output(),
        channel,
        &reply.tag,
        state.next_tag,
        false,
        &message.routing.exchange,
        &message.routing.routing_key,
    );
    super::deliver::send_content(conn, channel, message);
}

/// Sets a request's `reply_to` to its consumer's address; the properties are encoded afresh
/// for 0.9.1 consumers.
pub(crate) fn rewrite_reply_to(message: &mut Message, address: String) {
    message.properties_mut().reply_to = Some(address);
    message.encoded = Encoded::None;
}
