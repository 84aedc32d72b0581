//! `basic.publish`: build the message, route it, batch it per queue, confirm it.

use std::sync::Arc;

use amq_protocol::protocol::AMQPClass;
use amq_protocol::protocol::basic::{AMQPMethod, Return};
use charon_engine::{ConfirmTo, Enqueue, QueueRef, queue::args::MAX_EXPIRY_MS};
use charon_model::{Body, Encoded, Message, Origin, Routing, Value};

use super::session::Session;
use super::{MethodError, MethodResult};
use crate::proto::{Connection, PublishCommand, ReplyCode};

/// Publishes routed but not yet handed to their queues. Flushed before any other method is
/// handled (so ordering is preserved) and after each read from the socket, so a queue gets
/// one command per read instead of one per message.
#[derive(Debug, Default)]
pub(crate) struct PendingBatches {
    batches: Vec<Batch>,
}

#[derive(Debug)]
struct Batch {
    queue: QueueRef,
    channel: u16,
    items: Vec<Enqueue>,
}

impl PendingBatches {
    fn push(&mut self, queue: &QueueRef, channel: u16, item: Enqueue) {
        let found = self.batches.iter_mut().find(|b| b.channel == channel && Arc::ptr_eq(&b.queue, queue));
        match found {
            Some(batch) => batch.items.push(item),
            None => self.batches.push(Batch { queue: Arc::clone(queue), channel, items: vec![item] }),
        }
    }
}

/// RabbitMQ's `rabbit_basic:parse_expiration/1`: an integer string of milliseconds.
fn parse_expiration(text: &str) -> Result<u64, String> {
    let digits_end = text
        .char_indices()
        .find(|(i, c)| !(c.is_ascii_digit() || (*i == 0 && (*c == '-' || *c == '+'))))
        .map_or(text.len(), |(i, _)| i);
    let (number, rest) = text.split_at(digits_end);
    let Ok(value) = number.parse::<i64>() else {
        return Err("no_integer".to_owned());
    };
    if !rest.is_empty() {
        return Err(format!("{{leftover_string,\"{rest}\"}}"));
    }
    if value < 0 {
        return Err(format!("{{value_negative,{value}}}"));
    }
    if value > MAX_EXPIRY_MS {
        return Err(format!("{{value_too_large,{value}}}"));
    }
    u64::try_from(value).map_err(|_| "no_integer".to_owned())
}

/// The string routing keys of a `CC` or `BCC` header (an array of long strings).
fn header_keys(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::List(items)) => items
            .iter()
            .filter_map(|v| match v {
                Value::LongStr(_) => v.as_str().map(str::to_owned),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

impl Session {
    fn build_message(&self, command: PublishCommand) -> Result<Message, MethodError> {
        if command.method.immediate {
            return Err(MethodError::new(ReplyCode::NotImplemented, "immediate=true"));
        }
        let mut decoded = command.properties;
        if let Some(expiration) = &decoded.expiration {
            let ttl = parse_expiration(expiration).map_err(|e| {
                MethodError::new(ReplyCode::PreconditionFailed, format!("invalid expiration '{expiration}': {e}"))
            })?;
            decoded.properties.ttl = Some(ttl);
        }
        if let (Some(claimed), Some(user)) = (&decoded.properties.user_id, &self.user)
            && claimed.as_ref() != user.name.as_bytes()
        {
            return Err(MethodError::new(
                ReplyCode::PreconditionFailed,
                format!(
                    "user_id property set to '{}' but authenticated user was '{}'",
                    String::from_utf8_lossy(claimed),
                    user.name
                ),
            ));
        }
        let cc = header_keys(decoded.headers.get("CC"));
        let bcc = header_keys(decoded.headers.get("BCC"));
        let encoded = if decoded.headers.contains("BCC") {
            decoded.headers.remove("BCC");
            Encoded::None
        } else {
            Encoded::Amqp091Properties(command.raw_properties)
        };
        let routing = Routing {
            exchange: command.method.exchange.as_str().to_owned(),
            routing_key: command.method.routing_key.as_str().to_owned(),
            cc,
            bcc,
        };
        let mut message = Message::new(routing, Body::Data(command.body));
        message.set_properties(decoded.properties);
        message.headers = decoded.headers;
        message.encoded = encoded;
        message.origin = Origin::Amqp091;
        Ok(message)
    }

    /// Routes one publish and queues it for its queues; unroutable mandatory messages are
    /// returned at once.
    pub(crate) fn publish(&mut self, channel: u16, command: PublishCommand, conn: &mut Connection) -> MethodResult {
        let mandatory = command.method.mandatory;
        let message = self.build_message(command)?;
        let vhost = self.vhost()?;
        let state = self.channel(channel)?;
        let queues =
            vhost.route(&mut state.route_cache, &message.routing.exchange, &message.routing, &message.headers)?;
        let confirm = state.confirms.as_mut().map(|t| t.publish(queues.len()));
        if queues.is_empty() {
            if mandatory {
                send_return(conn, channel, &message);
            }
            return Ok(());
        }
        let message = Arc::new(message);
        for queue in queues.iter() {
            self.batches.push(queue, channel, Enqueue { message: Arc::clone(&message), confirm });
        }
        Ok(())
    }

    /// Hands batched publishes to their queues (waiting while a queue's mailbox is full).
    pub(crate) async fn flush_publishes(&mut self, conn: &mut Connection) {
        for batch in std::mem::take(&mut self.batches.batches) {
            let wants_confirm = batch.items.iter().any(|i| i.confirm.is_some());
            let seqs: Vec<u64> =
                if wants_confirm { batch.items.iter().filter_map(|i| i.confirm).collect() } else { Vec::new() };
            let confirm_to =
                wants_confirm.then(|| ConfirmTo { session: self.sink.clone(), channel: u32::from(batch.channel) });
            if !batch.queue.publish(batch.items, confirm_to).await {
                // The queue went away between routing and enqueueing: RabbitMQ confirms such
                // messages, as it does for unroutable ones.
                if let Some(tracker) = self.channels.get_mut(&batch.channel).and_then(|c| c.confirms.as_mut()) {
                    for seq in seqs {
                        tracker.answer(seq, true);
                    }
                }
            }
        }
        self.emit_confirms(conn);
    }
}

fn send_return(conn: &mut Connection, channel: u16, message: &Message) {
    let ret = Return {
        reply_code: ReplyCode::NoRoute.code(),
        reply_text: ReplyCode::NoRoute.name().into(),
        exchange: message.routing.exchange.as_str().into(),
        routing_key: message.routing.routing_key.as_str().into(),
    };
    conn.send_method(channel, &AMQPClass::Basic(AMQPMethod::Return(ret)));
    super::deliver::send_content(conn, channel, message);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiration_parses_like_rabbitmq() {
        assert_eq!(parse_expiration("60000"), Ok(60000));
        assert_eq!(parse_expiration("0"), Ok(0));
        assert_eq!(parse_expiration("-5"), Err("{value_negative,-5}".to_owned()));
        assert_eq!(parse_expiration("abc"), Err("no_integer".to_owned()));
        assert_eq!(parse_expiration("12ab"), Err("{leftover_string,\"ab\"}".to_owned()));
        assert_eq!(parse_expiration("315360000001"), Err("{value_too_large,315360000001}".to_owned()));
    }
}
