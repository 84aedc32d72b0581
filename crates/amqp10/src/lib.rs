//! AMQP 1.0 for Charon.
//!
//! - [`codec`] and [`proto`]: re-exported from `charon-amqp10-proto`, the sans-IO half (a crate
//!   without tokio or the engine).
//! - [`codec`]: frames, performatives, message sections and values (types from
//!   `fe2o3-amqp-types`, encoding by `serde_amqp`, framing and splitting ours).
//! - [`mapping`]: between 1.0 messages and the model, as RabbitMQ 4 converts them
//!   (`docs/fidelity.md`).
//! - [`proto`]: the sans-IO connection state machine (SASL, open, sessions, links, credit,
//!   transfers, protocol errors). It consumes bytes and produces bytes and events; it never
//!   touches a socket or a clock it was not given.
//! - [`server`]: the adapter that runs one connection as a tokio task, turning links into
//!   engine publishes and consumers and serving the `/management` node.

pub use charon_amqp10_proto::{codec, proto};

pub mod mapping;
pub mod server;
