//! Direct reply-to: RabbitMQ's `amq.rabbitmq.reply-to` pseudo-queue, which lets an RPC client
//! receive replies without declaring a queue.
//!
//! A client consumes from `amq.rabbitmq.reply-to` (no-ack) and publishes its requests with
//! `reply_to: amq.rabbitmq.reply-to`; the broker rewrites that to the consumer's own address,
//! `amq.rabbitmq.reply-to.<token>`. A server replies by publishing to the default exchange with
//! that address as routing key, from any connection, and the message goes straight to the
//! consumer's channel: no queue, no acknowledgement, dropped when the consumer is gone.
//!
//! The engine keeps the live consumers by address ([`ReplyConsumers`]) and knows how an
//! address is made ([`token`]); the protocol adapter decides who may consume and when a
//! `reply_to` is rewritten, and turns [`crate::SessionEvent::Reply`] into a delivery.

mod registry;
pub mod token;

pub use registry::{ReplyConsumer, ReplyConsumers};
pub use token::{PREFIX, PSEUDO_QUEUE, is_address};
