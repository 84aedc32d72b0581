//! The metadata a cluster replicates: the state machine its metadata group applies.

mod command;
mod records;

pub use command::MetaCommand;
pub use records::{
    BindingRecord, EncodedTable, ExchangeRecord, PermissionRecord, PolicyRecord, QueueRecord, RedriveRecord,
    ReplicaSet, TopicRecord, UserRecord, VhostRecord,
};

use std::collections::{BTreeMap, BTreeSet};

use charon_cluster::{Machine, MachineError};
use serde::{Deserialize, Serialize};

/// What an answer starts with when the command could not be applied (the reason follows).
pub const REFUSED: &str = "!";

/// What [`Metadata::apply`] answers a command that created or removed a record; `0` when it
/// replaced one or found nothing to remove.
pub const CHANGED: &[u8] = b"1";

/// By vhost, then by name.
type PerVhost<T> = BTreeMap<String, BTreeMap<String, T>>;

/// The metadata every node of a cluster applies in the same order: the records of what was
/// made through the cluster. A node's engine follows each command ([`super::Effects`]) and,
/// given a snapshot instead of the commands, these records.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Metadata {
    cluster_name: Option<String>,
    vhosts: BTreeMap<String, VhostRecord>,
    users: BTreeMap<String, UserRecord>,
    /// By vhost, then user.
    permissions: PerVhost<PermissionRecord>,
    /// By vhost, then user, then exchange.
    topic_permissions: PerVhost<BTreeMap<String, TopicRecord>>,
    /// By scope (`vhost`, `user`), then vhost or user name, then limit.
    limits: BTreeMap<String, BTreeMap<String, BTreeMap<String, i64>>>,
    exchanges: PerVhost<ExchangeRecord>,
    bindings: BTreeMap<String, BTreeSet<BindingRecord>>,
    queues: PerVhost<QueueRecord>,
    /// Exchange-to-queue bindings by vhost.
    queue_bindings: BTreeMap<String, BTreeSet<BindingRecord>>,
    policies: PerVhost<PolicyRecord>,
    operator_policies: PerVhost<PolicyRecord>,
    /// Zaqar queue metadata (JSON text) by project, then queue.
    zaqar: PerVhost<String>,
    /// Redrive jobs by vhost, then id.
    redrives: PerVhost<RedriveRecord>,
}

impl Metadata {
    /// The name set for the cluster, if one was.
    #[must_use]
    pub fn cluster_name(&self) -> Option<&str> {
        self.cluster_name.as_deref()
    }

    /// The vhosts made through the cluster.
    #[must_use]
    pub fn vhosts(&self) -> &BTreeMap<String, VhostRecord> {
        &self.vhosts
    }

    /// The users made through the cluster.
    #[must_use]
    pub fn users(&self) -> &BTreeMap<String, UserRecord> {
        &self.users
    }

    /// Permissions by vhost, then user.
    #[must_use]
    pub fn permissions(&self) -> &PerVhost<PermissionRecord> {
        &self.permissions
    }

    /// Topic permissions by vhost, then user, then exchange.
    #[must_use]
    pub fn topic_permissions(&self) -> &PerVhost<BTreeMap<String, TopicRecord>> {
        &self.topic_permissions
    }

    /// Limits by scope, then name, then limit.
    #[must_use]
    pub fn limits(&self) -> &BTreeMap<String, BTreeMap<String, BTreeMap<String, i64>>> {
        &self.limits
    }

    /// Exchanges by vhost, then name.
    #[must_use]
    pub fn exchanges(&self) -> &PerVhost<ExchangeRecord> {
        &self.exchanges
    }

    /// Exchange-to-exchange bindings by vhost.
    #[must_use]
    pub fn bindings(&self) -> &BTreeMap<String, BTreeSet<BindingRecord>> {
        &self.bindings
    }

    /// Queues by vhost, then name.
    #[must_use]
    pub fn queues(&self) -> &PerVhost<QueueRecord> {
        &self.queues
    }

    /// Zaqar's queue metadata (JSON text) by project, then queue.
    #[must_use]
    pub fn zaqar_metadata(&self) -> &PerVhost<String> {
        &self.zaqar
    }

    /// Redrive jobs by vhost, then id.
    #[must_use]
    pub fn redrives(&self) -> &PerVhost<RedriveRecord> {
        &self.redrives
    }

    /// Policies (`operator` false) or operator policies by vhost, then name.
    #[must_use]
    pub fn policies(&self, operator: bool) -> &PerVhost<PolicyRecord> {
        if operator { &self.operator_policies } else { &self.policies }
    }

