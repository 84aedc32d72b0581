//! Replicated quorum queues (issue 42): each is a Raft group of its own, numbered in its
//! metadata record, among the members that record names. Every member keeps the queue's
//! journal ([`charon_queue::replica::ReplicaJournal`]); the queue's home runs the queue and
//! writes its journal through the group ([`super::replicator`]).
//!
//! A group's log and machine live in a database file of their own under the node's cluster
//! directory (`quorum/<group>.redb`), as the metadata group's do.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use charon_cluster::transport::frame::Kind;
use charon_cluster::transport::{Answering, Dispatch, Identity};
use charon_cluster::{Group, GroupError, LogStore, Machine, MachineError, Peer, Timing};
use charon_queue::replica::ReplicaJournal;
use parking_lot::Mutex;

/// A queue group's timings: a failover waits for an election (its caller's vote is refused
/// by a member whose leader's lease still holds), so the timeout is short. A snapshot holds
/// every message of the queue: taken less often than the metadata's.
const TIMING: Timing = Timing {
    heartbeat: Duration::from_millis(150),
    election: (Duration::from_millis(600), Duration::from_millis(1200)),
    compaction: 20_000,
};

/// The version of the machine queue groups replicate (shown as RabbitMQ shows rabbit_fifo's):
/// a change to how it applies commands is a new version, switched on at one log index.
pub const MACHINE_VERSION: u32 = 1;

/// The machine a queue group replicates: the queue's journal.
#[derive(Default)]
pub struct ReplicaMachine(ReplicaJournal);

impl ReplicaMachine {
    /// The journal as this member applied it.
    #[must_use]
    pub fn journal(&self) -> &ReplicaJournal {
        &self.0
    }
}

impl Machine for ReplicaMachine {
    fn apply(&mut self, _index: u64, command: &[u8]) -> Vec<u8> {
        self.0.apply(command).encode()
    }

    fn snapshot(&self) -> Vec<u8> {
        self.0.snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), MachineError> {
        self.0 = ReplicaJournal::from_snapshot(snapshot).map_err(|e| MachineError(e.to_owned()))?;
        Ok(())
    }
}

/// One queue group on this node.
pub type QueueGroup = Group<ReplicaMachine>;

/// A quorum queue's members as RabbitMQ's management API shows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuorumMembers {
    /// The member that runs the queue (RabbitMQ's leader: Charon's home).
    pub leader: String,
    /// Every member, the declaring node first.
    pub members: Vec<String>,
    /// The members that run.
    pub online: Vec<String>,
}

/// One member's Raft state in a queue's group, as `GET /api/queues/quorum/{vhost}/{name}/status`
/// shows it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemberStatus {
    /// `leader`, `follower`, `candidate`, `learner`.
    pub state: String,
    /// Whether it votes.
    pub voter: bool,
    /// The last index in its log.
    pub last_log: u64,
    /// The last index it wrote (openraft reports what it appended; its log fsyncs each write).
    pub last_written: u64,
    /// The last index it applied.
    pub applied: u64,
    /// The last index it knows committed.
    pub committed: u64,
    /// The last index its snapshot covers (`None` before the first).
    pub snapshot: Option<u64>,
    /// Its term.
    pub term: u64,
}

/// The queue groups this node is a member of.
pub struct Replicas {
    identity: Identity,
    /// Where their databases are.
    dir: PathBuf,
    groups: Mutex<HashMap<u64, Arc<QueueGroup>>>,
    /// Each group's queue, as (vhost, name): a deleted queue's group is forgotten.
    queues: Mutex<HashMap<(String, String), u64>>,
    /// Serialises starts: two declares' effects may start the same group.
    starting: tokio::sync::Mutex<()>,
    /// Woken when a group starts (a home waits for its queue's group).
    started: tokio::sync::Notify,
    /// When this node last called an election in each group (one per election timeout).
    elections: Mutex<HashMap<u64, std::time::Instant>>,
}

impl Replicas {
    /// This node's queue groups, reaching its peers as `identity`, their files in `dir`.
    #[must_use]
    pub fn new(identity: Identity, dir: PathBuf) -> Self {
        Self {
            identity,
            dir,
            groups: Mutex::default(),
            queues: Mutex::default(),
            starting: tokio::sync::Mutex::default(),
            started: tokio::sync::Notify::new(),
            elections: Mutex::default(),
        }
    }

    /// Whether this node may call an election in group `group` now (none called within the
    /// longest election timeout), noting that it does.
    pub fn may_elect(&self, group: u64) -> bool {
        let mut elections = self.elections.lock();
        let now = std::time::Instant::now();
        if elections.get(&group).is_some_and(|at| now.duration_since(*at) < TIMING.election.1) {
            return false;
        }
        elections.insert(group, now);
        true
    }

