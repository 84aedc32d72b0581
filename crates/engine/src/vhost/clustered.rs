//! A vhost's queues in a cluster: declared, bound and deleted through the cluster; its home
//! node (the declaring one) makes it, every other node a proxy for it
//! (`crate::cluster::queues`). An exclusive queue lives with its connection, on its node.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use charon_model::Table;
use charon_store::meta::StoredQueue;

use super::{Created, DeclareOk, Declarer, QueueDeclare, VHost};
use crate::cluster::metadata::{QueueRecord, ReplicaSet};
use crate::error::EngineError;
use crate::exchange::Destination;
use crate::queue::args;
use crate::queue::{QueueConfig, QueueRef};

/// The owner a proxy gives an exclusive queue of another node: no connection of this node.
const OTHER_NODES_CONNECTION: u64 = u64::MAX;

impl VHost {
    /// Declares the queue `config` describes through the cluster; answered once this node
    /// made it (or its proxy), as checked against another node's declare of the name that
    /// came first.
    pub(super) async fn declare_through_cluster(&self, config: &QueueConfig) -> Result<DeclareOk, EngineError> {
        let Some(cluster) = self.cluster.get() else {
            return Err(EngineError::Store(format!("failed to declare {}", config_resource(config))));
        };
        let home = self.home_for(cluster, config);
        let group_size = self.initial_group_size(config);
        let created = cluster.declare_queue(&self.name, &config.name, config, (home, group_size)).await?;
        let Some(queue) = self.topology.read().queues.get(&config.name).cloned() else {
            return Err(EngineError::Store(format!("failed to declare {}", config_resource(config))));
        };
        if !created {
            let owner = config.exclusive_owner;
            Self::assert_queue_equivalent(&queue, owner, config.durable, config.auto_delete, &config.arguments)?;
        } else if queue.home.is_some() {
            // Made on another node (a balanced locator), which may not have applied the
            // declare yet: new and empty.
            return Ok(DeclareOk { name: config.name.clone(), messages: 0, consumers: 0, created });
        }
        let stats = queue.declared().await?;
        Ok(DeclareOk { name: config.name.clone(), messages: stats.ready, consumers: stats.consumers, created })
    }

    /// A new quorum queue's number of members: its `x-quorum-initial-group-size` argument, else
    /// its policy's `initial-cluster-size` (the argument wins, as over other policy keys).
    fn initial_group_size(&self, config: &QueueConfig) -> Option<usize> {
        let size = |value: &charon_model::Value| value.as_i64().and_then(|n| usize::try_from(n).ok());
        let argument = config.arguments.get("x-quorum-initial-group-size").and_then(size);
        argument.or_else(|| {
            let definition = self.policy_definition_for(&config.name, config.queue_type)?;
            definition.get("initial-cluster-size").and_then(size)
        })
    }

    /// Where a new queue lives: on this node (RabbitMQ's `client-local`, the default, and
    /// always for an exclusive queue), or, when its `x-queue-leader-locator` argument or the
    /// `queue-leader-locator` key of its policy says `balanced` (or a legacy value RabbitMQ 4
    /// takes as `balanced`), on the running node with the fewest queues in this vhost.
    fn home_for(&self, cluster: &crate::cluster::Cluster, config: &QueueConfig) -> String {
        let here = charon_model::node_name();
        if config.exclusive_owner.is_some() {
            return here;
        }
        let keys = ["x-queue-leader-locator", "x-queue-master-locator"];
        let argument =
            keys.iter().find_map(|key| config.arguments.get(key)).and_then(|v| v.as_str().map(str::to_owned));
        let policy = || {
            let definition = self.policy_definition_for(&config.name, config.queue_type)?;
            let keys = ["queue-leader-locator", "queue-master-locator"];
            keys.iter().find_map(|key| definition.get(key)).and_then(|v| v.as_str().map(str::to_owned))
        };
        match argument.or_else(policy).as_deref() {
            Some("balanced" | "random" | "least-leaders" | "min-masters") => {
                cluster.least_loaded(&self.name, self.local_queues().len() as u64)
            }
            _ => here,
        }
    }

