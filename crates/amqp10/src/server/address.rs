//! RabbitMQ 4 "v2" addresses (`rabbit_amqp_session:parse_target_v2_string/1`), and Charon's
//! one extension: the dead-letter event exchange as a source.

use charon_engine::dead_letter::events::EVENTS_EXCHANGE;

/// Where a target address sends messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TargetAddress {
    /// `/exchanges/:exchange/:routing-key` or `/exchanges/:exchange` (empty key).
    Exchange {
        /// Exchange name.
        exchange: String,
        /// Routing key.
        routing_key: String,
    },
    /// `/queues/:queue`: the default exchange with the queue name as key.
    Queue(String),
    /// The anonymous terminus: each message names its target in `to`.
    Anonymous,
}

/// Decodes `%XX` escapes; anything malformed (or not UTF-8 afterwards) is refused.
pub(crate) fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Parses a v2 target string (also the `to` of an anonymous-terminus message).
pub(crate) fn parse_target(address: &str) -> Option<TargetAddress> {
    if let Some(rest) = address.strip_prefix("/exchanges/") {
        let parts: Vec<&str> = rest.split('/').collect();
        return match parts.as_slice() {
            [""] | ["", ..] | ["amq.default", ..] => None,
            [exchange] => {
                Some(TargetAddress::Exchange { exchange: percent_decode(exchange)?, routing_key: String::new() })
            }
            [exchange, key] => {
                Some(TargetAddress::Exchange { exchange: percent_decode(exchange)?, routing_key: percent_decode(key)? })
            }
            _ => None,
        };
    }
    parse_queue_segment(address).map(TargetAddress::Queue)
}

/// `/queues/:queue` with one non-empty segment: a `/` in a queue name must be percent-encoded
/// (`/queues/a/b` is refused, as RabbitMQ 4.0.5 refuses it).
fn parse_queue_segment(address: &str) -> Option<String> {
    match address.strip_prefix("/queues/") {
        Some("") | None => None,
        Some(queue) if queue.contains('/') => None,
        Some(queue) => percent_decode(queue),
    }
}

/// Parses a v2 source address: only `/queues/:queue`.
pub(crate) fn parse_source(address: &str) -> Option<String> {
    parse_queue_segment(address)
}

/// The binding key of a source address on the dead-letter event exchange, a Charon extension
/// (docs/dead-letter-events.md): `/exchanges/amq.charon.dead-letter-events` binds `#`,
/// `/exchanges/amq.charon.dead-letter-events/:binding-key` that key. `None` for every other
/// address, and for an empty or malformed key: RabbitMQ 4.0.5 refuses every `/exchanges/`
/// source, and so does Charon for any other exchange.
pub(crate) fn parse_event_source(address: &str) -> Option<String> {
    let rest = address.strip_prefix("/exchanges/")?;
    let (exchange, key) = match rest.split_once('/') {
        Some((exchange, key)) => (exchange, Some(key)),
        None => (rest, None),
    };
    if percent_decode(exchange)? != EVENTS_EXCHANGE {
        return None;
    }
    match key {
        None => Some("#".to_owned()),
        Some("") => None,
        Some(key) => percent_decode(key),
    }
}

/// Why an address that is not v2 is refused, as the Erlang term RabbitMQ 4.0.5 puts after
/// "Attach rejected: ".
///
/// RabbitMQ treats every target not starting with `/exchanges/` or `/queues/` (and every source
/// not starting with `/queues/`) as a deprecated v1 address and parses it with
/// `rabbit_routing_parser:parse_endpoint/2`. A v1 address it cannot parse gets that parser's
/// error, which we reproduce exactly. Charon does not implement v1 addresses: one that parses
/// is refused the way RabbitMQ refuses it when `deprecated_features.permit.amqp_address_v1` is
/// false (a deliberate difference, docs/fidelity.md).
pub(crate) fn v1_refusal(address: &str, is_target: bool) -> String {
    match v1_parse_error(address, is_target) {
        Some(error) => error,
        None => format!("{{amqp_address_v1_not_permitted,{{utf8,<<\"{address}\">>}}}}"),
    }
}

