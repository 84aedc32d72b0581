//! RabbitMQ 4 "v2" addresses (`rabbit_amqp_session:parse_target_v2_string/1`).

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
    match address.strip_prefix("/queues/") {
        Some("") | None => None,
        Some(queue) => Some(TargetAddress::Queue(percent_decode(queue)?)),
    }
}

/// Parses a v2 source address: only `/queues/:queue`.
pub(crate) fn parse_source(address: &str) -> Option<String> {
    match address.strip_prefix("/queues/") {
        Some("") | None => None,
        Some(queue) => percent_decode(queue),
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
    fn v2_sources() {
        assert_eq!(parse_source("/queues/q"), Some("q".into()));
        assert_eq!(parse_source("/exchanges/x"), None);
        assert_eq!(parse_source("q"), None);
    }
}
