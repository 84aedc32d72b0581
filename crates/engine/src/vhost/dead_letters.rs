//! The vhost's side of the dead-letter seam: a queue's dead letters are routed through this
//! vhost's exchange graph, and what RabbitMQ would drop goes to the vhost's fallback queue.

use std::sync::{Arc, Weak};

use charon_model::{Routing, Table, Value};
use parking_lot::RwLock;

use super::{Created, Declarer, QueueDeclare, VHost};
use crate::clock::now_ms;
use crate::dead_letter::events::DeadLetterEvents;
use crate::dead_letter::{DeadLetterSink, DropReason, Drops, FALLBACK_QUEUE, Router};
use crate::queue::QueueRef;
use crate::topology::Topology;

/// The fallback queue's bounds, as declare arguments (a policy can lower them and give it a
/// TTL): at most a million messages or 1 GiB of bodies, the oldest dropped first.
const FALLBACK_MAX_LENGTH: i64 = 1_000_000;
const FALLBACK_MAX_LENGTH_BYTES: i64 = 1 << 30;

/// Routes dead letters through a vhost's topology, and reports deaths to its event stream.
/// Holds the topology weakly: the topology holds the queues, whose tasks hold this.
pub(super) struct DeadLetterRoutes {
    vhost: String,
    topology: Weak<RwLock<Topology>>,
    drops: Arc<Drops>,
    /// Whether dropped dead letters go to the fallback queue.
    fallback: bool,
    events: Option<Arc<DeadLetterEvents>>,
}

impl DeadLetterRoutes {
    /// Routes through `topology`, counting drops in `drops`, keeping them in the fallback queue
    /// if `fallback`, and reporting deaths to `events` (the event stream's own publisher routes
    /// without).
    pub(super) fn new(
        vhost: &str,
        topology: Weak<RwLock<Topology>>,
        drops: Arc<Drops>,
        fallback: bool,
        events: Option<Arc<DeadLetterEvents>>,
    ) -> Self {
        Self { vhost: vhost.to_owned(), topology, drops, fallback, events }
    }
}

impl Router for DeadLetterRoutes {
    fn route(&self, exchange: &str, routing: &Routing, headers: &Table) -> Option<Vec<QueueRef>> {
        self.topology.upgrade()?.read().route_dead_letter(exchange, routing, headers)
    }
}

impl DeadLetterSink for DeadLetterRoutes {
    fn dropped(&self, queue: &str, reason: DropReason) -> Option<QueueRef> {
        let fallback = (self.fallback && queue != FALLBACK_QUEUE)
            .then(|| self.topology.upgrade().and_then(|t| t.read().queues.get(FALLBACK_QUEUE).cloned()))
            .flatten();
        self.drops.count(&self.vhost, queue, reason, fallback.is_some(), now_ms());
        fallback
    }

    fn events(&self) -> Option<&DeadLetterEvents> {
        self.events.as_deref()
    }
}

impl VHost {
    /// Creates the fallback queue (durable, bounded) unless it is off or exists. Called once
    /// the vhost is restored, before clients can reach it.
    pub(crate) fn ensure_fallback_queue(&self) {
        if !self.fallback || self.topology.read().queues.contains_key(FALLBACK_QUEUE) {
            return;
        }
        let mut arguments = Table::new();
        arguments.insert("x-max-length", Value::I64(FALLBACK_MAX_LENGTH));
        arguments.insert("x-max-length-bytes", Value::I64(FALLBACK_MAX_LENGTH_BYTES));
        let declare = QueueDeclare { name: FALLBACK_QUEUE.to_owned(), durable: true, arguments, ..Default::default() };
        match self.create_or_check_queue(&declare, 0, (Declarer::Broker, None), None) {
            Ok(Created::Committing { queue, done, reservation }) => {
                let me = self.me.clone();
                tokio::spawn(async move {
                    let committed = done.wait().await.is_ok();
                    if let Some(vhost) = me.upgrade() {
                        vhost.publish_queue(&mut vhost.topology.write(), queue, committed, reservation);
                    }
                    if !committed {
                        tracing::error!(queue = FALLBACK_QUEUE, "storing the fallback queue failed");
                    }
                });
            }
            Ok(Created::New(_) | Created::Existing(_) | Created::Reserved(_) | Created::Propose(_)) => {}
            Err(error) => tracing::error!(queue = FALLBACK_QUEUE, %error, "creating the fallback queue failed"),
        }
    }

    /// Dead letters dropped where RabbitMQ drops them silently: `(queue, reason, count)`.
    #[must_use]
    pub fn dropped_dead_letters(&self) -> Vec<(String, DropReason, u64)> {
        self.drops.counts()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::{Binding, Destination};

    #[test]
    fn routes_through_the_topology_while_it_lives() {
        let topology = Arc::new(RwLock::new(Topology::with_standard_exchanges()));
        let routes = DeadLetterRoutes::new("/", Arc::downgrade(&topology), Arc::default(), true, None);
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
