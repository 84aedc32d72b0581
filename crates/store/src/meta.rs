//! Durable topology and policies in redb: exchanges, queues (with the ids their messages carry
//! in the log), bindings, policies and operator policies, per vhost.
//!
//! Every change is its own redb write transaction, committed (and fsync'd) before the broker
//! answers the declare, as RabbitMQ answers `declare-ok` only once a durable queue is recorded:
//! a message confirmed into a queue must never outlive the record of the queue. Deletions
//! cascade here as they do in the topology: a deleted queue or exchange takes the bindings that
//! lead to or from it.

use std::path::Path;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use charon_model::Table;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::codec::{CodecError, decode_table, encode_table};

const EXCHANGES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("exchanges");
const QUEUES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("queues");
const BINDINGS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bindings");
const POLICIES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("policies");
const LIMITS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("limits");
/// Operator policies: their own namespace (a user policy and an operator policy may share a
/// name), encoded as policies are.
const OPERATOR_POLICIES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("operator_policies");

/// Errors of the metadata store, with what was being done.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    /// redb could not open, read or commit.
    #[error("metadata store {what}: {source}")]
    Db {
        /// The operation.
        what: &'static str,
        /// redb's error.
        #[source]
        source: Box<redb::Error>,
    },
    /// A stored record does not decode: the file is corrupt or from another version.
    #[error("metadata store: corrupt {table} record: {detail}")]
    Corrupt {
        /// The table.
        table: &'static str,
        /// What was wrong.
        detail: String,
    },
}

pub(crate) fn db_error(what: &'static str) -> impl FnOnce(redb::Error) -> MetaError {
    move |source| MetaError::Db { what, source: Box::new(source) }
}

/// A durable exchange.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredExchange {
    /// Its vhost.
    pub vhost: String,
    /// Name.
    pub name: String,
    /// Type name (`direct`, `fanout`, `topic`, `headers`).
    pub kind: String,
    /// Auto-delete.
    pub auto_delete: bool,
    /// Internal.
    pub internal: bool,
    /// Declare arguments.
    pub arguments: Table,
}

/// A durable queue.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredQueue {
    /// Its vhost.
    pub vhost: String,
    /// Name.
    pub name: String,
    /// The broker-unique id its log records carry.
    pub id: u64,
    /// Auto-delete.
    pub auto_delete: bool,
    /// Declare arguments (with `x-queue-type`).
    pub arguments: Table,
    /// In a cluster, the node a durable queue of another node lives on: this node keeps a
    /// proxy for it (restored with the topology, so its dead letters route there from the
    /// start). Written after the arguments only when set: older records read as `None`.
    pub home: Option<String>,
    /// A replicated quorum queue's Raft group: its home restores it from the group, not from
    /// this node's log. Written after the home (an empty name standing for none) only when
    /// set: older records read as `None`.
    pub replica: Option<u64>,
}

/// A binding between durable ends.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredBinding {
    /// Its vhost.
    pub vhost: String,
    /// Source exchange.
    pub source: String,
    /// Whether the destination is an exchange (else a queue).
    pub to_exchange: bool,
    /// Destination name.
    pub destination: String,
    /// Binding key.
    pub key: String,
    /// Binding arguments.
    pub arguments: Table,
}

/// A policy.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredPolicy {
    /// Its vhost.
    pub vhost: String,
    /// Name.
    pub name: String,
    /// Queue-name regular expression.
    pub pattern: String,
    /// `queues`, `classic_queues`, `quorum_queues`, `exchanges` or `all`.
    pub apply_to: String,
    /// Priority.
    pub priority: i64,
    /// The definition.
    pub definition: Table,
}

/// A vhost or user limit (RabbitMQ's `set_vhost_limits` / `set_user_limits`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredLimit {
    /// `vhost` or `user`.
    pub scope: String,
    /// The vhost's or user's name.
    pub name: String,
    /// The limit (`max-connections`, `max-queues`, `max-channels`).
    pub limit: String,
    /// Its value (negative: no limit).
    pub value: i64,
}

