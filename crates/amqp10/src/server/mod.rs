//! The AMQP 1.0 adapter: one tokio task per connection, translating links into engine
//! publishes and consumers, and serving the `/management` node.
//!
//! - [`driver`]: the task's I/O loop.
//! - `session`: per-connection broker state and event dispatch.
//! - `address`: RabbitMQ 4 v2 addresses.
//! - `attach`, `publish`, `consume`, `management`: the link kinds (`deletions`: the queues a
//!   session published to by name, watched so their links are detached when they go); `management_http` answers
//!   the `/management` node's requests, `management_body` parses them.

mod address;
mod attach;
mod attach_error;
mod consume;
mod deletions;
pub mod driver;
mod frames;
mod management;
mod management_body;
mod management_http;
mod publish;
mod session;
mod settles;

pub use driver::{ServerConfig, serve};
