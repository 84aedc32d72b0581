//! A vhost's exchanges, queues and bindings, and routing over them.
//!
//! Plain data behind the vhost's lock; every method is synchronous and short, so the lock is
//! never held across an await.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use charon_model::{Routing, Table};

use crate::dead_letter::events::EVENTS_EXCHANGE;
use crate::exchange::{Binding, BindingSet, Destination, ExchangeInfo, ExchangeKind, local_random};
use crate::queue::QueueRef;
use crate::reservation::Reserved;

pub(crate) struct ExchangeEntry {
    pub(crate) info: Arc<ExchangeInfo>,
    pub(crate) bindings: BindingSet,
}

/// The result of routing one message.
#[derive(Debug, Default)]
pub(crate) struct Routed {
    pub(crate) queues: Vec<QueueRef>,
    /// False when a headers exchange took part (the result depends on the message's headers)
    /// or an `x-local-random` one (on chance): it must not be cached by routing key.
    pub(crate) cacheable: bool,
    /// The `x-local-random` exchanges that already picked a queue for this message.
    pub(crate) picked_at_random: Vec<String>,
}

#[derive(Default)]
pub(crate) struct Topology {
    pub(crate) exchanges: HashMap<String, ExchangeEntry>,
    pub(crate) queues: HashMap<String, QueueRef>,
    /// For each destination, the exchanges that bind it: makes deleting a queue or exchange
    /// cost its own bindings, not every binding in the vhost.
    sources: HashMap<Destination, HashSet<String>>,
    /// Durable exchanges removed since the vhost last looked (deletes and auto-delete
    /// cascades), for the store to forget.
    pub(crate) removed_durable_exchanges: Vec<String>,
    /// Names of durable exchanges being declared (their commit is in flight).
    pub(crate) reserved_exchanges: HashMap<String, Reserved>,
    /// Names of durable queues being declared (their commit is in flight).
    pub(crate) reserved_queues: HashMap<String, Reserved>,
    /// Whether [`EVENTS_EXCHANGE`] has a binding, kept here as bindings change and read
    /// without the lock by the queues that report deaths to it.
    events_listened: Arc<AtomicBool>,
    /// The alternate exchange a policy gives an exchange (`alternate-exchange`), used when its
    /// own `alternate-exchange` argument names none: the argument wins, as in RabbitMQ's
    /// `rabbit_policy:get_arg/3`. Kept by the vhost as policies and exchanges come and go.
    policy_alternates: HashMap<String, String>,
}

impl Topology {
    /// A vhost's predeclared exchanges: the default exchange and the `amq.*` ones.
    pub(crate) fn with_standard_exchanges() -> Self {
        let mut topology = Self::default();
        for (name, kind) in [
            ("", ExchangeKind::Direct),
            ("amq.direct", ExchangeKind::Direct),
            ("amq.fanout", ExchangeKind::Fanout),
            ("amq.topic", ExchangeKind::Topic),
            ("amq.headers", ExchangeKind::Headers),
            ("amq.match", ExchangeKind::Headers),
            (EVENTS_EXCHANGE, ExchangeKind::Topic),
        ] {
            topology.add_exchange(ExchangeInfo {
                name: name.to_owned(),
                kind,
                durable: true,
                auto_delete: false,
                // Only the broker publishes dead-letter events.
                internal: name == EVENTS_EXCHANGE,
                arguments: Table::new(),
            });
        }
        topology
    }

