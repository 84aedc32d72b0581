//! What the metadata machine records of each replicated object: plain data, so that applying a
//! command neither validates nor compiles anything (the proposing node did) and a snapshot is
//! the records themselves.

use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use charon_model::Table;
use serde::{Deserialize, Serialize};

/// An AMQP table as it travels in a command: its 0.9.1 field-table encoding in base64 (the
/// metadata log is JSON; the table keeps its value types, which JSON would lose).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EncodedTable(String);

impl EncodedTable {
    /// `table`, encoded.
    #[must_use]
    pub fn new(table: &Table) -> Self {
        let mut out = BytesMut::new();
        charon_store::codec::encode_table(table, &mut out);
        Self(base64::engine::general_purpose::STANDARD.encode(&out))
    }

    /// The table back. The bytes come from a peer: a table the store's decoder refuses (it
    /// bounds depth, counts and sizes) is an error, never a panic.
    ///
    /// # Errors
    /// Not base64, or not a field table.
    pub fn decode(&self) -> Result<Table, String> {
        let raw = base64::engine::general_purpose::STANDARD.decode(&self.0).map_err(|e| e.to_string())?;
        let mut bytes = Bytes::from(raw);
        let table = charon_store::codec::decode_table(&mut bytes).map_err(|e| e.to_string())?;
        if bytes.is_empty() { Ok(table) } else { Err("bytes after the table".into()) }
    }
}

/// A vhost as the cluster records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VhostRecord {
    /// Free text.
    pub description: String,
    /// Its tags.
    pub tags: Vec<String>,
}

/// A user as the cluster records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRecord {
    /// The hashing algorithm's name and the base64 of salt and digest; `None`: no password.
    pub password: Option<(String, String)>,
    /// Its tags.
    pub tags: Vec<String>,
}

/// A user's permissions in a vhost: the configure, write and read patterns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermissionRecord {
    /// The configure pattern.
    pub configure: String,
    /// The write pattern.
    pub write: String,
    /// The read pattern.
    pub read: String,
}

/// A user's topic permissions on one exchange of a vhost.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRecord {
    /// The write pattern.
    pub write: String,
    /// The read pattern.
    pub read: String,
}

/// An exchange as declared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExchangeRecord {
    /// Its type's name (`direct`, `topic`, ...).
    pub kind: String,
    /// Durable.
    pub durable: bool,
    /// Deleted with its last binding.
    pub auto_delete: bool,
    /// Not published to directly.
    pub internal: bool,
    /// Its arguments.
    pub arguments: EncodedTable,
}

/// A classic queue as declared through the cluster: it lives on its home node (the declaring
/// one); every other node reaches it through a proxy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueRecord {
    /// The node it lives on.
    pub home: String,
    /// Durable.
    pub durable: bool,
    /// Deleted with its last consumer.
    pub auto_delete: bool,
    /// Its arguments (`x-queue-type` included).
    pub arguments: EncodedTable,
    /// An exclusive queue's owner: the declaring connection, on the home node.
    #[serde(default)]
    pub owner: Option<u64>,
    /// The home node's run that declared it ([`crate::cluster::boot`]): a transient or
    /// exclusive queue of an earlier run went with it.
    #[serde(default)]
    pub boot: u64,
    /// A quorum queue's replicas: its Raft group and its members (`None`: it lives on its
    /// home node alone).
    #[serde(default)]
    pub replicas: Option<ReplicaSet>,
}

/// A replicated quorum queue's group: every member keeps the queue's journal; the home runs
/// the queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaSet {
    /// The group's number on the wire (never 0, the metadata group's), drawn at declare.
    pub group: u64,
    /// The members' node names, the home first.
    pub members: Vec<String>,
}

/// A binding between two exchanges of a vhost, or (in the queue bindings) from an exchange to
/// a queue.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BindingRecord {
    /// The source exchange.
    pub source: String,
    /// The destination exchange (the queue, in the queue bindings).
    pub destination: String,
    /// The binding key.
    pub key: String,
    /// Its arguments.
    pub arguments: EncodedTable,
}

/// A policy or operator policy as set (validated by the node that took it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyRecord {
    /// The regular expression names must match.
    pub pattern: String,
    /// What it applies to (`queues`, `exchanges`, ...).
    pub apply_to: String,
    /// Among matching policies, the highest applies.
    pub priority: i64,
    /// Its definition.
    pub definition: EncodedTable,
}

/// A redrive job as the cluster records it: the node that runs it, and its record as that node
/// last wrote it (the JSON a node's own store keeps: the job's view and sweep).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedriveRecord {
    /// The node whose task runs the job (the one it was created on).
    pub runner: String,
    /// Counts the runner's writes: one that arrives after a later one is not recorded (writes
    /// forwarded to the leader may overtake each other).
    pub seq: u64,
    /// The job's record.
    pub job: String,
}
