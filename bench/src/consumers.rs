//! Which AMQP 0.9.1 client consumes: lapin, or amqprs.
//!
//! On two cores the load generator takes its CPU from the broker's, so a run whose broker
//! needs little CPU per message measures the client. lapin parses every frame with parser
//! combinators and hands each delivery across threads; amqprs reads in large batches into one
//! buffer. In S1a the client needed 7.4 CPU-seconds per million messages with lapin
//! consumers and 4.9 with amqprs ones; in S6, 32 µs per message against 16. Publishers stay
//! on lapin unless `--publisher amqprs` (S1a and S1b), which writes each publish with its own
//! syscall where lapin coalesces a pipeline of publishes into few writes.

use std::time::Instant;

use anyhow::Result;
use tokio::task::JoinHandle;

use crate::amqp091::{self, Consumed, Settle};
use crate::amqprs091;

/// An AMQP 0.9.1 client library, for a scenario's consumers (`--consumer`) or S1's publisher
/// (`--publisher`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Client {
    /// lapin: channels on a connection shared with the scenario's setup.
    #[default]
    Lapin,
    /// amqprs: a connection per consumer.
    Amqprs,
}

/// Starts consumers of a scenario on the chosen client.
pub(crate) struct Consumers<'a> {
    pub(crate) client: Client,
    pub(crate) url: &'a str,
    /// Where lapin consumers open their channels.
    pub(crate) lapin: &'a lapin::Connection,
}

impl Consumers<'_> {
    /// See [`amqp091::consume`].
    pub(crate) async fn consume(
        &self,
        queue: &str,
        expected: u64,
        settle: Settle,
        epoch: Instant,
    ) -> Result<JoinHandle<Result<Consumed>>> {
        match self.client {
            Client::Lapin => {
                amqp091::consume(amqp091::channel(self.lapin).await?, queue, expected, settle, epoch).await
            }
            Client::Amqprs => amqprs091::consume(self.url, queue, expected, settle, epoch).await,
        }
    }

    /// See [`amqp091::nack_all`].
    pub(crate) async fn nack_all(&self, queue: &str, prefetch: u16) -> Result<JoinHandle<()>> {
        match self.client {
            Client::Lapin => amqp091::nack_all(amqp091::channel(self.lapin).await?, queue, prefetch).await,
            Client::Amqprs => amqprs091::nack_all(self.url, queue, prefetch).await,
        }
    }
}
