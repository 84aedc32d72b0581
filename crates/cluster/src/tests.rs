//! openraft's storage suite on [`LogStore`] and [`MachineStore`], and what a restart reads back.

use std::sync::Arc;

use openraft::StorageError;
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogReader, RaftLogStorage, RaftSnapshotBuilder, RaftStateMachine};
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::type_config::TypeConfigExt;
use openraft::vote::RaftLeaderId;
use openraft::{Entry, EntryPayload, LogId, Vote};
use tempfile::TempDir;

use crate::{Command, LogStore, Machine, MachineError, MachineStore, TypeConfig};

/// A machine that keeps every command it applied, with its index.
#[derive(Default)]
struct Journal(Vec<(u64, Vec<u8>)>);

impl Machine for Journal {
    fn apply(&mut self, index: u64, command: &[u8]) -> Vec<u8> {
        self.0.push((index, command.to_vec()));
        u64::try_from(self.0.len()).unwrap_or(u64::MAX).to_be_bytes().to_vec()
    }

    fn snapshot(&self) -> Vec<u8> {
        serde_json::to_vec(&self.0).unwrap_or_default()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), MachineError> {
        self.0 = serde_json::from_slice(snapshot).map_err(|e| MachineError(e.to_string()))?;
        Ok(())
    }
}

/// Each build: a fresh database in its own directory, kept while the test runs.
struct Builder;

impl StoreBuilder<TypeConfig, LogStore, MachineStore<Journal>, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, LogStore, MachineStore<Journal>), StorageError<TypeConfig>> {
        let dir = TempDir::new().map_err(|e| StorageError::read(TypeConfig::err_from_error(&e)))?;
        let db = LogStore::open_database(&dir.path().join("group.redb"))
            .map_err(|e| StorageError::read(TypeConfig::err_from_error(&e)))?;
        let machine = MachineStore::open(Arc::clone(&db), Journal::default(), None)
            .await
            .map_err(|e| StorageError::read(TypeConfig::err_from_error(&e)))?;
        Ok((dir, LogStore::new(db), machine))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openrafts_storage_suite_passes_on_the_redb_log_and_machine() -> Result<(), StorageError<TypeConfig>> {
    Suite::test_all(Builder).await
}

fn log_id(term: u64, index: u64) -> LogId<openraft::alias::CommittedLeaderIdOf<TypeConfig>> {
    LogId::new(openraft::impls::leader_id_adv::LeaderId::new(term, 1).to_committed(), index)
}

fn normal(
    term: u64,
    index: u64,
    command: &[u8],
) -> Entry<openraft::alias::CommittedLeaderIdOf<TypeConfig>, openraft::alias::PayloadOf<TypeConfig>> {
    Entry { log_id: log_id(term, index), payload: EntryPayload::Normal(Command(command.to_vec())) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopened_group_reads_back_its_log_vote_commit_point_and_snapshot() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("group.redb");
    let vote = Vote::new(3, 1);
    {
        let db = LogStore::open_database(&path).unwrap();
        let mut log = LogStore::new(Arc::clone(&db));
        log.save_vote(&vote).await.unwrap();
        let entries = vec![normal(3, 1, b"a"), normal(3, 2, b"b"), normal(3, 3, b"c")];
        log.append(entries, IOFlushed::noop()).await.unwrap();
        log.save_committed(Some(log_id(3, 3))).await.unwrap();
        log.purge(log_id(3, 1)).await.unwrap();
        let mut machine = MachineStore::open(Arc::clone(&db), Journal::default(), None).await.unwrap();
        let applied = vec![Ok((normal(3, 1, b"a"), None)), Ok((normal(3, 2, b"b"), None))];
        machine.apply(futures_util::stream::iter(applied)).await.unwrap();
        let snapshot = machine.get_snapshot_builder().await.build_snapshot().await.unwrap();
        assert_eq!(snapshot.meta.last_log_id, Some(log_id(3, 2)));
    }
    let db = LogStore::open_database(&path).unwrap();
    let mut log = LogStore::new(Arc::clone(&db));
    assert_eq!(log.read_vote().await.unwrap(), Some(vote));
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(3, 3)));
    let state = log.get_log_state().await.unwrap();
    assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(log_id(3, 1)), Some(log_id(3, 3))));
    let kept: Vec<u64> = log.try_get_log_entries(0..10).await.unwrap().iter().map(RaftEntry::index).collect();
    assert_eq!(kept, vec![2, 3]);
    let mut machine = MachineStore::open(db, Journal::default(), None).await.unwrap();
    assert_eq!(machine.applied_state().await.unwrap().0, Some(log_id(3, 2)));
    assert_eq!(machine.read(|journal| journal.0.clone()), vec![(1, b"a".to_vec()), (2, b"b".to_vec())]);
}

#[test]
fn a_command_is_one_base64_string_and_an_older_array_still_reads() {
    let command = Command(vec![0, 1, 254, 255, b'x']);
    let json = serde_json::to_string(&command).unwrap_or_default();
    assert_eq!(json, "\"AAH+/3g=\"");
    assert_eq!(serde_json::from_str::<Command>(&json).ok(), Some(command.clone()));
    assert_eq!(serde_json::from_str::<Command>("[0,1,254,255,120]").ok(), Some(command));
    assert!(serde_json::from_str::<Command>("\"not base64!\"").is_err());
    assert!(serde_json::from_str::<Command>("[256]").is_err());
}
