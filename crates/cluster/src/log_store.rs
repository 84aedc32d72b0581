//! A group's Raft log, vote and commit point in a redb database.

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;

use openraft::OptionalSend;
use openraft::alias::{EntryOf, LogIdOf, VoteOf};
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::types::TypeConfig;

/// The entries by index, each serialized as JSON (metadata is small; the decoder bounds its
/// nesting).
const ENTRIES: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_entries");
/// The vote, the commit point and the last purged log id, by name.
pub(crate) const STATE: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_state");

const VOTE: &str = "vote";
const COMMITTED: &str = "committed";
const PURGED: &str = "purged";

/// A redb or encoding failure, as the `io::Error` openraft's storage traits answer with.
pub(crate) fn io_error(error: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::other(error)
}

/// Runs `work` on the blocking pool: redb reads and fsync'd commits are file I/O, which
/// never runs on a runtime worker.
pub(crate) async fn blocking<T, F>(work: F) -> Result<T, io::Error>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, io::Error> + Send + 'static,
{
    tokio::task::spawn_blocking(work).await.map_err(io_error)?
}

pub(crate) fn encode(value: &impl Serialize) -> Result<Vec<u8>, io::Error> {
    serde_json::to_vec(value).map_err(io_error)
}

pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, io::Error> {
    serde_json::from_slice(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Reads one value of the state table.
pub(crate) fn read_state<T: DeserializeOwned>(db: &Database, key: &str) -> Result<Option<T>, io::Error> {
    let tx = db.begin_read().map_err(io_error)?;
    let table = match tx.open_table(STATE) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(io_error(e)),
    };
    table.get(key).map_err(io_error)?.map(|value| decode(value.value())).transpose()
}

/// A group's Raft log: cheap to clone (its readers are clones), every write one durable
/// redb commit.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Database>,
}

impl LogStore {
    /// The log in `db`, which the group's [`crate::MachineStore`] may share.
    #[must_use]
    pub fn new(db: Arc<Database>) -> Self {
        Self { db }
    }

    /// Opens (or creates) a group's database at `path`.
    ///
    /// # Errors
    /// The file cannot be opened or is not a redb database.
    pub fn open_database(path: &Path) -> Result<Arc<Database>, io::Error> {
        Database::create(path).map(Arc::new).map_err(io_error)
    }

    /// Empties a group's database (log, vote, commit point, snapshot) for a node that leaves
    /// its cluster to join another; the group using it must have stopped.
    ///
    /// # Errors
    /// The database cannot be written.
    pub async fn wipe(db: &Arc<Database>) -> Result<(), io::Error> {
        let db = Arc::clone(db);
        blocking(move || {
            let tx = db.begin_write().map_err(io_error)?;
            tx.delete_table(ENTRIES).map_err(io_error)?;
            tx.delete_table(STATE).map_err(io_error)?;
            tx.delete_table(crate::machine_store::SNAPSHOT).map_err(io_error)?;
            tx.commit().map_err(io_error)
        })
        .await
    }

    async fn put_state(&self, key: &'static str, value: Vec<u8>) -> Result<(), io::Error> {
        let db = Arc::clone(&self.db);
        blocking(move || {
            let tx = db.begin_write().map_err(io_error)?;
            tx.open_table(STATE).map_err(io_error)?.insert(key, value.as_slice()).map_err(io_error)?;
            tx.commit().map_err(io_error)
        })
        .await
    }

