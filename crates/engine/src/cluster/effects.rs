//! How each node's engine follows what the metadata group committed.

use std::sync::Arc;

use super::metadata::{self, MetaCommand, Metadata};
use crate::access::{AccessError, Account, HashingAlgorithm, PasswordHash, Permission, Tags, VhostInfo};
use crate::error::EngineError;
use crate::exchange::{Binding, Destination};
use crate::policy::{Policy, PolicyKind};
use crate::vhost::ExchangeDeclare;

/// Why this node could not follow a committed change.
#[derive(Debug, thiserror::Error)]
enum FollowError {
    #[error(transparent)]
    Access(#[from] AccessError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A record that does not decode or validate here (a newer node's, or a peer's garbage).
    #[error("{0}")]
    Record(String),
}

/// How this node's engine follows the metadata its cluster committed: what a command records
/// or removes is made or removed here too (idempotent: commands applied again at start find
/// them so), and a snapshot given instead of commands is made here record by record.
pub struct Effects {
    broker: std::sync::Weak<crate::Broker>,
}

impl Effects {
    /// The effects on `broker` (weak: the broker owns the cluster that owns these).
    #[must_use]
    pub fn new(broker: &Arc<crate::Broker>) -> Self {
        Self { broker: Arc::downgrade(broker) }
    }

    async fn follow(&self, command: MetaCommand, answer: &[u8]) {
        let Some(broker) = self.broker.upgrade() else {
            return;
        };
        match Self::make(&broker, command, answer).await {
            Ok(()) => {}
            // Another node's declare of the name came first: its proposer answers the 406.
            Err(FollowError::Engine(EngineError::Inequivalent(e))) => tracing::debug!(error = %e, "declare lost"),
            // The cluster has it; this node could not follow (its disk failed, or the vhost or
            // user is not one of this node's): logged, and the next start applies it again.
            Err(e) => tracing::error!(error = %e, "this node could not follow a metadata change"),
        }
    }

