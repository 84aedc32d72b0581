//! A Raft group of this node: openraft's `Raft` over our stores and transport, and what the
//! rest of Charon asks of it.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::Arc;
use std::time::Duration;

use openraft::alias::{SnapshotMetaOf, SnapshotOf, VoteOf};
use openraft::async_runtime::WatchReceiver;
use openraft::error::{
    ClientWriteError, InitializeError, NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError,
    Unreachable,
};
use openraft::network::{RPCOption, RaftNetworkFactory, v2::RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest, TransferLeaderResponse,
    VoteRequest, VoteResponse,
};
use openraft::{ChangeMembers, Config, Raft};
use redb::Database;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::log_store::{decode, encode};
use crate::machine::Effects;
use crate::transport::frame::Kind;
use crate::transport::{Answering, CallError, Connection, Dispatch, Identity};
use crate::{Command, LogStore, Machine, MachineStore, Peer, TypeConfig};

/// How long a write may take, committed by a majority and applied here: a leader cut off from
/// its majority never commits, and a forwarded write may meet a connection that went silent.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a group refused or could not do what it was asked.
#[derive(Debug, Error)]
pub enum GroupError {
    /// This node is not the leader; the leader, when it is known.
    #[error("not the leader (leader: {0:?})")]
    NotLeader(Option<(u64, Peer)>),
    /// No leader could take the command (no majority is reachable, or an election is on).
    #[error("no leader reachable: {0}")]
    NoLeader(String),
    /// The member asked belongs to no formed group yet (it is starting, as the asking node).
    #[error("the member asked belongs to no formed cluster yet")]
    NotFormed,
    /// The group stopped (its storage failed, or it was shut down).
    #[error("group stopped: {0}")]
    Stopped(String),
    /// Anything else openraft refused (a second initialization, a membership change in
    /// progress).
    #[error("{0}")]
    Refused(String),
}

/// A whole snapshot as it travels: the vote it is sent under and its metadata (the machine's
/// bytes follow the encoded header).
#[derive(Serialize, Deserialize)]
struct SnapshotHeader {
    vote: VoteOf<TypeConfig>,
    meta: SnapshotMetaOf<TypeConfig>,
}

/// Opens the connections of one group to its peers.
pub struct Network {
    identity: Identity,
    group: u64,
}

/// One group's client of one peer.
pub struct PeerClient {
    connection: Connection,
    group: u64,
}

fn unreachable(error: &CallError) -> RPCError<TypeConfig> {
    match error {
        CallError::Failed(_) => RPCError::Network(NetworkError::new(error)),
        _ => RPCError::Unreachable(Unreachable::new(error)),
    }
}

fn undecodable(error: &std::io::Error) -> RPCError<TypeConfig> {
    RPCError::Network(NetworkError::new(error))
}

impl PeerClient {
    /// One request, given up after `ttl` (a peer cut off answers nothing; the connection is
    /// then dropped, as half a frame may be on it).
    async fn call<Q: Serialize, A: serde::de::DeserializeOwned>(
        &mut self,
        kind: Kind,
        request: &Q,
        ttl: Duration,
    ) -> Result<A, RPCError<TypeConfig>> {
        let body = encode(request).map_err(|e| undecodable(&e))?;
        let answer = self.timed(kind, body, ttl).await.map_err(|e| unreachable(&e))?;
        decode(&answer).map_err(|e| undecodable(&e))
    }

    async fn timed(&mut self, kind: Kind, body: Vec<u8>, ttl: Duration) -> Result<Vec<u8>, CallError> {
        match tokio::time::timeout(ttl, self.connection.call(self.group, kind, body)).await {
            Ok(answer) => answer,
            Err(elapsed) => {
                self.connection.reset();
                Err(CallError::Unreachable(std::io::Error::new(std::io::ErrorKind::TimedOut, elapsed)))
            }
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, _target: u64, node: &Peer) -> PeerClient {
        PeerClient { connection: Connection::new(self.identity.clone(), node.address.clone()), group: self.group }
    }
}

impl RaftNetworkV2<TypeConfig> for PeerClient {
    type SnapshotData = Cursor<Vec<u8>>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(Kind::Append, &rpc, option.hard_ttl()).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(Kind::Vote, &rpc, option.hard_ttl()).await
    }

