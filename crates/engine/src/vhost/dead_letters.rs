//! The vhost's side of the dead-letter seam: a queue's dead letters are routed through this
//! vhost's exchange graph.

use std::sync::{Arc, Weak};

use charon_model::{Routing, Table};
use parking_lot::RwLock;

use crate::dead_letter::DeadLetterSink;
use crate::dead_letter::events::DeadLetterEvents;
use crate::queue::QueueRef;
use crate::topology::Topology;

/// Routes dead letters through a vhost's topology, and reports deaths to its event stream.
/// Holds the topology weakly: the topology holds the queues, whose tasks hold this.
pub(super) struct DeadLetterRoutes {
    topology: Weak<RwLock<Topology>>,
    events: Option<Arc<DeadLetterEvents>>,
}

impl DeadLetterRoutes {
    /// Routes through `topology`, reporting deaths to `events` (the event stream's own
    /// publisher routes without).
    pub(super) fn new(topology: Weak<RwLock<Topology>>, events: Option<Arc<DeadLetterEvents>>) -> Self {
        Self { topology, events }
    }
}

impl DeadLetterSink for DeadLetterRoutes {
    fn route(&self, exchange: &str, routing: &Routing, headers: &Table) -> Option<Vec<QueueRef>> {
        self.topology.upgrade()?.read().route_dead_letter(exchange, routing, headers)
    }

    fn events(&self) -> Option<&DeadLetterEvents> {
        self.events.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::{Binding, Destination};

    #[test]
    fn routes_through_the_topology_while_it_lives() {
        let topology = Arc::new(RwLock::new(Topology::with_standard_exchanges()));
        let routes = DeadLetterRoutes::new(Arc::downgrade(&topology), None);
        let routing = Routing { exchange: "amq.direct".into(), routing_key: "k".into(), ..Routing::default() };
        // An existing exchange without bindings routes nowhere; a missing one is `None`.
        assert_eq!(routes.route("amq.direct", &routing, &Table::new()).map(|q| q.len()), Some(0));
        assert!(routes.route("missing", &routing, &Table::new()).is_none());
        let binding = Binding { destination: Destination::Queue("q".into()), key: "k".into(), arguments: Table::new() };
        // Bound to a queue the topology does not have: still no target.
        topology.write().bind("amq.direct", binding);
        assert_eq!(routes.route("amq.direct", &routing, &Table::new()).map(|q| q.len()), Some(0));
        drop(topology);
        assert!(routes.route("amq.direct", &routing, &Table::new()).is_none());
    }
}