    /// Makes `broker` match what `command` changed (answered `answer` by the machine).
    async fn make(broker: &crate::Broker, command: MetaCommand, answer: &[u8]) -> Result<(), FollowError> {
        let vhost = |name: &str| broker.vhost(name).ok_or_else(|| EngineError::VhostNotFound(name.to_owned()));
        match command {
            MetaCommand::SetClusterName(_) => {}
            MetaCommand::PutVhost { name, description, tags } => {
                broker.add_vhost(&name, VhostInfo { description, tags: Tags::new(tags) }).await?;
            }
            // Absent here too (deleted before, or never made on this node): nothing to do.
            MetaCommand::DeleteVhost { name } if answer == metadata::CHANGED => {
                match broker.delete_vhost(&name).await {
                    Err(AccessError::NoSuchVhost(_)) => {}
                    other => other?,
                }
            }
            MetaCommand::DeleteVhost { .. } => {}
            MetaCommand::PutUser { name, password, tags } => {
                let hash = match password {
                    Some((algorithm, encoded)) => {
                        Some(PasswordHash::from_base64(HashingAlgorithm::parse(&algorithm)?, &encoded)?)
                    }
                    None => None,
                };
                broker.access().put_user(Account::new(name, hash, Tags::new(tags))).await?;
            }
            MetaCommand::DeleteUser { name } => match broker.delete_user(&name).await {
                Err(AccessError::NoSuchUser(_)) => {}
                other => other?,
            },
            MetaCommand::ClearPermission { vhost, user } => {
                broker.access().clear_permission(&vhost, &user).await?;
            }
            MetaCommand::SetPermission { vhost, user, configure, write, read } => {
                let permission = Permission::new(&configure, &write, &read)?;
                broker.access().set_permission(&vhost, &user, permission).await?;
            }
            MetaCommand::SetTopicPermission { vhost, user, exchange, write, read } => {
                broker.access().set_topic_permission(&vhost, &user, &exchange, &write, &read).await?;
            }
            MetaCommand::ClearTopicPermissions { vhost, user, exchange } => {
                broker.access().clear_topic_permissions(&vhost, &user, exchange.as_deref()).await?;
            }
            MetaCommand::SetLimit { scope, name, limit, value } => {
                let scope = crate::LimitScope::parse(&scope).ok_or_else(|| FollowError::Record(scope.clone()))?;
                broker.limits().set(scope, &name, &limit, value).await?;
            }
            MetaCommand::ClearLimit { scope, name, limit } => {
                let scope = crate::LimitScope::parse(&scope).ok_or_else(|| FollowError::Record(scope.clone()))?;
                broker.limits().clear(scope, &name, &limit).await?;
            }
            MetaCommand::DeclareExchange { vhost: on, name, record } => {
                let declare = ExchangeDeclare {
                    name,
                    kind: record.kind,
                    passive: false,
                    durable: record.durable,
                    auto_delete: record.auto_delete,
                    internal: record.internal,
                    arguments: record.arguments.decode().map_err(FollowError::Record)?,
                };
                vhost(&on)?.follow_exchange_declare(&declare).await?;
            }
            MetaCommand::DeleteExchange { vhost: on, name } => vhost(&on)?.follow_exchange_delete(&name).await,
            MetaCommand::BindExchange { vhost: on, binding } => {
                let (source, binding) = Self::binding(binding, false)?;
                vhost(&on)?.follow_bind(&source, binding).await?;
            }
            MetaCommand::UnbindExchange { vhost: on, binding } => {
                let (source, binding) = Self::binding(binding, false)?;
                vhost(&on)?.follow_unbind(&source, &binding).await;
            }
            MetaCommand::DeclareQueue { vhost: on, name, record } => {
                let arguments = record.arguments.decode().map_err(FollowError::Record)?;
                vhost(&on)?.follow_queue_declare(&name, &record, arguments).await?;
            }
            MetaCommand::DeleteQueue { vhost: on, name } => vhost(&on)?.follow_queue_delete(&name).await,
            MetaCommand::MoveQueue { vhost: on, name, .. } if answer == metadata::CHANGED => {
                let record = broker.cluster().and_then(|c| c.queue_record(&on, &name));
                if let Some(record) = record {
                    let arguments = record.arguments.decode().map_err(FollowError::Record)?;
                    vhost(&on)?.follow_queue_declare(&name, &record, arguments).await?;
                }
            }
            MetaCommand::SetReplicaMembers { vhost: on, name, .. } if answer == metadata::CHANGED => {
                if let Some(cluster) = broker.cluster() {
                    cluster.follow_replica_members(&on, &name).await;
                }
            }
            MetaCommand::MoveQueue { .. } | MetaCommand::SetReplicaMembers { .. } | MetaCommand::Barrier => {}
            MetaCommand::BindQueue { vhost: on, binding } => {
                let (source, binding) = Self::binding(binding, true)?;
                vhost(&on)?.follow_bind(&source, binding).await?;
            }
            MetaCommand::UnbindQueue { vhost: on, binding } => {
                let (source, binding) = Self::binding(binding, true)?;
                vhost(&on)?.follow_unbind(&source, &binding).await;
            }
            // Read where it is recorded, by the Zaqar gateway (`Cluster::zaqar_metadata`).
            MetaCommand::SetZaqarMetadata { .. } => {}
            MetaCommand::SetPolicy { vhost: on, name, operator, record } => {
                let definition = record.definition.decode().map_err(FollowError::Record)?;
                let (pattern, apply_to, priority) = (&record.pattern, &record.apply_to, record.priority);
                let policy = match operator {
                    true => Policy::operator(&name, pattern, apply_to, priority, definition),
                    false => Policy::new(&name, pattern, apply_to, priority, definition),
                };
                vhost(&on)?.follow_set_policy(policy.map_err(FollowError::Record)?).await?;
            }
            MetaCommand::ClearPolicy { vhost: on, name, operator } => {
                let kind = if operator { PolicyKind::Operator } else { PolicyKind::User };
                vhost(&on)?.clear_policy(kind, &name).await;
            }
            // Read where it is recorded (`Cluster::redrives`); its runner has it in its store.
            MetaCommand::PutRedrive { .. } => {}
            MetaCommand::DeleteRedrive { vhost, id } if answer == metadata::CHANGED => {
                broker.redrives().follow_delete(&vhost, &id).await;
            }
            MetaCommand::DeleteRedrive { .. } => {}
        }
        Ok(())
    }