/// `rabbit_routing_parser:parse_endpoint/2`'s error for `address`, or `None` when it parses.
fn v1_parse_error(address: &str, allow_anonymous_queue: bool) -> Option<String> {
    let parts: Vec<&str> = address.split('/').collect();
    let (kind, rest) = match parts.as_slice() {
        [_name] => return None,
        ["", "amq", "queue", rest @ ..] => ("amqqueue", rest),
        ["", "reply-queue", _, ..] => return None,
        ["", kind @ ("exchange" | "queue" | "topic" | "temp-queue"), rest @ ..] => (*kind, rest),
        _ => return Some(format!("{{unknown_destination,\"{address}\"}}")),
    };
    let kind = kind.replace('-', "_");
    let invalid = |rest: &[&str]| {
        let url = if rest.is_empty() { "[]".to_owned() } else { format!("\"/{}\"", rest.join("/")) };
        Some(format!("{{invalid_destination,{kind},{url}}}"))
    };
    match (kind.as_str(), rest) {
        ("exchange", ["", ..]) => invalid(rest),
        ("exchange", [_] | [_, _]) => None,
        ("queue", []) if allow_anonymous_queue => None,
        (_, [name]) if !name.is_empty() => None,
        _ => invalid(rest),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_targets() {
        assert_eq!(
            parse_target("/exchanges/amq.topic/a.b"),
            Some(TargetAddress::Exchange { exchange: "amq.topic".into(), routing_key: "a.b".into() })
        );
        assert_eq!(
            parse_target("/exchanges/my%2Fx"),
            Some(TargetAddress::Exchange { exchange: "my/x".into(), routing_key: String::new() })
        );
        assert_eq!(parse_target("/queues/q%201"), Some(TargetAddress::Queue("q 1".into())));
        assert_eq!(parse_target("/exchanges//k"), None);
        assert_eq!(parse_target("/exchanges/amq.default/k"), None);
        assert_eq!(parse_target("/exchanges/x/a/b"), None);
        assert_eq!(parse_target("/queues/"), None);
        assert_eq!(parse_target("/topic/foo"), None);
        assert_eq!(parse_target("/queues/%zz"), None);
    }

    #[test]
    fn v1_addresses_get_rabbitmqs_parser_errors_or_the_not_permitted_refusal() {
        assert_eq!(v1_refusal("/topics/x", true), "{unknown_destination,\"/topics/x\"}");
        assert_eq!(v1_refusal("/exchanges/amq.direct", false), "{unknown_destination,\"/exchanges/amq.direct\"}");
        assert_eq!(v1_refusal("/exchange//k", true), "{invalid_destination,exchange,\"//k\"}");
        assert_eq!(v1_refusal("/queue", false), "{invalid_destination,queue,[]}");
        assert_eq!(v1_refusal("/temp-queue/a/b", true), "{invalid_destination,temp_queue,\"/a/b\"}");
        assert_eq!(v1_refusal("/queue", true), "{amqp_address_v1_not_permitted,{utf8,<<\"/queue\">>}}");
        assert_eq!(v1_refusal("q1", false), "{amqp_address_v1_not_permitted,{utf8,<<\"q1\">>}}");
        assert_eq!(v1_refusal("/amq/queue/q", false), "{amqp_address_v1_not_permitted,{utf8,<<\"/amq/queue/q\">>}}");
    }

    #[test]
    fn the_event_exchange_is_a_source_with_an_optional_binding_key() {
        assert_eq!(parse_event_source("/exchanges/amq.charon.dead-letter-events"), Some("#".into()));
        assert_eq!(
            parse_event_source("/exchanges/amq.charon.dead-letter-events/rejected.%23"),
            Some("rejected.#".into())
        );
        assert_eq!(parse_event_source("/exchanges/amq.charon.dead-letter-events/*.orders"), Some("*.orders".into()));
        assert_eq!(parse_event_source("/exchanges/amq.charon.dead-letter-events/"), None);
        assert_eq!(parse_event_source("/exchanges/amq.topic"), None);
        assert_eq!(parse_event_source("/exchanges/amq.topic/#"), None);
        assert_eq!(parse_event_source("/queues/amq.charon.dead-letter-events"), None);
    }

    #[test]
    fn v2_sources() {
        assert_eq!(parse_source("/queues/q"), Some("q".into()));
        assert_eq!(parse_source("/exchanges/x"), None);
        assert_eq!(parse_source("q"), None);
        assert_eq!(parse_source("/queues/a/b"), None, "a slash must be percent-encoded");
        assert_eq!(parse_source("/queues/a%2Fb"), Some("a/b".into()));
        assert_eq!(parse_target("/queues/a/b"), None);
        assert_eq!(parse_target("/queues/a%2Fb"), Some(TargetAddress::Queue("a/b".into())));
    }
}
