//! A vhost's queues in a cluster: a queue other connections may use is declared, bound and
//! deleted through the cluster; its home node (the declaring one) makes it, every other node
//! a proxy for it (`crate::cluster::queues`). Exclusive queues stay with their connection's
//! node.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use charon_model::Table;

use super::{Created, DeclareOk, Declarer, QueueDeclare, VHost};
use crate::cluster::Cluster;
use crate::error::EngineError;
use crate::exchange::Destination;
use crate::queue::args;
use crate::queue::{QueueConfig, QueueRef};

impl VHost {
    /// The cluster a binding to `destination` goes through: every exchange's, and a queue's
    /// other connections may use; `None` out of a cluster.
    pub(super) fn cluster_for(&self, destination: &Destination) -> Option<&Cluster> {
        let cluster = self.cluster.get()?;
        match destination {
            Destination::Exchange(_) => Some(cluster),
            Destination::Queue(name) => {
                let shared = self.topology.read().queues.get(name).is_some_and(|q| q.config.exclusive_owner.is_none());
                shared.then_some(cluster)
            }
        }
    }

    /// Declares the queue `config` describes through the cluster; answered once this node
    /// made it (or its proxy), as checked against another node's declare of the name that
    /// came first.
    pub(super) async fn declare_through_cluster(&self, config: &QueueConfig) -> Result<DeclareOk, EngineError> {
        let Some(cluster) = self.cluster.get() else {
            return Err(EngineError::Store(format!("failed to declare {}", config_resource(config))));
        };
        let created = cluster.declare_queue(&self.name, &config.name, config).await?;
        let Some(queue) = self.topology.read().queues.get(&config.name).cloned() else {
            return Err(EngineError::Store(format!("failed to declare {}", config_resource(config))));
        };
        if !created {
            Self::assert_queue_equivalent(&queue, None, config.durable, config.auto_delete, &config.arguments)?;
        }
        let stats = queue.declared().await?;
        Ok(DeclareOk { name: config.name.clone(), messages: stats.ready, consumers: stats.consumers, created })
    }

    /// Makes on this node a queue the cluster committed: the queue itself on its home node,
    /// a proxy for it on every other. A queue there already stays (the first declare won).
    pub(crate) async fn follow_queue_declare(
        &self,
        name: &str,
        home: String,
        durable: bool,
        auto_delete: bool,
        arguments: Table,
    ) -> Result<(), EngineError> {
        self.check_live()?;
        if self.topology.read().queues.contains_key(name) {
            return Ok(());
        }
        if home == charon_model::node_name() {
            let declare = QueueDeclare {
                name: name.to_owned(),
                passive: false,
                durable,
                exclusive: false,
                auto_delete,
                arguments,
            };
            loop {
                match self.create_or_check_queue(&declare, 0, Declarer::Broker, None)? {
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
            exclusive_owner: None,
            queue_type: args::queue_type_of(&arguments),
            arguments,
        };
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let proxy = crate::cluster::queues::spawn_proxy(Arc::clone(&self.cluster), id, config, home);
        let mut topology = self.topology.write();
        if !topology.queues.contains_key(name) {
            topology.queues.insert(name.to_owned(), proxy);
            self.grew(&topology);
        }
        Ok(())
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
        match found {
            Some(queue) if queue.config.exclusive_owner.is_some() => {}
            Some(queue) if queue.home.is_none() => self.drop_queue(&queue).await,
            Some(proxy) => self.forget_queue(&proxy).await,
            None => {}
        }
    }

    /// A queue of this node deleted itself (auto-delete, `x-expires`): in a cluster, the
    /// other nodes drop their proxies for it.
    pub(super) fn deleted_itself(&self, queue: &QueueRef) {
        if queue.config.exclusive_owner.is_some() || !self.clustered() {
            return;
        }
        let (vhost, name) = (self.me.upgrade(), queue.name().to_owned());
        tokio::spawn(async move {
            let Some(vhost) = vhost else { return };
            if let Some(cluster) = vhost.cluster.get()
                && let Err(e) = cluster.delete_queue(&vhost.name, &name).await
            {
                tracing::warn!(queue = name, error = %e, "a queue that deleted itself is still in the cluster");
            }
        });
    }
}

fn config_resource(config: &QueueConfig) -> crate::error::Resource {
    crate::error::Resource::queue(&config.vhost, &config.name)
}