    async fn transfer_leader(
        &mut self,
        rpc: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(Kind::TransferLeader, &rpc, option.hard_ttl()).await
    }

    async fn full_snapshot(
        &mut self,
        vote: VoteOf<TypeConfig>,
        snapshot: SnapshotOf<TypeConfig, Self::SnapshotData>,
        _cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let streaming = |e: RPCError<TypeConfig>| match e {
            RPCError::Unreachable(e) => StreamingError::Unreachable(e),
            other => StreamingError::Network(NetworkError::new(&other)),
        };
        let header = encode(&SnapshotHeader { vote, meta: snapshot.meta }).map_err(|e| streaming(undecodable(&e)))?;
        let header_length = u32::try_from(header.len()).unwrap_or(u32::MAX);
        let data = snapshot.snapshot.into_inner();
        let mut body = Vec::with_capacity(4 + header.len() + data.len());
        body.extend_from_slice(&header_length.to_be_bytes());
        body.extend_from_slice(&header);
        body.extend_from_slice(&data);
        let answer = self.timed(Kind::Snapshot, body, option.hard_ttl()).await;
        let answer = answer.map_err(|e| streaming(unreachable(&e)))?;
        decode(&answer).map_err(|e| streaming(undecodable(&e)))
    }
}

/// A group's Raft timings and log compaction (ours, so that no caller names openraft's
/// `Config`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// How often the leader sends a heartbeat.
    pub heartbeat: Duration,
    /// A follower that heard no heartbeat for a random time in this range starts an election.
    pub election: (Duration, Duration),
    /// A snapshot is taken after this many entries since the last one, and the log it covers
    /// is purged but for a fifth of that (so a member a little behind still gets entries, one
    /// further behind gets the snapshot): what bounds a group's log on disk.
    pub compaction: u64,
}

impl Timing {
    fn config(self, name: &str) -> Config {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Config {
            cluster_name: name.to_owned(),
            heartbeat_interval: ms(self.heartbeat),
            election_timeout_min: ms(self.election.0),
            election_timeout_max: ms(self.election.1),
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(self.compaction.max(1)),
            max_in_snapshot_log_to_keep: self.compaction / 5,
            ..Config::default()
        }
    }
}

/// RabbitMQ's quorum-queue guidance and the issue's: up to five voters, the rest learners
/// (more voters slow every commit and add no safety that matters).
pub const MAX_VOTERS: usize = 5;

/// A change of a group's members, as a member forwards it to the leader.
#[derive(Clone, Debug, Serialize, Deserialize)]
enum MemberChange {
    /// A node joins: a learner until it caught up, then a voter while there are fewer than
    /// [`MAX_VOTERS`].
    Add { id: u64, peer: Peer },
    /// A node is forgotten (`forget_cluster_node`).
    Remove { id: u64 },
    /// Member `id` is to lead: the leader hands leadership over to it.
    Lead { id: u64 },
}

/// A member as the group's membership has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its Raft id.
    pub id: u64,
    /// Its name and address.
    pub peer: Peer,
    /// A voter (or a learner).
    pub voter: bool,
}

/// What a member that belongs to no formed group answers a joining node.
const NOT_FORMED: &str = "not formed";

/// A refused write or membership change, as the group's error (a redirect keeps the leader).
fn refused(error: RaftError<TypeConfig, ClientWriteError<TypeConfig>>) -> GroupError {
    match error {
        RaftError::APIError(ClientWriteError::ForwardToLeader(to)) => {
            GroupError::NotLeader(to.leader_id.zip(to.leader_node))
        }
        RaftError::APIError(other) => GroupError::Refused(other.to_string()),
        RaftError::Fatal(fatal) => GroupError::Stopped(fatal.to_string()),
    }
}

