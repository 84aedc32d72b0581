//! A 0.9.1 publish as a model [`Message`] (RabbitMQ 4's `mc_amqpl:init/1` plus the checks
//! `rabbit_channel` makes on the properties before routing).

use std::sync::Arc;

use charon_engine::queue::args::MAX_EXPIRY_MS;
use charon_model::{Body, Encoded, Message, Origin, Routing, Value, erlang};

use crate::proto::PublishCommand;

/// Properties RabbitMQ refuses with `PRECONDITION_FAILED`; the texts are RabbitMQ's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum IngestError {
    /// `expiration` is not a valid number of milliseconds.
    #[error("invalid expiration '{expiration}': {reason}")]
    Expiration {
        /// The property as sent.
        expiration: String,
        /// Erlang's reason term.
        reason: String,
    },
    /// `user_id` names someone other than the authenticated user.
    #[error("user_id property set to '{claimed}' but authenticated user was '{user}'")]
    UserId {
        /// The property as sent.
        claimed: String,
        /// The connection's user.
        user: String,
    },
}

/// Builds the model message of a publish. `user` is the connection's authenticated user,
/// whom a `user_id` property must name. The property bytes are kept for pass-through to 0.9.1
/// consumers unless the broker changes the headers (a `BCC` header is removed).
///
/// # Errors
/// A bad `expiration` or a `user_id` naming another user.
pub(crate) fn to_model(command: PublishCommand, user: Option<&str>) -> Result<Arc<Message>, IngestError> {
    let mut decoded = command.properties;
    if let Some(expiration) = &decoded.expiration {
        let ttl = parse_expiration(expiration)
            .map_err(|reason| IngestError::Expiration { expiration: expiration.clone(), reason })?;
        decoded.properties.get_or_insert_with(Box::default).ttl = Some(ttl);
    }
    let claimed = decoded.properties.as_ref().and_then(|p| p.user_id.as_ref());
    if let (Some(claimed), Some(user)) = (claimed, user)
        && claimed.as_ref() != user.as_bytes()
    {
        return Err(IngestError::UserId {
            claimed: String::from_utf8_lossy(claimed).into_owned(),
            user: user.to_owned(),
        });
    }
    let cc = header_keys(decoded.headers.get("CC"));
    let bcc = header_keys(decoded.headers.get("BCC"));
    let encoded = if decoded.headers.contains("BCC") {
        decoded.headers.remove("BCC");
        Encoded::None
    } else {
        Encoded::Amqp091Properties(command.raw_properties)
    };
    let routing = Routing { exchange: command.method.exchange, routing_key: command.method.routing_key, cc, bcc };
    let mut message = Message::new(routing, Body::Data(command.body));
    message.set_boxed_properties(decoded.properties);
    message.headers = decoded.headers;
    message.encoded = encoded;
    message.origin = Origin::Amqp091;
    // Into its `Arc` here, in one move: the caller's `Result`s would each copy the 300 bytes.
    Ok(Arc::new(message))
}

/// RabbitMQ's `rabbit_basic:parse_expiration/1`: an integer string of milliseconds.
fn parse_expiration(text: &str) -> Result<u64, String> {
    let digits_end = text
        .char_indices()
        .find(|(i, c)| !(c.is_ascii_digit() || (*i == 0 && (*c == '-' || *c == '+'))))
        .map_or(text.len(), |(i, _)| i);
    let (number, rest) = text.split_at(digits_end);
    let Ok(value) = number.parse::<i64>() else {
        return Err("no_integer".to_owned());
    };
    if !rest.is_empty() {
        return Err(format!("{{leftover_string,\"{rest}\"}}"));
    }
    if value < 0 {
        return Err(erlang::tuple(&["value_negative", &value.to_string()]));
    }
    if value > MAX_EXPIRY_MS {
        return Err(erlang::tuple(&["value_too_large", &value.to_string()]));
    }
    u64::try_from(value).map_err(|_| "no_integer".to_owned())
}

/// The string routing keys of a `CC` or `BCC` header (an array of long strings).
fn header_keys(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::List(items)) => items
            .iter()
            .filter_map(|v| match v {
                Value::LongStr(_) => v.as_str().map(str::to_owned),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use charon_model::{Properties, Table};

    use super::*;
    use crate::codec::{DecodedProperties, Publish};

    fn command(headers: Table, expiration: Option<&str>, user_id: Option<&str>) -> PublishCommand {
        let mut properties =
            DecodedProperties { headers, expiration: expiration.map(str::to_owned), ..DecodedProperties::default() };
        properties.properties = user_id.map(|u| {
            Box::new(Properties { user_id: Some(Bytes::copy_from_slice(u.as_bytes())), ..Properties::default() })
        });
        PublishCommand {
            method: Publish { exchange: "ex".into(), routing_key: "rk".into(), ..Publish::default() },
            raw_properties: Bytes::from_static(&[0x20, 0x00]),
            properties,
            body: Bytes::from_static(b"hello"),
        }
    }

    #[test]
    fn expiration_parses_like_rabbitmq() {
        assert_eq!(parse_expiration("60000"), Ok(60000));
        assert_eq!(parse_expiration("0"), Ok(0));
        assert_eq!(parse_expiration("-5"), Err("{value_negative,-5}".to_owned()));
        assert_eq!(parse_expiration("abc"), Err("no_integer".to_owned()));
        assert_eq!(parse_expiration("12ab"), Err("{leftover_string,\"ab\"}".to_owned()));
        assert_eq!(parse_expiration("315360000001"), Err("{value_too_large,315360000001}".to_owned()));
    }

    #[test]
    fn a_publish_keeps_its_property_bytes_and_routing() {
        let cc = Value::List(vec![Value::long_str("a"), Value::I32(1), Value::long_str("b")]);
        let headers: Table = vec![("CC".to_owned(), cc)].into_iter().collect();
        let message = to_model(command(headers, Some("250"), Some("guest")), Some("guest")).unwrap();
        assert_eq!(message.routing.exchange, "ex");
        assert_eq!(message.routing.routing_key, "rk");
        assert_eq!(message.routing.cc, ["a", "b"]);
        assert_eq!(message.properties().ttl, Some(250));
        assert_eq!(message.origin, Origin::Amqp091);
        assert!(matches!(&message.encoded, Encoded::Amqp091Properties(raw) if raw.as_ref() == [0x20, 0x00]));
        assert_eq!(message.body.bytes().as_ref(), b"hello");
    }

    #[test]
    fn bcc_is_removed_so_the_properties_are_encoded_afresh() {
        let bcc = Value::List(vec![Value::long_str("hidden")]);
        let headers: Table = vec![("BCC".to_owned(), bcc)].into_iter().collect();
        let message = to_model(command(headers, None, None), None).unwrap();
        assert_eq!(message.routing.bcc, ["hidden"]);
        assert!(!message.headers.contains("BCC"));
        assert!(matches!(message.encoded, Encoded::None));
    }

    #[test]
    fn bad_properties_are_refused_with_rabbitmqs_texts() {
        let bad_ttl = to_model(command(Table::new(), Some("-5"), None), None).unwrap_err();
        assert_eq!(bad_ttl.to_string(), "invalid expiration '-5': {value_negative,-5}");
        let impostor = to_model(command(Table::new(), None, Some("bob")), Some("guest")).unwrap_err();
        assert_eq!(impostor.to_string(), "user_id property set to 'bob' but authenticated user was 'guest'");
    }
}