    /// Starts this node's member of group `group` (of queue `queue`, as vhost and name)
    /// unless it runs; a restarted member takes up from its file. The queue's home
    /// (`initialize`) makes `members` the group's first membership; any other member that
    /// belongs to no formed group (a member added later) asks the others to add it, once a
    /// second for a minute, until one takes it.
    ///
    /// # Errors
    /// The group's file cannot be opened, or the group does not start.
    pub async fn start(
        &self,
        group: u64,
        members: BTreeMap<u64, Peer>,
        (vhost, name): (&str, &str),
        initialize: bool,
    ) -> Result<Arc<QueueGroup>, GroupError> {
        let _one = self.starting.lock().await;
        self.queues.lock().insert((vhost.to_owned(), name.to_owned()), group);
        if let Some(running) = self.get(group) {
            return Ok(running);
        }
        let path = self.dir.join(format!("{group:016x}.redb"));
        let stopped = |e: &dyn std::fmt::Display| GroupError::Stopped(e.to_string());
        let db = tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(path.parent().unwrap_or(&path))?;
            LogStore::open_database(&path)
        })
        .await
        .map_err(|e| stopped(&e))?
        .map_err(|e| stopped(&e))?;
        let id = charon_cluster::node_id(&self.identity.name);
        let started = Group::start((id, group), self.identity.clone(), TIMING, db, (ReplicaMachine::default(), None));
        let started = Arc::new(started.await?);
        if initialize && members.contains_key(&id) {
            started.initialize(members).await?;
        } else if let Some(me) = members.get(&id).cloned().filter(|_| !initialize) {
            let others: Vec<Peer> = members.into_values().filter(|peer| peer.name != me.name).collect();
            tokio::spawn(join(Arc::downgrade(&started), id, me, others));
        }
        self.groups.lock().insert(group, Arc::clone(&started));
        self.started.notify_waiters();
        Ok(started)
    }

    /// This node's member of group `group`'s Raft state, when it runs.
    #[must_use]
    pub fn status(&self, group: u64) -> Option<MemberStatus> {
        let status = self.get(group)?.status();
        Some(MemberStatus {
            state: status.state.to_owned(),
            voter: status.voter,
            last_log: status.last_written,
            last_written: status.last_written,
            applied: status.applied,
            committed: status.committed,
            snapshot: status.snapshotted.then_some(status.snapshot),
            term: status.term,
        })
    }

    /// This node's member of group `group`, when it runs.
    #[must_use]
    pub fn get(&self, group: u64) -> Option<Arc<QueueGroup>> {
        self.groups.lock().get(&group).cloned()
    }

    /// This node's member of group `group`, once it runs (a queue restored at start waits for
    /// the cluster to start its group).
    pub async fn until_started(&self, group: u64) -> Arc<QueueGroup> {
        loop {
            let started = self.started.notified();
            if let Some(running) = self.get(group) {
                return running;
            }
            // Bounded, in case a start lands between the check and the wait.
            let _ = tokio::time::timeout(Duration::from_secs(1), started).await;
        }
    }

    /// Stops this node's member of queue `name` of `vhost`'s group and deletes its file (the
    /// queue was deleted).
    pub async fn forget(&self, vhost: &str, name: &str) {
        let Some(group) = self.queues.lock().remove(&(vhost.to_owned(), name.to_owned())) else {
            return;
        };
        let Some(running) = self.groups.lock().remove(&group) else {
            return;
        };
        running.shutdown().await;
        drop(running);
        let path = self.dir.join(format!("{group:016x}.redb"));
        if let Err(e) = tokio::task::spawn_blocking(move || std::fs::remove_file(path)).await {
            tracing::warn!(group, error = %e, "a deleted queue's group file stayed");
        }
    }
}

/// A member added to a formed group asks the others to add it (`Group::join_through`: to a
/// learner, then a voter once it caught up) until one does, the group is stopped, or a minute
/// passed.
async fn join(group: std::sync::Weak<QueueGroup>, id: u64, me: Peer, others: Vec<Peer>) {
    for _ in 0..60 {
        let Some(member) = group.upgrade() else { return };
        if member.is_formed().await && member.members().iter().any(|m| m.id == id && m.voter) {
            return;
        }
        for peer in &others {
            if member.join_through(&peer.address, id, me.clone()).await.is_ok() {
                return;
            }
        }
        drop(member);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tracing::warn!(node = me.name, "no member of the queue's group took this node in within a minute");
}

/// Peers' requests for a queue group go to this node's member of it.
impl Dispatch for Replicas {
    fn answer(&self, group: u64, kind: Kind, body: Vec<u8>) -> Answering<'_> {
        let running = self.get(group);
        Box::pin(async move {
            match running {
                Some(running) => running.answer(kind, body).await,
                None => Err(format!("no group {group} on this node")),
            }
        })
    }
}

/// What a node's groups answer: the metadata group (0), or a queue group.
pub struct Groups {
    metadata: Arc<dyn Dispatch>,
    replicas: Arc<Replicas>,
}

impl Groups {
    /// The metadata group's answers and the queue groups'.
    #[must_use]
    pub fn new(metadata: Arc<dyn Dispatch>, replicas: Arc<Replicas>) -> Self {
        Self { metadata, replicas }
    }
}

impl Dispatch for Groups {
    fn answer(&self, group: u64, kind: Kind, body: Vec<u8>) -> Answering<'_> {
        if group == 0 { self.metadata.answer(group, kind, body) } else { self.replicas.answer(group, kind, body) }
    }
}