/// Everything stored, as read at start.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetaSnapshot {
    /// Durable exchanges.
    pub exchanges: Vec<StoredExchange>,
    /// Durable queues.
    pub queues: Vec<StoredQueue>,
    /// Durable bindings.
    pub bindings: Vec<StoredBinding>,
    /// Policies.
    pub policies: Vec<StoredPolicy>,
    /// Operator policies.
    pub operator_policies: Vec<StoredPolicy>,
    /// Vhost and user limits.
    pub limits: Vec<StoredLimit>,
}

/// The metadata store.
#[derive(Debug)]
pub struct MetaStore {
    pub(crate) db: Database,
}

/// A stored key and value.
pub(crate) type Row = (Vec<u8>, Vec<u8>);

/// A key of length-prefixed parts, so that names may hold any byte and a prefix of parts
/// selects everything below it (the bindings of one source, say).
pub(crate) fn key(parts: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for part in parts {
        put_str(&mut out, part);
    }
    out
}

pub(crate) fn put_str(out: &mut impl BufMut, s: &str) {
    out.put_u32_le(u32::try_from(s.len()).unwrap_or(u32::MAX));
    out.put_slice(s.as_bytes());
}

/// A cursor over a stored record.
pub(crate) struct Reader {
    bytes: Bytes,
    table: &'static str,
}

impl Reader {
    pub(crate) fn new(bytes: &[u8], table: &'static str) -> Self {
        Self { bytes: Bytes::copy_from_slice(bytes), table }
    }

    fn corrupt(&self, detail: impl Into<String>) -> MetaError {
        MetaError::Corrupt { table: self.table, detail: detail.into() }
    }

    pub(crate) fn u8(&mut self) -> Result<u8, MetaError> {
        if self.bytes.remaining() < 1 {
            return Err(self.corrupt("truncated"));
        }
        Ok(self.bytes.get_u8())
    }

    fn u64(&mut self) -> Result<u64, MetaError> {
        if self.bytes.remaining() < 8 {
            return Err(self.corrupt("truncated"));
        }
        Ok(self.bytes.get_u64_le())
    }

    pub(crate) fn string(&mut self) -> Result<String, MetaError> {
        if self.bytes.remaining() < 4 {
            return Err(self.corrupt("truncated string length"));
        }
        let len = usize::try_from(self.bytes.get_u32_le()).unwrap_or(usize::MAX);
        if self.bytes.remaining() < len {
            return Err(self.corrupt("truncated string"));
        }
        let raw = self.bytes.split_to(len);
        String::from_utf8(raw.to_vec()).map_err(|_| self.corrupt("a name is not UTF-8"))
    }

    fn table(&mut self) -> Result<Table, MetaError> {
        decode_table(&mut self.bytes).map_err(|e: CodecError| self.corrupt(e.to_string()))
    }
}

impl MetaStore {
    /// Opens (creating) the store at `path`.
    ///
    /// # Errors
    /// When redb cannot open the file (it checks its own format and version).
    pub fn open(path: &Path) -> Result<Self, MetaError> {
        let db = Database::create(path).map_err(|e| db_error("open")(e.into()))?;
        let store = Self { db };
        store.write("create tables", |_| Ok(()))?;
        store.write_one(LIMITS, "create tables", |_| Ok(()))?;
        store.write_one(OPERATOR_POLICIES, "create tables", |_| Ok(()))?;
        store.access().create_tables()?;
        Ok(store)
    }

    /// One committed write transaction on one table that nothing cascades to or from (limits,
    /// operator policies).
    fn write_one(
        &self,
        table: TableDefinition<&'static [u8], &'static [u8]>,
        what: &'static str,
        change: impl FnOnce(&mut redb::Table<'_, &'static [u8], &'static [u8]>) -> Result<(), redb::Error>,
    ) -> Result<(), MetaError> {
        let txn = self.db.begin_write().map_err(|e| db_error(what)(e.into()))?;
        {
            let mut open = txn.open_table(table).map_err(|e| db_error(what)(e.into()))?;
            change(&mut open).map_err(db_error(what))?;
        }
        txn.commit().map_err(|e| db_error(what)(e.into()))
    }

    /// Records (or replaces) a limit.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn put_limit(&self, limit: &StoredLimit) -> Result<(), MetaError> {
        let key = key(&[&limit.scope, &limit.name, &limit.limit]);
        let value = limit.value.to_le_bytes();
        self.write_one(LIMITS, "put limit", |limits| {
            limits.insert(key.as_slice(), &value[..]).map(drop).map_err(Into::into)
        })
    }

