//! AMQP 1.0's sans-IO half, a crate of its own so that the compiler keeps it apart from the
//! runtime and the engine: its dependencies have neither tokio nor `charon-engine`.
//!
//! - [`codec`]: frames, performatives, message sections and values (types from
//!   `fe2o3-amqp-types`, encoding by `serde_amqp`, framing, splitting and the hot
//!   performatives ours).
//! - [`proto`]: the connection state machine (SASL, open, sessions, links, credit, transfers,
//!   protocol errors). It consumes bytes and produces bytes and events; it never touches a
//!   socket or a clock it was not given.
//!
//! `charon-amqp10` re-exports both and adds the mapping to the model and the server.

pub mod codec;
pub mod proto;