    /// The flag that says whether [`EVENTS_EXCHANGE`] has a binding.
    pub(crate) fn events_listened(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.events_listened)
    }

    /// Refreshes [`Self::events_listened`] after bindings from `source` changed.
    fn bindings_changed(&self, source: &str) {
        if source == EVENTS_EXCHANGE {
            self.events_listened.store(self.has_bindings_from(EVENTS_EXCHANGE), Ordering::Relaxed);
        }
    }

    pub(crate) fn add_exchange(&mut self, info: ExchangeInfo) {
        let bindings = BindingSet::new(info.kind);
        self.exchanges.insert(info.name.clone(), ExchangeEntry { info: Arc::new(info), bindings });
    }

    /// Sets (or clears) the alternate exchange a policy gives `exchange`.
    pub(crate) fn set_policy_alternate(&mut self, exchange: &str, alternate: Option<String>) {
        match alternate {
            Some(alternate) => self.policy_alternates.insert(exchange.to_owned(), alternate),
            None => self.policy_alternates.remove(exchange),
        };
    }

    pub(crate) fn has_bindings_from(&self, exchange: &str) -> bool {
        self.exchanges.get(exchange).is_some_and(|e| !e.bindings.is_empty())
    }

    /// Adds a binding; returns false if it already existed.
    pub(crate) fn bind(&mut self, source: &str, binding: Binding) -> bool {
        let destination = binding.destination.clone();
        let Some(entry) = self.exchanges.get_mut(source) else {
            return false;
        };
        if !entry.bindings.add(binding) {
            return false;
        }
        self.sources.entry(destination).or_default().insert(source.to_owned());
        self.bindings_changed(source);
        true
    }

    /// Removes a binding; returns false if it did not exist. Auto-delete exchanges left
    /// without bindings are deleted, as RabbitMQ does.
    pub(crate) fn unbind(&mut self, source: &str, binding: &Binding) -> bool {
        let Some(entry) = self.exchanges.get_mut(source) else {
            return false;
        };
        if !entry.bindings.remove(binding) {
            return false;
        }
        let still_bound = entry.bindings.contains_destination(&binding.destination);
        if !still_bound && let Some(set) = self.sources.get_mut(&binding.destination) {
            set.remove(source);
            if set.is_empty() {
                self.sources.remove(&binding.destination);
            }
        }
        self.bindings_changed(source);
        self.collect_auto_deleted(source);
        true
    }

    /// Every binding as (source, binding), ordered by source, then destination (queues before
    /// exchanges, as RabbitMQ lists them), key and arguments' order of insertion.
    pub(crate) fn bindings(&self) -> Vec<(String, Binding)> {
        let mut all = Vec::new();
        for (destination, sources) in &self.sources {
            for source in sources {
                if let Some(entry) = self.exchanges.get(source) {
                    all.extend(entry.bindings.to_destination(destination).into_iter().map(|b| (source.clone(), b)));
                }
            }
        }
        let order = |d: &Destination| match d {
            Destination::Queue(name) => (0, name.clone()),
            Destination::Exchange(name) => (1, name.clone()),
        };
        all.sort_by(|(sa, a), (sb, b)| (sa, order(&a.destination), &a.key).cmp(&(sb, order(&b.destination), &b.key)));
        all
    }

    pub(crate) fn binding_exists(&self, source: &str, binding: &Binding) -> bool {
        self.exchanges.get(source).is_some_and(|e| e.bindings.contains(binding))
    }

    /// Removes every binding that leads to `destination`.
    pub(crate) fn remove_bindings_to(&mut self, destination: &Destination) {
        let Some(sources) = self.sources.remove(destination) else {
            return;
        };
        for source in &sources {
            if let Some(entry) = self.exchanges.get_mut(source) {
                entry.bindings.remove_destination(destination);
            }
            self.bindings_changed(source);
        }
        for source in &sources {
            self.collect_auto_deleted(source);
        }
    }

    /// Deletes an exchange and every binding from or to it.
    pub(crate) fn remove_exchange(&mut self, name: &str) {
        let Some(entry) = self.exchanges.remove(name) else {
            return;
        };
        if entry.info.durable {
            self.removed_durable_exchanges.push(name.to_owned());
        }
        drop(entry);
        for set in self.sources.values_mut() {
            set.remove(name);
        }
        self.sources.retain(|_, set| !set.is_empty());
        self.remove_bindings_to(&Destination::Exchange(name.to_owned()));
    }

    fn collect_auto_deleted(&mut self, source: &str) {
        let unused_auto_delete =
            self.exchanges.get(source).is_some_and(|e| e.info.auto_delete && e.bindings.is_empty());
        if unused_auto_delete {
            self.remove_exchange(source);
        }
    }

    /// Routes a message published to `exchange`: every routing key (publish key, CC, BCC)
    /// through the exchange graph, with alternate exchanges where an exchange matched nothing.
    pub(crate) fn route(&self, exchange: &str, routing: &Routing, headers: &Table) -> Routed {
        let mut routed = Routed { queues: Vec::new(), cacheable: true, picked_at_random: Vec::new() };
        for key in routing.all_keys() {
            let mut visited = HashSet::new();
            self.route_key(exchange, key, headers, &mut visited, &mut routed);
        }
        routed
    }

    /// Routes a dead letter: like [`Self::route`], without the `internal` check the vhost makes
    /// for publishes (RabbitMQ calls `rabbit_exchange:route` directly). `None` when the exchange
    /// does not exist.
    pub(crate) fn route_dead_letter(
        &self,
        exchange: &str,
        routing: &Routing,
        headers: &Table,
    ) -> Option<Vec<QueueRef>> {
        self.exchanges.contains_key(exchange).then(|| self.route(exchange, routing, headers).queues)
    }

    fn route_key(&self, exchange: &str, key: &str, headers: &Table, visited: &mut HashSet<String>, out: &mut Routed) {
        if !visited.insert(exchange.to_owned()) {
            return;
        }
        if exchange.is_empty() {
            if let Some(queue) = self.queues.get(key) {
                push_unique(&mut out.queues, queue);
            }
            return;
        }
        let Some(entry) = self.exchanges.get(exchange) else {
            return;
        };
        if matches!(entry.info.kind, ExchangeKind::Headers | ExchangeKind::LocalRandom) {
            out.cacheable = false;
        }
        let mut destinations = Vec::new();
        entry.bindings.route(key, headers, &mut destinations);
        if entry.info.kind == ExchangeKind::LocalRandom {
            // One queue per message, whatever its keys: RabbitMQ routes the exchange once.
            if out.picked_at_random.iter().any(|x| x == exchange) {
                return;
            }
            out.picked_at_random.push(exchange.to_owned());
            destinations.retain(|d| matches!(d, Destination::Queue(name) if self.queues.contains_key(name)));
            let chosen = local_random::choose(&destinations, |n| rand::random_range(0..n));
            destinations = chosen.into_iter().collect();
        }
        if destinations.is_empty() {
            let by_policy = || self.policy_alternates.get(exchange).map(String::as_str);
            if let Some(alternate) = entry.info.alternate_exchange().or_else(by_policy) {
                self.route_key(alternate, key, headers, visited, out);
            }
            return;
        }
        for destination in destinations {
            match destination {
                Destination::Queue(name) => {
                    if let Some(queue) = self.queues.get(name) {
                        push_unique(&mut out.queues, queue);
                    }
                }
                Destination::Exchange(name) => self.route_key(name, key, headers, visited, out),
            }
        }
    }
}

