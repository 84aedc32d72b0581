//! The parts of a [`Message`]: properties (a presence bitmap, then the present fields), tables,
//! body, routing, broker annotations and the original encoding.

use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use charon_model::{
    Body, BrokerAnnotations, Death, DeathCause, DeathEvent, DeathHistory, DeathReason, Encoded, Message, MessageId,
    Origin, Properties, Routing, Table,
};

use super::CodecError;
use super::value::{put_table, read_table};
use super::wire::{Reader, put_bytes, put_str, put_varint, put_zigzag};

pub(super) fn put_message(out: &mut BytesMut, m: &Message) {
    out.put_u8(match m.origin {
        Origin::Broker => 0,
        Origin::Amqp091 => 1,
        Origin::Amqp10 => 2,
    });
    put_properties(out, m.properties());
    put_table(out, &m.headers);
    put_table(out, &m.annotations);
    match &m.body {
        Body::Data(b) => {
            out.put_u8(0);
            put_bytes(out, b);
        }
        Body::Amqp10Sections(b) => {
            out.put_u8(1);
            put_bytes(out, b);
        }
    }
    put_str(out, &m.routing.exchange);
    put_str(out, &m.routing.routing_key);
    put_strings(out, &m.routing.cc);
    put_strings(out, &m.routing.bcc);
    put_varint(out, u64::from(m.broker.delivery_count));
    put_varint(out, u64::from(m.broker.acquired_count));
    put_varint(out, u64::from(m.broker.redrive_count));
    match m.broker.not_before {
        None => out.put_u8(0),
        Some(at) => {
            out.put_u8(1);
            put_zigzag(out, at);
        }
    }
    match &m.broker.deaths {
        None => out.put_u8(0),
        Some(history) => {
            out.put_u8(1);
            put_history(out, history);
        }
    }
    match &m.encoded {
        Encoded::None => out.put_u8(0),
        Encoded::Amqp091Properties(b) => {
            out.put_u8(1);
            put_bytes(out, b);
        }
        Encoded::Amqp10Bare(b) => {
            out.put_u8(2);
            put_bytes(out, b);
        }
    }
}

/// Reads a message of layout `version` (1 has no redrive count, 2 no "not before" time).
pub(super) fn read_message(r: &mut Reader, version: u8) -> Result<Message, CodecError> {
    let origin = match r.u8("origin")? {
        0 => Origin::Broker,
        1 => Origin::Amqp091,
        2 => Origin::Amqp10,
        _ => return Err(r.error("origin")),
    };
    let properties = read_properties(r)?;
    let headers = read_table(r)?;
    let annotations = read_table(r)?;
    let body = match r.u8("body kind")? {
        0 => Body::Data(r.bytes("body")?),
        1 => Body::Amqp10Sections(r.bytes("body sections")?),
        _ => return Err(r.error("body kind")),
    };
    let routing = Routing {
        exchange: r.string("exchange")?,
        routing_key: r.string("routing key")?,
        cc: read_strings(r)?,
        bcc: read_strings(r)?,
    };
    let delivery_count = r.u32("delivery count")?;
    let acquired_count = r.u32("acquired count")?;
    let redrive_count = if version >= 2 { r.u32("redrive count")? } else { 0 };
    let not_before = if version >= 3 && r.bool("not before")? { Some(r.zigzag("not before")?) } else { None };
    let deaths = if r.bool("death history")? { Some(Box::new(read_history(r)?)) } else { None };
    let encoded = match r.u8("encoding kind")? {
        0 => Encoded::None,
        1 => Encoded::Amqp091Properties(r.bytes("0.9.1 properties")?),
        2 => Encoded::Amqp10Bare(r.bytes("1.0 bare message")?),
        _ => return Err(r.error("encoding kind")),
    };
    let mut message = Message::new(routing, body);
    message.headers = headers;
    message.annotations = annotations;
    message.broker =
        BrokerAnnotations { deaths, delivery_count, acquired_count, refusal: None, redrive_count, not_before };
    message.encoded = encoded;
    message.origin = origin;
    message.set_properties(properties);
    Ok(message)
}

fn put_strings(out: &mut BytesMut, items: &[String]) {
    put_varint(out, items.len() as u64);
    for item in items {
        put_str(out, item);
    }
}

fn read_strings(r: &mut Reader) -> Result<Vec<String>, CodecError> {
    let n = r.count("string list")?;
    (0..n).map(|_| r.string("string list item")).collect()
}

fn put_opt_str(out: &mut BytesMut, value: &Option<String>) {
    if let Some(text) = value {
        put_str(out, text);
    }
}

fn put_id(out: &mut BytesMut, id: &MessageId) {
    match id {
        MessageId::String(s) => {
            out.put_u8(0);
            put_str(out, s);
        }
        MessageId::Ulong(n) => {
            out.put_u8(1);
            put_varint(out, *n);
        }
        MessageId::Uuid(raw) => {
            out.put_u8(2);
            out.put_slice(raw);
        }
        MessageId::Binary(b) => {
            out.put_u8(3);
            put_bytes(out, b);
        }
    }
}

