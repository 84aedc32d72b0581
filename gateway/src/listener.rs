//! Accepting connections and routing each to its protocol by its first eight bytes.

use std::sync::Arc;
use std::time::Duration;

use charon_amqp091::proto::{Negotiation, negotiate};
use charon_amqp091::server::{ServerConfig, serve};
use charon_engine::Broker;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// A client that has not sent its protocol header by then is dropped.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for connections to finish their close handshake.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Protocol settings shared by every connection.
#[derive(Clone, Debug, Default)]
pub(crate) struct Settings {
    pub(crate) amqp091: ServerConfig,
    pub(crate) amqp10: charon_amqp10::server::ServerConfig,
}

pub(crate) async fn accept_loop(
    listener: TcpListener,
    broker: Arc<Broker>,
    settings: Arc<Settings>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(handle(stream, Arc::clone(&broker), Arc::clone(&settings), shutdown.clone()));
                }
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async { while connections.join_next().await.is_some() {} });
    if drained.await.is_err() {
        connections.abort_all();
    }
}

async fn handle(mut stream: TcpStream, broker: Arc<Broker>, settings: Arc<Settings>, shutdown: watch::Receiver<bool>) {
    let mut header = [0u8; 8];
    match tokio::time::timeout(HEADER_TIMEOUT, stream.read_exact(&mut header)).await {
        Ok(Ok(_)) => {}
        _ => return,
    }
    match negotiate(header) {
        Negotiation::Amqp091 => serve(stream, broker, settings.amqp091.clone(), shutdown).await,
        Negotiation::Amqp10Sasl => {
            charon_amqp10::server::serve(stream, broker, settings.amqp10.clone(), shutdown).await
        }
        Negotiation::Refuse(reply) => refuse(stream, reply).await,
    }
}

async fn refuse(mut stream: TcpStream, reply: [u8; 8]) {
    let _ = stream.write_all(&reply).await;
    let _ = stream.shutdown().await;
}