    /// Forgets a limit.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn delete_limit(&self, scope: &str, name: &str, limit: &str) -> Result<(), MetaError> {
        let key = key(&[scope, name, limit]);
        self.write_one(LIMITS, "delete limit", |limits| limits.remove(key.as_slice()).map(drop).map_err(Into::into))
    }

    /// One committed write transaction with all four tables open.
    fn write(
        &self,
        what: &'static str,
        change: impl FnOnce(&mut [redb::Table<'_, &'static [u8], &'static [u8]>; 4]) -> Result<(), redb::Error>,
    ) -> Result<(), MetaError> {
        let txn = self.db.begin_write().map_err(|e| db_error(what)(e.into()))?;
        {
            let open = |def| txn.open_table(def).map_err(|e| db_error(what)(e.into()));
            let mut tables = [open(EXCHANGES)?, open(QUEUES)?, open(BINDINGS)?, open(POLICIES)?];
            change(&mut tables).map_err(db_error(what))?;
        }
        txn.commit().map_err(|e| db_error(what)(e.into()))
    }

    /// Records a durable exchange.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn put_exchange(&self, exchange: &StoredExchange) -> Result<(), MetaError> {
        let mut value = BytesMut::new();
        put_str(&mut value, &exchange.kind);
        value.put_u8(u8::from(exchange.auto_delete) | (u8::from(exchange.internal) << 1));
        encode_table(&exchange.arguments, &mut value);
        let key = key(&[&exchange.vhost, &exchange.name]);
        self.write("put exchange", |[exchanges, ..]| {
            exchanges.insert(key.as_slice(), &value[..]).map(drop).map_err(Into::into)
        })
    }

    /// Forgets an exchange and every binding from or to it.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn delete_exchange(&self, vhost: &str, name: &str) -> Result<(), MetaError> {
        let key = key(&[vhost, name]);
        self.write("delete exchange", |[exchanges, _, bindings, _]| {
            exchanges.remove(key.as_slice())?;
            remove_bindings(bindings, vhost, |b| b.source == name || (b.to_exchange && b.destination == name))
        })
    }

    /// Records a durable queue.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn put_queue(&self, queue: &StoredQueue) -> Result<(), MetaError> {
        let mut value = BytesMut::new();
        value.put_u64_le(queue.id);
        value.put_u8(u8::from(queue.auto_delete));
        encode_table(&queue.arguments, &mut value);
        if queue.home.is_some() || queue.replica.is_some() {
            put_str(&mut value, queue.home.as_deref().unwrap_or_default());
        }
        if let Some(group) = queue.replica {
            value.put_u64_le(group);
        }
        let key = key(&[&queue.vhost, &queue.name]);
        self.write("put queue", |[_, queues, ..]| {
            queues.insert(key.as_slice(), &value[..]).map(drop).map_err(Into::into)
        })
    }

    /// Forgets a queue and every binding to it.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn delete_queue(&self, vhost: &str, name: &str) -> Result<(), MetaError> {
        let key = key(&[vhost, name]);
        self.write("delete queue", |[_, queues, bindings, _]| {
            queues.remove(key.as_slice())?;
            remove_bindings(bindings, vhost, |b| !b.to_exchange && b.destination == name)
        })
    }

    fn binding_key(binding: &StoredBinding) -> Vec<u8> {
        let kind = if binding.to_exchange { "e" } else { "q" };
        let mut key = key(&[&binding.vhost, &binding.source, kind, &binding.destination, &binding.key]);
        let mut arguments = BytesMut::new();
        encode_table(&binding.arguments, &mut arguments);
        key.extend_from_slice(&arguments);
        key
    }

    /// Records a binding.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn put_binding(&self, binding: &StoredBinding) -> Result<(), MetaError> {
        let key = Self::binding_key(binding);
        self.write("put binding", |[_, _, bindings, _]| {
            bindings.insert(key.as_slice(), &[][..]).map(drop).map_err(Into::into)
        })
    }

    /// Forgets a binding.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn delete_binding(&self, binding: &StoredBinding) -> Result<(), MetaError> {
        let key = Self::binding_key(binding);
        self.write("delete binding", |[_, _, bindings, _]| {
            bindings.remove(key.as_slice()).map(drop).map_err(Into::into)
        })
    }

    /// Records (or replaces) a policy.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn put_policy(&self, policy: &StoredPolicy) -> Result<(), MetaError> {
        let (key, value) = encode_policy(policy);
        self.write("put policy", |[.., policies]| {
            policies.insert(key.as_slice(), &value[..]).map(drop).map_err(Into::into)
        })
    }

    /// Records (or replaces) an operator policy.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn put_operator_policy(&self, policy: &StoredPolicy) -> Result<(), MetaError> {
        let (key, value) = encode_policy(policy);
        self.write_one(OPERATOR_POLICIES, "put operator policy", |policies| {
            policies.insert(key.as_slice(), &value[..]).map(drop).map_err(Into::into)
        })
    }

    /// Forgets an operator policy.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn delete_operator_policy(&self, vhost: &str, name: &str) -> Result<(), MetaError> {
        let key = key(&[vhost, name]);
        self.write_one(OPERATOR_POLICIES, "delete operator policy", |policies| {
            policies.remove(key.as_slice()).map(drop).map_err(Into::into)
        })
    }

    /// Forgets a policy.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn delete_policy(&self, vhost: &str, name: &str) -> Result<(), MetaError> {
        let key = key(&[vhost, name]);
        self.write("delete policy", |[.., policies]| policies.remove(key.as_slice()).map(drop).map_err(Into::into))
    }

    /// Reads everything.
    ///
    /// # Errors
    /// When redb fails or a record does not decode.
    pub fn load(&self) -> Result<MetaSnapshot, MetaError> {
        let txn = self.db.begin_read().map_err(|e| db_error("read")(e.into()))?;
        let rows = |def: TableDefinition<&[u8], &[u8]>| -> Result<Vec<Row>, MetaError> {
            let table = txn.open_table(def).map_err(|e| db_error("read")(e.into()))?;
            let mut out = Vec::new();
            for row in table.iter().map_err(|e| db_error("read")(e.into()))? {
                let (k, v) = row.map_err(|e| db_error("read")(e.into()))?;
                out.push((k.value().to_vec(), v.value().to_vec()));
            }
            Ok(out)
        };
        let mut snapshot = MetaSnapshot::default();
        for (k, v) in rows(EXCHANGES)? {
            let mut key = Reader::new(&k, "exchanges");
            let mut value = Reader::new(&v, "exchanges");
            let (vhost, name, kind) = (key.string()?, key.string()?, value.string()?);
            let flags = value.u8()?;
            let arguments = value.table()?;
            let (auto_delete, internal) = (flags & 1 != 0, flags & 2 != 0);
            snapshot.exchanges.push(StoredExchange { vhost, name, kind, auto_delete, internal, arguments });
        }
        for (k, v) in rows(QUEUES)? {
            let mut key = Reader::new(&k, "queues");
            let mut value = Reader::new(&v, "queues");
            let (vhost, name, id) = (key.string()?, key.string()?, value.u64()?);
            let auto_delete = value.u8()? != 0;
            let arguments = value.table()?;
            // A node name is never empty: an empty one stands for none, before a group.
            let home = if value.bytes.has_remaining() { Some(value.string()?) } else { None };
            let home = home.filter(|home| !home.is_empty());
            let replica = if value.bytes.has_remaining() { Some(value.u64()?) } else { None };
            snapshot.queues.push(StoredQueue { vhost, name, id, auto_delete, arguments, home, replica });
        }
        for (k, _) in rows(BINDINGS)? {
            snapshot.bindings.push(decode_binding(&k)?);
        }
        for (k, v) in rows(POLICIES)? {
            snapshot.policies.push(decode_policy(&k, &v, "policies")?);
        }
        for (k, v) in rows(OPERATOR_POLICIES)? {
            snapshot.operator_policies.push(decode_policy(&k, &v, "operator_policies")?);
        }
        for (k, v) in rows(LIMITS)? {
            let mut key = Reader::new(&k, "limits");
            let mut value = Reader::new(&v, "limits");
            let (scope, name, limit) = (key.string()?, key.string()?, key.string()?);
            let value = i64::from_le_bytes(value.u64()?.to_le_bytes());
            snapshot.limits.push(StoredLimit { scope, name, limit, value });
        }
        Ok(snapshot)
    }
}

