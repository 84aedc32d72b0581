//! AMQP 1.0 for Charon.
//!
//! - [`codec`]: frames, performatives, message sections and values (types from
//!   `fe2o3-amqp-types`, encoding by `serde_amqp`, framing and splitting ours).

pub mod codec;
pub mod mapping;
pub mod proto;
pub mod server;
