//! The Raft types every Charon group shares.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A command for a group's machine, encoded by the layer that owns the machine: Raft carries
/// the bytes and never looks inside. In the log and on the wire (JSON) its bytes are one base64
/// string: a queue group's commands carry message bodies, which as JSON's array of numbers took
/// up to four bytes each and a parse per byte. An array, as earlier logs hold it, still reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command(pub Vec<u8>);

impl Serialize for Command {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use base64::Engine;
        if serializer.is_human_readable() {
            serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
        } else {
            serializer.serialize_bytes(&self.0)
        }
    }
}

impl<'de> Deserialize<'de> for Command {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// A string of base64, or (as earlier logs hold it) an array of bytes.
        struct Bytes;
        impl<'de> serde::de::Visitor<'de> for Bytes {
            type Value = Vec<u8>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a command's bytes, as base64 or an array")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Vec<u8>, E> {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD.decode(text).map_err(E::custom)
            }

            fn visit_bytes<E: serde::de::Error>(self, bytes: &[u8]) -> Result<Vec<u8>, E> {
                Ok(bytes.to_vec())
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
                let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
                while let Some(byte) = seq.next_element::<u8>()? {
                    bytes.push(byte);
                }
                Ok(bytes)
            }
        }
        deserializer.deserialize_any(Bytes).map(Command)
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "command of {} bytes", self.0.len())
    }
}

/// A machine's answer to a command, for the node that proposed it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer(pub Vec<u8>);

/// A cluster node as Raft knows it: its RabbitMQ-style name (`charon-1@localhost`) and the
/// address of its cluster listener.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    /// The node's name, as `--node-name` gives it.
    pub name: String,
    /// Where its cluster listener is (`host:port`).
    pub address: String,
}

openraft::declare_raft_types!(
    /// The Raft type configuration of every Charon group: opaque commands and answers, nodes
    /// numbered by `u64` and described by [`Peer`].
    pub TypeConfig:
        D = Command,
        R = Answer,
        Node = Peer,
);
