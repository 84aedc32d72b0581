//! AMQP 0.9.1 wire format.
//!
//! Frame splitting and body frames are ours (zero-copy: a body is a `Bytes` slice of the read
//! buffer); method frames are decoded and encoded with amq-protocol's generated code, wrapped
//! here so it could be replaced, except `basic.publish`, which is decoded by hand (`publish.rs`:
//! once per message); content-header properties and field tables use our own codec that keeps
//! header order.

mod frame;
mod method;
mod method_tables;
mod properties;
mod publish;
mod table;

pub use frame::{
    FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD, FrameError, RawFrame, parse_frame,
};
pub use method::{MethodError, decode_method, encode_method, method_ids, put_ack, put_deliver, put_nack};
pub use properties::{DecodedProperties, decode_properties, encode_properties};
pub use publish::{Publish, decode_publish, is_publish};
pub use table::{decode_table, encode_table};

/// A field table, property list or method payload could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// Ran out of bytes.
    #[error("truncated")]
    Truncated,
    /// A field-table value had an unknown type letter.
    #[error("unknown field type {0:#04x}")]
    UnknownFieldType(u8),
    /// Tables or arrays nested deeper than the model's [`charon_model::MAX_DEPTH`].
    #[error("field tables nested deeper than {} levels", charon_model::MAX_DEPTH)]
    TooDeep,
}