    async fn state<T: DeserializeOwned + Send + 'static>(&self, key: &'static str) -> Result<Option<T>, io::Error> {
        let db = Arc::clone(&self.db);
        blocking(move || read_state(&db, key)).await
    }

    /// Removes the entries in `range` and, for a purge, records the last purged id in the same
    /// commit.
    async fn remove(&self, range: (Bound<u64>, Bound<u64>), purged: Option<Vec<u8>>) -> Result<(), io::Error> {
        let db = Arc::clone(&self.db);
        blocking(move || {
            let tx = db.begin_write().map_err(io_error)?;
            {
                let mut entries = tx.open_table(ENTRIES).map_err(io_error)?;
                entries.retain_in(range, |_, _| false).map_err(io_error)?;
                if let Some(purged) = purged {
                    tx.open_table(STATE).map_err(io_error)?.insert(PURGED, purged.as_slice()).map_err(io_error)?;
                }
            }
            tx.commit().map_err(io_error)
        })
        .await
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<EntryOf<TypeConfig>>, io::Error> {
        let range = (range.start_bound().cloned(), range.end_bound().cloned());
        let db = Arc::clone(&self.db);
        blocking(move || {
            let tx = db.begin_read().map_err(io_error)?;
            let entries = match tx.open_table(ENTRIES) {
                Ok(table) => table,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
                Err(e) => return Err(io_error(e)),
            };
            let mut found = Vec::new();
            for item in entries.range(range).map_err(io_error)? {
                let (_, value) = item.map_err(io_error)?;
                found.push(decode(value.value())?);
            }
            Ok(found)
        })
        .await
    }

    async fn read_vote(&mut self) -> Result<Option<VoteOf<TypeConfig>>, io::Error> {
        self.state(VOTE).await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let db = Arc::clone(&self.db);
        blocking(move || {
            let purged: Option<LogIdOf<TypeConfig>> = read_state(&db, PURGED)?;
            let tx = db.begin_read().map_err(io_error)?;
            let last = match tx.open_table(ENTRIES) {
                Ok(entries) => match entries.last().map_err(io_error)? {
                    Some((_, value)) => Some(decode::<EntryOf<TypeConfig>>(value.value())?.log_id()),
                    None => None,
                },
                Err(redb::TableError::TableDoesNotExist(_)) => None,
                Err(e) => return Err(io_error(e)),
            };
            Ok(LogState { last_log_id: last.or(purged), last_purged_log_id: purged })
        })
        .await
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &VoteOf<TypeConfig>) -> Result<(), io::Error> {
        self.put_state(VOTE, encode(vote)?).await
    }

    /// Kept so that a restarted node applies again, from the log, what its machine had
    /// applied after its last snapshot (the machine itself is not written per apply).
    async fn save_committed(&mut self, committed: Option<LogIdOf<TypeConfig>>) -> Result<(), io::Error> {
        self.put_state(COMMITTED, encode(&committed)?).await
    }

    async fn read_committed(&mut self) -> Result<Option<LogIdOf<TypeConfig>>, io::Error> {
        Ok(self.state::<Option<LogIdOf<TypeConfig>>>(COMMITTED).await?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = EntryOf<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let encoded = entries
            .into_iter()
            .map(|entry| Ok((entry.index(), encode(&entry)?)))
            .collect::<Result<Vec<(u64, Vec<u8>)>, io::Error>>()?;
        let db = Arc::clone(&self.db);
        let written = blocking(move || {
            let tx = db.begin_write().map_err(io_error)?;
            {
                let mut table = tx.open_table(ENTRIES).map_err(io_error)?;
                for (index, bytes) in &encoded {
                    table.insert(*index, bytes.as_slice()).map_err(io_error)?;
                }
            }
            tx.commit().map_err(io_error)
        })
        .await;
        // The commit is durable when it returns: the entries are flushed.
        let answer = match &written {
            Ok(()) => Ok(()),
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        };
        callback.io_completed(answer);
        written
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogIdOf<TypeConfig>>) -> Result<(), io::Error> {
        let from = last_log_id.map_or(Bound::Unbounded, |id| Bound::Excluded(id.index()));
        self.remove((from, Bound::Unbounded), None).await
    }

    async fn purge(&mut self, log_id: LogIdOf<TypeConfig>) -> Result<(), io::Error> {
        let upto = Bound::Included(log_id.index());
        self.remove((Bound::Unbounded, upto), Some(encode(&log_id)?)).await
    }
}
