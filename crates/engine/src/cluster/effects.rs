//! How each node's engine follows what the metadata group committed.

use std::sync::Arc;

use super::metadata::{self, MetaCommand};
use crate::access::{AccessError, Account, HashingAlgorithm, PasswordHash, Permission, Tags, VhostInfo};

/// How this node's engine follows the metadata its cluster committed: the vhosts, users and
/// permissions a command records or removes are made or removed here too (idempotent: commands
/// applied again at start find them so).
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
        if let Err(e) = Self::make(&broker, command, answer).await {
            // The cluster has it; this node could not follow (its disk failed, or the user is
            // not one of this node's): logged, and the next start applies it again.
            tracing::error!(error = %e, "this node could not follow a metadata change");
        }
    }

    /// Makes `broker` match what `command` changed (answered `answer` by the machine).
    async fn make(broker: &crate::Broker, command: MetaCommand, answer: &[u8]) -> Result<(), AccessError> {
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
        }
        Ok(())
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
}
