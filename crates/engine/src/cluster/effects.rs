//! How each node's engine follows what the metadata group committed.

use std::sync::Arc;

use super::metadata::{self, MetaCommand};

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
        let outcome = match command {
            MetaCommand::SetClusterName(_) => Ok(()),
            MetaCommand::PutVhost { name, description, tags } => {
                let info = crate::access::VhostInfo { description, tags: crate::access::Tags::new(tags) };
                broker.add_vhost(&name, info).await.map(|_| ())
            }
            // Absent here too (deleted before, or never made on this node): nothing to do.
            MetaCommand::DeleteVhost { name } if answer == metadata::CHANGED => {
                match broker.delete_vhost(&name).await {
                    Err(crate::access::AccessError::NoSuchVhost(_)) => Ok(()),
                    other => other,
                }
            }
            MetaCommand::DeleteVhost { .. } => Ok(()),
            MetaCommand::PutUser { name, password, tags } => {
                let hash = match password {
                    Some((algorithm, encoded)) => crate::access::HashingAlgorithm::parse(&algorithm)
                        .and_then(|algorithm| crate::access::PasswordHash::from_base64(algorithm, &encoded))
                        .map(Some),
                    None => Ok(None),
                };
                match hash {
                    Ok(hash) => {
                        let account = crate::access::Account::new(name, hash, crate::access::Tags::new(tags));
                        broker.access().put_user(account).await
                    }
                    Err(e) => Err(e),
                }
            }
            MetaCommand::DeleteUser { name } => match broker.delete_user(&name).await {
                Err(crate::access::AccessError::NoSuchUser(_)) => Ok(()),
                other => other,
            },
            MetaCommand::ClearPermission { vhost, user } => {
                broker.access().clear_permission(&vhost, &user).await.map(|_| ())
            }
            MetaCommand::SetPermission { vhost, user, configure, write, read } => {
                match crate::access::Permission::new(&configure, &write, &read) {
                    Ok(permission) => broker.access().set_permission(&vhost, &user, permission).await,
                    Err(e) => Err(e),
                }
            }
        };
        if let Err(e) = outcome {
            // The cluster has it; this node could not follow (its disk failed, or the user is
            // not one of this node's): logged, and the next start applies it again.
            tracing::error!(error = %e, "this node could not follow a metadata change");
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
}
