//! Between AMQP 1.0 messages and the model, following RabbitMQ 4's `mc_amqp` (1.0 side) and
//! `mc_amqpl` (0.9.1 side) conversions. The table lives in `docs/fidelity.md`.

mod ingest;
mod plain;
mod render;
mod sections;

pub use ingest::to_model;
pub use render::{DeliveryFacts, for_consumer, render_for_consumer};