/// A group's Raft state on this node, for the metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// The current term.
    pub term: u64,
    /// Whether this node leads.
    pub leader: bool,
    /// The last log index this node knows committed.
    pub committed: u64,
    /// The last log index this node applied.
    pub applied: u64,
    /// The last log index this node wrote.
    pub last_written: u64,
    /// The last log index its latest snapshot covers (0 before the first).
    pub snapshot: u64,
    /// Whether it took or was given a snapshot yet.
    pub snapshotted: bool,
    /// Its Raft state in Ra's words, as RabbitMQ shows them: `leader`, `follower`,
    /// `candidate`, `learner` (a member catching up before it votes), `shutdown`.
    pub state: &'static str,
    /// Whether it votes (a learner does not).
    pub voter: bool,
}

/// What a leader answers a proposal with: where the command was committed, and the
/// machine's answer.
#[derive(Serialize, Deserialize)]
struct Committed {
    index: u64,
    answer: Vec<u8>,
}

/// One Raft group this node is a member of.
pub struct Group<M: Machine> {
    raft: Raft<TypeConfig, MachineStore<M>>,
    /// This member's Raft id.
    id: u64,
    machine: MachineStore<M>,
    /// The group's number on the wire (0: the metadata group).
    group: u64,
    /// How this node reaches the leader to forward a write.
    identity: Identity,
}

impl<M: Machine> Group<M> {
    /// Starts this node's member `id` of group `group`, its log and machine in `db`, reaching
    /// its peers as `identity`, acting on each committed command with `effects`. A restarted
    /// member takes up from what `db` holds.
    ///
    /// # Errors
    /// The timings are invalid (an election range below the heartbeat), or the stores cannot
    /// be read.
    pub async fn start(
        (id, group): (u64, u64),
        identity: Identity,
        timing: Timing,
        db: Arc<Database>,
        (machine, effects): (M, Option<Arc<dyn Effects>>),
    ) -> Result<Self, GroupError> {
        let config = timing.config(&format!("group-{group}"));
        let config = Arc::new(config.validate().map_err(|e| GroupError::Refused(e.to_string()))?);
        let machine = MachineStore::open(Arc::clone(&db), machine, effects)
            .await
            .map_err(|e| GroupError::Stopped(e.to_string()))?;
        let network = Network { identity: identity.clone(), group };
        let raft = Raft::new(id, config, network, LogStore::new(db), machine.clone())
            .await
            .map_err(|e| GroupError::Stopped(e.to_string()))?;
        Ok(Self { raft, id, machine, group, identity })
    }

    /// Makes `members` the group's first membership, unless it has one: true when this call
    /// did. Every member of a fresh cluster may call it with the same members (openraft's
    /// voting elects one leader among them); different lists on different nodes would form
    /// different clusters, which is why every node is given the same peer list.
    ///
    /// # Errors
    /// This node is not among `members`, or the group stopped.
    pub async fn initialize(&self, members: BTreeMap<u64, Peer>) -> Result<bool, GroupError> {
        match self.raft.initialize(members).await {
            Ok(()) => Ok(true),
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(false),
            Err(e) => Err(GroupError::Refused(e.to_string())),
        }
    }

