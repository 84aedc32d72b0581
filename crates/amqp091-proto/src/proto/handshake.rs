//! Protocol-header negotiation and SASL-style login parsing.

use bytes::Bytes;
use charon_model::Value;

use crate::codec::decode_table;

/// What to do with the first eight bytes a client sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Negotiation {
    /// AMQP 0-9-1 (or 0-9, which RabbitMQ treats the same way).
    Amqp091,
    /// AMQP 1.0 with the SASL layer (`AMQP 3 1 0 0`).
    Amqp10Sasl,
    /// Unsupported: write these eight bytes back and close, as RabbitMQ does.
    Refuse([u8; 8]),
}

/// The 0-9-1 protocol header.
pub const AMQP_0_9_1: [u8; 8] = *b"AMQP\x00\x00\x09\x01";
/// The AMQP 1.0 SASL protocol header.
pub const AMQP_1_0_SASL: [u8; 8] = *b"AMQP\x03\x01\x00\x00";

/// Decides how to answer a protocol header, following `rabbit_reader:version_negotiation/2`:
/// `AMQP 0 0 9 1` and `AMQP 1 1 0 9` (0-9) are 0-9-1; `AMQP 3 1 0 0` is AMQP 1.0 with SASL
/// (which RabbitMQ requires: `AMQP 0 1 0 0` gets the SASL header back);
/// another `AMQP 0 0 9+ x` gets the 0-9-1 header back; anything else gets the AMQP 1.0 SASL
/// header back.
#[must_use]
pub fn negotiate(header: [u8; 8]) -> Negotiation {
    let [a, m, q, p, id, major, minor, revision] = header;
    if [a, m, q, p] != *b"AMQP" {
        return Negotiation::Refuse(AMQP_1_0_SASL);
    }
    match (id, major, minor, revision) {
        (0, 0, 9, 1) | (1, 1, 0, 9) => Negotiation::Amqp091,
        (3, 1, 0, 0) => Negotiation::Amqp10Sasl,
        (0, 0, minor, _) if minor >= 9 => Negotiation::Refuse(AMQP_0_9_1),
        _ => Negotiation::Refuse(AMQP_1_0_SASL),
    }
}

/// Extracts user and password from a `connection.start-ok` response for the PLAIN
/// (`\0user\0password`) or AMQPLAIN (a field table with `LOGIN` and `PASSWORD`) mechanism.
/// `None` for anything malformed.
#[must_use]
pub(super) fn credentials(mechanism: &str, response: &[u8]) -> Option<(String, String)> {
    match mechanism {
        "PLAIN" => {
            let mut parts = response.split(|b| *b == 0);
            let _authzid = parts.next()?;
            let user = parts.next()?;
            let password = parts.next()?;
            if parts.next().is_some() {
                return None;
            }
            Some((String::from_utf8(user.to_vec()).ok()?, String::from_utf8(password.to_vec()).ok()?))
        }
        "AMQPLAIN" => {
            // The response is a table without its length prefix.
            let mut framed = Vec::with_capacity(response.len() + 4);
            framed.extend_from_slice(&u32::try_from(response.len()).ok()?.to_be_bytes());
            framed.extend_from_slice(response);
            let table = decode_table(&mut Bytes::from(framed)).ok()?;
            let text = |key: &str| table.get(key).and_then(Value::as_str).map(str::to_owned);
            Some((text("LOGIN")?, text("PASSWORD")?))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_follows_rabbitmq() {
        assert_eq!(negotiate(*b"AMQP\x00\x00\x09\x01"), Negotiation::Amqp091);
        assert_eq!(negotiate(*b"AMQP\x01\x01\x00\x09"), Negotiation::Amqp091);
        assert_eq!(negotiate(*b"AMQP\x03\x01\x00\x00"), Negotiation::Amqp10Sasl);
        assert_eq!(negotiate(*b"AMQP\x00\x00\x09\x00"), Negotiation::Refuse(AMQP_0_9_1));
        assert_eq!(negotiate(*b"AMQP\x00\x00\x0a\x00"), Negotiation::Refuse(AMQP_0_9_1));
        assert_eq!(negotiate(*b"AMQP\x00\x00\x08\x00"), Negotiation::Refuse(AMQP_1_0_SASL));
        assert_eq!(negotiate(*b"HTTP/1.1"), Negotiation::Refuse(AMQP_1_0_SASL));
        assert_eq!(negotiate(*b"AMQP\x00\x01\x00\x00"), Negotiation::Refuse(AMQP_1_0_SASL));
    }

    #[test]
    fn plain_and_amqplain_credentials() {
        assert_eq!(credentials("PLAIN", b"\0guest\0secret"), Some(("guest".into(), "secret".into())));
        assert_eq!(credentials("PLAIN", b"guest"), None);
        let mut table = bytes::BytesMut::new();
        let t: charon_model::Table =
            vec![("LOGIN".to_owned(), Value::long_str("u")), ("PASSWORD".to_owned(), Value::long_str("p"))]
                .into_iter()
                .collect();
        crate::codec::encode_table(&mut table, &t);
        let response = table.get(4..).unwrap_or_default();
        assert_eq!(credentials("AMQPLAIN", response), Some(("u".into(), "p".into())));
        assert_eq!(credentials("EXTERNAL", b""), None);
    }
}
