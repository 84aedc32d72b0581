//! Durable redrive jobs (issue 20), in the metadata store's redb file.
//!
//! The store keeps each job as an opaque record under its vhost and id: the engine owns the
//! record's layout (its JSON), as a job's spec and progress are the engine's business. A job
//! is written when it is created, whenever its state changes and as its progress advances, and
//! read back at start so that running jobs resume where they were.

use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use crate::meta::{MetaError, MetaStore, Reader, db_error, key};

const REDRIVES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("redrives");

/// One stored redrive job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRedrive {
    /// Its vhost.
    pub vhost: String,
    /// Its id.
    pub id: String,
    /// The engine's record of it.
    pub record: Vec<u8>,
}

impl MetaStore {
    /// Records (or replaces) a redrive job.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn put_redrive(&self, job: &StoredRedrive) -> Result<(), MetaError> {
        let key = key(&[&job.vhost, &job.id]);
        self.write_redrives("put redrive", |table| {
            table.insert(key.as_slice(), job.record.as_slice()).map(drop).map_err(Into::into)
        })
    }

    /// Forgets a redrive job.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn delete_redrive(&self, vhost: &str, id: &str) -> Result<(), MetaError> {
        let key = key(&[vhost, id]);
        self.write_redrives("delete redrive", |table| table.remove(key.as_slice()).map(drop).map_err(Into::into))
    }

    /// Every stored redrive job.
    ///
    /// # Errors
    /// When redb fails or a key does not decode.
    pub fn load_redrives(&self) -> Result<Vec<StoredRedrive>, MetaError> {
        let txn = self.db.begin_read().map_err(|e| db_error("read")(e.into()))?;
        let table = match txn.open_table(REDRIVES) {
            Ok(table) => table,
            // Never written: no jobs.
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(db_error("read")(e.into())),
        };
        let mut out = Vec::new();
        for row in table.iter().map_err(|e| db_error("read")(e.into()))? {
            let (k, v) = row.map_err(|e| db_error("read")(e.into()))?;
            let mut key = Reader::new(k.value(), "redrives");
            let (vhost, id) = (key.string()?, key.string()?);
            out.push(StoredRedrive { vhost, id, record: v.value().to_vec() });
        }
        Ok(out)
    }

    fn write_redrives(
        &self,
        what: &'static str,
        change: impl FnOnce(&mut redb::Table<'_, &'static [u8], &'static [u8]>) -> Result<(), redb::Error>,
    ) -> Result<(), MetaError> {
        let txn = self.db.begin_write().map_err(|e| db_error(what)(e.into()))?;
        {
            let mut table = txn.open_table(REDRIVES).map_err(|e| db_error(what)(e.into()))?;
            change(&mut table).map_err(db_error(what))?;
        }
        txn.commit().map_err(|e| db_error(what)(e.into()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn jobs_survive_a_reopen_and_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.redb");
        let job = |vhost: &str, id: &str, record: &[u8]| StoredRedrive {
            vhost: vhost.into(),
            id: id.into(),
            record: record.to_vec(),
        };
        {
            let store = MetaStore::open(&path).unwrap();
            assert_eq!(store.load_redrives().unwrap(), []);
            store.put_redrive(&job("/", "a", b"{1}")).unwrap();
            store.put_redrive(&job("/", "a", b"{2}")).unwrap();
            store.put_redrive(&job("v", "b", b"{3}")).unwrap();
        }
        let store = MetaStore::open(&path).unwrap();
        assert_eq!(store.load_redrives().unwrap(), [job("/", "a", b"{2}"), job("v", "b", b"{3}")]);
        store.delete_redrive("/", "a").unwrap();
        assert_eq!(store.load_redrives().unwrap(), [job("v", "b", b"{3}")]);
    }
}
