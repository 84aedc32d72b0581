//! What the broker says it is, the same over both protocols (0.9.1 `server-properties`, 1.0
//! `open` properties).
//!
//! `product` and `version` are RabbitMQ's: RabbitMQ's own AMQP 1.0 clients refuse a broker
//! whose `product` is not `RabbitMQ` or whose `version` is below 4, and 0.9.1 clients read the
//! version to pick features; Charon implements RabbitMQ 4.0.5's behaviour, which its
//! conformance suite checks against that version. Who it really is goes in `information` and
//! `platform`.

/// `product`.
pub const PRODUCT: &str = "RabbitMQ";

/// `version`: the RabbitMQ release whose behaviour Charon matches.
pub const VERSION: &str = "4.0.5";

/// `platform`.
pub const PLATFORM: &str = "Charon (Rust)";

/// `copyright`.
pub const COPYRIGHT: &str = "Copyright (c) 2026 the Charon authors";

/// `information`: Charon and its own version.
#[must_use]
pub fn information() -> String {
    format!("Charon {}: AMQP 0.9.1 and 1.0 broker, RabbitMQ-compatible", env!("CARGO_PKG_VERSION"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn information_names_charon_and_its_version() {
        assert_eq!(
            information(),
            format!("Charon {}: AMQP 0.9.1 and 1.0 broker, RabbitMQ-compatible", env!("CARGO_PKG_VERSION"))
        );
        assert_eq!((PRODUCT, VERSION), ("RabbitMQ", "4.0.5"));
    }
}