fn push_unique(queues: &mut Vec<QueueRef>, queue: &QueueRef) {
    if !queues.iter().any(|q| Arc::ptr_eq(q, queue)) {
        queues.push(Arc::clone(queue));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_exchange_is_internal_and_its_listened_flag_follows_its_bindings() {
        let mut topology = Topology::with_standard_exchanges();
        let info = &topology.exchanges.get(EVENTS_EXCHANGE).map(|e| Arc::clone(&e.info)).unwrap();
        assert_eq!((info.kind, info.durable, info.internal), (ExchangeKind::Topic, true, true));
        let listened = topology.events_listened();
        let binding = |queue: &str| Binding {
            destination: Destination::Queue(queue.into()),
            key: "#".into(),
            arguments: Table::new(),
        };
        assert!(topology.bind("amq.topic", binding("a")));
        assert!(!listened.load(Ordering::Relaxed), "other exchanges do not count");
        assert!(topology.bind(EVENTS_EXCHANGE, binding("a")));
        assert!(topology.bind(EVENTS_EXCHANGE, binding("b")));
        assert!(listened.load(Ordering::Relaxed));
        assert!(topology.unbind(EVENTS_EXCHANGE, &binding("a")));
        assert!(listened.load(Ordering::Relaxed), "b still listens");
        topology.remove_bindings_to(&Destination::Queue("b".into()));
        assert!(!listened.load(Ordering::Relaxed), "the queue went with its binding");
    }

    #[test]
    fn bindings_lists_every_binding_by_source_then_queues_before_exchanges() {
        let mut topology = Topology::with_standard_exchanges();
        let to =
            |destination: Destination, key: &str| Binding { destination, key: key.into(), arguments: Table::new() };
        assert!(topology.bind("amq.topic", to(Destination::Exchange("amq.fanout".into()), "x")));
        assert!(topology.bind("amq.topic", to(Destination::Queue("q".into()), "b")));
        assert!(topology.bind("amq.topic", to(Destination::Queue("q".into()), "a")));
        assert!(topology.bind("amq.direct", to(Destination::Queue("z".into()), "k")));
        let listed: Vec<(String, Destination, String)> =
            topology.bindings().into_iter().map(|(source, b)| (source, b.destination, b.key)).collect();
        assert_eq!(
            listed,
            vec![
                ("amq.direct".into(), Destination::Queue("z".into()), "k".into()),
                ("amq.topic".into(), Destination::Queue("q".into()), "a".into()),
                ("amq.topic".into(), Destination::Queue("q".into()), "b".into()),
                ("amq.topic".into(), Destination::Exchange("amq.fanout".into()), "x".into()),
            ]
        );
        topology.remove_exchange("amq.topic");
        assert_eq!(topology.bindings().len(), 1);
    }
}