fn read_id(r: &mut Reader) -> Result<MessageId, CodecError> {
    Ok(match r.u8("id kind")? {
        0 => MessageId::String(r.string("id")?),
        1 => MessageId::Ulong(r.varint("id")?),
        2 => MessageId::Uuid(r.fixed("id")?),
        3 => MessageId::Binary(r.bytes("id")?),
        _ => return Err(r.error("id kind")),
    })
}

/// Properties: a bitmap of the present fields (in declaration order), then each present field,
/// written straight into `out` (the bitmap is known before the fields: no scratch buffer).
pub(super) fn put_properties(out: &mut BytesMut, p: &Properties) {
    let present = [
        p.content_type.is_some(),
        p.content_encoding.is_some(),
        p.delivery_mode.is_some(),
        p.durable.is_some(),
        p.priority.is_some(),
        p.correlation_id.is_some(),
        p.reply_to.is_some(),
        p.ttl.is_some(),
        p.message_id.is_some(),
        p.timestamp.is_some(),
        p.message_type.is_some(),
        p.user_id.is_some(),
        p.app_id.is_some(),
        p.cluster_id.is_some(),
        p.to.is_some(),
        p.subject.is_some(),
        p.absolute_expiry_time.is_some(),
        p.group_id.is_some(),
        p.group_sequence.is_some(),
        p.reply_to_group_id.is_some(),
    ];
    let bits = present.iter().rev().fold(0u32, |bits, has| (bits << 1) | u32::from(*has));
    put_varint(out, u64::from(bits));
    put_opt_str(out, &p.content_type);
    put_opt_str(out, &p.content_encoding);
    if let Some(mode) = p.delivery_mode {
        out.put_u8(mode);
    }
    if let Some(durable) = p.durable {
        out.put_u8(u8::from(durable));
    }
    if let Some(priority) = p.priority {
        out.put_u8(priority);
    }
    if let Some(id) = &p.correlation_id {
        put_id(out, id);
    }
    put_opt_str(out, &p.reply_to);
    if let Some(ttl) = p.ttl {
        put_varint(out, ttl);
    }
    if let Some(id) = &p.message_id {
        put_id(out, id);
    }
    if let Some(ts) = p.timestamp {
        put_zigzag(out, ts);
    }
    put_opt_str(out, &p.message_type);
    if let Some(user) = &p.user_id {
        put_bytes(out, user);
    }
    put_opt_str(out, &p.app_id);
    put_opt_str(out, &p.cluster_id);
    put_opt_str(out, &p.to);
    put_opt_str(out, &p.subject);
    if let Some(at) = p.absolute_expiry_time {
        put_zigzag(out, at);
    }
    put_opt_str(out, &p.group_id);
    if let Some(seq) = p.group_sequence {
        put_varint(out, u64::from(seq));
    }
    put_opt_str(out, &p.reply_to_group_id);
}

fn read_properties(r: &mut Reader) -> Result<Properties, CodecError> {
    let bits = r.u32("property flags")?;
    let has = |bit: u32| bits & (1 << bit) != 0;
    let opt_str = |r: &mut Reader, bit: u32, what| if has(bit) { r.string(what).map(Some) } else { Ok(None) };
    Ok(Properties {
        content_type: opt_str(r, 0, "content-type")?,
        content_encoding: opt_str(r, 1, "content-encoding")?,
        delivery_mode: if has(2) { Some(r.u8("delivery-mode")?) } else { None },
        durable: if has(3) { Some(r.bool("durable")?) } else { None },
        priority: if has(4) { Some(r.u8("priority")?) } else { None },
        correlation_id: if has(5) { Some(read_id(r)?) } else { None },
        reply_to: opt_str(r, 6, "reply-to")?,
        ttl: if has(7) { Some(r.varint("ttl")?) } else { None },
        message_id: if has(8) { Some(read_id(r)?) } else { None },
        timestamp: if has(9) { Some(r.zigzag("timestamp")?) } else { None },
        message_type: opt_str(r, 10, "type")?,
        user_id: if has(11) { Some(r.bytes("user-id")?) } else { None },
        app_id: opt_str(r, 12, "app-id")?,
        cluster_id: opt_str(r, 13, "cluster-id")?,
        to: opt_str(r, 14, "to")?,
        subject: opt_str(r, 15, "subject")?,
        absolute_expiry_time: if has(16) { Some(r.zigzag("absolute-expiry-time")?) } else { None },
        group_id: opt_str(r, 17, "group-id")?,
        group_sequence: if has(18) { Some(r.u32("group-sequence")?) } else { None },
        reply_to_group_id: opt_str(r, 19, "reply-to-group-id")?,
    })
}