    /// Replicates `command` from any member: proposed here when this node leads, otherwise
    /// forwarded to the leader; answered once this node applied it too, so that what the
    /// caller does next on this node sees it (a queue declared on one node is there for the
    /// publish that follows on the same node).
    ///
    /// # Errors
    /// No leader is reachable, the leader refused, or this node did not apply the command in
    /// time.
    pub async fn write(&self, command: Vec<u8>) -> Result<Vec<u8>, GroupError> {
        let deadline = tokio::time::Instant::now() + WRITE_TIMEOUT;
        let timed_out = |_| GroupError::NoLeader(format!("no majority committed the write within {WRITE_TIMEOUT:?}"));
        let committed =
            match tokio::time::timeout_at(deadline, self.commit(command.clone())).await.map_err(timed_out)? {
                Err(GroupError::NotLeader(Some((_, leader)))) => {
                    tokio::time::timeout_at(deadline, self.forward(&leader, command)).await.map_err(timed_out)??
                }
                Err(GroupError::NotLeader(None)) => return Err(GroupError::NoLeader("no leader known".to_owned())),
                other => other?,
            };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let wait = self.raft.wait(Some(left));
        let applied = wait.applied_index_at_least(Some(committed.index), "write").await;
        applied.map_err(|e| GroupError::Stopped(e.to_string()))?;
        Ok(committed.answer)
    }

    async fn commit(&self, command: Vec<u8>) -> Result<Committed, GroupError> {
        let written = self.raft.client_write(Command(command)).await.map_err(refused)?;
        Ok(Committed { index: written.log_id.index(), answer: written.data.0 })
    }

    async fn forward(&self, leader: &Peer, command: Vec<u8>) -> Result<Committed, GroupError> {
        let answer = self.call(&leader.address, Kind::Propose, command).await?;
        decode(&answer).map_err(|e| GroupError::NoLeader(e.to_string()))
    }

