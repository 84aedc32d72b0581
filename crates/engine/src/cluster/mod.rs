//! The node's cluster, when it runs in one: the metadata group and the configured members.

mod effects;
pub mod metadata;

pub use effects::Effects;

use std::sync::Arc;

use charon_cluster::transport::Liveness;
use charon_cluster::{Group, Peer};

use self::metadata::{MetaCommand, Metadata};
use crate::error::EngineError;

/// The cluster this node is a member of (`--cluster-listen`): the metadata Raft group, the
/// members the node was configured with, and which of them answer.
pub struct Cluster {
    group: Arc<Group<Metadata>>,
    members: Vec<Peer>,
    liveness: Liveness,
}

/// A member as this node sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its node name.
    pub name: String,
    /// This node, or a peer that answered its last pings.
    pub running: bool,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("members", &self.members).finish_non_exhaustive()
    }
}

impl Cluster {
    /// The cluster whose metadata `group` replicates among `members`, their liveness watched
    /// by `liveness`.
    #[must_use]
    pub fn new(group: Arc<Group<Metadata>>, members: Vec<Peer>, liveness: Liveness) -> Self {
        Self { group, members, liveness }
    }

    /// Every member by name, as RabbitMQ lists its nodes, with whether it runs: the group's
    /// membership (the configured peers until the cluster formed). Must run inside the runtime
    /// (members that joined since are pinged from now on).
    #[must_use]
    pub fn members(&self) -> Vec<Member> {
        let me = charon_model::node_name();
        let joined: Vec<Peer> = self.group.members().into_iter().map(|m| m.peer).collect();
        let peers = if joined.is_empty() { self.members.clone() } else { joined };
        self.liveness.watch(peers.iter().cloned());
        let mut members: Vec<Member> = peers
            .iter()
            .map(|peer| Member {
                running: peer.name == me || self.liveness.running(&peer.name),
                name: peer.name.clone(),
            })
            .collect();
        members.sort_by(|a, b| a.name.cmp(&b.name));
        members
    }

    /// `forget_cluster_node`: removes a member that is down from the cluster (through the
    /// leader); a running member, or this node, is refused.
    ///
    /// # Errors
    /// `name` is no member, runs, or is this node; or no leader took the change.
    pub async fn forget(&self, name: &str) -> Result<(), EngineError> {
        let member = self.members().into_iter().find(|m| m.name == name);
        match member {
            None => Err(EngineError::Precondition(format!("{name} is not a member of this cluster"))),
            Some(_) if name == charon_model::node_name() => {
                Err(EngineError::Precondition(format!("{name} is the node asked: forget it from another node")))
            }
            Some(member) if member.running => {
                Err(EngineError::Precondition(format!("{name} is running: stop it before it is forgotten")))
            }
            Some(_) => self
                .group
                .remove_member(charon_cluster::node_id(name))
                .await
                .map_err(|e| EngineError::Store(e.to_string())),
        }
    }

    /// The metadata group's Raft state on this node (for the Prometheus endpoint).
    #[must_use]
    pub fn status(&self) -> charon_cluster::Status {
        self.group.status()
    }

    /// The cluster's name as this node applied it: the one set, or this node's name, as
    /// RabbitMQ names a cluster by default.
    #[must_use]
    pub fn name(&self) -> String {
        self.group.read(|meta| meta.cluster_name().map(str::to_owned)).unwrap_or_else(charon_model::node_name)
    }

    /// Names the cluster, through the metadata group; answered once this node applied it.
    ///
    /// # Errors
    /// No leader is reachable (this node is on the minority side), or the group stopped: an
    /// internal error with the reason (the API answers it as RabbitMQ 4.3.6 does there: 500,
    /// empty body).
    pub async fn set_name(&self, name: String) -> Result<(), EngineError> {
        self.write(&MetaCommand::SetClusterName(name)).await.map(|_| ())
    }

    /// Creates vhost `name` through the cluster, or replaces its description and tags, with
    /// full permissions there for `creator` when it is created (as RabbitMQ's `put_vhost`);
    /// true when it was created. Every node follows ([`Effects`]).
    ///
    /// # Errors
    /// As [`Self::set_name`].
    pub async fn put_vhost(
        &self,
        name: &str,
        description: String,
        tags: Vec<String>,
        creator: &str,
    ) -> Result<bool, EngineError> {
        let created = self.write(&MetaCommand::PutVhost { name: name.to_owned(), description, tags }).await?;
        let created = created == metadata::CHANGED;
        if created {
            self.set_permission(name, creator, &crate::access::Permission::full()).await?;
        }
        Ok(created)
    }

    /// Deletes vhost `name` through the cluster, with everything in it, on every node; false
    /// when the cluster had no such vhost.
    ///
    /// # Errors
    /// As [`Self::set_name`].
    pub async fn delete_vhost(&self, name: &str) -> Result<bool, EngineError> {
        Ok(self.write(&MetaCommand::DeleteVhost { name: name.to_owned() }).await? == metadata::CHANGED)
    }

    /// Creates or replaces user `account` through the cluster, on every node.
    ///
    /// # Errors
    /// As [`Self::set_name`].
    pub async fn put_user(&self, account: &crate::access::Account) -> Result<(), EngineError> {
        let password = account.password().map(|hash| (hash.algorithm().as_str().to_owned(), hash.to_base64()));
        let tags = account.tags().as_slice().to_vec();
        self.write(&MetaCommand::PutUser { name: account.name().to_owned(), password, tags }).await.map(|_| ())
    }

    /// Deletes user `name` through the cluster, on every node (its connections closed there).
    ///
    /// # Errors
    /// As [`Self::set_name`].
    pub async fn delete_user(&self, name: &str) -> Result<(), EngineError> {
        self.write(&MetaCommand::DeleteUser { name: name.to_owned() }).await.map(|_| ())
    }

    /// Sets `user`'s permissions in `vhost` through the cluster, on every node.
    ///
    /// # Errors
    /// As [`Self::set_name`].
    pub async fn set_permission(
        &self,
        vhost: &str,
        user: &str,
        permission: &crate::access::Permission,
    ) -> Result<(), EngineError> {
        let (configure, write, read) = permission.patterns();
        let command = MetaCommand::SetPermission {
            vhost: vhost.to_owned(),
            user: user.to_owned(),
            configure: configure.to_owned(),
            write: write.to_owned(),
            read: read.to_owned(),
        };
        self.write(&command).await.map(|_| ())
    }

    /// Clears `user`'s permissions in `vhost` through the cluster, on every node.
    ///
    /// # Errors
    /// As [`Self::set_name`].
    pub async fn clear_permission(&self, vhost: &str, user: &str) -> Result<(), EngineError> {
        self.write(&MetaCommand::ClearPermission { vhost: vhost.to_owned(), user: user.to_owned() }).await.map(|_| ())
    }

    /// Whether the cluster made vhost `name`.
    #[must_use]
    pub fn has_vhost(&self, name: &str) -> bool {
        self.group.read(|meta| meta.vhosts().contains_key(name))
    }

    async fn write(&self, command: &MetaCommand) -> Result<Vec<u8>, EngineError> {
        let bytes = serde_json::to_vec(command).map_err(|e| EngineError::Store(e.to_string()))?;
        match self.group.write(bytes).await {
            Ok(answer) if answer.starts_with(metadata::REFUSED.as_bytes()) => {
                Err(EngineError::Store(String::from_utf8_lossy(&answer).into_owned()))
            }
            Ok(answer) => Ok(answer),
            Err(e) => Err(EngineError::Store(e.to_string())),
        }
    }
}
