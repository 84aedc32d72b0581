//! The sections the broker puts before a plain AMQP 1.0 message, written by hand.
//!
//! Most deliveries are of messages published over 1.0 without message annotations or a death
//! history: the broker adds a `header` and the `x-exchange` / `x-routing-key` annotations.
//! Building those as values (a list, a map, boxed descriptors, cloned strings) and then
//! encoding them was a dozen allocations per delivery; here they are written straight into
//! the output, byte for byte what the general path ([`crate::codec::generate`]) writes — the
//! tests compare both.

use charon_model::{Message, Origin};

use super::render::DeliveryFacts;

/// Writes the header and message annotations of a plain message and returns true, or writes
/// nothing and returns false when the message needs the general path.
pub(super) fn plain_sections(out: &mut Vec<u8>, message: &Message, facts: DeliveryFacts) -> bool {
    if matches!(message.origin, Origin::Amqp091)
        || !message.annotations.is_empty()
        || message.broker.deaths.is_some()
        || message.broker.redrive_count > 0
    {
        return false;
    }
    let props = message.properties();
    let delivery_count = message.broker.delivery_count.saturating_add(facts.delivery_count);
    let first_acquirer = !facts.redelivered && delivery_count == 0;
    // Five fields of at most 5 bytes each: always a list8, whose size byte is filled in once
    // the fields are written (no scratch buffer per delivery).
    out.extend([0x00, 0x53, 0x70, 0xc0, 0, 5]);
    let size_at = out.len() - 2;
    out.push(boolean(props.durable.unwrap_or(true)));
    match props.priority {
        Some(priority) => out.extend([0x50, priority]),
        None => out.push(0x40),
    }
    match props.ttl.and_then(|t| u32::try_from(t).ok()) {
        Some(ttl) => uint(out, ttl),
        None => out.push(0x40),
    }
    out.push(boolean(first_acquirer));
    uint(out, delivery_count);
    let size = u8::try_from(out.len() - size_at - 1).unwrap_or(u8::MAX);
    if let Some(slot) = out.get_mut(size_at) {
        *slot = size;
    }

    let exchange = message.routing.exchange.as_bytes();
    let routing_key = message.routing.routing_key.as_bytes();
    let body = variable_len(b"x-exchange")
        + variable_len(exchange)
        + variable_len(b"x-routing-key")
        + variable_len(routing_key);
    out.extend([0x00, 0x53, 0x72]);
    compound(out, 0xc1, 4, body);
    variable(out, 0xa3, b"x-exchange");
    variable(out, 0xa1, exchange);
    variable(out, 0xa3, b"x-routing-key");
    variable(out, 0xa1, routing_key);
    true
}

fn boolean(value: bool) -> u8 {
    if value { 0x41 } else { 0x42 }
}

fn uint(out: &mut Vec<u8>, value: u32) {
    match value {
        0 => out.push(0x43),
        1..=255 => out.extend([0x52, value as u8]),
        _ => {
            out.push(0x70);
            out.extend(value.to_be_bytes());
        }
    }
}

/// The bytes [`variable`] writes for `bytes`.
fn variable_len(bytes: &[u8]) -> usize {
    if bytes.len() <= 0xff { 2 + bytes.len() } else { 5 + bytes.len() }
}

/// A string, symbol or binary: the 1-byte size up to 255 bytes, as the generator picks.
fn variable(out: &mut Vec<u8>, small_code: u8, bytes: &[u8]) {
    match u8::try_from(bytes.len()) {
        Ok(len) => out.extend([small_code, len]),
        Err(_) => {
            out.push(small_code | 0x10);
            out.extend(u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
        }
    }
    out.extend_from_slice(bytes);
}

/// A list or map constructor for `count` items in `body` bytes: the short form while the size
/// fits a byte, as the generator picks.
fn compound(out: &mut Vec<u8>, small_code: u8, count: u8, body: usize) {
    match u8::try_from(body + 1) {
        Ok(size) => out.extend([small_code, size, count]),
        Err(_) => {
            out.push(small_code | 0x10);
            out.extend(u32::try_from(body + 4).unwrap_or(u32::MAX).to_be_bytes());
            out.extend(u32::from(count).to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use charon_model::{Body, DeathHistory, DeathReason, DeathRecord, Properties, Routing, Table, Value};

    use super::*;
    use crate::mapping::render::general_sections;

    fn message(exchange: &str, routing_key: &str, properties: Properties, delivery_count: u32) -> Message {
        let routing =
            Routing { exchange: exchange.to_owned(), routing_key: routing_key.to_owned(), ..Routing::default() };
        let mut message = Message::new(routing, Body::Data(Bytes::from_static(b"x")));
        message.origin = Origin::Amqp10;
        message.set_properties(properties);
        message.broker.delivery_count = delivery_count;
        message
    }

    #[test]
    fn plain_sections_are_what_the_general_path_writes() {
        let long = "k".repeat(300);
        let edge = "e".repeat(255);
        let mut cases = Vec::new();
        for (exchange, routing_key) in [("", "q"), ("amq.topic", "a.b.c"), ("x", long.as_str()), (edge.as_str(), "")] {
            for properties in [
                Properties::default(),
                Properties { durable: Some(false), priority: Some(7), ttl: Some(60_000), ..Properties::default() },
                Properties { durable: Some(true), ttl: Some(200), ..Properties::default() },
                Properties { ttl: Some(u64::from(u32::MAX) + 1), ..Properties::default() },
            ] {
                for delivery_count in [0, 3, 300] {
                    cases.push(message(exchange, routing_key, properties.clone(), delivery_count));
                }
            }
        }
        for message in &cases {
            for facts in [
                DeliveryFacts::default(),
                DeliveryFacts { redelivered: true, delivery_count: 0 },
                DeliveryFacts { redelivered: false, delivery_count: 1 },
            ] {
                let mut fast = Vec::new();
                assert!(plain_sections(&mut fast, message, facts));
                let mut general = Vec::new();
                general_sections(&mut general, message, facts);
                assert_eq!(fast, general, "{message:?} {facts:?}");
            }
        }
    }

    #[test]
    fn annotated_dead_lettered_and_0_9_1_messages_take_the_general_path() {
        let mut annotated = message("", "q", Properties::default(), 0);
        annotated.annotations = Table::from_iter([("x-key".to_owned(), Value::Bool(true))]);
        let mut dead = message("", "q", Properties::default(), 0);
        let record = DeathRecord {
            queue: "q",
            reason: DeathReason::Expired,
            exchange: "",
            routing_keys: &[],
            ttl: None,
            now: 0,
            cause: None,
        };
        dead.broker.deaths = Some(Box::new(DeathHistory::new(&record)));
        let mut from_0_9_1 = message("", "q", Properties::default(), 0);
        from_0_9_1.origin = Origin::Amqp091;
        for m in [annotated, dead, from_0_9_1] {
            let mut out = Vec::new();
            assert!(!plain_sections(&mut out, &m, DeliveryFacts::default()));
            assert!(out.is_empty());
        }
    }
}
