//! The connections between nodes: each node listens on its cluster address and connects to
//! its peers from that same address (so one node can be cut off by address); every connection
//! is authenticated first ([`handshake`]), then carries [`frame::Frame`]s — a request and its
//! answer at a time, as openraft drives one client per peer and purpose.

pub mod frame;
pub mod handshake;
mod liveness;
mod node;
mod tls;

pub use liveness::{DOWN_AFTER, Liveness};
pub use node::NodeDispatch;
pub use tls::{NodeTls, TlsError};

use self::tls::Io;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use self::frame::{Frame, FrameError, Kind};
use self::handshake::HandshakeError;

/// How long a connection may take to authenticate before it is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// What this node is to its peers: its name, its secret, and the address its connections
/// leave from.
#[derive(Clone)]
pub struct Identity {
    /// The node's name (`charon-1@localhost`).
    pub name: String,
    /// The cluster's shared secret.
    pub secret: Arc<Vec<u8>>,
    /// The cluster listener's address: outgoing connections bind its IP.
    pub address: SocketAddr,
    /// TLS between nodes, when configured: every connection, made or accepted, is TLS.
    pub tls: Option<Arc<NodeTls>>,
}

/// A request a node's groups answer: the group, what kind of request, its body.
pub type Answering<'a> = Pin<Box<dyn Future<Output = Result<Vec<u8>, String>> + Send + 'a>>;

/// The groups of a node, as the transport reaches them.
pub trait Dispatch: Send + Sync + 'static {
    /// Answers one request for `group`; an error is sent back as the reason it failed.
    fn answer(&self, group: u64, kind: Kind, body: Vec<u8>) -> Answering<'_>;
}

/// Why a call to a peer failed.
#[derive(Debug, Error)]
pub enum CallError {
    /// The peer cannot be reached (refused, reset, timed out, closed).
    #[error("peer unreachable: {0}")]
    Unreachable(#[from] std::io::Error),
    /// The peer is not one of ours (wrong secret or protocol).
    #[error(transparent)]
    Handshake(#[from] HandshakeError),
    /// The peer sent bytes that are no frame.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The peer answered that the request failed.
    #[error("peer failed the request: {0}")]
    Failed(String),
}

/// A connection to one peer, made on first use and again after a failure.
pub struct Connection {
    identity: Identity,
    peer: String,
    stream: Option<Box<dyn Io>>,
    input: Vec<u8>,
    next_id: u64,
}

impl Connection {
    /// A connection to the node listening at `peer` (not made yet).
    #[must_use]
    pub fn new(identity: Identity, peer: String) -> Self {
        Self { identity, peer, stream: None, input: Vec::new(), next_id: 0 }
    }

    async fn connect(&self) -> Result<Box<dyn Io>, CallError> {
        let target: SocketAddr = tokio::net::lookup_host(&self.peer).await?.next().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, format!("no address for {}", self.peer))
        })?;
        let socket = if target.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
        socket.bind(SocketAddr::new(self.identity.address.ip(), 0))?;
        let stream = socket.connect(target).await?;
        stream.set_nodelay(true)?;
        let identity = &self.identity;
        let mut stream: Box<dyn Io> = match &identity.tls {
            Some(tls) => match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.connect(&self.peer, stream)).await {
                Ok(secured) => secured?,
                Err(elapsed) => return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, elapsed).into()),
            },
            None => Box::new(stream),
        };
        let greeted = handshake::connect(&mut stream, &identity.name, &identity.secret);
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, greeted).await {
            Ok(Ok(_)) => Ok(stream),
            Ok(Err(e)) => Err(e.into()),
            Err(elapsed) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, elapsed).into()),
        }
    }

    /// Sends one request and waits for its answer; a failed connection is dropped, to be made
    /// again by the next call.
    ///
    /// # Errors
    /// The peer is unreachable, not one of ours, or failed the request.
    pub async fn call(&mut self, group: u64, kind: Kind, body: Vec<u8>) -> Result<Vec<u8>, CallError> {
        let answer = self.exchange(group, kind, body).await;
        if matches!(answer, Err(CallError::Unreachable(_) | CallError::Handshake(_) | CallError::Frame(_))) {
            self.reset();
        }
        answer
    }

    /// Drops the connection (a call given up half way may have left half a frame on it); the
    /// next call makes a new one.
    pub fn reset(&mut self) {
        self.stream = None;
        self.input.clear();
    }

    async fn exchange(&mut self, group: u64, kind: Kind, body: Vec<u8>) -> Result<Vec<u8>, CallError> {
        if self.stream.is_none() {
            self.stream = Some(self.connect().await?);
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let mut out = Vec::with_capacity(body.len() + 32);
        Frame { kind, group, id, body }.encode(&mut out)?;
        let Some(stream) = self.stream.as_mut() else {
            return Err(std::io::Error::from(std::io::ErrorKind::NotConnected).into());
        };
        stream.write_all(&out).await?;
        loop {
            if let Some(frame) = Frame::decode(&mut self.input)? {
                // An answer to an earlier, abandoned request is skipped.
                match frame.kind {
                    Kind::Answer if frame.id == id => return Ok(frame.body),
                    Kind::Failed if frame.id == id => {
                        return Err(CallError::Failed(String::from_utf8_lossy(&frame.body).into_owned()));
                    }
                    _ => continue,
                }
            }
            read_some(stream, &mut self.input).await?;
        }
    }
}

