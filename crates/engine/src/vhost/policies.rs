//! A vhost's policies: stored by name, applied to matching queues at declare and whenever a
//! policy changes (RabbitMQ applies policies to existing queues at runtime).

use charon_model::Table;
use charon_store::meta::StoredPolicy;

use super::VHost;
use crate::error::EngineError;
use crate::policy::{Policy, effective, effective_for_exchange};
use crate::queue::{QueueRef, QueueSettings, QueueType};
use crate::topology::Topology;

impl VHost {
    /// Adds or replaces a policy and applies it to the queues it now governs. Returns whether
    /// it is new.
    ///
    /// # Errors
    /// When the durable store cannot record it (nothing changes).
    pub async fn set_policy(&self, policy: Policy) -> Result<bool, EngineError> {
        // Committed first, then applied, as before; the commit runs on the metadata writer.
        if let Some(store) = self.store() {
            let stored = StoredPolicy {
                vhost: self.name().to_owned(),
                name: policy.name.clone(),
                pattern: policy.pattern.clone(),
                apply_to: policy.apply_to.as_str().to_owned(),
                priority: policy.priority,
                definition: policy.definition.clone(),
            };
            store.save_policy(stored).wait().await?;
        }
        // rabbitmqctl's wording (4.0.5 logs nothing for a policy set over HTTP).
        tracing::info!(
            "Setting policy '{}' for pattern '{}' to '{:?}' with priority '{}' for vhost '{}'",
            policy.name,
            policy.pattern,
            policy.definition,
            policy.priority,
            self.name()
        );
        let created = {
            let mut policies = self.policies.write();
            let created = match policies.iter_mut().find(|p| p.name == policy.name) {
                Some(existing) => {
                    *existing = policy;
                    false
                }
                None => {
                    policies.push(policy);
                    true
                }
            };
            policies.sort_by(|a, b| a.name.cmp(&b.name));
            created
        };
        self.reapply_policies().await;
        Ok(created)
    }

    /// Removes a policy; false when there was none of that name.
    pub async fn delete_policy(&self, name: &str) -> bool {
        let forgotten = {
            let mut policies = self.policies.write();
            let before = policies.len();
            policies.retain(|p| p.name != name);
            // Submitted under the lock, so that the store forgets in the order of the removals.
            (before != policies.len()).then(|| self.store().map(|store| store.forget_policy(self.name(), name)))
        };
        let Some(forgotten) = forgotten else {
            return false;
        };
        tracing::info!("Clearing policy '{name}' on vhost '{}'", self.name());
        if let Some(done) = forgotten {
            // A failure is logged by the store; the policy is gone either way.
            let _ = done.wait().await;
        }
        self.reapply_policies().await;
        true
    }

    /// Every policy, by name.
    #[must_use]
    pub fn policies(&self) -> Vec<Policy> {
        self.policies.read().clone()
    }

    /// One policy.
    #[must_use]
    pub fn policy(&self, name: &str) -> Option<Policy> {
        self.policies.read().iter().find(|p| p.name == name).cloned()
    }

    /// The policy that applies to `queue`, if any.
    #[must_use]
    pub fn queue_policy(&self, queue: &QueueRef) -> Option<Policy> {
        let policies = self.policies.read();
        effective(policies.iter(), queue.name(), queue.config.queue_type).cloned()
    }

    /// A queue's settings: its arguments merged with the policy that applies to it.
    pub(crate) fn settings_for(&self, name: &str, queue_type: QueueType, arguments: &Table) -> QueueSettings {
        let policies = self.policies.read();
        let policy = effective(policies.iter(), name, queue_type);
        QueueSettings::resolve(queue_type, arguments, policy.map(|p| &p.definition), self.dead_letter_guarantee)
    }

    /// The alternate exchange the policy that applies to exchange `name` gives it.
    fn policy_alternate(&self, name: &str) -> Option<String> {
        let policies = self.policies.read();
        let policy = effective_for_exchange(policies.iter(), name)?;
        policy.definition.get("alternate-exchange").and_then(|v| v.as_str()).map(str::to_owned)
    }

    /// Records the alternate exchange policies give the exchange `name`, just added to
    /// `topology` (whose lock the caller holds; policies are read under it, never the other way
    /// round).
    pub(super) fn note_policy_alternate(&self, topology: &mut Topology, name: &str) {
        topology.set_policy_alternate(name, self.policy_alternate(name));
    }

    /// Records the alternate exchanges policies give every exchange, after policies changed
    /// or the vhost was restored; cached routes are dropped.
    pub(super) fn refresh_policy_alternates(&self) {
        let mut topology = self.topology.write();
        let names: Vec<String> = topology.exchanges.keys().cloned().collect();
        for name in names {
            self.note_policy_alternate(&mut topology, &name);
        }
        drop(topology);
        self.changed();
    }

    async fn reapply_policies(&self) {
        self.refresh_policy_alternates();
        for queue in self.queues() {
            let config = &queue.config;
            let settings = self.settings_for(&config.name, config.queue_type, &config.arguments);
            queue.apply_settings(settings).await;
        }
    }
}
