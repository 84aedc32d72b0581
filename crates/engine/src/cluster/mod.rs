//! The node's cluster, when it runs in one: the metadata group and the configured members.

pub mod metadata;

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
        self.write(&MetaCommand::SetClusterName(name)).await
    }

    async fn write(&self, command: &MetaCommand) -> Result<(), EngineError> {
        let bytes = serde_json::to_vec(command).map_err(|e| EngineError::Store(e.to_string()))?;
        match self.group.write(bytes).await {
            Ok(answer) if answer.is_empty() => Ok(()),
            Ok(answer) => Err(EngineError::Store(String::from_utf8_lossy(&answer).into_owned())),
            Err(e) => Err(EngineError::Store(e.to_string())),
        }
    }
}
