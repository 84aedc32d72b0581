//! A binding and where it leads: the one type every exchange type's index holds.

use charon_model::Table;

/// Where a binding leads.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Destination {
    /// A queue, by name.
    Queue(String),
    /// Another exchange, by name (exchange-to-exchange binding).
    Exchange(String),
}

/// One binding of a source exchange.
#[derive(Clone, Debug, PartialEq)]
pub struct Binding {
    /// Where it leads.
    pub destination: Destination,
    /// Binding key.
    pub key: String,
    /// Binding arguments (meaningful for headers exchanges; part of the binding's identity
    /// for all types, as in RabbitMQ).
    pub arguments: Table,
}

impl Binding {
    pub(super) fn same_as(&self, other: &Self) -> bool {
        self.destination == other.destination && self.key == other.key && self.arguments == other.arguments
    }
}

/// Identifies a binding's arguments in the management APIs' binding keys (HTTP properties keys,
/// 1.0 binding locations): empty without arguments, else a 32-bit hash in unpadded URL-safe
/// base64 (6 characters), the shape RabbitMQ gives its `erlang:phash2/2` of the arguments.
/// The hash function is Charon's (FNV-1a over the arguments' debug rendering, stable for equal
/// tables), so the literal differs from RabbitMQ's.
#[must_use]
pub fn arguments_hash(args: &Table) -> String {
    const URLSAFE: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    if args.is_empty() {
        return String::new();
    }
    let mut hash: u32 = 0x811c_9dc5;
    for byte in format!("{args:?}").bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    let bits = u64::from(hash) << 4;
    (0..6)
        .rev()
        .map(|i| {
            let index = usize::try_from((bits >> (i * 6)) & 0x3f).unwrap_or_default();
            char::from(URLSAFE.get(index).copied().unwrap_or(b'A'))
        })
        .collect()
}
