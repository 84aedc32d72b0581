//! Accepting connections and routing each to its protocol by its first eight bytes, over plain
//! TCP or, on amqps listeners, after the TLS handshake.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use charon_amqp091::proto::{Negotiation, negotiate};
use charon_amqp091::server::{ServerConfig, serve};
use charon_engine::Broker;
use charon_engine::login::{CertificateSubject, Peer};
use charon_net::Transport;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// A client that has not sent its protocol header by then is dropped.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// A client that has not finished its TLS handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for connections to finish their close handshake.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Protocol settings shared by every connection.
#[derive(Clone, Debug, Default)]
pub(crate) struct Settings {
    pub(crate) amqp091: ServerConfig,
    pub(crate) amqp10: charon_amqp10::server::ServerConfig,
}

/// Accepts on `listener` until shutdown; `tls` makes it an amqps listener. Returns whether
/// every connection closed within the grace period (the rest are aborted, and what they owed
/// their queues, the requeue of their unsettled messages, is not told).
pub(crate) async fn accept_loop(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    broker: Arc<Broker>,
    settings: Arc<Settings>,
    mut shutdown: watch::Receiver<bool>,
) -> bool {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, address)) => {
                    let (broker, settings, shutdown) = (Arc::clone(&broker), Arc::clone(&settings), shutdown.clone());
                    let local = stream.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
                    tracing::info!("accepting AMQP connection {address} -> {local}");
                    match &tls {
                        None => {
                            let peer = Peer::new(address, None).on(local, false);
                            connections.spawn(handle(stream, peer, broker, settings, shutdown))
                        }
                        Some(acceptor) => {
                            connections.spawn(handle_tls(stream, address, acceptor.clone(), broker, settings, shutdown))
                        }
                    };
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
        return false;
    }
    true
}

/// The TLS handshake, then the connection as on plain TCP. A failed handshake only ends this
/// connection.
async fn handle_tls(
    stream: TcpStream,
    address: SocketAddr,
    acceptor: TlsAcceptor,
    broker: Arc<Broker>,
    settings: Arc<Settings>,
    shutdown: watch::Receiver<bool>,
) {
    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            tracing::warn!(peer = %address, %error, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::warn!(peer = %address, "TLS handshake timed out");
            return;
        }
    };
    let certificate = peer_certificate(&stream, address);
    let local = stream.get_ref().0.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    handle(stream, Peer::new(address, certificate).on(local, true), broker, settings, shutdown).await;
}

/// The subject of the client certificate the handshake verified (the leaf), if any.
fn peer_certificate(stream: &TlsStream<TcpStream>, address: SocketAddr) -> Option<CertificateSubject> {
    let leaf = stream.get_ref().1.peer_certificates()?.first()?;
    match CertificateSubject::from_der(leaf) {
        Ok(subject) => Some(subject),
        Err(error) => {
            tracing::warn!(peer = %address, %error, "client certificate subject unreadable: EXTERNAL not offered");
            None
        }
    }
}

async fn handle<S>(
    mut stream: S,
    peer: Peer,
    broker: Arc<Broker>,
    settings: Arc<Settings>,
    shutdown: watch::Receiver<bool>,
) where
    S: Transport + AsyncRead + AsyncWrite + Unpin,
{
    let mut header = [0u8; 8];
    match tokio::time::timeout(HEADER_TIMEOUT, stream.read_exact(&mut header)).await {
        Ok(Ok(_)) => {}
        _ => return,
    }
    match negotiate(header) {
        Negotiation::Amqp091 => serve(stream, peer, broker, settings.amqp091.clone(), shutdown).await,
        Negotiation::Amqp10Sasl => {
            charon_amqp10::server::serve(stream, peer, broker, settings.amqp10.clone(), shutdown).await
        }
        Negotiation::Refuse(reply) => refuse(stream, reply).await,
    }
}

async fn refuse<S: AsyncWrite + Unpin>(mut stream: S, reply: [u8; 8]) {
    let _ = stream.write_all(&reply).await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use charon_engine::BrokerConfig;
    use fe2o3_amqp::sasl_profile::SaslProfile;
    use lapin::{Connection, ConnectionProperties};

    use super::*;

    /// A broker whose connections all look as if they came from `peer` (the sockets are on
    /// loopback; `handle` gets the address it is told, as the accept loop passes the real one).
    async fn broker_seeing(peer: &str) -> (u16, watch::Sender<bool>) {
        let broker = Broker::new(BrokerConfig::default());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let peer: SocketAddr = peer.parse().unwrap();
        let (stop, shutdown) = watch::channel(false);
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let (broker, shutdown) = (Arc::clone(&broker), shutdown.clone());
                tokio::spawn(handle(stream, Peer::new(peer, None), broker, Arc::default(), shutdown));
            }
        });
        (port, stop)
    }

    async fn refusal_091(port: u16, password: &str) -> String {
        let url = format!("amqp://guest:{password}@127.0.0.1:{port}/%2f");
        Connection::connect(&url, ConnectionProperties::default())
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    async fn opens_10(port: u16) -> bool {
        opens_10_with(port, SaslProfile::Plain { username: "guest".into(), password: "guest".into() }).await
    }

    async fn opens_10_with(port: u16, profile: SaslProfile) -> bool {
        fe2o3_amqp::Connection::builder()
            .container_id("loopback-test")
            .hostname("vhost:/")
            .sasl_profile(profile)
            .open(format!("amqp://127.0.0.1:{port}").as_str())
            .await
            .is_ok()
    }

    async fn anonymous_091(port: u16) -> Result<(), String> {
        let url = format!("amqp://127.0.0.1:{port}/%2f?auth_mechanism=anonymous");
        Connection::connect(&url, ConnectionProperties::default()).await.map(drop).map_err(|e| e.to_string())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn guest_from_a_remote_address_is_refused_as_a_wrong_password_on_both_protocols() {
        let (remote, _stop_remote) = broker_seeing("192.0.2.9:40000").await;
        let (local, _stop_local) = broker_seeing("127.0.0.1:40000").await;
        let refused = refusal_091(remote, "guest").await;
        assert!(
            refused.contains(
                "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the broker logfile."
            ),
            "{refused}"
        );
        assert_eq!(refused, refusal_091(local, "wrong").await, "the same answer as a wrong password");
        assert!(refusal_091(local, "guest").await.is_empty(), "guest from loopback logs in");
        assert!(opens_10(local).await);
        assert!(!opens_10(remote).await, "1.0: refused from a remote address");
    }

    /// RabbitMQ 4 offers SASL ANONYMOUS by default on both protocols, logging in as `guest`,
    /// whom `loopback_users` keeps to the machine itself.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn anonymous_logs_in_as_guest_from_loopback_only_on_both_protocols() {
        let (remote, _stop_remote) = broker_seeing("192.0.2.9:40000").await;
        let (local, _stop_local) = broker_seeing("127.0.0.1:40000").await;
        assert_eq!(anonymous_091(local).await, Ok(()));
        assert!(opens_10_with(local, SaslProfile::Anonymous).await);
        let refused = anonymous_091(remote).await.unwrap_err();
        assert!(
            refused.contains("ACCESS_REFUSED - Login was refused using authentication mechanism ANONYMOUS"),
            "{refused}"
        );
        assert!(!opens_10_with(remote, SaslProfile::Anonymous).await, "1.0: refused from a remote address");
    }
}
