//! The node's name, as RabbitMQ's health checks, limits texts, management API and AMQP 1.0
//! container id report it. Here, in the model every crate depends on, so that the engine and
//! the sans-IO 1.0 core (which depends on no engine) name the node one way.

use std::sync::OnceLock;

/// The name `--node-name` gave, or the default, fixed by the first call.
static NAME: OnceLock<String> = OnceLock::new();

/// The node's name: as `--node-name` set it ([`set_node_name`]), or `charon@<hostname>`, the
/// way RabbitMQ names its node `rabbit@<hostname>` (health checks and the management API
/// report it).
#[must_use]
pub fn node_name() -> String {
    NAME.get_or_init(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let host = host.trim();
        format!("charon@{}", if host.is_empty() { "localhost" } else { host })
    })
    .clone()
}

/// Names the node, once, before anything asks (the binary does it at start); false when the
/// name was already fixed.
pub fn set_node_name(name: String) -> bool {
    NAME.set(name).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_is_charon_at_the_host() {
        let name = node_name();
        let host = name.strip_prefix("charon@").unwrap();
        assert!(!host.is_empty() && !host.contains(char::is_whitespace), "{name}");
    }
}