    /// Makes on this node a queue the cluster committed: the queue itself on its home node,
    /// a proxy for it on every other. A queue there already stays (the first declare won).
    /// A transient or exclusive queue an earlier run of this node declared went with that
    /// run: its record is deleted through the cluster instead.
    pub(crate) async fn follow_queue_declare(
        &self,
        name: &str,
        record: &QueueRecord,
        arguments: Table,
    ) -> Result<(), EngineError> {
        self.check_live()?;
        let me = charon_model::node_name();
        if let Some(replicas) = record.replicas.as_ref().filter(|r| r.members.contains(&me)) {
            self.start_replica(name, replicas, &record.home).await?;
        }
        let existing = self.topology.read().queues.get(name).cloned();
        if let Some(existing) = existing {
            if let Some(replicas) = &record.replicas {
                self.follow_queue_home(&existing, record, replicas.group, arguments).await;
            }
            return Ok(());
        }
        let (durable, auto_delete, exclusive) = (record.durable, record.auto_delete, record.owner.is_some());
        let replica = record.replicas.as_ref().map(|r| r.group);
        if record.home == charon_model::node_name() {
            if record.boot != crate::cluster::boot() && (!durable || exclusive) {
                self.forget_stale(name);
                return Ok(());
            }
            let declare =
                QueueDeclare { name: name.to_owned(), passive: false, durable, exclusive, auto_delete, arguments };
            loop {
                let declarer = (Declarer::Broker, replica);
                match self.create_or_check_queue(&declare, record.owner.unwrap_or(0), declarer, None)? {
                    Created::New(_) | Created::Existing(_) | Created::Propose(_) => return Ok(()),
                    Created::Reserved(reserved) => reserved.wait().await,
                    Created::Committing { queue, done, reservation } => {
                        return self
                            .after_commit(done, move |vhost, topology, committed| {
                                vhost.publish_queue(topology, queue, committed, reservation);
                            })
                            .await;
                    }
                }
            }
        }
        let config = QueueConfig {
            name: name.to_owned(),
            vhost: self.name.clone(),
            durable,
            auto_delete,
            // Another node's connection owns it: every connection of this node is refused
            // (405), as RabbitMQ refuses them; publishes still route to it.
            exclusive_owner: record.owner.map(|_| OTHER_NODES_CONNECTION),
            queue_type: args::queue_type_of(&arguments),
            arguments,
        };
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        // Kept in this node's store too, as its exchanges are: restored with the topology at
        // the next start, before its queues dead-letter into it.
        let stored = durable.then(|| StoredQueue {
            vhost: self.name.clone(),
            name: name.to_owned(),
            id,
            auto_delete,
            arguments: config.arguments.clone(),
            home: Some(record.home.clone()),
            replica,
        });
        let proxy = self.proxy(id, config, record.home.clone());
        let done = {
            let mut topology = self.topology.write();
            if topology.queues.contains_key(name) {
                return Ok(());
            }
            topology.queues.insert(name.to_owned(), proxy);
            self.grew(&topology);
            self.store.as_ref().zip(stored).map(|(store, stored)| store.save_queue(stored))
        };
        if let Some(done) = done
            && let Err(e) = done.wait().await
        {
            tracing::error!(queue = name, error = %e, "this node could not store its proxy");
        }
        Ok(())
    }

