//! A group's machine as openraft applies it, with its last snapshot in the group's database.

use std::io::{self, Cursor};
use std::sync::Arc;

use futures_util::{Stream, TryStreamExt};
use openraft::alias::{LogIdOf, SnapshotMetaOf, SnapshotOf, StoredMembershipOf};
use openraft::storage::{EntryResponder, RaftSnapshotBuilder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, StoredMembership};
use parking_lot::Mutex;
use redb::{Database, ReadableDatabase, TableDefinition};

use crate::log_store::{STATE, blocking, encode, io_error, read_state};
use crate::machine::{Effects, Machine};
use crate::types::{Answer, TypeConfig};

/// The last snapshot's state, beside its metadata (in the log's state table).
pub(crate) const SNAPSHOT: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_snapshot");
const SNAPSHOT_META: &str = "snapshot_meta";
const SNAPSHOT_DATA: &str = "data";

type Meta = SnapshotMetaOf<TypeConfig>;

/// What openraft asks of a machine besides its state: what was applied last, the membership
/// it applied last, and the last snapshot.
struct Applied<M> {
    machine: M,
    last_applied: Option<LogIdOf<TypeConfig>>,
    membership: StoredMembershipOf<TypeConfig>,
    snapshot: Option<(Meta, Arc<Vec<u8>>)>,
}

/// A group's machine (cheap to clone: the snapshot builder is a clone). The lock is held only
/// while one entry applies or the state is copied for a snapshot: never across I/O.
pub struct MachineStore<M> {
    applied: Arc<Mutex<Applied<M>>>,
    db: Arc<Database>,
    /// What this node does with each committed command besides applying it.
    effects: Option<Arc<dyn Effects>>,
}

impl<M> Clone for MachineStore<M> {
    fn clone(&self) -> Self {
        Self { applied: Arc::clone(&self.applied), db: Arc::clone(&self.db), effects: self.effects.clone() }
    }
}

impl<M: Machine> MachineStore<M> {
    /// `machine` restored from the last snapshot in `db`, if there is one.
    ///
    /// # Errors
    /// The database cannot be read, or the machine refuses its own snapshot.
    pub async fn open(db: Arc<Database>, machine: M, effects: Option<Arc<dyn Effects>>) -> Result<Self, io::Error> {
        let reading = Arc::clone(&db);
        let stored = blocking(move || {
            let Some(meta) = read_state::<Meta>(&reading, SNAPSHOT_META)? else {
                return Ok(None);
            };
            let tx = reading.begin_read().map_err(io_error)?;
            let table = tx.open_table(SNAPSHOT).map_err(io_error)?;
            let data = table.get(SNAPSHOT_DATA).map_err(io_error)?.map(|v| v.value().to_vec()).unwrap_or_default();
            Ok(Some((meta, data)))
        })
        .await?;
        let empty = machine.snapshot();
        let mut applied =
            Applied { machine, last_applied: None, membership: StoredMembership::default(), snapshot: None };
        let mut restored = None;
        if let Some((meta, data)) = stored {
            applied.machine.restore(&data).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            applied.last_applied = meta.last_log_id;
            applied.membership = meta.last_membership.clone();
            let data = Arc::new(data);
            restored = Some(Arc::clone(&data));
            applied.snapshot = Some((meta, data));
        }
        // The layer that follows the machine makes what the snapshot records, as a node given
        // that snapshot by its leader does: what the log holds after it is applied again next.
        if let (Some(effects), Some(data)) = (&effects, restored) {
            effects.restored(&empty, &data).await;
        }
        Ok(Self { applied: Arc::new(Mutex::new(applied)), db, effects })
    }

    /// Calls `read` with the machine as applied so far (for reads served by this node).
    pub fn read<T>(&self, read: impl FnOnce(&M) -> T) -> T {
        read(&self.applied.lock().machine)
    }

    /// Writes `meta` and `data` as the group's snapshot in one durable commit.
    async fn persist(&self, meta: &Meta, data: Arc<Vec<u8>>) -> Result<(), io::Error> {
        let meta = encode(meta)?;
        let db = Arc::clone(&self.db);
        blocking(move || {
            let tx = db.begin_write().map_err(io_error)?;
            tx.open_table(SNAPSHOT).map_err(io_error)?.insert(SNAPSHOT_DATA, data.as_slice()).map_err(io_error)?;
            tx.open_table(STATE).map_err(io_error)?.insert(SNAPSHOT_META, meta.as_slice()).map_err(io_error)?;
            tx.commit().map_err(io_error)
        })
        .await
    }
}

impl<M: Machine> RaftSnapshotBuilder<TypeConfig> for MachineStore<M> {
    type SnapshotData = Cursor<Vec<u8>>;

    async fn build_snapshot(&mut self) -> Result<SnapshotOf<TypeConfig, Self::SnapshotData>, io::Error> {
        let (meta, data) = {
            let applied = self.applied.lock();
            let meta = Meta { last_log_id: applied.last_applied, last_membership: applied.membership.clone() };
            (meta, Arc::new(applied.machine.snapshot()))
        };
        self.persist(&meta, Arc::clone(&data)).await?;
        self.applied.lock().snapshot = Some((meta.clone(), Arc::clone(&data)));
        Ok(SnapshotOf::<TypeConfig, _> { meta, snapshot: Cursor::new(data.to_vec()) })
    }
}

impl<M: Machine> RaftStateMachine<TypeConfig> for MachineStore<M> {
    type SnapshotData = Cursor<Vec<u8>>;
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogIdOf<TypeConfig>>, StoredMembershipOf<TypeConfig>), io::Error> {
        let applied = self.applied.lock();
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let answer = {
                let mut applied = self.applied.lock();
                applied.last_applied = Some(entry.log_id);
                match &entry.payload {
                    EntryPayload::Blank => Answer::default(),
                    EntryPayload::Normal(command) => Answer(applied.machine.apply(entry.log_id.index(), &command.0)),
                    EntryPayload::Membership(membership) => {
                        applied.membership = StoredMembership::new(Some(entry.log_id), membership.clone());
                        Answer::default()
                    }
                }
            };
            if let (Some(effects), EntryPayload::Normal(command)) = (&self.effects, &entry.payload) {
                effects.apply(&command.0, &answer.0).await;
            }
            if let Some(responder) = responder {
                responder.send(answer);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(&mut self, meta: &Meta, snapshot: Self::SnapshotData) -> Result<(), io::Error> {
        let data = Arc::new(snapshot.into_inner());
        let before = {
            let mut applied = self.applied.lock();
            let before = self.effects.as_ref().map(|_| applied.machine.snapshot());
            applied.machine.restore(&data).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            applied.last_applied = meta.last_log_id;
            applied.membership = meta.last_membership.clone();
            before
        };
        self.persist(meta, Arc::clone(&data)).await?;
        self.applied.lock().snapshot = Some((meta.clone(), Arc::clone(&data)));
        if let (Some(effects), Some(before)) = (&self.effects, before) {
            effects.restored(&before, &data).await;
        }
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<SnapshotOf<TypeConfig, Self::SnapshotData>>, io::Error> {
        let applied = self.applied.lock();
        Ok(applied.snapshot.as_ref().map(|(meta, data)| SnapshotOf::<TypeConfig, _> {
            meta: meta.clone(),
            snapshot: Cursor::new(data.to_vec()),
        }))
    }
}