    /// The commands that make these records, in an order that applies (vhosts and users
    /// before what names them, exchanges before their bindings): what a node given a
    /// snapshot follows.
    #[must_use]
    pub fn commands(&self) -> Vec<MetaCommand> {
        let mut commands: Vec<MetaCommand> =
            self.cluster_name.iter().cloned().map(MetaCommand::SetClusterName).collect();
        for (name, record) in &self.vhosts {
            let (description, tags) = (record.description.clone(), record.tags.clone());
            commands.push(MetaCommand::PutVhost { name: name.clone(), description, tags });
        }
        for (name, record) in &self.users {
            let (password, tags) = (record.password.clone(), record.tags.clone());
            commands.push(MetaCommand::PutUser { name: name.clone(), password, tags });
        }
        for (vhost, users) in &self.permissions {
            for (user, p) in users {
                let (vhost, user) = (vhost.clone(), user.clone());
                let (configure, write, read) = (p.configure.clone(), p.write.clone(), p.read.clone());
                commands.push(MetaCommand::SetPermission { vhost, user, configure, write, read });
            }
        }
        for (vhost, users) in &self.topic_permissions {
            for (user, exchanges) in users {
                for (exchange, t) in exchanges {
                    let (vhost, user, exchange) = (vhost.clone(), user.clone(), exchange.clone());
                    let (write, read) = (t.write.clone(), t.read.clone());
                    commands.push(MetaCommand::SetTopicPermission { vhost, user, exchange, write, read });
                }
            }
        }
        for (scope, names) in &self.limits {
            for (name, limits) in names {
                for (limit, value) in limits {
                    let (scope, name, limit, value) = (scope.clone(), name.clone(), limit.clone(), *value);
                    commands.push(MetaCommand::SetLimit { scope, name, limit, value });
                }
            }
        }
        for (vhost, exchanges) in &self.exchanges {
            for (name, record) in exchanges {
                let (vhost, name, record) = (vhost.clone(), name.clone(), record.clone());
                commands.push(MetaCommand::DeclareExchange { vhost, name, record });
            }
        }
        for (vhost, bindings) in &self.bindings {
            for binding in bindings {
                commands.push(MetaCommand::BindExchange { vhost: vhost.clone(), binding: binding.clone() });
            }
        }
        for (vhost, queues) in &self.queues {
            for (name, record) in queues {
                let (vhost, name, record) = (vhost.clone(), name.clone(), record.clone());
                commands.push(MetaCommand::DeclareQueue { vhost, name, record });
            }
        }
        for (vhost, bindings) in &self.queue_bindings {
            for binding in bindings {
                commands.push(MetaCommand::BindQueue { vhost: vhost.clone(), binding: binding.clone() });
            }
        }
        for operator in [false, true] {
            for (vhost, policies) in self.policies(operator) {
                for (name, record) in policies {
                    let (vhost, name, record) = (vhost.clone(), name.clone(), record.clone());
                    commands.push(MetaCommand::SetPolicy { vhost, name, operator, record });
                }
            }
        }
        for (project, queues) in &self.zaqar {
            for (queue, text) in queues {
                let (project, queue, metadata) = (project.clone(), queue.clone(), Some(text.clone()));
                commands.push(MetaCommand::SetZaqarMetadata { project, queue, metadata });
            }
        }
        for (vhost, jobs) in &self.redrives {
            for (id, record) in jobs {
                let (vhost, id, record) = (vhost.clone(), id.clone(), record.clone());
                commands.push(MetaCommand::PutRedrive { vhost, id, record });
            }
        }
        commands
    }

