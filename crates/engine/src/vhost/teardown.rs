//! Deleting a whole vhost: its queues with their messages, its exchanges, its policies and
//! operator policies.

use super::VHost;
use crate::persist::MetaDone;

impl VHost {
    /// Deletes everything the vhost holds, durably: every queue (its messages dropped from
    /// the log after its record, as a queue delete does), every exchange record, every
    /// policy. Connections still open on it can declare and bind nothing more (530, as for a
    /// vhost that does not exist); the broker forgets the vhost itself.
    pub(crate) async fn tear_down(&self) {
        self.mark_deleted();
        // The cluster's records went with the vhost's.
        for queue in self.queues() {
            self.drop_here(&queue).await;
        }
        let forgotten: Vec<MetaDone> = {
            let mut topology = self.topology.write();
            let names: Vec<String> = topology.exchanges.keys().cloned().collect();
            topology.exchanges.clear();
            self.changed();
            match &self.store {
                Some(store) => names.iter().map(|name| store.forget_exchange(&self.name, name)).collect(),
                None => Vec::new(),
            }
        };
        let _ = MetaDone::all(forgotten).await;
        for policy in self.policies() {
            self.clear_policy(crate::policy::PolicyKind::User, &policy.name).await;
        }
        for policy in self.operator_policies() {
            self.clear_policy(crate::policy::PolicyKind::Operator, &policy.name).await;
        }
    }
}
