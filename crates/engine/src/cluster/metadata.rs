//! The metadata a cluster replicates: the state machine its metadata group applies.

use charon_cluster::{Machine, MachineError};
use serde::{Deserialize, Serialize};

/// A change to the replicated metadata, as a node proposes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetaCommand {
    /// `PUT /api/cluster-name` (RabbitMQ's `cluster_name` runtime parameter).
    SetClusterName(String),
}

/// The metadata every node of a cluster applies in the same order. So far the cluster's
/// name; vhosts, users, permissions, policies and queue records come next (issue 41 item 3).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    cluster_name: Option<String>,
}

impl Metadata {
    /// The name set for the cluster, if one was.
    #[must_use]
    pub fn cluster_name(&self) -> Option<&str> {
        self.cluster_name.as_deref()
    }
}

impl Machine for Metadata {
    /// Answers an empty vector for a command applied, or the text of why the bytes are no
    /// command (a newer node's, which this one cannot apply; every node skips it alike).
    fn apply(&mut self, _index: u64, command: &[u8]) -> Vec<u8> {
        match serde_json::from_slice(command) {
            Ok(MetaCommand::SetClusterName(name)) => {
                self.cluster_name = Some(name);
                Vec::new()
            }
            Err(e) => format!("not a metadata command: {e}").into_bytes(),
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
        assert!(String::from_utf8_lossy(&answers[1].0).starts_with("not a metadata command"));
        assert_eq!((one.cluster_name(), &one), (Some("prod"), &two));
        let mut restored = Metadata::default();
        restored.restore(&one.snapshot()).unwrap();
        assert_eq!(restored, one);
        assert!(restored.restore(b"[]").is_err());
        assert_eq!(restored, one);
    }
}
