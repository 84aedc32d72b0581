//! A message published over AMQP 1.0, into the model.

use bytes::Bytes;
use charon_model::{Body, Encoded, Message, MessageId, Origin, Properties, Routing, Table, Value};
use fe2o3_amqp_types::messaging::MessageId as AmqpMessageId;

use crate::codec::{BodyKind, ParsedMessage};

fn message_id(id: &AmqpMessageId) -> MessageId {
    match id {
        AmqpMessageId::Ulong(n) => MessageId::Ulong(*n),
        AmqpMessageId::Uuid(u) => MessageId::Uuid(*u.as_inner()),
        AmqpMessageId::Binary(b) => MessageId::Binary(Bytes::copy_from_slice(b.as_ref())),
        AmqpMessageId::String(s) => MessageId::String(s.clone()),
    }
}

/// Builds the model message for a parsed transfer routed to `exchange` with `routing_key`.
/// The bare message is kept verbatim for 1.0 consumers.
#[must_use]
pub fn to_model(parsed: &ParsedMessage, exchange: &str, routing_key: String) -> Message {
    let header = parsed.header.unwrap_or_default();
    let mut properties = Properties {
        // RabbitMQ stores a message whose header omits `durable` (or has no header) as durable.
        durable: Some(header.durable.unwrap_or(true)),
        priority: header.priority,
        ttl: header.ttl.map(u64::from),
        ..Properties::default()
    };
    if let Some(p) = &parsed.properties {
        properties.message_id = p.message_id.as_ref().map(message_id);
        properties.correlation_id = p.correlation_id.as_ref().map(message_id);
        properties.user_id = p.user_id.as_ref().map(|b| Bytes::copy_from_slice(b.as_ref()));
        properties.to = p.to.clone();
        properties.subject = p.subject.clone();
        properties.reply_to = p.reply_to.clone();
        properties.content_type = p.content_type.as_ref().map(|s| s.as_str().to_owned());
        properties.content_encoding = p.content_encoding.as_ref().map(|s| s.as_str().to_owned());
        properties.absolute_expiry_time = p.absolute_expiry_time.as_ref().map(|t| t.milliseconds());
        properties.timestamp = p.creation_time.as_ref().map(|t| t.milliseconds());
        properties.group_id = p.group_id.clone();
        properties.group_sequence = p.group_sequence;
        properties.reply_to_group_id = p.reply_to_group_id.clone();
    }
    let annotations: Table = parsed
        .annotations
        .iter()
        .filter_map(|(k, v)| match k {
            Value::Symbol(key) => Some((key.clone(), v.clone())),
            _ => None,
        })
        .collect();
    let body = match &parsed.body {
        Some(BodyKind::SingleData(bytes) | BodyKind::MultipleData(bytes)) => Body::Data(bytes.clone()),
        _ => Body::Amqp10Sections(parsed.body_sections.clone()),
    };
    // An `x-cc` annotation stays an annotation: RabbitMQ 4.0.5 routes a 1.0 message by its
    // target's key alone (rabbit_amqp_session:lookup_routing_key/4 replaces the routing keys), so
    // CC keys neither route it nor show up in its death history.
    let routing = Routing { exchange: exchange.to_owned(), routing_key, ..Routing::default() };
    let mut message = Message::new(routing, body);
    message.set_properties(properties);
    message.headers = parsed.application_properties.iter().cloned().collect();
    message.annotations = annotations;
    message.encoded = Encoded::Amqp10Bare(parsed.bare.clone());
    message.origin = Origin::Amqp10;
    message
}
