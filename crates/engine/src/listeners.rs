//! The sockets the node listens on (RabbitMQ's `rabbit_networking:active_listeners()`), as
//! the process that binds them records them: the management API's `listeners`, and the
//! port- and protocol-listener health checks.

use std::net::SocketAddr;

use parking_lot::RwLock;

/// One listening socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listener {
    /// RabbitMQ's protocol name: `amqp`, `amqp/ssl`, `http`, `https`, `http/prometheus`.
    pub protocol: String,
    /// The bound address.
    pub address: SocketAddr,
}

/// The node's listeners.
#[derive(Debug, Default)]
pub struct Listeners {
    list: RwLock<Vec<Listener>>,
}

impl Listeners {
    /// Records a socket bound for `protocol`.
    pub fn add(&self, protocol: &str, address: SocketAddr) {
        self.list.write().push(Listener { protocol: protocol.to_owned(), address });
    }

    /// Every listener, in the order they were bound.
    #[must_use]
    pub fn list(&self) -> Vec<Listener> {
        self.list.read().clone()
    }
}