/// Reads what the socket has into `input`; an error when it closed.
async fn read_some(
    stream: &mut (impl AsyncReadExt + Unpin + ?Sized),
    input: &mut Vec<u8>,
) -> Result<(), std::io::Error> {
    let mut chunk = [0; 16 << 10];
    let read = stream.read(&mut chunk).await?;
    if read == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    input.extend_from_slice(chunk.get(..read).unwrap_or_default());
    Ok(())
}

/// Accepts peers on `listener` until the task is dropped (which closes every connection it
/// accepted): each connection is authenticated, then its requests are answered by `groups`,
/// one at a time.
pub async fn serve(listener: TcpListener, identity: Identity, groups: Arc<dyn Dispatch>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            // Reaps the connections that ended, so that the set holds only live ones.
            Some(_) = connections.join_next() => continue,
        };
        let (stream, from) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "cluster listener: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (identity, groups) = (identity.clone(), Arc::clone(&groups));
        connections.spawn(async move {
            if let Err(e) = answer_peer(stream, &identity, groups.as_ref()).await {
                // RabbitMQ logs a refused node the same way (invalid challenge reply).
                tracing::warn!(peer = %from, error = %e, "cluster connection closed");
            }
        });
    }
}

async fn answer_peer(stream: TcpStream, identity: &Identity, groups: &dyn Dispatch) -> Result<(), CallError> {
    stream.set_nodelay(true)?;
    let timed_out = |elapsed| std::io::Error::new(std::io::ErrorKind::TimedOut, elapsed);
    let mut stream: Box<dyn Io> = match &identity.tls {
        Some(tls) => tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(stream)).await.map_err(timed_out)??,
        None => Box::new(stream),
    };
    let greeted = handshake::accept(&mut stream, &identity.name, &identity.secret);
    let peer = tokio::time::timeout(HANDSHAKE_TIMEOUT, greeted).await.map_err(timed_out)??;
    tracing::debug!(peer, "cluster peer connected");
    let mut input = Vec::new();
    let mut out = Vec::new();
    loop {
        while let Some(request) = Frame::decode(&mut input)? {
            let answer = groups.answer(request.group, request.kind, request.body).await;
            let (kind, body) = match answer {
                Ok(body) => (Kind::Answer, body),
                Err(reason) => (Kind::Failed, reason.into_bytes()),
            };
            out.clear();
            Frame { kind, group: request.group, id: request.id, body }.encode(&mut out)?;
            stream.write_all(&out).await?;
        }
        match read_some(&mut stream, &mut input).await {
            Ok(()) => {}
            // The peer hung up between two requests (it dropped a connection it no longer
            // needs, with or without TLS's close_notify): an end, not a failure.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && input.is_empty() => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
}
