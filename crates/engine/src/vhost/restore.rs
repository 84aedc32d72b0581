//! Rebuilding a vhost from the store at start: policies and operator policies first (so queues
//! start with their effective settings), then durable exchanges, durable queues with their
//! logged messages (in a cluster, proxies for the durable queues of other nodes), and the
//! bindings between them.

use std::collections::HashMap;

use charon_model::{Table, Value};
use charon_store::meta::MetaSnapshot;
use charon_store::segment_log::RecoveredQueue;

use super::VHost;
use crate::exchange::{Binding, Destination, ExchangeInfo, ExchangeKind};
use crate::policy::{Policy, PolicyFields, PolicyKind};
use crate::queue::QueueConfig;
use crate::queue::args::queue_type_of;

impl VHost {
    /// Restores this vhost's part of `snapshot`, taking each restored queue's messages out of
    /// `messages` (by queue id).
    pub(crate) fn restore(&self, snapshot: &MetaSnapshot, messages: &mut HashMap<u64, RecoveredQueue>) {
        let mine = |vhost: &str| vhost == self.name;
        for (kind, stored_policies) in
            [(PolicyKind::User, &snapshot.policies), (PolicyKind::Operator, &snapshot.operator_policies)]
        {
            let mut policies = self.policies_of(kind).write();
            for stored in stored_policies.iter().filter(|p| mine(&p.vhost)) {
                let fields = PolicyFields {
                    pattern: Some(Value::long_str(&stored.pattern)),
                    definition: Some(Value::Table(stored.definition.clone())),
                    priority: Some(Value::I64(stored.priority)),
                    apply_to: Some(Value::long_str(&stored.apply_to)),
                    unrecognised: Table::new(),
                };
                match Policy::from_fields(kind, &stored.name, fields) {
                    Ok(policy) => policies.push(policy),
                    Err(reason) => tracing::error!(policy = stored.name, %reason, "stored policy no longer valid"),
                }
            }
            policies.sort_by(|a, b| a.name.cmp(&b.name));
        }
        let mut topology = self.topology.write();
        for stored in snapshot.exchanges.iter().filter(|e| mine(&e.vhost)) {
            let Ok(kind) = ExchangeKind::parse(&stored.kind) else {
                tracing::error!(exchange = stored.name, kind = stored.kind, "stored exchange has an unknown type");
                continue;
            };
            if topology.exchanges.contains_key(&stored.name) {
                continue;
            }
            topology.add_exchange(ExchangeInfo {
                name: stored.name.clone(),
                kind,
                durable: true,
                auto_delete: stored.auto_delete,
                internal: stored.internal,
                arguments: stored.arguments.clone(),
            });
        }
        for stored in snapshot.queues.iter().filter(|q| mine(&q.vhost)) {
            let queue_type = queue_type_of(&stored.arguments);
            let config = QueueConfig {
                name: stored.name.clone(),
                vhost: self.name.clone(),
                durable: true,
                auto_delete: stored.auto_delete,
                exclusive_owner: None,
                arguments: stored.arguments.clone(),
                queue_type,
            };
            if let Some(home) = &stored.home {
                // A queue of another node of the cluster: its proxy.
                let proxy = self.proxy(stored.id, config, home.clone());
                topology.queues.insert(stored.name.clone(), proxy);
                continue;
            }
            let settings = self.settings_for(&stored.name, queue_type, &config.arguments);
            let restored = messages.remove(&stored.id).unwrap_or_default();
            // A replicated queue's messages come from its group: what this node's log holds of
            // it may be older than what a later home wrote.
            let restored = if stored.replica.is_some() { RecoveredQueue::default() } else { restored };
            tracing::info!(queue = stored.name, vhost = self.name, messages = restored.len(), "queue recovered");
            let links = self.queue_links(stored.replica.map(|group| (group, stored.name.as_str(), false)));
            let queue = crate::queue::spawn(stored.id, config, settings, links, restored);
            topology.queues.insert(stored.name.clone(), queue);
        }
        for stored in snapshot.bindings.iter().filter(|b| mine(&b.vhost)) {
            let destination = if stored.to_exchange {
                Destination::Exchange(stored.destination.clone())
            } else {
                Destination::Queue(stored.destination.clone())
            };
            let exists = match &destination {
                Destination::Queue(name) => topology.queues.contains_key(name),
                Destination::Exchange(name) => topology.exchanges.contains_key(name),
            };
            if exists {
                let binding = Binding { destination, key: stored.key.clone(), arguments: stored.arguments.clone() };
                topology.bind(&stored.source, binding);
            }
        }
        drop(topology);
        // Alternate exchanges from policies; this also drops cached routes.
        self.refresh_policy_alternates();
    }
}