    /// Makes this node's handle of replicated queue `existing` match where its record says it
    /// lives, once it moved (its home node went and a member took it over, or this node was
    /// down meanwhile): the queue itself, taken over from its group ([`crate::cluster::replicas`]),
    /// when this node is its home, else a proxy for its home. The handle is replaced in place,
    /// bindings and all, so that no publish finds the queue missing; the one it replaces goes —
    /// a queue here cancels its consumers (they consume again through the new handle, as after
    /// any cancel) and stops, its records dropped from this node's log.
    async fn follow_queue_home(&self, existing: &QueueRef, record: &QueueRecord, group: u64, arguments: Table) {
        let _one = self.moves.lock().await;
        let here = record.home == charon_model::node_name();
        let current = self.topology.read().queues.get(existing.name()).cloned();
        let Some(old) = current else { return };
        if (here && old.home.is_none()) || (!here && old.home.as_deref() == Some(record.home.as_str())) {
            return;
        }
        let name = old.name().to_owned();
        let queue_type = args::queue_type_of(&arguments);
        let config = QueueConfig {
            name: name.clone(),
            vhost: self.name.clone(),
            durable: true,
            auto_delete: record.auto_delete,
            exclusive_owner: None,
            queue_type,
            arguments,
        };
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let stored = StoredQueue {
            vhost: self.name.clone(),
            name: name.clone(),
            id,
            auto_delete: record.auto_delete,
            arguments: config.arguments.clone(),
            home: (!here).then(|| record.home.clone()),
            replica: Some(group),
        };
        let new = if here {
            let settings = self.settings_for(&name, queue_type, &config.arguments);
            crate::queue::spawn(id, config, settings, self.queue_links(Some((group, &name, true))), Default::default())
        } else {
            self.proxy(id, config, record.home.clone())
        };
        tracing::info!(queue = name, vhost = self.name, home = record.home, "the queue moved");
        {
            let mut topology = self.topology.write();
            topology.queues.insert(name.clone(), new);
            self.grew(&topology);
        }
        if let Some(store) = &self.store {
            if let Err(e) = store.save_queue(stored).wait().await {
                tracing::error!(queue = name, error = %e, "this node could not store where its queue moved");
            }
            if old.home.is_none() {
                store.log.append(vec![charon_store::segment_log::Record::DropQueue { queue: old.id }], None);
            }
        }
        old.retired.send_replace(true);
        // Not awaited: it may be taking the queue over still, waiting for this node's metadata
        // to catch up — which waits for this very change to be followed.
        if old.home.is_none() {
            tokio::spawn(async move {
                let _ = old.delete(false, false).await;
            });
        }
    }

    /// A proxy for queue `config` of node `home`; when that node answers again after it did
    /// not, the dead letters waiting in this vhost are tried again at once.
    pub(super) fn proxy(&self, id: u64, config: QueueConfig, home: String) -> QueueRef {
        let me = self.me.clone();
        let back = Box::new(move || {
            if let Some(vhost) = me.upgrade() {
                vhost.retry_dead_letters();
            }
        });
        crate::cluster::queues::spawn_proxy(Arc::clone(&self.cluster), id, config, home, back)
    }

    /// Queue `name` when it lives on this node, whoever owns it (the asking node checked the
    /// asking connection's access).
    pub(crate) fn queue_here(&self, name: &str) -> Option<QueueRef> {
        self.topology.read().queues.get(name).filter(|q| q.home.is_none()).cloned()
    }

    /// Deletes the record of a queue that went with an earlier run of this node, once the
    /// cluster takes writes (at start the node may still be catching up).
    fn forget_stale(&self, name: &str) {
        self.delete_record(name, 60);
    }

