//! The node's cluster, when it runs in one: the metadata group and the configured members.

pub mod metadata;

use std::sync::Arc;

use charon_cluster::{Group, Peer};

use self::metadata::{MetaCommand, Metadata};
use crate::error::EngineError;

/// The cluster this node is a member of (`--cluster-listen`): the metadata Raft group and
/// the members the node was configured with.
pub struct Cluster {
    group: Arc<Group<Metadata>>,
    members: Vec<Peer>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("members", &self.members).finish_non_exhaustive()
    }
}

impl Cluster {
    /// The cluster whose metadata `group` replicates among `members`.
    #[must_use]
    pub fn new(group: Arc<Group<Metadata>>, members: Vec<Peer>) -> Self {
        Self { group, members }
    }

    /// The configured members.
    #[must_use]
    pub fn members(&self) -> &[Peer] {
        &self.members
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
    /// internal error with the reason, until RabbitMQ 4.3's answer for a metadata change
    /// without a majority is observed and matched (issue 41 item 3).
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
