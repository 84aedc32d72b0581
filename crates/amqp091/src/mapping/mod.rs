//! Between AMQP 0.9.1 messages and the model, following RabbitMQ 4's `mc_amqpl`; the same
//! split as `charon_amqp10::mapping`. The table of conversions lives in `docs/fidelity.md`.
//!
//! - `ingest`: a publish (method, content header, body) as a model message.
//! - `render`: a model message's content-header properties for a 0.9.1 consumer, using
//!   `convert` (a message published over 1.0) and `deaths` (the `x-death` history).

mod convert;
mod deaths;
mod ingest;
mod render;

pub(crate) use ingest::{IngestError, to_model};
pub(crate) use render::for_consumer;