    /// Deletes queue `name`'s record through the cluster in a task of its own, trying
    /// `attempts` times a second apart.
    fn delete_record(&self, name: &str, attempts: u32) {
        let (vhost, name) = (self.me.upgrade(), name.to_owned());
        tokio::spawn(async move {
            let Some(vhost) = vhost else { return };
            for attempt in 1..=attempts {
                match vhost.cluster.get().map(|cluster| cluster.delete_queue(&vhost.name, &name)) {
                    Some(deleting) => match deleting.await {
                        Ok(()) => return,
                        Err(e) if attempt == attempts => {
                            tracing::warn!(queue = name, error = %e, "a queue that went is still in the cluster");
                        }
                        Err(_) => {}
                    },
                    None if attempt == attempts => tracing::warn!(queue = name, "no cluster to forget a queue"),
                    None => {}
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        });
    }

    /// Whether `queue` is one the cluster records (not this node's own from before it joined).
    pub(super) fn recorded(&self, queue: &str) -> bool {
        self.cluster.get().is_some_and(|cluster| cluster.has_queue(&self.name, queue))
    }

    /// Whether a binding to `destination` goes through the cluster: one to an exchange, or to
    /// a queue the cluster records.
    pub(super) fn through_cluster(&self, destination: &Destination) -> bool {
        match destination {
            Destination::Exchange(_) => true,
            Destination::Queue(name) => self.recorded(name),
        }
    }

    /// Deletes `queue` through the cluster, checked first against its counters on its node;
    /// answers its ready messages.
    pub(super) async fn delete_through_cluster(
        &self,
        queue: &QueueRef,
        if_unused: bool,
        if_empty: bool,
    ) -> Result<u32, EngineError> {
        let stats = queue.stats().await?;
        if if_unused && stats.consumers > 0 {
            return Err(EngineError::InUse(queue.resource()));
        }
        if if_empty && stats.ready > 0 {
            return Err(EngineError::NotEmpty(queue.resource()));
        }
        if let Some(cluster) = self.cluster.get() {
            cluster.delete_queue(&self.name, queue.name()).await?;
        }
        Ok(stats.ready)
    }

    /// Deletes on this node a queue whose deletion the cluster committed: the queue on its
    /// home node, the proxy elsewhere (with the bindings to it).
    pub(crate) async fn follow_queue_delete(&self, name: &str) {
        let found = self.topology.read().queues.get(name).cloned();
        if let Some(queue) = found {
            self.drop_here(&queue).await;
        }
        if let Some(cluster) = self.cluster.get() {
            cluster.replicas().forget(&self.name, name).await;
        }
    }

    /// Quorum queue `queue`'s members, as RabbitMQ's management API lists them (`leader`,
    /// `members`, `online`): its group's, for a replicated queue; this node alone for one that
    /// lives on this node only. `None` for any other queue.
    #[must_use]
    pub fn quorum_members(&self, queue: &QueueRef) -> Option<crate::cluster::replicas::QuorumMembers> {
        if queue.config.queue_type != crate::queue::QueueType::Quorum {
            return None;
        }
        let cluster = self.cluster.get();
        let record = cluster.and_then(|c| c.queue_record(&self.name, queue.name()));
        let (Some(cluster), Some(record)) = (cluster, record) else {
            let me = queue.home.clone().unwrap_or_else(charon_model::node_name);
            return Some(crate::cluster::replicas::QuorumMembers {
                leader: me.clone(),
                members: vec![me.clone()],
                online: vec![me],
            });
        };
        let members = record.replicas.map_or_else(|| vec![record.home.clone()], |r| r.members);
        let online = members.iter().filter(|m| cluster.is_running(m)).cloned().collect();
        Some(crate::cluster::replicas::QuorumMembers { leader: record.home, members, online })
    }

    /// Starts this node's member of a replicated quorum queue's group (this node is among
    /// `replicas`' members).
    async fn start_replica(&self, name: &str, replicas: &ReplicaSet, record_home: &str) -> Result<(), EngineError> {
        let Some(cluster) = self.cluster.get() else {
            return Ok(());
        };
        let mut members = std::collections::BTreeMap::new();
        for member in &replicas.members {
            let address = cluster.address_of(member).ok_or_else(|| {
                EngineError::Store(format!("member {member} of queue '{name}' is not in the cluster"))
            })?;
            let peer = charon_cluster::Peer { name: member.clone(), address };
            members.insert(charon_cluster::node_id(member), peer);
        }
        let initialize = record_home == charon_model::node_name();
        let started = cluster.replicas().start(replicas.group, members, (&self.name, name), initialize).await;
        started.map(drop).map_err(|e| EngineError::Store(format!("queue '{name}' could not start its replica: {e}")))
    }

    /// A queue of this node went (it deleted itself, or its connection closed): in a
    /// cluster, the other nodes drop their proxies for it.
    pub(super) fn deleted_itself(&self, queue: &QueueRef) {
        if queue.home.is_none() && self.recorded(queue.name()) {
            self.delete_record(queue.name(), 1);
        }
    }
}

fn config_resource(config: &QueueConfig) -> crate::error::Resource {
    crate::error::Resource::queue(&config.vhost, &config.name)
}