    /// The commands that remove what `self` records and `now` does not (a node that was given
    /// `now` as a snapshot missed them), and the exchanges `now` records otherwise (deleted and
    /// declared again: a declare does not replace one): applied before [`Self::commands`] of
    /// `now`, they make a node that held `self` hold `now`. What `self` never recorded (a
    /// node's own, made before it clustered) is left alone.
    #[must_use]
    pub fn removals(&self, now: &Self) -> Vec<MetaCommand> {
        let mut commands = Vec::new();
        for name in self.vhosts.keys().filter(|name| !now.vhosts.contains_key(*name)) {
            commands.push(MetaCommand::DeleteVhost { name: name.clone() });
        }
        for name in self.users.keys().filter(|name| !now.users.contains_key(*name)) {
            commands.push(MetaCommand::DeleteUser { name: name.clone() });
        }
        for (vhost, users) in &self.permissions {
            for user in users.keys().filter(|user| gone(vhost, user, &now.permissions)) {
                commands.push(MetaCommand::ClearPermission { vhost: vhost.clone(), user: user.clone() });
            }
        }
        for (vhost, users) in &self.topic_permissions {
            for (user, exchanges) in users {
                let kept = now.topic_permissions.get(vhost).and_then(|u| u.get(user));
                for exchange in exchanges.keys().filter(|x| !kept.is_some_and(|k| k.contains_key(*x))) {
                    let (vhost, user, exchange) = (vhost.clone(), user.clone(), Some(exchange.clone()));
                    commands.push(MetaCommand::ClearTopicPermissions { vhost, user, exchange });
                }
            }
        }
        for (scope, names) in &self.limits {
            for (name, limits) in names {
                let kept = now.limits.get(scope).and_then(|n| n.get(name));
                for limit in limits.keys().filter(|l| !kept.is_some_and(|k| k.contains_key(*l))) {
                    let (scope, name, limit) = (scope.clone(), name.clone(), limit.clone());
                    commands.push(MetaCommand::ClearLimit { scope, name, limit });
                }
            }
        }
        for (vhost, bindings) in &self.bindings {
            let kept = now.bindings.get(vhost);
            for binding in bindings.iter().filter(|b| !kept.is_some_and(|k| k.contains(*b))) {
                commands.push(MetaCommand::UnbindExchange { vhost: vhost.clone(), binding: binding.clone() });
            }
        }
        for (vhost, bindings) in &self.queue_bindings {
            let kept = now.queue_bindings.get(vhost);
            for binding in bindings.iter().filter(|b| !kept.is_some_and(|k| k.contains(*b))) {
                commands.push(MetaCommand::UnbindQueue { vhost: vhost.clone(), binding: binding.clone() });
            }
        }
        for (vhost, queues) in &self.queues {
            for (name, record) in queues {
                // A replicated queue that only moved is the same queue (its declare follows).
                let moved = |later: &QueueRecord| {
                    later.replicas.is_some() && QueueRecord { home: later.home.clone(), ..record.clone() } == *later
                };
                let later = now.queues.get(vhost).and_then(|q| q.get(name));
                if later != Some(record) && !later.is_some_and(moved) {
                    commands.push(MetaCommand::DeleteQueue { vhost: vhost.clone(), name: name.clone() });
                }
            }
        }
        for (vhost, exchanges) in &self.exchanges {
            for (name, record) in exchanges {
                if now.exchanges.get(vhost).and_then(|x| x.get(name)) != Some(record) {
                    commands.push(MetaCommand::DeleteExchange { vhost: vhost.clone(), name: name.clone() });
                }
            }
        }
        for operator in [false, true] {
            for (vhost, policies) in self.policies(operator) {
                for name in policies.keys().filter(|name| gone(vhost, name, now.policies(operator))) {
                    commands.push(MetaCommand::ClearPolicy { vhost: vhost.clone(), name: name.clone(), operator });
                }
            }
        }
        for (project, queues) in &self.zaqar {
            for queue in queues.keys().filter(|queue| gone(project, queue, &now.zaqar)) {
                let (project, queue) = (project.clone(), queue.clone());
                commands.push(MetaCommand::SetZaqarMetadata { project, queue, metadata: None });
            }
        }
        for (vhost, jobs) in &self.redrives {
            for id in jobs.keys().filter(|id| gone(vhost, id, &now.redrives)) {
                commands.push(MetaCommand::DeleteRedrive { vhost: vhost.clone(), id: id.clone() });
            }
        }
        commands
    }

