//! The address of one reply consumer: `amq.rabbitmq.reply-to.<owner>.<secret>`.
//!
//! RabbitMQ 4.0.5 encodes the channel's process id (which names its node) and a random key,
//! each in standard base64 (`amq.rabbitmq.reply-to.g1h2AA5y…3w==.lVIViG6jB0bE3Ym0FdPH/g==`).
//! Charon's address has the same shape: the owning node (its cluster id, so that a reply
//! published on another node of the cluster is sent to it), connection and channel, then 16
//! random bytes from a cryptographic generator. The owner part says where the consumer is; the
//! secret makes the address unguessable, so knowing (or guessing) a connection's id and channel
//! number is not enough to send it messages, and every consume on a channel gets a new
//! address.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rand::RngCore;

use crate::session::Owner;

/// The pseudo-queue a client consumes from, and the `reply_to` it publishes with.
pub const PSEUDO_QUEUE: &str = "amq.rabbitmq.reply-to";

/// What every reply consumer's address starts with.
pub const PREFIX: &str = "amq.rabbitmq.reply-to.";

/// Bytes of the random part.
const SECRET_LEN: usize = 16;
/// Bytes of the owner part: the node (8), the connection id (8) and the channel (4),
/// big-endian.
const OWNER_LEN: usize = 20;

/// Whether a routing key or queue name is a reply consumer's address (a prefix check only,
/// cheap enough for every publish to the default exchange).
#[must_use]
pub fn is_address(name: &str) -> bool {
    name.starts_with(PREFIX)
}

/// One reply consumer's address, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Token {
    node: u64,
    owner: Owner,
    secret: [u8; SECRET_LEN],
}

/// This node's id in addresses: its cluster id (`charon_cluster::node_id` of its name).
pub(crate) fn this_node() -> u64 {
    static NODE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NODE.get_or_init(|| charon_cluster::node_id(&charon_model::node_name()))
}

impl Token {
    /// A fresh address for a consumer of `owner`, on this node.
    pub(crate) fn random(owner: Owner) -> Self {
        let mut secret = [0u8; SECRET_LEN];
        rand::rng().fill_bytes(&mut secret);
        Self { node: this_node(), owner, secret }
    }

    /// The node the consumer lives on.
    pub(crate) fn node(&self) -> u64 {
        self.node
    }

    /// The channel the consumer lives on.
    pub(crate) fn owner(&self) -> Owner {
        self.owner
    }

    /// Whether `other` carries the same secret, compared in constant time so that timing does
    /// not reveal how much of a guess was right.
    pub(crate) fn same_secret(&self, other: &Self) -> bool {
        self.secret.iter().zip(other.secret.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }

    /// The full address, `amq.rabbitmq.reply-to.<owner>.<secret>`.
    pub(crate) fn encode(&self) -> String {
        let mut owner = [0u8; OWNER_LEN];
        let (node, rest) = owner.split_at_mut(8);
        let (session, channel) = rest.split_at_mut(8);
        node.copy_from_slice(&self.node.to_be_bytes());
        session.copy_from_slice(&self.owner.session.to_be_bytes());
        channel.copy_from_slice(&self.owner.channel.to_be_bytes());
        let mut out = String::with_capacity(PREFIX.len() + 28 + 1 + 24);
        out.push_str(PREFIX);
        STANDARD.encode_string(owner, &mut out);
        out.push('.');
        STANDARD.encode_string(self.secret, &mut out);
        out
    }

    /// Reads an address; `None` for anything [`Self::encode`] cannot have made. Allocates
    /// nothing.
    pub(crate) fn decode(address: &str) -> Option<Self> {
        let (owner_text, secret_text) = address.strip_prefix(PREFIX)?.split_once('.')?;
        let owner: [u8; OWNER_LEN] = decode_exact(owner_text)?;
        let secret: [u8; SECRET_LEN] = decode_exact(secret_text)?;
        let (node, rest) = owner.split_at(8);
        let (session, channel) = rest.split_at(8);
        let node = u64::from_be_bytes(node.try_into().ok()?);
        let session = u64::from_be_bytes(session.try_into().ok()?);
        let channel = u32::from_be_bytes(channel.try_into().ok()?);
        Some(Self { node, owner: Owner { session, channel }, secret })
    }
}

/// Decodes base64 text of exactly `N` bytes (with its padding, as encoded).
fn decode_exact<const N: usize>(text: &str) -> Option<[u8; N]> {
    // Room for the decoder's length estimate, which may exceed N by up to two bytes.
    let mut buffer = [0u8; 32];
    let written = STANDARD.decode_slice(text, &mut buffer).ok()?;
    if written != N || text.len() != N.div_ceil(3) * 4 {
        return None;
    }
    buffer.get(..N)?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWNER: Owner = Owner { session: 0x0102_0304_0506_0708, channel: 7 };

    #[test]
    fn an_address_has_rabbitmqs_shape_and_round_trips() {
        let token = Token { node: 0x0a0b_0c0d_0e0f_1011, owner: OWNER, secret: [0xff; 16] };
        let address = token.encode();
        assert_eq!(address, "amq.rabbitmq.reply-to.CgsMDQ4PEBEBAgMEBQYHCAAAAAc=./////////////////////w==");
        assert!(is_address(&address));
        assert_eq!(Token::decode(&address), Some(token));
    }

    #[test]
    fn fresh_addresses_differ_in_their_secret_only() {
        let a = Token::random(OWNER);
        let b = Token::random(OWNER);
        assert_eq!(a.owner(), b.owner());
        assert!(!a.same_secret(&b), "two consumes must not share an address");
        assert!(a.same_secret(&a));
        assert_ne!(a.encode(), b.encode());
    }

    #[test]
    fn malformed_addresses_are_refused() {
        let good = Token { node: 1, owner: OWNER, secret: [1; 16] }.encode();
        assert!(Token::decode(&good).is_some());
        assert_eq!(Token::decode(PSEUDO_QUEUE), None);
        assert_eq!(Token::decode(&good.replacen(PREFIX, "amq.rabbitmq.reply-tx.", 1)), None);
        assert_eq!(Token::decode(&format!("{good}x")), None);
        assert_eq!(Token::decode(&format!("{good}AAAA")), None, "a longer secret");
        assert_eq!(Token::decode(&good.replace('.', "")), None);
        assert_eq!(Token::decode("amq.rabbitmq.reply-to.AQIDBAUGBwgAAAAH"), None);
        // An address of the earlier shape, without its node, is no address now.
        assert_eq!(Token::decode("amq.rabbitmq.reply-to.AQIDBAUGBwgAAAAH./////////////////////w=="), None);
        assert_eq!(Token::decode("amq.rabbitmq.reply-to.AQIDBAUGBwg=.AQEBAQEBAQEBAQEBAQEBAQ=="), None);
        assert!(!is_address(PSEUDO_QUEUE));
        assert!(!is_address("amq.rabbitmq.reply-tox"));
    }
}
