//! The open connections, by user and vhost, so that deleting a vhost or a user closes theirs,
//! as RabbitMQ's connection tracking does.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::session::{SessionEvent, SessionId, SessionSink};

/// One tracked connection.
#[derive(Debug)]
struct Tracked {
    user: String,
    vhost: String,
    sink: SessionSink,
}

/// Every connection that opened a vhost.
#[derive(Debug, Default)]
pub struct Connections {
    open: Mutex<HashMap<SessionId, Tracked>>,
}

/// A connection's entry; dropping it (the connection ends) forgets the connection.
#[derive(Debug)]
pub struct Registration {
    connections: Weak<Connections>,
    id: SessionId,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(connections) = self.connections.upgrade() {
            connections.open.lock().remove(&self.id);
        }
    }
}

impl Connections {
    /// Tracks the connection behind `sink`, of `user` on `vhost`.
    #[must_use]
    pub fn register(self: &Arc<Self>, sink: &SessionSink, user: &str, vhost: &str) -> Registration {
        let tracked = Tracked { user: user.to_owned(), vhost: vhost.to_owned(), sink: sink.clone() };
        self.open.lock().insert(sink.id, tracked);
        Registration { connections: Arc::downgrade(self), id: sink.id }
    }

    /// How many connections are open.
    #[must_use]
    pub fn len(&self) -> usize {
        self.open.lock().len()
    }

    /// Whether none is.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Asks every connection `selected(user, vhost)` picks to close, forced, with `reason`
    /// (see [`SessionEvent::ForceClose`]); returns how many.
    pub fn close_where(&self, selected: impl Fn(&str, &str) -> bool, reason: &str) -> usize {
        let open = self.open.lock();
        let mut closed = 0;
        for tracked in open.values().filter(|t| selected(&t.user, &t.vhost)) {
            tracked.sink.send(SessionEvent::ForceClose { reason: reason.to_owned() });
            closed += 1;
        }
        if closed > 0 {
            tracing::info!(closed, reason, "closing connections");
        }
        closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selected_connections_are_told_and_dropped_entries_forgotten() {
        let connections = Arc::new(Connections::default());
        let (a, mut a_rx) = SessionSink::new(1, 8);
        let (b, mut b_rx) = SessionSink::new(2, 8);
        let kept_a = connections.register(&a, "ann", "dev");
        let kept_b = connections.register(&b, "bob", "/");
        assert_eq!(connections.close_where(|_, vhost| vhost == "dev", "vhost 'dev' is deleted"), 1);
        assert!(
            matches!(a_rx.try_recv(), Ok(SessionEvent::ForceClose { reason }) if reason == "vhost 'dev' is deleted")
        );
        assert!(b_rx.try_recv().is_err());
        drop(kept_a);
        assert_eq!(connections.len(), 1);
        assert_eq!(connections.close_where(|user, _| user == "ann", "user 'ann' is deleted"), 0);
        drop(kept_b);
        assert!(connections.is_empty());
    }
}