fn reason_code(reason: DeathReason) -> u8 {
    match reason {
        DeathReason::Rejected => 0,
        DeathReason::Expired => 1,
        DeathReason::Maxlen => 2,
        DeathReason::DeliveryLimit => 3,
    }
}

fn read_reason(r: &mut Reader) -> Result<DeathReason, CodecError> {
    Ok(match r.u8("death reason")? {
        0 => DeathReason::Rejected,
        1 => DeathReason::Expired,
        2 => DeathReason::Maxlen,
        3 => DeathReason::DeliveryLimit,
        _ => return Err(r.error("death reason")),
    })
}

fn put_event(out: &mut BytesMut, event: &DeathEvent) {
    put_str(out, &event.queue);
    out.put_u8(reason_code(event.reason));
    put_str(out, &event.exchange);
}

fn read_event(r: &mut Reader) -> Result<DeathEvent, CodecError> {
    Ok(DeathEvent { queue: r.string("death queue")?, reason: read_reason(r)?, exchange: r.string("death exchange")? })
}

fn put_history(out: &mut BytesMut, history: &DeathHistory) {
    put_varint(out, history.entries.len() as u64);
    for d in &history.entries {
        put_str(out, &d.queue);
        out.put_u8(reason_code(d.reason));
        put_varint(out, d.count);
        put_zigzag(out, d.first_time);
        put_zigzag(out, d.last_time);
        put_str(out, &d.exchange);
        put_strings(out, &d.routing_keys);
        let flags = u8::from(d.original_ttl.is_some()) * ENTRY_TTL + u8::from(d.cause.is_some()) * ENTRY_CAUSE;
        out.put_u8(flags);
        if let Some(ttl) = d.original_ttl {
            put_varint(out, ttl);
        }
        if let Some(cause) = &d.cause {
            put_cause(out, cause);
        }
    }
    put_event(out, &history.first);
    put_event(out, &history.last);
}

fn read_history(r: &mut Reader) -> Result<DeathHistory, CodecError> {
    let n = r.count("death entries")?;
    let mut entries = Vec::with_capacity(n);
    for _ in 0..n {
        let queue = r.string("death queue")?;
        let reason = read_reason(r)?;
        let count = r.varint("death count")?;
        let first_time = r.zigzag("death time")?;
        let last_time = r.zigzag("death time")?;
        let exchange = r.string("death exchange")?;
        let routing_keys = read_strings(r)?;
        let flags = r.u8("death entry flags")?;
        if flags & !(ENTRY_TTL | ENTRY_CAUSE) != 0 {
            return Err(r.error("death entry flags"));
        }
        let original_ttl = if flags & ENTRY_TTL != 0 { Some(r.varint("original ttl")?) } else { None };
        let cause = if flags & ENTRY_CAUSE != 0 { Some(Arc::new(read_cause(r)?)) } else { None };
        entries.push(Death {
            queue,
            reason,
            count,
            first_time,
            last_time,
            exchange,
            routing_keys,
            original_ttl,
            cause,
        });
    }
    Ok(DeathHistory { entries, first: read_event(r)?, last: read_event(r)? })
}

/// A death entry's flags byte: it has an original TTL. Before causes existed the byte was the
/// TTL's presence as a bool (0 or 1), so those records read unchanged.
const ENTRY_TTL: u8 = 1;
/// A death entry's flags byte: a [`DeathCause`] follows the TTL.
const ENTRY_CAUSE: u8 = 2;

/// A cause: a byte saying which parts are present (condition, description, info,
/// annotations, in that bit order), then each present part.
fn put_cause(out: &mut BytesMut, cause: &DeathCause) {
    let parts = [
        cause.condition().is_some(),
        cause.description().is_some(),
        cause.info().is_some(),
        cause.annotations().is_some(),
    ];
    out.put_u8(parts.iter().enumerate().fold(0, |bits, (bit, present)| bits | (u8::from(*present) << bit)));
    for text in [cause.condition(), cause.description()].into_iter().flatten() {
        put_str(out, text);
    }
    for table in [cause.info(), cause.annotations()].into_iter().flatten() {
        put_table(out, table);
    }
}

fn read_cause(r: &mut Reader) -> Result<DeathCause, CodecError> {
    let parts = r.u8("death cause parts")?;
    if parts & !0b1111 != 0 {
        return Err(r.error("death cause parts"));
    }
    let has = |bit: u8| parts & (1 << bit) != 0;
    let text = |r: &mut Reader, bit, what| if has(bit) { r.string(what).map(Some) } else { Ok(None) };
    let table = |r: &mut Reader, bit| if has(bit) { read_table(r).map(Some) } else { Ok::<Option<Table>, _>(None) };
    let condition = text(r, 0, "death cause condition")?;
    let description = text(r, 1, "death cause description")?;
    let info = table(r, 2)?;
    let annotations = table(r, 3)?;
    // Never written empty: a cause that reads as nothing is not what was stored.
    DeathCause::new(condition, description, info, annotations).ok_or_else(|| r.error("death cause"))
}
