//! A vhost's policies and operator policies: stored by name, each kind in its own namespace,
//! applied to matching queues at declare and whenever a policy of either kind changes
//! (RabbitMQ applies policies to existing queues at runtime). A queue runs with the highest
//! priority matching policy of each kind, their definitions merged ([`merge`]).

use charon_model::Table;
use charon_store::meta::StoredPolicy;
use parking_lot::RwLock;

use super::VHost;
use crate::error::EngineError;
use crate::policy::{Policy, PolicyKind, effective, effective_for_exchange, merge};
use crate::queue::{QueueRef, QueueSettings, QueueType};
use crate::topology::Topology;

/// The policies that apply to one queue, one of each kind at most.
#[derive(Clone, Debug, Default)]
pub struct AppliedPolicies {
    /// The user policy.
    pub policy: Option<Policy>,
    /// The operator policy.
    pub operator_policy: Option<Policy>,
}

impl AppliedPolicies {
    /// The definition the queue runs with (`effective_policy_definition`): both merged, the
    /// stricter value winning; `None` when no policy applies.
    #[must_use]
    pub fn effective_definition(&self) -> Option<Table> {
        merge(self.policy.as_ref().map(|p| &p.definition), self.operator_policy.as_ref().map(|p| &p.definition))
    }
}

impl VHost {
    pub(super) fn policies_of(&self, kind: PolicyKind) -> &RwLock<Vec<Policy>> {
        match kind {
            PolicyKind::User => &self.policies,
            PolicyKind::Operator => &self.operator_policies,
        }
    }

    /// Adds or replaces a policy (of its kind) and applies it to the queues it now governs.
    /// Returns whether it is new.
    ///
    /// # Errors
    /// When the durable store cannot record it (nothing changes).
    pub async fn set_policy(&self, policy: Policy) -> Result<bool, EngineError> {
        let Some(cluster) = self.cluster.get() else {
            return self.put_policy(policy).await;
        };
        let created = !self.policies_of(policy.kind()).read().iter().any(|p| p.name == policy.name);
        cluster.set_policy(self.name(), &policy).await?;
        Ok(created)
    }

    /// Sets on this node a policy the cluster committed.
    ///
    /// # Errors
    /// When the durable store cannot record it.
    pub(crate) async fn follow_set_policy(&self, policy: Policy) -> Result<(), EngineError> {
        self.put_policy(policy).await.map(drop)
    }

    async fn put_policy(&self, policy: Policy) -> Result<bool, EngineError> {
        let kind = policy.kind();
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
            store.save_policy(kind, stored).wait().await?;
        }
        // rabbitmqctl's wording (4.0.5 logs nothing for a policy set over HTTP).
        let what = match kind {
            PolicyKind::User => "policy",
            PolicyKind::Operator => "operator policy",
        };
        tracing::info!(
            "Setting {what} '{}' for pattern '{}' to '{:?}' with priority '{}' for vhost '{}'",
            policy.name,
            policy.pattern,
            policy.definition,
            policy.priority,
            self.name()
        );
        let created = {
            let mut policies = self.policies_of(kind).write();
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
    ///
    /// # Errors
    /// In a cluster, when the cluster does not take the change.
    pub async fn delete_policy(&self, name: &str) -> Result<bool, EngineError> {
        self.delete_policy_of(PolicyKind::User, name).await
    }

    /// Removes an operator policy; false when there was none of that name.
    ///
    /// # Errors
    /// As [`Self::delete_policy`].
    pub async fn delete_operator_policy(&self, name: &str) -> Result<bool, EngineError> {
        self.delete_policy_of(PolicyKind::Operator, name).await
    }

    async fn delete_policy_of(&self, kind: PolicyKind, name: &str) -> Result<bool, EngineError> {
        let Some(cluster) = self.cluster.get() else {
            return Ok(self.clear_policy(kind, name).await);
        };
        if !self.policies_of(kind).read().iter().any(|p| p.name == name) {
            return Ok(false);
        }
        cluster.clear_policy(self.name(), kind, name).await?;
        Ok(true)
    }

    /// Removes a policy of `kind` from this node (a cleared one the cluster committed, or one
    /// of a vhost being deleted); false when there was none.
    pub(crate) async fn clear_policy(&self, kind: PolicyKind, name: &str) -> bool {
        let forgotten = {
            let mut policies = self.policies_of(kind).write();
            let before = policies.len();
            policies.retain(|p| p.name != name);
            // Submitted under the lock, so that the store forgets in the order of the removals.
            (before != policies.len()).then(|| self.store().map(|store| store.forget_policy(kind, self.name(), name)))
        };
        let Some(forgotten) = forgotten else {
            return false;
        };
        match kind {
            PolicyKind::User => tracing::info!("Clearing policy '{name}' on vhost '{}'", self.name()),
            PolicyKind::Operator => tracing::info!("Clearing operator policy '{name}' on vhost '{}'", self.name()),
        }
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

    /// Every operator policy, by name.
    #[must_use]
    pub fn operator_policies(&self) -> Vec<Policy> {
        self.operator_policies.read().clone()
    }

    /// One operator policy.
    #[must_use]
    pub fn operator_policy(&self, name: &str) -> Option<Policy> {
        self.operator_policies.read().iter().find(|p| p.name == name).cloned()
    }

    /// The user policy that applies to `queue`, if any.
    #[must_use]
    pub fn queue_policy(&self, queue: &QueueRef) -> Option<Policy> {
        self.queue_policies(queue).policy
    }

    /// The policy and the operator policy that apply to `queue`.
    #[must_use]
    pub fn queue_policies(&self, queue: &QueueRef) -> AppliedPolicies {
        let (name, queue_type) = (queue.name(), queue.config.queue_type);
        let pick = |kind| effective(self.policies_of(kind).read().iter(), name, queue_type).cloned();
        AppliedPolicies { policy: pick(PolicyKind::User), operator_policy: pick(PolicyKind::Operator) }
    }

    /// A queue's settings: its arguments merged with the definition its policies give it.
    pub(crate) fn settings_for(&self, name: &str, queue_type: QueueType, arguments: &Table) -> QueueSettings {
        let definition = self.policy_definition_for(name, queue_type);
        QueueSettings::resolve(queue_type, arguments, definition.as_ref(), self.dead_letter_guarantee)
    }

    /// The definition queue `name`'s policies give it, both kinds merged.
    pub(super) fn policy_definition_for(&self, name: &str, queue_type: QueueType) -> Option<Table> {
        let policies = self.policies.read();
        let operator_policies = self.operator_policies.read();
        let policy = effective(policies.iter(), name, queue_type);
        let operator_policy = effective(operator_policies.iter(), name, queue_type);
        merge(policy.map(|p| &p.definition), operator_policy.map(|p| &p.definition))
    }

    /// The alternate exchange the policy that applies to exchange `name` gives it (operator
    /// policies cannot set one).
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
