//! AMQP 0.9.1's sans-IO half, a crate of its own so that the compiler keeps it apart from the
//! runtime and the engine: its dependencies have neither tokio nor `charon-engine`.
//!
//! - [`codec`]: frames, methods, content-header properties and field tables.
//! - [`proto`]: the connection state machine (handshake, tuning, heartbeats, channel
//!   lifecycle, content assembly, protocol errors). It consumes bytes and produces bytes and
//!   events; it never touches a socket or a clock it was not given.
//!
//! `charon-amqp091` re-exports both and adds the mapping to the model and the server.

pub mod codec;
pub mod proto;
