//! The connection driver shared by Charon's protocols.
//!
//! Each protocol crate keeps its wire protocol in a sans-IO core (bytes and time in, bytes and
//! events out) and adapts it to the engine; [`drive`] is the one tokio task that owns the
//! socket around such an adapter, so both protocols read, write, time out and shut down the
//! same way: large batched reads, one coalesced write per wake-up, `TCP_NODELAY` and
//! `TCP_QUICKACK`, output and delivery back-pressure, the broker's alarms and shutdown, over
//! plain TCP or TLS ([`Transport`]).

mod driver;
mod protocol;
mod transport;

pub use driver::{ACK_DELAY, DELIVERY_HIGH_WATER, OUTPUT_HIGH_WATER, READ_CHUNK, drive};
pub use protocol::{AlarmStep, Protocol};
pub use transport::{TlsReader, Transport};

#[cfg(test)]
mod tests;
