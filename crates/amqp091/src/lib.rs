//! AMQP 0.9.1 for Charon.
//!
//! - [`codec`] and [`proto`]: re-exported from `charon-amqp091-proto`, the sans-IO half (a
//!   crate without tokio or the engine).
//! - [`codec`]: frames, methods, content-header properties and field tables.
//! - `mapping`: between 0.9.1 messages and the model (publish in, content properties out), the
//!   counterpart of `charon_amqp10::mapping`.
//! - [`proto`]: the sans-IO connection state machine (handshake, tuning, heartbeats, channel
//!   lifecycle, content assembly, protocol errors). It consumes bytes and produces bytes and
//!   events; it never touches a socket or a clock it was not given.
//! - [`server`]: the adapter that runs one connection as a tokio task, executing channel
//!   methods against the engine.

pub use charon_amqp091_proto::{codec, proto};

mod mapping;
pub mod server;