/// A policy's key (vhost, name) and value (pattern, apply-to, priority, definition).
fn encode_policy(policy: &StoredPolicy) -> (Vec<u8>, BytesMut) {
    let mut value = BytesMut::new();
    put_str(&mut value, &policy.pattern);
    put_str(&mut value, &policy.apply_to);
    value.put_i64_le(policy.priority);
    encode_table(&policy.definition, &mut value);
    (key(&[&policy.vhost, &policy.name]), value)
}

fn decode_policy(k: &[u8], v: &[u8], table: &'static str) -> Result<StoredPolicy, MetaError> {
    let mut key = Reader::new(k, table);
    let mut value = Reader::new(v, table);
    let (vhost, name) = (key.string()?, key.string()?);
    let (pattern, apply_to) = (value.string()?, value.string()?);
    let priority = i64::from_le_bytes(value.u64()?.to_le_bytes());
    let definition = value.table()?;
    Ok(StoredPolicy { vhost, name, pattern, apply_to, priority, definition })
}

fn decode_binding(raw: &[u8]) -> Result<StoredBinding, MetaError> {
    let mut key = Reader::new(raw, "bindings");
    let (vhost, source, kind, destination, binding_key) =
        (key.string()?, key.string()?, key.string()?, key.string()?, key.string()?);
    let arguments = key.table()?;
    Ok(StoredBinding { vhost, source, to_exchange: kind == "e", destination, key: binding_key, arguments })
}

