//! Encoding message sections.

use serde_amqp::Value as Amqp;
use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor;

use crate::codec::generate;

pub(super) const HEADER: u64 = 0x70;
pub(super) const MESSAGE_ANNOTATIONS: u64 = 0x72;
pub(super) const PROPERTIES: u64 = 0x73;
pub(super) const APPLICATION_PROPERTIES: u64 = 0x74;
pub(super) const DATA: u64 = 0x75;

/// Appends a described section.
/// Sections the broker writes are encoded the way RabbitMQ's generator writes them (see
/// [`crate::codec::generate`]), so consumers (and RabbitMQ, if a message travels on) read them as
/// they would RabbitMQ's.
pub(super) fn push_section(out: &mut Vec<u8>, code: u64, value: Amqp) {
    let described = Amqp::Described(Box::new(Described { descriptor: Descriptor::Code(code), value }));
    generate(out, &described);
}

/// A list with trailing absent fields trimmed, as composite types are encoded.
pub(super) fn composite(mut fields: Vec<Amqp>) -> Amqp {
    while matches!(fields.last(), Some(Amqp::Null)) {
        fields.pop();
    }
    Amqp::List(fields)
}
