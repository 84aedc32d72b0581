//! TLS between nodes (`cluster_tls`, as RabbitMQ's inter-node TLS): both ends present a
//! certificate and check the other's against the cluster's CA, before the shared-secret
//! handshake runs inside the encrypted stream. The connecting node checks the accepting node's
//! certificate against the host of the address it connects to (an IP address or a name).

use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// A byte stream to a peer: TCP, or TLS over it.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send + Sync {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> Io for T {}

/// A node's TLS: how it connects (its certificate, and the CA the accepting node's must chain
/// to) and how it accepts (its certificate, and the CA a connecting node's must chain to).
pub struct NodeTls {
    connector: TlsConnector,
    acceptor: TlsAcceptor,
}

/// Why a node's TLS could not be set up from its PEM files.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file holds no certificate, or one that does not parse.
    #[error("certificates: {0}")]
    Certificates(String),
    /// The key does not parse.
    #[error("private key: {0}")]
    Key(String),
    /// rustls refused the configuration (a key that does not fit the certificate, no CA).
    #[error("{0}")]
    Config(String),
}

impl NodeTls {
    /// Mutual TLS from PEM: this node's certificate `chain` and `key`, presented both ways,
    /// and the `ca` every peer's certificate must chain to.
    ///
    /// # Errors
    /// A file that does not parse, a key that does not fit, a CA bundle without certificates.
    pub fn from_pem(chain: &[u8], key: &[u8], ca: &[u8]) -> Result<Self, TlsError> {
        let certificates = |pem: &[u8]| -> Result<Vec<CertificateDer<'static>>, TlsError> {
            let all = CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>();
            let all = all.map_err(|e| TlsError::Certificates(e.to_string()))?;
            if all.is_empty() { Err(TlsError::Certificates("none in the PEM".into())) } else { Ok(all) }
        };
        let chain = certificates(chain)?;
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| TlsError::Key(e.to_string()))?;
        let mut roots = RootCertStore::empty();
        for certificate in certificates(ca)? {
            roots.add(certificate).map_err(|e| TlsError::Certificates(e.to_string()))?;
        }
        let roots = Arc::new(roots);
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = |e: rustls::Error| TlsError::Config(e.to_string());
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::clone(&roots), Arc::clone(&provider))
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?;
        let server = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(config)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(config)?;
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(config)?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(config)?;
        Ok(Self { connector: TlsConnector::from(Arc::new(client)), acceptor: TlsAcceptor::from(Arc::new(server)) })
    }

    /// TLS over `stream`, connected to `peer` (`host:port`; the host is what the peer's
    /// certificate must name).
    pub(crate) async fn connect(&self, peer: &str, stream: TcpStream) -> std::io::Result<Box<dyn Io>> {
        let host = peer.rsplit_once(':').map_or(peer, |(host, _)| host).trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_owned())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{host}: {e}")))?;
        Ok(Box::new(self.connector.connect(name, stream).await?))
    }

    /// TLS over a stream a peer opened.
    pub(crate) async fn accept(&self, stream: TcpStream) -> std::io::Result<Box<dyn Io>> {
        Ok(Box::new(self.acceptor.accept(stream).await?))
    }
}