    /// Records `command`; whether it created or removed a record.
    fn record(&mut self, command: MetaCommand) -> bool {
        match command {
            MetaCommand::SetClusterName(name) => self.cluster_name.replace(name).is_none(),
            MetaCommand::PutVhost { name, description, tags } => {
                self.vhosts.insert(name, VhostRecord { description, tags }).is_none()
            }
            MetaCommand::DeleteVhost { name } => {
                self.permissions.remove(&name);
                self.topic_permissions.remove(&name);
                self.exchanges.remove(&name);
                self.bindings.remove(&name);
                self.queues.remove(&name);
                self.queue_bindings.remove(&name);
                self.policies.remove(&name);
                self.operator_policies.remove(&name);
                self.zaqar.remove(&name);
                remove_limits(&mut self.limits, "vhost", &name);
                self.vhosts.remove(&name).is_some()
            }
            MetaCommand::PutUser { name, password, tags } => {
                self.users.insert(name, UserRecord { password, tags }).is_none()
            }
            MetaCommand::DeleteUser { name } => {
                for vhost in self.permissions.keys().cloned().collect::<Vec<_>>() {
                    remove_in(&mut self.permissions, &vhost, &name);
                }
                for vhost in self.topic_permissions.keys().cloned().collect::<Vec<_>>() {
                    remove_in(&mut self.topic_permissions, &vhost, &name);
                }
                remove_limits(&mut self.limits, "user", &name);
                self.users.remove(&name).is_some()
            }
            MetaCommand::SetPermission { vhost, user, configure, write, read } => {
                let record = PermissionRecord { configure, write, read };
                self.permissions.entry(vhost).or_default().insert(user, record).is_none()
            }
            MetaCommand::ClearPermission { vhost, user } => remove_in(&mut self.permissions, &vhost, &user),
            MetaCommand::SetTopicPermission { vhost, user, exchange, write, read } => {
                let by_exchange = self.topic_permissions.entry(vhost).or_default().entry(user).or_default();
                by_exchange.insert(exchange, TopicRecord { write, read }).is_none()
            }
            MetaCommand::ClearTopicPermissions { vhost, user, exchange: None } => {
                remove_in(&mut self.topic_permissions, &vhost, &user)
            }
            MetaCommand::ClearTopicPermissions { vhost, user, exchange: Some(exchange) } => {
                let Some(by_exchange) = self.topic_permissions.get_mut(&vhost).and_then(|u| u.get_mut(&user)) else {
                    return false;
                };
                let removed = by_exchange.remove(&exchange).is_some();
                if by_exchange.is_empty() {
                    remove_in(&mut self.topic_permissions, &vhost, &user);
                }
                removed
            }
            MetaCommand::SetLimit { scope, name, limit, value } => {
                self.limits.entry(scope).or_default().entry(name).or_default().insert(limit, value).is_none()
            }
            MetaCommand::ClearLimit { scope, name, limit } => {
                let Some(set) = self.limits.get_mut(&scope).and_then(|names| names.get_mut(&name)) else {
                    return false;
                };
                let removed = set.remove(&limit).is_some();
                if set.is_empty() {
                    remove_limits(&mut self.limits, &scope, &name);
                }
                removed
            }
            MetaCommand::DeclareExchange { vhost, name, record } => {
                let exchanges = self.exchanges.entry(vhost).or_default();
                // The first declare wins; a later inequivalent one is refused by every node's
                // engine alike, as it finds the first.
                !exchanges.contains_key(&name) && exchanges.insert(name, record).is_none()
            }
            MetaCommand::DeleteExchange { vhost, name } => self.delete_exchange(&vhost, &name),
            MetaCommand::BindExchange { vhost, binding } => self.bindings.entry(vhost).or_default().insert(binding),
            MetaCommand::UnbindExchange { vhost, binding } => {
                let removed = self.bindings.get_mut(&vhost).is_some_and(|set| set.remove(&binding));
                if removed {
                    self.collect_auto_deleted(&vhost, &binding.source);
                }
                removed
            }
            MetaCommand::DeclareQueue { vhost, name, record } => {
                let queues = self.queues.entry(vhost).or_default();
                // As for exchanges: the first declare wins.
                !queues.contains_key(&name) && queues.insert(name, record).is_none()
            }
            MetaCommand::DeleteQueue { vhost, name } => self.delete_queue(&vhost, &name),
            MetaCommand::MoveQueue { vhost, name, home } => {
                let record = self.queues.get_mut(&vhost).and_then(|q| q.get_mut(&name));
                match record {
                    Some(record)
                        if record.home != home
                            && record.replicas.as_ref().is_some_and(|r| r.members.contains(&home)) =>
                    {
                        record.home = home;
                        true
                    }
                    _ => false,
                }
            }
            MetaCommand::SetReplicaMembers { vhost, name, members } => {
                let record = self.queues.get_mut(&vhost).and_then(|q| q.get_mut(&name));
                match record.and_then(|r| r.replicas.as_mut().map(|replicas| (replicas, &r.home))) {
                    Some((replicas, home)) if members.contains(home) && replicas.members != members => {
                        replicas.members = members;
                        true
                    }
                    _ => false,
                }
            }
            MetaCommand::Barrier => false,
            MetaCommand::BindQueue { vhost, binding } => {
                let exists = self.queues.get(&vhost).is_some_and(|q| q.contains_key(&binding.destination));
                exists && self.queue_bindings.entry(vhost).or_default().insert(binding)
            }
            MetaCommand::UnbindQueue { vhost, binding } => {
                let removed = self.queue_bindings.get_mut(&vhost).is_some_and(|set| set.remove(&binding));
                if removed {
                    self.collect_auto_deleted(&vhost, &binding.source);
                }
                removed
            }
            MetaCommand::SetPolicy { vhost, name, operator, record } => {
                let policies = if operator { &mut self.operator_policies } else { &mut self.policies };
                policies.entry(vhost).or_default().insert(name, record).is_none()
            }
            MetaCommand::SetZaqarMetadata { project, queue, metadata: Some(text) } => {
                self.zaqar.entry(project).or_default().insert(queue, text).is_none()
            }
            MetaCommand::SetZaqarMetadata { project, queue, metadata: None } => {
                remove_in(&mut self.zaqar, &project, &queue)
            }
            MetaCommand::ClearPolicy { vhost, name, operator } => {
                remove_in(if operator { &mut self.operator_policies } else { &mut self.policies }, &vhost, &name)
            }
            MetaCommand::PutRedrive { vhost, id, record } => {
                match self.redrives.get_mut(&vhost).and_then(|jobs| jobs.get_mut(&id)) {
                    // A write the runner made before the recorded one, overtaken on its way.
                    Some(recorded) if recorded.seq >= record.seq => false,
                    Some(recorded) => {
                        *recorded = record;
                        false
                    }
                    // Only a job's first write makes its record: a later one of a job since
                    // deleted was on its way when the delete overtook it.
                    None => record.seq == 1 && self.redrives.entry(vhost).or_default().insert(id, record).is_none(),
                }
            }
            MetaCommand::DeleteRedrive { vhost, id } => remove_in(&mut self.redrives, &vhost, &id),
        }
    }

