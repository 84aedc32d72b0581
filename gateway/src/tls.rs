//! The rustls server configurations for amqps and HTTPS, read from the configured PEM files.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio_rustls::TlsAcceptor;

use crate::config::TlsConfig;

/// The TLS acceptors built once at start.
#[derive(Clone)]
pub(crate) struct Acceptors {
    /// amqps: client certificates as configured (`verify_peer`, `fail_if_no_peer_cert`).
    pub(crate) amqp: TlsAcceptor,
    /// HTTPS: the same server certificate; clients log in with basic auth, so no client
    /// certificate is asked for.
    pub(crate) https: TlsAcceptor,
}

impl Acceptors {
    /// Reads the certificate chain, the key and the CA bundle; every problem is an error that
    /// names the file.
    pub(crate) fn load(config: &TlsConfig) -> anyhow::Result<Self> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let chain = certificates(&config.cert)?;
        let key = PrivateKeyDer::from_pem_file(&config.key)
            .with_context(|| format!("reading the private key (PEM) from {}", config.key.display()))?;
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?;
        let amqp = if config.verify_peer {
            let Some(ca) = &config.ca else { bail!("tls_verify_peer needs tls_ca") };
            builder.with_client_cert_verifier(client_verifier(ca, config.fail_if_no_peer_cert, &provider)?)
        } else {
            builder.with_no_client_auth()
        };
        let amqp = amqp
            .with_single_cert(chain.clone(), key.clone_key())
            .with_context(|| format!("{} does not fit {}", config.key.display(), config.cert.display()))?;
        let https = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .with_context(|| format!("{} does not fit {}", config.key.display(), config.cert.display()))?;
        Ok(Self { amqp: TlsAcceptor::from(Arc::new(amqp)), https: TlsAcceptor::from(Arc::new(https)) })
    }
}

/// Every certificate in a PEM file; none is an error.
fn certificates(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let chain = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("reading certificates (PEM) from {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing certificates (PEM) in {}", path.display()))?;
    if chain.is_empty() {
        bail!("no certificate (PEM) in {}", path.display());
    }
    Ok(chain)
}

fn client_verifier(
    ca: &Path,
    fail_if_no_peer_cert: bool,
    provider: &Arc<CryptoProvider>,
) -> anyhow::Result<Arc<dyn rustls::server::danger::ClientCertVerifier>> {
    let mut roots = RootCertStore::empty();
    for certificate in certificates(ca)? {
        roots.add(certificate).with_context(|| format!("a CA certificate in {} is not usable", ca.display()))?;
    }
    let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(provider));
    let builder = if fail_if_no_peer_cert { builder } else { builder.allow_unauthenticated() };
    builder.build().with_context(|| format!("building the client certificate verifier from {}", ca.display()))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn config(dir: &Path, cert: &str, key: &str) -> TlsConfig {
        TlsConfig {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
            ca: Some(dir.join("cert.pem")),
            verify_peer: true,
            fail_if_no_peer_cert: false,
            listen: vec![],
            https_listen: String::new(),
        }
        .with_files(cert, key)
    }

    impl TlsConfig {
        fn with_files(self, cert: &str, key: &str) -> Self {
            std::fs::write(&self.cert, cert).unwrap();
            std::fs::write(&self.key, key).unwrap();
            self
        }
    }

    fn generated() -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap().self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn good_files_load() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = generated();
        assert!(Acceptors::load(&config(dir.path(), &cert, &key)).is_ok());
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = generated();
        let (_, other_key) = generated();
        let error = |c: &TlsConfig| format!("{:#}", Acceptors::load(c).err().unwrap());
        assert!(error(&config(dir.path(), "garbage", &key)).contains("no certificate (PEM) in"));
        assert!(error(&config(dir.path(), &cert, "garbage")).contains("reading the private key (PEM)"));
        assert!(error(&config(dir.path(), &cert, &other_key)).contains("does not fit"));
        let mut missing = config(dir.path(), &cert, &key);
        missing.cert = PathBuf::from("/nonexistent/cert.pem");
        assert!(error(&missing).contains("/nonexistent/cert.pem"));
    }
}