    /// One request to the member at `address` (the leader, or a member a joining node
    /// asks), given up after [`WRITE_TIMEOUT`].
    async fn call(&self, address: &str, kind: Kind, body: Vec<u8>) -> Result<Vec<u8>, GroupError> {
        let mut connection = Connection::new(self.identity.clone(), address.to_owned());
        match tokio::time::timeout(WRITE_TIMEOUT, connection.call(self.group, kind, body)).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(CallError::Failed(reason))) if reason == NOT_FORMED => Err(GroupError::NotFormed),
            Ok(Err(e)) => Err(GroupError::NoLeader(format!("{address}: {e}"))),
            Err(_) => Err(GroupError::NoLeader(format!("{address} did not answer"))),
        }
    }

    /// The members as this node last learnt them, by id.
    #[must_use]
    pub fn members(&self) -> Vec<Member> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        let membership = &metrics.membership_config;
        let voters: std::collections::BTreeSet<u64> = membership.voter_ids().collect();
        membership
            .nodes()
            .map(|(id, peer)| Member { id: *id, peer: peer.clone(), voter: voters.contains(id) })
            .collect()
    }

    /// The group's Raft state on this node.
    #[must_use]
    pub fn status(&self) -> Status {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        let index = |id: Option<&openraft::LogId<_>>| id.map_or(0, |id| id.index());
        Status {
            term: metrics.current_term,
            leader: metrics.current_leader == Some(metrics.id),
            committed: index(metrics.local_committed.as_ref()),
            applied: index(metrics.last_applied.as_ref()),
            last_written: metrics.last_log_index.unwrap_or(0),
            snapshot: index(metrics.snapshot.as_ref()),
            snapshotted: metrics.snapshot.is_some(),
            state: match metrics.state {
                openraft::ServerState::Leader => "leader",
                openraft::ServerState::Follower => "follower",
                openraft::ServerState::Candidate => "candidate",
                openraft::ServerState::Learner => "learner",
                openraft::ServerState::Shutdown => "shutdown",
            },
            voter: metrics.membership_config.voter_ids().any(|id| id == metrics.id),
        }
    }

    /// Whether this node belongs to a formed group (initialized, or joined and replicated to).
    pub async fn is_formed(&self) -> bool {
        self.raft.is_initialized().await.unwrap_or(false)
    }

    /// Adds `peer` as member `id`, from any member (forwarded to the leader).
    ///
    /// # Errors
    /// No leader is reachable, or the change was refused.
    pub async fn add_member(&self, id: u64, peer: Peer) -> Result<(), GroupError> {
        self.change(MemberChange::Add { id, peer }).await
    }

    /// Removes member `id`, from any member (forwarded to the leader).
    ///
    /// # Errors
    /// No leader is reachable, or the change was refused (the last voter cannot go).
    pub async fn remove_member(&self, id: u64) -> Result<(), GroupError> {
        self.change(MemberChange::Remove { id }).await
    }

    /// Has this node lead the group, asking the leader to hand leadership over (a queue's home
    /// writes through the group: as its leader, each write is one round to the followers
    /// rather than a forward first). Returns once asked: the handover follows.
    ///
    /// # Errors
    /// No leader is reachable.
    pub async fn lead(&self) -> Result<(), GroupError> {
        if self.status().leader {
            return Ok(());
        }
        self.change(MemberChange::Lead { id: self.id }).await
    }

    /// The leader as this node knows it, with its address.
    async fn leader_peer(&self) -> Option<(u64, Peer)> {
        let leader = self.raft.current_leader().await?;
        let peer = self.members().into_iter().find(|m| m.id == leader)?.peer;
        Some((leader, peer))
    }

    /// Asks the member at `address` to add this node (`me`); the node it asked is in a formed
    /// group when this succeeds.
    ///
    /// # Errors
    /// It cannot be reached, belongs to no formed group yet, or no leader took the change.
    pub async fn join_through(&self, address: &str, id: u64, me: Peer) -> Result<(), GroupError> {
        let body = encode(&MemberChange::Add { id, peer: me }).map_err(|e| GroupError::Refused(e.to_string()))?;
        self.call(address, Kind::Membership, body).await.map(|_| ())
    }

    async fn change(&self, change: MemberChange) -> Result<(), GroupError> {
        let timed_out = |_| GroupError::NoLeader(format!("no majority took the change within {WRITE_TIMEOUT:?}"));
        match tokio::time::timeout(WRITE_TIMEOUT, self.change_here(&change)).await.map_err(timed_out)? {
            Err(GroupError::NotLeader(Some((_, leader)))) => {
                let body = encode(&change).map_err(|e| GroupError::Refused(e.to_string()))?;
                self.call(&leader.address, Kind::Membership, body).await.map(|_| ())
            }
            Err(GroupError::NotLeader(None)) => Err(GroupError::NoLeader("no leader known".to_owned())),
            other => other,
        }
    }

    /// The change, made here if this node leads.
    async fn change_here(&self, change: &MemberChange) -> Result<(), GroupError> {
        let members = self.members();
        match change {
            MemberChange::Add { id, peer } => {
                if members.iter().any(|m| m.id == *id && m.voter) {
                    return Ok(());
                }
                // Blocking: the learner has caught up before it may vote.
                self.raft.add_learner(*id, peer.clone(), true).await.map_err(refused)?;
                if members.iter().filter(|m| m.voter).count() < MAX_VOTERS {
                    let voters = ChangeMembers::AddVoterIds(std::iter::once(*id).collect());
                    self.raft.change_membership(voters, false).await.map_err(refused)?;
                }
                Ok(())
            }
            MemberChange::Lead { id } => {
                if self.raft.current_leader().await != Some(self.id) {
                    return Err(GroupError::NotLeader(self.leader_peer().await));
                }
                if *id != self.id {
                    self.raft.trigger().transfer_leader(*id).await.map_err(|e| GroupError::Stopped(e.to_string()))?;
                }
                Ok(())
            }
            MemberChange::Remove { id } => {
                let Some(member) = members.iter().find(|m| m.id == *id) else {
                    return Ok(());
                };
                let set = std::iter::once(*id).collect();
                let removal =
                    if member.voter { ChangeMembers::RemoveVoters(set) } else { ChangeMembers::RemoveNodes(set) };
                self.raft.change_membership(removal, false).await.map_err(refused)?;
                Ok(())
            }
        }
    }

    /// Starts an election at once (no pre-vote): the leader's node is known to be down, and
    /// waiting out the election timeout would only delay the failover.
    ///
    /// # Errors
    /// The group stopped.
    pub async fn elect(&self) -> Result<(), GroupError> {
        self.raft.trigger().elect(false).await.map_err(|e| GroupError::Stopped(e.to_string()))
    }

    /// This member's Raft id.
    #[must_use]
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The leader this node knows of.
    pub async fn leader(&self) -> Option<u64> {
        self.raft.current_leader().await
    }

    /// Calls `read` with the machine as this node applied it so far.
    pub fn read<T>(&self, read: impl FnOnce(&M) -> T) -> T {
        self.machine.read(read)
    }

    /// Stops the group's tasks; what it stored stays.
    pub async fn shutdown(&self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "raft group did not stop cleanly");
        }
    }

    /// Answers a peer's request for this group.
    ///
    /// # Errors
    /// The request does not decode or is no request, or the group stopped; the text goes
    /// back to the peer.
    pub async fn answer(&self, kind: Kind, body: Vec<u8>) -> Result<Vec<u8>, String> {
        let text = |e: &dyn std::fmt::Display| e.to_string();
        match kind {
            Kind::Append => {
                let request = decode(&body).map_err(|e| text(&e))?;
                let answer = self.raft.append_entries(request).await.map_err(|e| text(&e))?;
                encode(&answer).map_err(|e| text(&e))
            }
            Kind::Vote => {
                let request = decode(&body).map_err(|e| text(&e))?;
                let answer = self.raft.vote(request).await.map_err(|e| text(&e))?;
                encode(&answer).map_err(|e| text(&e))
            }
            Kind::TransferLeader => {
                let request = decode(&body).map_err(|e| text(&e))?;
                let answer = self.raft.handle_transfer_leader(request).await.map_err(|e| text(&e))?;
                encode(&answer).map_err(|e| text(&e))
            }
            Kind::Snapshot => {
                let (length, rest) = body.split_first_chunk::<4>().ok_or("short snapshot")?;
                let length = usize::try_from(u32::from_be_bytes(*length)).unwrap_or(usize::MAX);
                let header = rest.get(..length).ok_or("short snapshot header")?;
                let SnapshotHeader { vote, meta } = decode(header).map_err(|e| text(&e))?;
                let data = rest.get(length..).unwrap_or_default().to_vec();
                let snapshot = SnapshotOf::<TypeConfig, _> { meta, snapshot: Cursor::new(data) };
                let answer = self.raft.install_full_snapshot(vote, snapshot).await.map_err(|e| text(&e))?;
                encode(&answer).map_err(|e| text(&e))
            }
            // Only the leader takes a forwarded command: one hop, never a chain.
            Kind::Propose => {
                let committed = self.commit(body).await.map_err(|e| text(&e))?;
                encode(&committed).map_err(|e| text(&e))
            }
            Kind::Ping => Ok(Vec::new()),
            // A node joining asks any member; a member that belongs to no formed group says so
            // (the joining node then forms one with its peers, as they all start together).
            Kind::Membership => {
                let change: MemberChange = decode(&body).map_err(|e| text(&e))?;
                if !self.is_formed().await {
                    return Err(NOT_FORMED.to_owned());
                }
                self.change(change).await.map_err(|e| text(&e))?;
                Ok(Vec::new())
            }
            Kind::Answer | Kind::Failed => Err("not a request".to_owned()),
            Kind::Queue => Err("queue requests are not a group's".to_owned()),
        }
    }
}

/// A node whose only group is this one answers its peers through it.
impl<M: Machine> Dispatch for Group<M> {
    fn answer(&self, group: u64, kind: Kind, body: Vec<u8>) -> Answering<'_> {
        Box::pin(async move {
            if group != self.group {
                return Err(format!("no group {group} on this node"));
            }
            Group::answer(self, kind, body).await
        })
    }
}
