//! Nodes authenticate each other with the cluster's shared secret, as Erlang nodes do with
//! their cookie: neither side sends the secret, each proves it holds it.
//!
//! The connecting node sends `MAGIC`, its name and a random nonce; the accepting node answers
//! with its name and its nonce; the connecting node proves itself first with an HMAC-SHA256
//! over both nonces and both names under the secret, so that the node it reached can refuse it
//! and log who it was (as RabbitMQ logs a node whose challenge reply is wrong); then the
//! accepting node proves itself the same way (under another label, so one side's proof is
//! never the other's). A wrong proof closes the connection on either side.

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

const MAGIC: &[u8; 8] = b"CHARONC1";
const NONCE: usize = 32;
const PROOF: usize = 32;

/// Why a handshake failed.
#[derive(Debug, Error)]
pub enum HandshakeError {
    /// The socket failed or closed.
    #[error("cluster handshake I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The peer does not speak this protocol.
    #[error("not a Charon cluster peer")]
    Protocol,
    /// The peer's proof does not match this node's secret.
    #[error("node '{0}' does not hold this cluster's secret")]
    Secret(String),
}

fn proof(secret: &[u8], label: &[u8], nonces: (&[u8; NONCE], &[u8; NONCE]), names: (&str, &str)) -> Hmac<Sha256> {
    // A key of any length is accepted by HMAC.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret).unwrap_or_else(|_| unreachable!());
    for part in [label, nonces.0, nonces.1, names.0.as_bytes(), &[0], names.1.as_bytes()] {
        mac.update(part);
    }
    mac
}

async fn write_hello<S: AsyncWrite + Unpin>(
    stream: &mut S,
    name: &str,
    nonce: &[u8; NONCE],
) -> Result<(), HandshakeError> {
    let length = u8::try_from(name.len()).map_err(|_| HandshakeError::Protocol)?;
    let mut hello = Vec::with_capacity(MAGIC.len() + 1 + name.len() + NONCE);
    hello.extend_from_slice(MAGIC);
    hello.push(length);
    hello.extend_from_slice(name.as_bytes());
    hello.extend_from_slice(nonce);
    stream.write_all(&hello).await?;
    Ok(())
}

async fn read_hello<S: AsyncRead + Unpin>(stream: &mut S) -> Result<(String, [u8; NONCE]), HandshakeError> {
    let mut magic = [0; MAGIC.len()];
    stream.read_exact(&mut magic).await?;
    if &magic != MAGIC {
        return Err(HandshakeError::Protocol);
    }
    let length = usize::from(stream.read_u8().await?);
    let mut name = vec![0; length];
    stream.read_exact(&mut name).await?;
    let name = String::from_utf8(name).map_err(|_| HandshakeError::Protocol)?;
    let mut nonce = [0; NONCE];
    stream.read_exact(&mut nonce).await?;
    Ok((name, nonce))
}

async fn read_proof<S: AsyncRead + Unpin>(stream: &mut S) -> Result<[u8; PROOF], HandshakeError> {
    let mut proof = [0; PROOF];
    stream.read_exact(&mut proof).await?;
    Ok(proof)
}

fn nonce() -> [u8; NONCE] {
    let mut nonce = [0; NONCE];
    rand::rng().fill_bytes(&mut nonce);
    nonce
}

/// Authenticates an outgoing connection as `name`; the name of the node it reached.
///
/// # Errors
/// The peer failed, spoke another protocol, or does not hold `secret`.
pub async fn connect<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    name: &str,
    secret: &[u8],
) -> Result<String, HandshakeError> {
    let ours = nonce();
    write_hello(stream, name, &ours).await?;
    let (peer, theirs) = read_hello(stream).await?;
    let answer = proof(secret, b"connect", (&ours, &theirs), (name, &peer)).finalize().into_bytes();
    stream.write_all(&answer).await?;
    let expected = proof(secret, b"accept", (&ours, &theirs), (name, &peer));
    expected.verify_slice(&read_proof(stream).await?).map_err(|_| HandshakeError::Secret(peer.clone()))?;
    Ok(peer)
}

/// Authenticates an incoming connection as `name`; the name of the node that connected.
///
/// # Errors
/// The peer failed, spoke another protocol, or does not hold `secret`.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    name: &str,
    secret: &[u8],
) -> Result<String, HandshakeError> {
    let (peer, theirs) = read_hello(stream).await?;
    let ours = nonce();
    write_hello(stream, name, &ours).await?;
    let expected = proof(secret, b"connect", (&theirs, &ours), (&peer, name));
    expected.verify_slice(&read_proof(stream).await?).map_err(|_| HandshakeError::Secret(peer.clone()))?;
    let ours_proof = proof(secret, b"accept", (&theirs, &ours), (&peer, name)).finalize().into_bytes();
    stream.write_all(&ours_proof).await?;
    Ok(peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pair(
        secrets: (&'static [u8], &'static [u8]),
    ) -> (Result<String, HandshakeError>, Result<String, HandshakeError>) {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let connecting = tokio::spawn(async move { connect(&mut a, "charon-1@localhost", secrets.0).await });
        let accepted = accept(&mut b, "charon-2@localhost", secrets.1).await;
        drop(b);
        (connecting.await.unwrap(), accepted)
    }

    #[tokio::test]
    async fn nodes_with_one_secret_learn_each_others_names() {
        let (connected, accepted) = pair((b"cookie", b"cookie")).await;
        assert_eq!(connected.unwrap(), "charon-2@localhost");
        assert_eq!(accepted.unwrap(), "charon-1@localhost");
    }

    #[tokio::test]
    async fn a_node_with_another_secret_is_refused_by_both_sides() {
        let (connected, accepted) = pair((b"cookie", b"other")).await;
        // The accepting node checks first and knows whom it refused; the connecting node sees
        // it hang up.
        assert!(matches!(accepted, Err(HandshakeError::Secret(name)) if name == "charon-1@localhost"));
        assert!(matches!(connected, Err(HandshakeError::Io(_))));
    }

    #[tokio::test]
    async fn an_accepting_node_that_guesses_a_proof_is_refused() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let impostor = tokio::spawn(async move {
            let _ = read_hello(&mut b).await.unwrap();
            write_hello(&mut b, "impostor", &[7; NONCE]).await.unwrap();
            let _ = read_proof(&mut b).await.unwrap();
            b.write_all(&[0; PROOF]).await.unwrap();
            b
        });
        let refused = connect(&mut a, "charon-1@localhost", b"cookie").await;
        assert!(matches!(refused, Err(HandshakeError::Secret(name)) if name == "impostor"));
        drop(impostor.await.unwrap());
    }

    #[tokio::test]
    async fn bytes_of_another_protocol_are_refused() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        a.write_all(b"AMQP\x00\x00\x09\x01").await.unwrap();
        assert!(matches!(accept(&mut b, "n", b"s").await, Err(HandshakeError::Protocol)));
    }
}
