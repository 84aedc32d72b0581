//! Charon's protocol-neutral message model.
//!
//! One [`Message`] type carries a message from any protocol adapter (AMQP 0.9.1 or AMQP 1.0)
//! through the engine to any other. It follows the split RabbitMQ 4 makes in its message
//! container (`mc.erl`): protocol-visible *properties* and *application headers*, an opaque
//! *body*, the *routing* facts the broker needs (exchange, routing keys including CC and BCC),
//! and *broker annotations* (death history, delivery counts) that are stored once and rendered
//! differently for each consumer protocol (`x-death` for 0.9.1, `x-opt-deaths` for 1.0).
//!
//! # Layout
//! - [`value`]: the typed value tree able to hold every AMQP 0.9.1 field-table value and every
//!   AMQP 1.0 simple and compound value.
//! - [`properties`]: the message properties both protocols share (content type, durability,
//!   expiration, ids, ...).
//! - [`death`]: the death history RabbitMQ keeps per `{queue, reason}`.
//! - [`death_cause`]: what a refusing AMQP 1.0 consumer said, kept with a death (an extension).
//! - [`message`]: the message itself, its routing facts and the raw encodings kept for
//!   same-protocol pass-through.
//! - [`erlang`]: Erlang term printing, for the RabbitMQ texts clients see.
//! - [`node`]: the node's name (`charon@<host>`), one for every crate that reports it.
//! - [`text`]: name comparison on the message path (empty names without `memcmp`).
//!
//! This crate knows no wire format and does no I/O, except that [`node_name`] reads the host
//! name.

pub mod calendar;
pub mod death;
pub mod death_cause;
pub mod erlang;
pub mod identity;
pub mod message;
pub mod node;
pub mod properties;
pub mod serial;
pub mod text;
pub mod value;

pub use death::{Death, DeathEvent, DeathHistory, DeathReason, DeathRecord};
pub use death_cause::DeathCause;
pub use message::{Body, BrokerAnnotations, DELIVERY_COUNT_KEY, Encoded, Message, Origin, REDRIVE_COUNT_KEY, Routing};
pub use node::{node_name, set_node_name};
pub use properties::{MessageId, Properties};
pub use serial::{link_credit_snd, serial_diff};
pub use value::{MAX_DEPTH, Table, Value};
