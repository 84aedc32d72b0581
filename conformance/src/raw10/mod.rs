//! A hand-driven AMQP 1.0 peer for cases no client library can express.
//!
//! Drain flows with credit in the same frame, modified outcomes with annotations, malformed
//! frames, unknown channels and handles, oversized frames, SASL failures and byte-exact message
//! checks all need control over every frame. Frames are laid out by hand ([`codec::frame`]);
//! performatives and sections are encoded with `serde_amqp` / `fe2o3-amqp-types`, never with
//! Charon's crates.

pub mod codec;
pub mod conn;
pub mod link;
pub mod message;
pub mod value;

pub use conn::{Conn10, WAIT};
pub use link::{Delivery, Refusal};
pub use message::{Msg, Received};