    /// Removes a queue with the bindings to it, and the auto-delete exchanges that lost their
    /// last binding with it.
    fn delete_queue(&mut self, vhost: &str, name: &str) -> bool {
        let removed = self.queues.get_mut(vhost).is_some_and(|q| q.remove(name).is_some());
        let mut sources = BTreeSet::new();
        if let Some(bindings) = self.queue_bindings.get_mut(vhost) {
            bindings.retain(|b| {
                let to_it = b.destination == name;
                if to_it {
                    sources.insert(b.source.clone());
                }
                !to_it
            });
        }
        for source in sources {
            self.collect_auto_deleted(vhost, &source);
        }
        removed
    }

    /// Removes an exchange with the bindings from and to it, and the auto-delete exchanges
    /// that lost their last binding with it (as every node's topology does).
    fn delete_exchange(&mut self, vhost: &str, name: &str) -> bool {
        let removed = self.exchanges.get_mut(vhost).is_some_and(|x| x.remove(name).is_some());
        if let Some(bindings) = self.queue_bindings.get_mut(vhost) {
            bindings.retain(|b| b.source != name);
        }
        let Some(bindings) = self.bindings.get_mut(vhost) else {
            return removed;
        };
        let mut sources = BTreeSet::new();
        bindings.retain(|b| {
            if b.destination == name && b.source != name {
                sources.insert(b.source.clone());
            }
            b.source != name && b.destination != name
        });
        for source in sources {
            self.collect_auto_deleted(vhost, &source);
        }
        removed
    }

    fn collect_auto_deleted(&mut self, vhost: &str, source: &str) {
        let auto_delete = self.exchanges.get(vhost).and_then(|x| x.get(source)).is_some_and(|x| x.auto_delete);
        let from =
            |set: Option<&BTreeSet<BindingRecord>>| set.is_some_and(|set| set.iter().any(|b| b.source == source));
        let bound = from(self.bindings.get(vhost)) || from(self.queue_bindings.get(vhost));
        if auto_delete && !bound {
            self.delete_exchange(vhost, source);
        }
    }
}

/// Whether `map` has no `name` in `vhost`.
fn gone<T>(vhost: &str, name: &str, map: &PerVhost<T>) -> bool {
    !map.get(vhost).is_some_and(|m| m.contains_key(name))
}

/// Removes `key` from the map of `outer`, and that map when it is left empty; whether it was there.
fn remove_in<T>(map: &mut BTreeMap<String, BTreeMap<String, T>>, outer: &str, key: &str) -> bool {
    let Some(inner) = map.get_mut(outer) else {
        return false;
    };
    let removed = inner.remove(key).is_some();
    if inner.is_empty() {
        map.remove(outer);
    }
    removed
}

fn remove_limits(limits: &mut BTreeMap<String, BTreeMap<String, BTreeMap<String, i64>>>, scope: &str, name: &str) {
    remove_in(limits, scope, name);
}

impl Machine for Metadata {
    /// Answers [`CHANGED`] for a command that created or removed a record, `0` for one that
    /// replaced one or found nothing to remove, or the text of why the bytes are no command
    /// (a newer node's, which this one cannot apply; every node skips it alike).
    fn apply(&mut self, _index: u64, command: &[u8]) -> Vec<u8> {
        match serde_json::from_slice(command) {
            Ok(command) => {
                if self.record(command) {
                    CHANGED.to_vec()
                } else {
                    b"0".to_vec()
                }
            }
            Err(e) => format!("{REFUSED}not a metadata command: {e}").into_bytes(),
        }
    }