    /// The binding `record` names (to a queue when `queue`), with its source.
    fn binding(record: metadata::BindingRecord, queue: bool) -> Result<(String, Binding), FollowError> {
        let arguments = record.arguments.decode().map_err(FollowError::Record)?;
        let destination = match queue {
            true => Destination::Queue(record.destination),
            false => Destination::Exchange(record.destination),
        };
        let binding = Binding { destination, key: record.key, arguments };
        Ok((record.source, binding))
    }

    /// Makes this node, which followed `before`, hold `after`: what `before` recorded and
    /// `after` does not is removed, then every record of `after` made.
    async fn restore(&self, before: &[u8], after: &[u8]) {
        let (before, after): (Metadata, Metadata) =
            match (serde_json::from_slice(before), serde_json::from_slice(after)) {
                (Ok(before), Ok(after)) => (before, after),
                (Err(e), _) | (_, Err(e)) => {
                    return tracing::error!(error = %e, "a metadata snapshot this node cannot read");
                }
            };
        let (removals, commands) = (before.removals(&after), after.commands());
        tracing::info!(removed = removals.len(), records = commands.len(), "following a metadata snapshot");
        for command in removals.into_iter().chain(commands) {
            self.follow(command, metadata::CHANGED).await;
        }
        // A proxy this node restored from its own store for a queue the cluster no longer
        // has (deleted while this node was down, in commands the snapshot replaced).
        let Some(broker) = self.broker.upgrade() else { return };
        broker.redrives().follow_records(after.redrives()).await;
        for vhost in broker.vhosts() {
            let recorded = after.queues().get(vhost.name());
            for queue in vhost.queues() {
                if queue.home.is_some() && !recorded.is_some_and(|r| r.contains_key(queue.name())) {
                    vhost.drop_here(&queue).await;
                }
            }
        }
    }
}

impl charon_cluster::Effects for Effects {
    fn apply<'a>(
        &'a self,
        command: &'a [u8],
        answer: &'a [u8],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            if let Ok(command) = serde_json::from_slice::<MetaCommand>(command) {
                self.follow(command, answer).await;
            }
        })
    }

    fn restored<'a>(
        &'a self,
        before: &'a [u8],
        after: &'a [u8],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(self.restore(before, after))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use charon_cluster::{Effects as _, Machine as _};

    use super::*;
    use crate::cluster::metadata::{BindingRecord, EncodedTable, ExchangeRecord, PolicyRecord};

    #[tokio::test]
    async fn a_node_given_a_snapshot_makes_every_record_of_it() {
        let broker = crate::Broker::new(crate::BrokerConfig::default());
        let table = |key: &str, value: i64| {
            let mut table = charon_model::Table::new();
            table.insert(key, charon_model::Value::I64(value));
            EncodedTable::new(&table)
        };
        let exchange = |kind: &str| ExchangeRecord {
            kind: kind.into(),
            durable: true,
            auto_delete: false,
            internal: false,
            arguments: EncodedTable::new(&charon_model::Table::new()),
        };
        let commands = [
            MetaCommand::PutVhost { name: "v".into(), description: "d".into(), tags: vec![] },
            MetaCommand::PutUser { name: "u".into(), password: None, tags: vec!["management".into()] },
            MetaCommand::SetPermission {
                vhost: "v".into(),
                user: "u".into(),
                configure: "^u".into(),
                write: ".*".into(),
                read: ".*".into(),
            },
            MetaCommand::SetTopicPermission {
                vhost: "v".into(),
                user: "u".into(),
                exchange: "amq.topic".into(),
                write: "^a".into(),
                read: ".*".into(),
            },
            MetaCommand::SetLimit { scope: "vhost".into(), name: "v".into(), limit: "max-queues".into(), value: 7 },
            MetaCommand::DeclareExchange { vhost: "v".into(), name: "a".into(), record: exchange("topic") },
            MetaCommand::DeclareExchange { vhost: "v".into(), name: "b".into(), record: exchange("fanout") },
            MetaCommand::BindExchange {
                vhost: "v".into(),
                binding: BindingRecord {
                    source: "a".into(),
                    destination: "b".into(),
                    key: "k".into(),
                    arguments: EncodedTable::new(&charon_model::Table::new()),
                },
            },
            MetaCommand::SetPolicy {
                vhost: "v".into(),
                name: "cap".into(),
                operator: false,
                record: PolicyRecord {
                    pattern: "^q".into(),
                    apply_to: "queues".into(),
                    priority: 3,
                    definition: table("max-length", 10),
                },
            },
        ];
        let mut machine = Metadata::default();
        for (i, command) in commands.iter().enumerate() {
            machine.apply(i as u64, &serde_json::to_vec(command).unwrap());
        }
        let empty = Metadata::default().snapshot();
        Effects::new(&broker).restored(&empty, &machine.snapshot()).await;

        let vhost = broker.vhost("v").unwrap();
        assert_eq!(broker.access().account("u").unwrap().tags().as_slice(), ["management"]);
        let permission = broker.access().permissions().into_iter().find(|(v, u, _)| v == "v" && u == "u");
        assert_eq!(permission.unwrap().2.patterns(), ("^u", ".*", ".*"));
        assert_eq!(broker.access().topic_permissions()[0].3, "^a");
        assert_eq!(broker.limits().get(crate::LimitScope::Vhost, "v")["max-queues"], 7);
        assert_eq!(vhost.exchange("a").unwrap().kind, crate::ExchangeKind::Topic);
        let bound =
            vhost.bindings().into_iter().any(|(s, b)| s == "a" && b.destination == Destination::Exchange("b".into()));
        assert!(bound);
        assert_eq!(vhost.policy("cap").unwrap().priority, 3);
        // Given again (a second snapshot), it changes nothing and refuses nothing.
        Effects::new(&broker).restored(&machine.snapshot(), &machine.snapshot()).await;
        assert_eq!(vhost.bindings().iter().filter(|(s, _)| s == "a").count(), 1);

        // A later snapshot, taken after commands this node missed deleted or changed records:
        // they go here too; what the cluster never recorded (this node's own) stays.
        let mine = crate::vhost::ExchangeDeclare { name: "mine".into(), kind: "direct".into(), ..Default::default() };
        vhost.follow_exchange_declare(&mine).await.unwrap();
        let mut later = machine.clone();
        let missed = [
            MetaCommand::DeleteExchange { vhost: "v".into(), name: "b".into() },
            MetaCommand::DeleteExchange { vhost: "v".into(), name: "a".into() },
            MetaCommand::DeclareExchange { vhost: "v".into(), name: "a".into(), record: exchange("fanout") },
            MetaCommand::ClearPolicy { vhost: "v".into(), name: "cap".into(), operator: false },
            MetaCommand::ClearTopicPermissions { vhost: "v".into(), user: "u".into(), exchange: None },
            MetaCommand::ClearLimit { scope: "vhost".into(), name: "v".into(), limit: "max-queues".into() },
        ];
        for (i, command) in missed.iter().enumerate() {
            later.apply(100 + i as u64, &serde_json::to_vec(command).unwrap());
        }
        Effects::new(&broker).restored(&machine.snapshot(), &later.snapshot()).await;
        assert_eq!(vhost.exchange("a").unwrap().kind, crate::ExchangeKind::Fanout);
        assert!(vhost.exchange("b").is_none() && vhost.exchange("mine").is_some());
        assert!(vhost.bindings().iter().all(|(s, _)| s != "a"));
        assert!(vhost.policy("cap").is_none() && broker.access().topic_permissions().is_empty());
        assert!(broker.limits().get(crate::LimitScope::Vhost, "v").is_empty());
        assert!(broker.access().account("u").is_some());
    }
}
