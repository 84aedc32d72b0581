//! The dead-letter event stream (issue 16): every vhost has a topic exchange
//! [`EVENTS_EXCHANGE`], and every death — a message leaving a queue dead, dead-lettered or
//! dropped — publishes one small JSON event to it with routing key `<reason>.<queue>`
//! (docs/dead-letter-events.md).
//!
//! Events are best effort and never slow dead lettering: a queue builds one only while the
//! exchange has a binding (one atomic load per death otherwise), hands it to a bounded buffer
//! without waiting ([`DeadLetterEvents`]), and one task per vhost renders and publishes what
//! the buffer holds. A full buffer drops the event and counts it.

mod buffer;
pub(crate) mod event;
mod publisher;

pub use buffer::DeadLetterEvents;
pub use event::{DeadLetterEvent, DropReason, EVENTS_EXCHANGE, id_text};

/// Events a vhost's buffer holds before it drops new ones.
pub const BUFFER_CAPACITY: usize = 10_000;