    fn snapshot(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), MachineError> {
        *self = serde_json::from_slice(snapshot).map_err(|e| MachineError(e.to_string()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(command: &MetaCommand) -> Vec<u8> {
        serde_json::to_vec(command).unwrap()
    }

    #[test]
    fn machines_given_the_same_commands_agree_and_a_snapshot_restores_the_state() {
        let commands = [
            encoded(&MetaCommand::SetClusterName("a".into())),
            b"{not json".to_vec(),
            encoded(&MetaCommand::SetClusterName("prod".into())),
        ];
        let (mut one, mut two) = (Metadata::default(), Metadata::default());
        let answers: Vec<(Vec<u8>, Vec<u8>)> =
            commands.iter().enumerate().map(|(i, c)| (one.apply(i as u64, c), two.apply(i as u64, c))).collect();
        assert!(answers.iter().all(|(a, b)| a == b));
        assert!(String::from_utf8_lossy(&answers[1].0).starts_with("!not a metadata command"));
        assert_eq!((one.cluster_name(), &one), (Some("prod"), &two));
        let mut restored = Metadata::default();
        restored.restore(&one.snapshot()).unwrap();
        assert_eq!(restored, one);
        assert!(restored.restore(br#"{"vhosts": 3}"#).is_err());
        assert_eq!(restored, one);
    }

    #[test]
    fn vhosts_answer_whether_they_changed() {
        let mut meta = Metadata::default();
        let put = |name: &str, description: &str| {
            encoded(&MetaCommand::PutVhost { name: name.into(), description: description.into(), tags: vec![] })
        };
        assert_eq!(meta.apply(1, &put("v", "a")), CHANGED);
        assert_eq!(meta.apply(2, &put("v", "b")), b"0");
        assert_eq!(meta.vhosts()["v"].description, "b");
        let delete = encoded(&MetaCommand::DeleteVhost { name: "v".into() });
        assert_eq!((meta.apply(3, &delete), meta.apply(4, &delete)), (CHANGED.to_vec(), b"0".to_vec()));
        assert!(meta.vhosts().is_empty());
    }

    fn exchange(auto_delete: bool) -> ExchangeRecord {
        let mut arguments = charon_model::Table::new();
        arguments.insert("alternate-exchange", charon_model::Value::long_str("ae"));
        ExchangeRecord {
            kind: "topic".into(),
            durable: true,
            auto_delete,
            internal: false,
            arguments: EncodedTable::new(&arguments),
        }
    }

    fn binding(source: &str, destination: &str) -> BindingRecord {
        BindingRecord {
            source: source.into(),
            destination: destination.into(),
            key: "k.#".into(),
            arguments: EncodedTable::new(&charon_model::Table::new()),
        }
    }

    fn apply_all(meta: &mut Metadata, commands: &[MetaCommand]) -> Vec<Vec<u8>> {
        commands.iter().enumerate().map(|(i, c)| meta.apply(i as u64, &encoded(c))).collect()
    }

    #[test]
    fn a_deleted_exchange_takes_its_bindings_and_the_auto_delete_sources_it_left_unbound() {
        let declare = |name: &str, auto_delete: bool| MetaCommand::DeclareExchange {
            vhost: "/".into(),
            name: name.into(),
            record: exchange(auto_delete),
        };
        let bind = |s: &str, d: &str| MetaCommand::BindExchange { vhost: "/".into(), binding: binding(s, d) };
        let mut meta = Metadata::default();
        let answers = apply_all(
            &mut meta,
            &[
                declare("a", true),
                declare("a", false),
                declare("b", false),
                declare("c", true),
                bind("a", "b"),
                bind("a", "b"),
                bind("c", "b"),
                bind("c", "a"),
            ],
        );
        // The first declare wins; a binding is recorded once.
        let expected: Vec<&[u8]> = vec![CHANGED, b"0", CHANGED, CHANGED, CHANGED, b"0", CHANGED, CHANGED];
        assert_eq!(answers, expected);
        assert!(meta.exchanges()["/"]["a"].auto_delete);
        // Deleting `b` unbinds `a` (still bound to nothing: auto-deleted, taking `c -> a`, so
        // `c` goes too).
        assert_eq!(
            meta.apply(9, &encoded(&MetaCommand::DeleteExchange { vhost: "/".into(), name: "b".into() })),
            CHANGED
        );
        assert!(meta.exchanges()["/"].is_empty(), "{meta:?}");
        assert!(meta.bindings()["/"].is_empty());
        // An auto-delete source goes with its last binding.
        apply_all(&mut meta, &[declare("x", true), declare("y", false), bind("x", "y"), bind("x", "x")]);
        let unbind = |s: &str, d: &str| MetaCommand::UnbindExchange { vhost: "/".into(), binding: binding(s, d) };
        assert_eq!(meta.apply(20, &encoded(&unbind("x", "y"))), CHANGED);
        assert!(meta.exchanges()["/"].contains_key("x"));
        assert_eq!(meta.apply(21, &encoded(&unbind("x", "x"))), CHANGED);
        assert_eq!(meta.exchanges()["/"].keys().collect::<Vec<_>>(), ["y"]);
        assert_eq!(meta.apply(22, &encoded(&unbind("x", "x"))), b"0");
    }

    #[test]
    fn deleting_a_vhost_or_a_user_removes_what_names_it() {
        let mut meta = Metadata::default();
        let record = PolicyRecord {
            pattern: "^q".into(),
            apply_to: "queues".into(),
            priority: 1,
            definition: EncodedTable::new(&charon_model::Table::new()),
        };
        apply_all(
            &mut meta,
            &[
                MetaCommand::PutVhost { name: "v".into(), description: String::new(), tags: vec![] },
                MetaCommand::PutUser { name: "u".into(), password: None, tags: vec![] },
                MetaCommand::SetPermission {
                    vhost: "v".into(),
                    user: "u".into(),
                    configure: ".*".into(),
                    write: ".*".into(),
                    read: ".*".into(),
                },
                MetaCommand::SetTopicPermission {
                    vhost: "w".into(),
                    user: "u".into(),
                    exchange: "amq.topic".into(),
                    write: "^a".into(),
                    read: ".*".into(),
                },
                MetaCommand::SetLimit {
                    scope: "user".into(),
                    name: "u".into(),
                    limit: "max-channels".into(),
                    value: 3,
                },
                MetaCommand::SetLimit { scope: "vhost".into(), name: "v".into(), limit: "max-queues".into(), value: 9 },
                MetaCommand::DeclareExchange { vhost: "v".into(), name: "x".into(), record: exchange(false) },
                MetaCommand::SetPolicy { vhost: "v".into(), name: "p".into(), operator: true, record },
            ],
        );
        assert_eq!(meta.policies(true)["v"]["p"].priority, 1);
        assert_eq!(meta.apply(10, &encoded(&MetaCommand::DeleteUser { name: "u".into() })), CHANGED);
        assert!(meta.permissions().is_empty() && meta.topic_permissions().is_empty());
        assert_eq!(meta.limits().keys().collect::<Vec<_>>(), ["vhost"]);
        assert_eq!(meta.apply(11, &encoded(&MetaCommand::DeleteVhost { name: "v".into() })), CHANGED);
        assert_eq!(meta, Metadata::default());
    }

    #[test]
    fn the_commands_of_the_records_rebuild_them() {
        let mut meta = Metadata::default();
        let record = PolicyRecord {
            pattern: "^q".into(),
            apply_to: "all".into(),
            priority: -2,
            definition: EncodedTable::new(&charon_model::Table::new()),
        };
        apply_all(
            &mut meta,
            &[
                MetaCommand::SetClusterName("c".into()),
                MetaCommand::PutVhost { name: "v".into(), description: "d".into(), tags: vec!["t".into()] },
                MetaCommand::PutUser {
                    name: "u".into(),
                    password: Some(("sha256".into(), "AAAA".into())),
                    tags: vec![],
                },
                MetaCommand::SetPermission {
                    vhost: "v".into(),
                    user: "u".into(),
                    configure: "c".into(),
                    write: "w".into(),
                    read: "r".into(),
                },
                MetaCommand::SetTopicPermission {
                    vhost: "v".into(),
                    user: "u".into(),
                    exchange: "t".into(),
                    write: "w".into(),
                    read: "r".into(),
                },
                MetaCommand::SetLimit { scope: "vhost".into(), name: "v".into(), limit: "max-queues".into(), value: 2 },
                MetaCommand::DeclareExchange { vhost: "v".into(), name: "a".into(), record: exchange(false) },
                MetaCommand::DeclareExchange { vhost: "v".into(), name: "b".into(), record: exchange(true) },
                MetaCommand::BindExchange { vhost: "v".into(), binding: binding("b", "a") },
                MetaCommand::SetPolicy { vhost: "v".into(), name: "p".into(), operator: false, record: record.clone() },
                MetaCommand::SetPolicy { vhost: "v".into(), name: "o".into(), operator: true, record },
            ],
        );
        let mut rebuilt = Metadata::default();
        apply_all(&mut rebuilt, &meta.commands());
        assert_eq!(rebuilt, meta);
        assert_eq!(meta.commands().len(), 11);
        assert_eq!(
            meta.exchanges()["v"]["a"].arguments.decode().unwrap().get("alternate-exchange").and_then(|v| v.as_str()),
            Some("ae")
        );
        // A table that is no table is refused, not a panic.
        for garbage in [r#""AAAA""#, r#""!""#, r#""AAAAAQ==""#] {
            let table: EncodedTable = serde_json::from_str(garbage).unwrap();
            assert!(table.decode().is_err(), "{garbage}");
        }
    }
    fn queue(home: &str) -> QueueRecord {
        QueueRecord {
            home: home.into(),
            durable: true,
            auto_delete: false,
            arguments: EncodedTable::new(&charon_model::Table::new()),
            owner: None,
            boot: 9,
            replicas: None,
        }
    }

    #[test]
    fn queues_and_their_bindings_cascade_and_a_later_snapshot_removes_what_it_lacks() {
        let mut meta = Metadata::default();
        let apply = |meta: &mut Metadata, command: MetaCommand| meta.apply(0, &encoded(&command));
        let declare = |name: &str, home: &str| MetaCommand::DeclareQueue {
            vhost: "/".into(),
            name: name.into(),
            record: queue(home),
        };
        assert_eq!(apply(&mut meta, declare("q", "n1")), CHANGED);
        // The first declare wins: a second one, from another node, records nothing.
        assert_eq!(apply(&mut meta, declare("q", "n2")), b"0");
        assert_eq!(meta.queues()["/"]["q"].home, "n1");
        let mut auto = exchange(true);
        auto.arguments = EncodedTable::new(&charon_model::Table::new());
        apply(&mut meta, MetaCommand::DeclareExchange { vhost: "/".into(), name: "auto".into(), record: auto });
        // A binding to a queue the cluster does not have is not recorded.
        let to = |queue: &str| MetaCommand::BindQueue { vhost: "/".into(), binding: binding("auto", queue) };
        assert_eq!(apply(&mut meta, to("nowhere")), b"0");
        assert_eq!(apply(&mut meta, to("q")), CHANGED);
        let before = meta.clone();
        assert!(before.commands().contains(&to("q")));

        // The queue goes with its binding, and the auto-delete exchange with its last binding.
        assert_eq!(apply(&mut meta, MetaCommand::DeleteQueue { vhost: "/".into(), name: "q".into() }), CHANGED);
        assert!(meta.queues().get("/").is_none_or(BTreeMap::is_empty));
        assert!(meta.exchanges().get("/").is_none_or(|x| !x.contains_key("auto")));
        // A node that held `before` and is given `meta` removes the binding, then the queue.
        let removals = before.removals(&meta);
        let unbind = MetaCommand::UnbindQueue { vhost: "/".into(), binding: binding("auto", "q") };
        let delete = MetaCommand::DeleteQueue { vhost: "/".into(), name: "q".into() };
        let at = |c: &MetaCommand| removals.iter().position(|r| r == c).unwrap();
        assert!(at(&unbind) < at(&delete), "{removals:?}");

        // Zaqar's metadata: set, replaced, in the snapshot's commands, removed when missed.
        let zaqar = |text: Option<&str>| MetaCommand::SetZaqarMetadata {
            project: "/".into(),
            queue: "zq".into(),
            metadata: text.map(str::to_owned),
        };
        let unset = meta.clone();
        assert_eq!(apply(&mut meta, zaqar(Some(r#"{"a":1}"#))), CHANGED);
        assert_eq!(apply(&mut meta, zaqar(Some(r#"{"a":2}"#))), b"0");
        assert_eq!(meta.zaqar_metadata()["/"]["zq"], r#"{"a":2}"#);
        assert!(meta.commands().contains(&zaqar(Some(r#"{"a":2}"#))));
        assert!(meta.removals(&unset).contains(&zaqar(None)));

        // Redrive jobs: made by their first write only, kept at their runner's latest write
        // (an earlier one that arrives late changes nothing), deleted, and not made again by a
        // write that was on its way when the delete overtook it.
        let job = |seq: u64, text: &str| MetaCommand::PutRedrive {
            vhost: "/".into(),
            id: "j1".into(),
            record: RedriveRecord { runner: "n2".into(), seq, job: text.into() },
        };
        let before_jobs = meta.clone();
        assert_eq!(apply(&mut meta, job(2, "late")), b"0");
        assert!(meta.redrives().is_empty());
        assert_eq!(apply(&mut meta, job(1, "created")), CHANGED);
        assert_eq!(apply(&mut meta, job(3, "third")), b"0");
        assert_eq!(apply(&mut meta, job(2, "second")), b"0");
        assert_eq!((meta.redrives()["/"]["j1"].seq, meta.redrives()["/"]["j1"].job.as_str()), (3, "third"));
        assert!(meta.commands().contains(&job(3, "third")));
        assert!(
            meta.removals(&before_jobs).contains(&MetaCommand::DeleteRedrive { vhost: "/".into(), id: "j1".into() })
        );
        let delete_job = MetaCommand::DeleteRedrive { vhost: "/".into(), id: "j1".into() };
        assert_eq!(apply(&mut meta, delete_job.clone()), CHANGED);
        assert_eq!((apply(&mut meta, job(4, "stale")), apply(&mut meta, delete_job)), (b"0".to_vec(), b"0".to_vec()));
        assert_eq!(meta, before_jobs);

        // Deleting the vhost takes its queues and their bindings (and Zaqar's metadata).
        apply(&mut meta, declare("q2", "n1"));
        apply(&mut meta, MetaCommand::DeleteVhost { name: "/".into() });
        assert!(meta.queues().is_empty() && meta.zaqar_metadata().is_empty() && meta.commands().is_empty());
    }
}
