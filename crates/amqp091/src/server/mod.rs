//! The AMQP 0.9.1 adapter: runs one client connection as a tokio task, translating channel
//! methods into engine calls and engine events into frames.
//!
//! - [`driver`]: the task's I/O loop (socket, timers, engine events, shutdown).
//! - `session`: per-connection broker state and event dispatch.
//! - `channel`: per-channel bookkeeping (delivery tags, confirms, prefetch).
//! - `tx`: a transactional channel's held publishes and settlements.
//! - `topology`, `basic`, `publish`, `deliver`, `tx_methods`: method handlers by area; the message
//!   conversions they use live in `crate::mapping`.
//! - `reply_to`: direct reply-to (`amq.rabbitmq.reply-to`).
//! - `ack_timeout`: the consumer (delivery acknowledgement) timeout.

mod ack_timeout;
mod basic;
mod channel;
mod confirms;
mod deliver;
pub mod driver;
mod grants;
mod method_error;
mod publish;
mod reply_to;
mod report;
mod session;
#[cfg(test)]
mod test_queue;
mod topology;
mod tx;
mod tx_methods;

use charon_engine::{EngineError, ErrorKind};

pub use driver::{ServerConfig, serve};

use crate::proto::ReplyCode;

/// The 0.9.1 reply code for an engine error.
#[must_use]
pub fn reply_code(error: &EngineError) -> ReplyCode {
    match error.kind() {
        ErrorKind::NotFound => ReplyCode::NotFound,
        ErrorKind::AccessRefused => ReplyCode::AccessRefused,
        ErrorKind::ResourceLocked => ReplyCode::ResourceLocked,
        ErrorKind::PreconditionFailed => ReplyCode::PreconditionFailed,
        ErrorKind::NotAllowed => ReplyCode::NotAllowed,
        ErrorKind::NotImplemented => ReplyCode::NotImplemented,
        ErrorKind::InternalError => ReplyCode::InternalError,
    }
}

pub(crate) use method_error::{MethodError, MethodResult};
