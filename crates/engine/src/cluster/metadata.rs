//! The metadata a cluster replicates: the state machine its metadata group applies.

use charon_cluster::{Machine, MachineError};
use serde::{Deserialize, Serialize};

/// A change to the replicated metadata, as a node proposes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetaCommand {
    /// `PUT /api/cluster-name` (RabbitMQ's `cluster_name` runtime parameter).
    SetClusterName(String),
    /// `PUT /api/vhosts/{name}`: created, or its description and tags replaced.
    PutVhost {
        /// The vhost.
        name: String,
        /// Free text.
        description: String,
        /// Its tags.
        tags: Vec<String>,
    },
    /// `DELETE /api/vhosts/{name}`.
    DeleteVhost {
        /// The vhost.
        name: String,
    },
    /// `PUT /api/users/{name}`: the user's password hash (hashed, salt and all, on the node
    /// that took the request: applying it draws nothing random) and tags.
    PutUser {
        /// The user.
        name: String,
        /// The hashing algorithm's name and the base64 of salt and digest; `None`: no password.
        password: Option<(String, String)>,
        /// Its tags.
        tags: Vec<String>,
    },
    /// `DELETE /api/users/{name}`.
    DeleteUser {
        /// The user.
        name: String,
    },
    /// `DELETE /api/permissions/{vhost}/{user}`.
    ClearPermission {
        /// The vhost.
        vhost: String,
        /// The user.
        user: String,
    },
    /// A user's permissions in a vhost (`PUT /api/permissions/{vhost}/{user}`, and the
    /// creator's full ones when a vhost is created).
    SetPermission {
        /// The vhost.
        vhost: String,
        /// The user.
        user: String,
        /// The configure pattern.
        configure: String,
        /// The write pattern.
        write: String,
        /// The read pattern.
        read: String,
    },
}

/// A vhost as the cluster records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VhostRecord {
    /// Free text.
    pub description: String,
    /// Its tags.
    pub tags: Vec<String>,
}

/// What an answer starts with when the command could not be applied (the reason follows).
pub const REFUSED: &str = "!";

/// What [`Metadata::apply`] answers a `PutVhost` or `DeleteVhost` with: the record was new
/// (created, deleted) or not (updated, absent).
pub const CHANGED: &[u8] = b"1";

/// The metadata every node of a cluster applies in the same order: the cluster's name and the
/// vhosts made through the cluster, with the permissions given with them. Users, the other
/// permissions, policies and queue records come next (issue 41 item 3). Each node's engine
/// follows through [`super::Effects`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    cluster_name: Option<String>,
    #[serde(default)]
    vhosts: std::collections::BTreeMap<String, VhostRecord>,
}

impl Metadata {
    /// The name set for the cluster, if one was.
    #[must_use]
    pub fn cluster_name(&self) -> Option<&str> {
        self.cluster_name.as_deref()
    }

    /// The vhosts made through the cluster.
    #[must_use]
    pub fn vhosts(&self) -> &std::collections::BTreeMap<String, VhostRecord> {
        &self.vhosts
    }
}

impl Machine for Metadata {
    /// Answers an empty vector for a command applied, or the text of why the bytes are no
    /// command (a newer node's, which this one cannot apply; every node skips it alike).
    fn apply(&mut self, _index: u64, command: &[u8]) -> Vec<u8> {
        let changed = |new: bool| if new { CHANGED.to_vec() } else { b"0".to_vec() };
        match serde_json::from_slice(command) {
            Ok(MetaCommand::SetClusterName(name)) => {
                self.cluster_name = Some(name);
                Vec::new()
            }
            Ok(MetaCommand::PutVhost { name, description, tags }) => {
                changed(self.vhosts.insert(name, VhostRecord { description, tags }).is_none())
            }
            Ok(MetaCommand::DeleteVhost { name }) => changed(self.vhosts.remove(&name).is_some()),
            // Kept by each node's access control (the effects); nothing to record here yet.
            Ok(
                MetaCommand::SetPermission { .. }
                | MetaCommand::ClearPermission { .. }
                | MetaCommand::PutUser { .. }
                | MetaCommand::DeleteUser { .. },
            ) => Vec::new(),
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
        assert!(restored.restore(b"[]").is_err());
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
}