/// Removes the bindings of `vhost` that `doomed` selects.
fn remove_bindings(
    bindings: &mut redb::Table<'_, &'static [u8], &'static [u8]>,
    vhost: &str,
    doomed: impl Fn(&StoredBinding) -> bool,
) -> Result<(), redb::Error> {
    let mut keys = Vec::new();
    for row in bindings.iter()? {
        let (k, _) = row?;
        let raw = k.value();
        if let Ok(binding) = decode_binding(raw)
            && binding.vhost == vhost
            && doomed(&binding)
        {
            keys.push(raw.to_vec());
        }
    }
    for k in keys {
        bindings.remove(k.as_slice())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use charon_model::Value;

    use super::*;

    fn args(pairs: &[(&str, Value)]) -> Table {
        Table(pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect())
    }

    fn binding(source: &str, to_exchange: bool, destination: &str, key: &str) -> StoredBinding {
        StoredBinding {
            vhost: "/".into(),
            source: source.into(),
            to_exchange,
            destination: destination.into(),
            key: key.into(),
            arguments: Table::new(),
        }
    }

    #[test]
    fn everything_survives_a_reopen_and_deletes_cascade_to_bindings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.redb");
        let queue = StoredQueue {
            vhost: "/".into(),
            name: "q\0odd".into(),
            id: 42,
            auto_delete: false,
            arguments: args(&[("x-queue-type", Value::long_str("quorum")), ("x-max-length", Value::I64(5))]),
            home: None,
            replica: None,
        };
        let proxied =
            StoredQueue { name: "elsewhere".into(), id: 43, home: Some("charon-2@h".into()), ..queue.clone() };
        let replicated =
            StoredQueue { name: "replicated".into(), id: 44, replica: Some(u64::MAX - 1), ..queue.clone() };
        let replica_of_elsewhere = StoredQueue { name: "replica".into(), id: 45, replica: Some(7), ..proxied.clone() };
        let exchange = StoredExchange {
            vhost: "/".into(),
            name: "x".into(),
            kind: "topic".into(),
            auto_delete: true,
            internal: false,
            arguments: args(&[("alternate-exchange", Value::long_str("ae"))]),
        };
        let policy = StoredPolicy {
            vhost: "v2".into(),
            name: "p".into(),
            pattern: "^dl".into(),
            apply_to: "queues".into(),
            priority: -3,
            definition: args(&[("message-ttl", Value::I64(1000))]),
        };
        {
            let store = MetaStore::open(&path).unwrap();
            store.put_queue(&queue).unwrap();
            store.put_queue(&proxied).unwrap();
            store.put_queue(&replicated).unwrap();
            store.put_queue(&replica_of_elsewhere).unwrap();
            store.put_exchange(&exchange).unwrap();
            store.put_policy(&policy).unwrap();
            store.put_binding(&binding("x", false, "q\0odd", "a.#")).unwrap();
            store.put_binding(&binding("amq.topic", true, "x", "b")).unwrap();
            store.put_binding(&binding("amq.direct", false, "q\0odd", "c")).unwrap();
        }
        let store = MetaStore::open(&path).unwrap();
        let snapshot = store.load().unwrap();
        let mut queues = snapshot.queues.clone();
        queues.sort_by_key(|q| q.id);
        assert_eq!(queues, vec![queue.clone(), proxied, replicated, replica_of_elsewhere]);
        store.delete_queue("/", "elsewhere").unwrap();
        store.delete_queue("/", "replicated").unwrap();
        store.delete_queue("/", "replica").unwrap();
        assert_eq!(snapshot.exchanges, vec![exchange]);
        assert_eq!(snapshot.policies, vec![policy]);
        assert_eq!(snapshot.bindings.len(), 3);

        store.delete_exchange("/", "x").unwrap();
        let keys: Vec<String> = store.load().unwrap().bindings.into_iter().map(|b| b.key).collect();
        assert_eq!(keys, vec!["c".to_owned()], "bindings from and to the exchange went with it");
        store.delete_queue("/", "q\0odd").unwrap();
        store.delete_policy("v2", "p").unwrap();
        assert_eq!(store.load().unwrap(), MetaSnapshot::default());
    }

    #[test]
    fn a_binding_is_identified_by_its_arguments_too() {
        let dir = tempfile::tempdir().unwrap();
        let store = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
        let plain = binding("amq.headers", false, "q", "");
        let mut with_args = plain.clone();
        with_args.arguments = args(&[("x-match", Value::long_str("any"))]);
        store.put_binding(&plain).unwrap();
        store.put_binding(&with_args).unwrap();
        store.delete_binding(&plain).unwrap();
        assert_eq!(store.load().unwrap().bindings, vec![with_args]);
    }

    #[test]
    fn limits_survive_a_reopen_and_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.redb");
        let limit = |scope: &str, name: &str, limit: &str, value| StoredLimit {
            scope: scope.into(),
            name: name.into(),
            limit: limit.into(),
            value,
        };
        {
            let store = MetaStore::open(&path).unwrap();
            store.put_limit(&limit("vhost", "/", "max-queues", 10)).unwrap();
            store.put_limit(&limit("vhost", "/", "max-queues", 3)).unwrap();
            store.put_limit(&limit("user", "guest", "max-channels", -1)).unwrap();
        }
        let store = MetaStore::open(&path).unwrap();
        let mut limits = store.load().unwrap().limits;
        limits.sort_by(|a, b| a.scope.cmp(&b.scope));
        assert_eq!(limits, [limit("user", "guest", "max-channels", -1), limit("vhost", "/", "max-queues", 3)]);
        store.delete_limit("vhost", "/", "max-queues").unwrap();
        assert_eq!(store.load().unwrap().limits, [limit("user", "guest", "max-channels", -1)]);
    }

    #[test]
    fn operator_policies_are_their_own_namespace_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.redb");
        let policy = |max: i64| StoredPolicy {
            vhost: "/".into(),
            name: "cap".into(),
            pattern: "^q".into(),
            apply_to: "queues".into(),
            priority: 2,
            definition: args(&[("max-length", Value::I64(max))]),
        };
        {
            let store = MetaStore::open(&path).unwrap();
            store.put_policy(&policy(10)).unwrap();
            store.put_operator_policy(&policy(3)).unwrap();
        }
        let store = MetaStore::open(&path).unwrap();
        let snapshot = store.load().unwrap();
        assert_eq!((snapshot.policies, snapshot.operator_policies), (vec![policy(10)], vec![policy(3)]));
        store.delete_operator_policy("/", "cap").unwrap();
        let snapshot = store.load().unwrap();
        assert_eq!((snapshot.policies, snapshot.operator_policies), (vec![policy(10)], vec![]));
    }
}
