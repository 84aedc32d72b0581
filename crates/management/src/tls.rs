//! The management API over HTTPS: the same router, behind a TLS listener.
//!
//! Handshakes run in their own tasks, so a client that stalls its handshake holds up no one;
//! axum only sees finished TLS streams. A failed handshake drops that connection alone.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::{Listener, ListenerExt};
use axum::{Router, ServiceExt};
use charon_engine::Broker;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::router;

/// A client that has not finished its TLS handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Finished handshakes waiting for axum to take them.
const ACCEPTED_BACKLOG: usize = 64;

/// Serves the API over TLS on `listener` until `shutdown` turns true.
///
/// # Errors
/// When the listener fails.
pub async fn serve_tls(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    broker: Arc<Broker>,
    shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    serve_tls_router(listener, acceptor, router(broker), shutdown).await
}

/// Serves `app` (the API's [`router`], possibly with more routes around it) over TLS on
/// `listener` until `shutdown` turns true.
///
/// # Errors
/// When the listener fails.
pub async fn serve_tls_router(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    app: Router,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let local = listener.local_addr()?;
    let (accepted, incoming) = mpsc::channel(ACCEPTED_BACKLOG);
    let handshakes = tokio::spawn(handshake_loop(listener, acceptor, accepted, shutdown.clone()));
    // `tap_io` only so that axum's `ConnectInfo<SocketAddr>` applies to this listener too.
    let tls = TlsListener { local, incoming }.tap_io(|_| {});
    let app = crate::with_trailing_slashes(app);
    let served = axum::serve(tls, ServiceExt::into_make_service_with_connect_info::<SocketAddr>(app))
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        })
        .await;
    handshakes.abort();
    served
}

/// Accepts TCP connections and hands each, once its handshake succeeded, to the listener.
async fn handshake_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    accepted: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
    mut shutdown: watch::Receiver<bool>,
) {
    if *shutdown.borrow_and_update() {
        return;
    }
    loop {
        let (tcp, peer) = tokio::select! {
            result = listener.accept() => match result {
                Ok(pair) => pair,
                Err(error) => {
                    tracing::warn!(%error, "HTTPS accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            stopped = shutdown.changed() => {
                if stopped.is_err() || *shutdown.borrow() {
                    return;
                }
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let accepted = accepted.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => {
                    let _ = accepted.send((stream, peer)).await;
                }
                Ok(Err(error)) => tracing::debug!(%peer, %error, "HTTPS TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "HTTPS TLS handshake timed out"),
            }
        });
    }
}

/// The TLS streams whose handshake finished, as axum's listener.
struct TlsListener {
    local: SocketAddr,
    incoming: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.incoming.recv().await {
            Some(pair) => pair,
            // The handshake loop stopped (shutdown): nothing more comes.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}
