//! The node's cluster, when it runs in one: the metadata group and the configured members.

mod effects;
pub mod forward;
pub mod metadata;
pub mod queues;
pub mod replicas;
pub(crate) mod replicator;
mod report;

pub use effects::Effects;
pub use queues::{Home, Queues};
pub use report::{NodeReport, VhostTotals};

use std::sync::{Arc, OnceLock};

use charon_cluster::transport::Liveness;
use charon_cluster::{Current, Group, GroupError, Peer};

use self::metadata::{
    BindingRecord, EncodedTable, ExchangeRecord, MetaCommand, Metadata, PolicyRecord, QueueRecord, RedriveRecord,
    ReplicaSet,
};
use crate::error::EngineError;
use crate::exchange::ExchangeInfo;
use crate::policy::{Policy, PolicyKind};

/// This run of the node, drawn once: its sessions and transient queues are told from an
/// earlier run's by it.
#[must_use]
pub fn boot() -> u64 {
    static BOOT: OnceLock<u64> = OnceLock::new();
    *BOOT.get_or_init(rand::random)
}

/// A quorum queue's members unless `x-quorum-initial-group-size` says otherwise (RabbitMQ's
/// default `quorum_cluster_size`).
const DEFAULT_GROUP_SIZE: usize = 3;

/// How long a redrive job's runner may take to answer a control (its store's commit
/// included).
const REDRIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Where the broker and its vhosts find the cluster, once the node joined one at start.
pub(crate) type ClusterSlot = Arc<OnceLock<Cluster>>;

/// Starts this node's metadata group afresh, its storage emptied (`join_cluster`).
pub type Restart = Box<
    dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Arc<Group<Metadata>>, GroupError>> + Send>>
        + Send
        + Sync,
>;

/// The cluster this node is a member of (`--cluster-listen`): the metadata Raft group, the
/// members the node was configured with, and which of them answer.
pub struct Cluster {
    group: Arc<Current<Metadata>>,
    members: Vec<Peer>,
    liveness: Liveness,
    restart: Restart,
    queues: Queues,
    replicas: Arc<replicas::Replicas>,
}

/// A member as this node sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its node name.
    pub name: String,
    /// This node, or a peer that answered its last pings.
    pub running: bool,
    /// What a running peer said of itself in its last answer (`None` for this node, and for a
    /// peer that is down or sent what this node cannot read).
    pub report: Option<NodeReport>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("members", &self.members).finish_non_exhaustive()
    }
}

impl Cluster {
    /// The cluster whose metadata `group` replicates among `members`, their liveness watched
    /// by `liveness`; `restart` starts the group afresh for `join_cluster`; `queues` reaches
    /// the queues of other nodes.
    #[must_use]
    pub fn new(
        group: Arc<Current<Metadata>>,
        members: Vec<Peer>,
        liveness: Liveness,
        restart: Restart,
        (queues, replicas): (Queues, Arc<replicas::Replicas>),
    ) -> Self {
        Self { group, members, liveness, restart, queues, replicas }
    }

    /// How this node reaches the queues of other nodes.
    #[must_use]
    pub fn queues(&self) -> &Queues {
        &self.queues
    }

    /// The groups of the replicated quorum queues this node is a member of.
    #[must_use]
    pub fn replicas(&self) -> &replicas::Replicas {
        &self.replicas
    }

    /// Where member `name`'s cluster listener is: as the group's membership says, or as this
    /// node was configured.
    #[must_use]
    pub fn address_of(&self, name: &str) -> Option<String> {
        let joined = self.group.get().members().into_iter().map(|m| m.peer);
        joined.chain(self.members.iter().cloned()).find(|peer| peer.name == name).map(|peer| peer.address)
    }

    /// The running member with the fewest queues in `vhost` (this node's, `local_queues`,
    /// counted now, the others' as their last reports say; the first by name among equals):
    /// where RabbitMQ's `balanced` queue locator places a queue.
    #[must_use]
    pub fn least_loaded(&self, vhost: &str, local_queues: u64) -> String {
        let me = charon_model::node_name();
        let load = |member: &Member| match (&member.report, member.name == me) {
            (_, true) => local_queues,
            (Some(report), false) => report.vhosts.get(vhost).map_or(0, |v| v.queues),
            (None, false) => u64::MAX,
        };
        let members = self.members();
        let running = members.iter().filter(|m| m.running);
        running.min_by_key(|m| (load(m), m.name.clone())).map_or(me, |m| m.name.clone())
    }

    /// How long a request to member `name` may take: `full`, or 2 s for a member whose pings
    /// go unanswered (asked anyway: it may have just started, before its first ping).
    pub(crate) fn patience(&self, name: &str, full: std::time::Duration) -> std::time::Duration {
        if self.is_running(name) { full } else { full.min(std::time::Duration::from_secs(2)) }
    }

    /// Whether member `name` runs (this node, or a peer that answers its pings).
    #[must_use]
    pub fn is_running(&self, name: &str) -> bool {
        name == charon_model::node_name() || self.liveness.running(name)
    }

    /// `join_cluster`: this node, alone in its own cluster, leaves it and joins the one
    /// `name` (at `address`, or at its configured address) is a member of, as rabbitmqctl's
    /// verb resets a node first. What this node made alone stays on it; the cluster's
    /// metadata comes to it as to any new member. A node clustered with others is refused.
    ///
    /// # Errors
    /// `name` is this node, unknown without an address, or this node has other members; or the
    /// cluster did not take it within 10 s (this node is then in no cluster: run it again).
    pub async fn join(&self, name: &str, address: Option<&str>) -> Result<(), EngineError> {
        let me = charon_model::node_name();
        let refused = |reason: String| Err(EngineError::Precondition(reason));
        if name == me {
            return refused(format!("{name} is the node asked: it cannot join itself"));
        }
        let known = self.members.iter().find(|p| p.name == name).map(|p| p.address.clone());
        let Some(address) = address.map(str::to_owned).or(known) else {
            return refused(format!("{name} is not among this node's peers: give its address, {name}=HOST:PORT"));
        };
        let Some(this) = self.members.iter().find(|p| p.name == me).cloned() else {
            return refused(format!("{me} is not among its own peers"));
        };
        let group = self.group.get();
        let others: Vec<String> =
            group.members().into_iter().map(|m| m.peer.name).filter(|other| *other != me).collect();
        if !others.is_empty() {
            return refused(format!(
                "{me} is already clustered with {}: it must be forgotten first",
                others.join(", ")
            ));
        }
        group.shutdown().await;
        let fresh = (self.restart)().await.map_err(|e| EngineError::Store(e.to_string()))?;
        self.group.replace(Arc::clone(&fresh));
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match fresh.join_through(&address, charon_cluster::node_id(&me), this.clone()).await {
                Ok(()) => return Ok(()),
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(EngineError::Store(format!("{name} did not let {me} join: {e}")));
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(300)).await,
            }
        }
    }

    /// Every member by name, as RabbitMQ lists its nodes, with whether it runs: the group's
    /// membership (the configured peers until the cluster formed). Must run inside the runtime
    /// (members that joined since are pinged from now on).
    #[must_use]
    pub fn members(&self) -> Vec<Member> {
        let me = charon_model::node_name();
        let joined: Vec<Peer> = self.group.get().members().into_iter().map(|m| m.peer).collect();
        let peers = if joined.is_empty() { self.members.clone() } else { joined };
        self.liveness.watch(peers.iter().cloned());
        let mut members: Vec<Member> = peers
            .iter()
            .map(|peer| {
                let report = (peer.name != me).then(|| self.liveness.report(&peer.name)).flatten();
                Member {
                    running: peer.name == me || self.liveness.running(&peer.name),
                    report: report.and_then(|bytes| serde_json::from_slice(&bytes).ok()),
                    name: peer.name.clone(),
                }
            })
            .collect();
        members.sort_by(|a, b| a.name.cmp(&b.name));
        members
    }

    /// `forget_cluster_node`: removes a member that is down from the cluster (through the
    /// leader); a running member, or this node, is refused.
    ///
    /// # Errors
    /// `name` is no member, runs, or is this node; or no leader took the change.
    pub async fn forget(&self, name: &str) -> Result<(), EngineError> {
        let member = self.members().into_iter().find(|m| m.name == name);
        match member {
            None => Err(EngineError::Precondition(format!("{name} is not a member of this cluster"))),
            Some(_) if name == charon_model::node_name() => {
                Err(EngineError::Precondition(format!("{name} is the node asked: forget it from another node")))
            }
            Some(member) if member.running => {
                Err(EngineError::Precondition(format!("{name} is running: stop it before it is forgotten")))
            }
            Some(_) => self
                .group
                .get()
                .remove_member(charon_cluster::node_id(name))
                .await
                .map_err(|e| EngineError::Store(e.to_string())),
        }
    }

    /// The replicated queues of which this node is a member and that would lose their majority
    /// were it to stop (RabbitMQ's `node-is-quorum-critical`), by vhost and name; and whether
    /// the metadata group would.
    #[must_use]
    pub fn quorum_critical(&self) -> (Vec<(String, String)>, bool) {
        let me = charon_model::node_name();
        let critical = |members: &[String]| {
            let others_up = members.iter().filter(|m| **m != me && self.is_running(m)).count();
            members.contains(&me) && others_up < members.len() / 2 + 1
        };
        let queues = self
            .replicated_queues()
            .into_iter()
            .filter(|(_, _, record)| record.replicas.as_ref().is_some_and(|r| critical(&r.members)))
            .map(|(vhost, name, _)| (vhost, name))
            .collect();
        let metadata: Vec<String> =
            self.group.get().members().into_iter().filter(|m| m.voter).map(|m| m.peer.name).collect();
        (queues, metadata.len() > 1 && critical(&metadata))
    }

    /// The replicated queues (of `vhost`, or of every vhost) that have no majority of their
    /// members running, so no leader (RabbitMQ's `quorum-queues-without-elected-leaders`).
    #[must_use]
    pub fn queues_without_leaders(&self, vhost: Option<&str>) -> Vec<(String, String)> {
        self.replicated_queues()
            .into_iter()
            .filter(|(v, _, _)| vhost.is_none_or(|vhost| vhost == v))
            .filter(|(_, _, record)| {
                record
                    .replicas
                    .as_ref()
                    .is_some_and(|r| r.members.iter().filter(|m| self.is_running(m)).count() <= r.members.len() / 2)
            })
            .map(|(vhost, name, _)| (vhost, name))
            .collect()
    }

    /// Every replicated queue's record, by vhost and name, as this node applied them.
    fn replicated_queues(&self) -> Vec<(String, String, QueueRecord)> {
        self.replicated_queues_where(|_| true)
    }

    /// [`Self::replicated_queues`] whose record `keep` keeps: the others are not copied.
    fn replicated_queues_where(&self, keep: impl Fn(&QueueRecord) -> bool) -> Vec<(String, String, QueueRecord)> {
        self.group.get().read(|m| {
            m.queues()
                .iter()
                .flat_map(|(vhost, queues)| queues.iter().map(move |(name, record)| (vhost, name, record)))
                .filter(|(_, _, record)| record.replicas.is_some() && keep(record))
                .map(|(vhost, name, record)| (vhost.clone(), name.clone(), record.clone()))
                .collect()
        })
    }

    /// Blocks this node's publishers while another running member is in alarm, as RabbitMQ's
    /// alarms do cluster-wide (from the members' latest reports).
    pub fn follow_alarms(&self, resources: &crate::alarms::Resources) {
        let remote = self.members().into_iter().filter_map(|m| Some((m.name, m.report?.alarms()))).collect();
        resources.set_remote_alarms(remote);
    }

    /// The metadata group's Raft state on this node (for the Prometheus endpoint).
    #[must_use]
    pub fn status(&self) -> charon_cluster::Status {
        self.group.get().status()
    }

    /// The cluster's name as this node applied it: the one set, or this node's name, as
    /// RabbitMQ names a cluster by default.
    #[must_use]
    pub fn name(&self) -> String {
        self.group.get().read(|meta| meta.cluster_name().map(str::to_owned)).unwrap_or_else(charon_model::node_name)
    }

    /// Names the cluster, through the metadata group; answered once this node applied it.
    ///
    /// # Errors
    /// No leader is reachable (this node is on the minority side), or the group stopped: an
    /// internal error with the reason (the API answers it as RabbitMQ 4.3.6 does there: 500,
    /// empty body).
    pub async fn set_name(&self, name: String) -> Result<(), EngineError> {
        self.write(&MetaCommand::SetClusterName(name)).await.map(|_| ())
    }

    /// Creates vhost `name` through the cluster, or replaces its description and tags, with
    /// full permissions there for `creator` when it is created (as RabbitMQ's `put_vhost`);
    /// true when it was created. Every node follows ([`Effects`]).
    ///
    /// # Errors
    /// As [`Self::set_name`].
    pub async fn put_vhost(
        &self,
        name: &str,
        description: String,
        tags: Vec<String>,
        creator: Option<&str>,
    ) -> Result<bool, EngineError> {
        let created = self.write(&MetaCommand::PutVhost { name: name.to_owned(), description, tags }).await?;
        let created = created == metadata::CHANGED;
        if let (true, Some(creator)) = (created, creator) {
            self.set_permission(name, creator, &crate::access::Permission::full()).await?;
        }
        Ok(created)
    }

    /// Deletes vhost `name` through the cluster, with everything in it, on every node; false
    /// when the cluster had no such vhost.
    ///
    /// # Errors
    /// As [`Self::set_name`].
    pub async fn delete_vhost(&self, name: &str) -> Result<bool, EngineError> {
        Ok(self.write(&MetaCommand::DeleteVhost { name: name.to_owned() }).await? == metadata::CHANGED)
    }

    /// Creates or replaces user `account` through the cluster, on every node.
    ///
    /// # Errors
    /// As [`Self::set_name`].
    pub async fn put_user(&self, account: &crate::access::Account) -> Result<(), EngineError> {
        let password = account.password().map(|hash| (hash.algorithm().as_str().to_owned(), hash.to_base64()));
        let tags = account.tags().as_slice().to_vec();
        self.write(&MetaCommand::PutUser { name: account.name().to_owned(), password, tags }).await.map(|_| ())
    }

    /// Deletes user `name` through the cluster, on every node (its connections closed there).
    ///
    /// # Errors
    /// As [`Self::set_name`].
    pub async fn delete_user(&self, name: &str) -> Result<(), EngineError> {
        self.write(&MetaCommand::DeleteUser { name: name.to_owned() }).await.map(|_| ())
    }

    /// Sets `user`'s permissions in `vhost` through the cluster, on every node.
    ///
    /// # Errors
    /// As [`Self::set_name`].
    pub async fn set_permission(
        &self,
        vhost: &str,
        user: &str,
        permission: &crate::access::Permission,
    ) -> Result<(), EngineError> {
        let (configure, write, read) = permission.patterns();
        let command = MetaCommand::SetPermission {
            vhost: vhost.to_owned(),
            user: user.to_owned(),
            configure: configure.to_owned(),
            write: write.to_owned(),
            read: read.to_owned(),
        };
        self.write(&command).await.map(|_| ())
    }

    /// Clears `user`'s permissions in `vhost` through the cluster, on every node.
    ///
    /// # Errors
    /// As [`Self::set_name`].
    pub async fn clear_permission(&self, vhost: &str, user: &str) -> Result<(), EngineError> {
        self.write(&MetaCommand::ClearPermission { vhost: vhost.to_owned(), user: user.to_owned() }).await.map(|_| ())
    }

    /// Whether the cluster made vhost `name`.
    #[must_use]
    pub fn has_vhost(&self, name: &str) -> bool {
        self.group.get().read(|meta| meta.vhosts().contains_key(name))
    }

    /// Whether the cluster records queue `name` of `vhost` (a queue a node had before it
    /// joined is that node's own: it is bound and deleted there only).
    #[must_use]
    pub fn has_queue(&self, vhost: &str, name: &str) -> bool {
        self.group.get().read(|meta| meta.queues().get(vhost).is_some_and(|q| q.contains_key(name)))
    }

    /// Queue `name` of `vhost`'s record, as this node applied it.
    #[must_use]
    pub fn queue_record(&self, vhost: &str, name: &str) -> Option<QueueRecord> {
        self.group.get().read(|meta| meta.queues().get(vhost).and_then(|q| q.get(name)).cloned())
    }

    /// Queue `name` of `vhost`'s home as the cluster has it now: read after this node applied
    /// everything committed before the call (a node restarted while its queue moved elsewhere
    /// must not take it back on its own stale copy).
    ///
    /// # Errors
    /// No majority of the metadata group answered.
    pub(crate) async fn current_home(&self, vhost: &str, name: &str) -> Result<Option<String>, EngineError> {
        self.write(&MetaCommand::Barrier).await?;
        Ok(self.queue_record(vhost, name).map(|record| record.home))
    }

    /// Makes this node match every replicated queue's record: its member of the queue's group
    /// runs when the record names it, and its handle of the queue is the queue itself or a
    /// proxy for its home, as the record says. What the metadata's effects do as each change
    /// comes; again here every second, for what they could not do (a vhost not yet made) and
    /// for a node restarted while a queue moved (the move then lies in the snapshot it
    /// started from, whose effects are not made again).
    pub async fn follow_replicas(&self, broker: &crate::Broker) {
        let me = charon_model::node_name();
        for (vhost, name, record) in self.replicated_queues() {
            let Some(on) = broker.vhost(&vhost) else { continue };
            let member = record.replicas.as_ref().is_some_and(|r| r.members.contains(&me));
            let started = record.replicas.as_ref().is_some_and(|r| self.replicas.get(r.group).is_some());
            if started && !member {
                // Removed from the group (`delete_member`, `shrink`).
                self.replicas.forget(&vhost, &name).await;
                continue;
            }
            // A replicated queue is never exclusive: any session may look it up.
            let handle = on.queue(&name, 0).ok();
            let placed = handle.is_some_and(|q| match &q.home {
                None => record.home == me,
                Some(home) => *home == record.home,
            });
            if placed && (started || !member) {
                continue;
            }
            let Ok(arguments) = record.arguments.decode() else { continue };
            if let Err(e) = on.follow_queue_declare(&name, &record, arguments).await {
                tracing::warn!(queue = name, vhost, error = %e, "this node could not follow a replicated queue");
            }
        }
    }

    /// Follows a change of replicated queue `name` of `vhost`'s members on this node: a node
    /// removed stops its member (and forgets its file); the home removes from the group the
    /// members no longer recorded. A node added starts its member and joins the group
    /// (`follow_replicas`, also run every second, does both).
    pub(crate) async fn follow_replica_members(&self, vhost: &str, name: &str) {
        let me = charon_model::node_name();
        let Some(record) = self.queue_record(vhost, name) else { return };
        let Some(replicas) = record.replicas else { return };
        if !replicas.members.contains(&me) {
            self.replicas.forget(vhost, name).await;
            return;
        }
        if record.home != me {
            return;
        }
        let Some(group) = self.replicas.get(replicas.group) else { return };
        let recorded: Vec<u64> = replicas.members.iter().map(|m| charon_cluster::node_id(m)).collect();
        let removed: Vec<u64> = group.members().into_iter().map(|m| m.id).filter(|id| !recorded.contains(id)).collect();
        if removed.is_empty() {
            return;
        }
        // Not awaited: the change waits for the group, the metadata's effects must not.
        tokio::spawn(async move {
            for id in removed {
                if let Err(e) = group.remove_member(id).await {
                    tracing::warn!(error = %e, "the queue's group did not remove a member");
                }
            }
        });
    }

    /// `add_member`: node `node` becomes a member of replicated queue `name` of `vhost`
    /// (as RabbitMQ's `rabbit_quorum_queue:add_member`); answered once it votes in the group
    /// (it caught up), 30 s at most. A member already is one.
    ///
    /// # Errors
    /// The queue is not replicated, `node` is no running member of the cluster, the change
    /// was not taken, or the node did not catch up in time.
    pub async fn add_replica(&self, vhost: &str, name: &str, node: &str) -> Result<(), EngineError> {
        let record = self.replicated(vhost, name)?;
        let mut members = record.replicas.map(|r| r.members).unwrap_or_default();
        if members.iter().any(|m| m == node) {
            return Ok(());
        }
        if !self.members().iter().any(|m| m.name == node && m.running) {
            return Err(EngineError::Precondition(format!("node {node} is not a running member of the cluster")));
        }
        members.push(node.to_owned());
        let command =
            MetaCommand::SetReplicaMembers { vhost: vhost.to_owned(), name: name.to_owned(), members: members.clone() };
        self.write(&command).await?;
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let statuses = self.replica_statuses(vhost, name).await.unwrap_or_default();
            if statuses.iter().any(|(member, status)| member == node && status.as_ref().is_some_and(|s| s.voter)) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(EngineError::Store(format!("node {node} did not catch up with queue '{name}' in 30 s")));
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    /// `delete_member`: node `node` stops being a member of replicated queue `name` of
    /// `vhost`. Not a member: nothing to do. The home is refused (it runs the queue: another
    /// member takes it over once its node is down), as is the last member.
    ///
    /// # Errors
    /// The queue is not replicated, `node` is its home or its last member, or the change was
    /// not taken.
    pub async fn delete_replica(&self, vhost: &str, name: &str, node: &str) -> Result<(), EngineError> {
        let record = self.replicated(vhost, name)?;
        let mut members = record.replicas.map(|r| r.members).unwrap_or_default();
        if !members.iter().any(|m| m == node) {
            return Ok(());
        }
        if record.home == node {
            return Err(EngineError::Precondition(format!(
                "node {node} is the leader of queue '{name}' in vhost '{vhost}': it cannot be removed"
            )));
        }
        members.retain(|m| m != node);
        let command = MetaCommand::SetReplicaMembers { vhost: vhost.to_owned(), name: name.to_owned(), members };
        self.write(&command).await.map(drop)
    }

    /// The replicated queues of the vhosts matching `vhost_pattern` whose names match
    /// `queue_pattern` (regular expressions, as `grow`'s and RabbitMQ's), by vhost and name.
    ///
    /// # Errors
    /// A pattern is no regular expression.
    pub fn replicated_matching(
        &self,
        vhost_pattern: &str,
        queue_pattern: &str,
    ) -> Result<Vec<(String, String, Vec<String>)>, EngineError> {
        let compile = |pattern: &str| {
            regex::Regex::new(pattern).map_err(|e| EngineError::Precondition(format!("invalid pattern {pattern}: {e}")))
        };
        let (vhosts, queues) = (compile(vhost_pattern)?, compile(queue_pattern)?);
        Ok(self
            .replicated_queues()
            .into_iter()
            .filter(|(vhost, name, _)| vhosts.is_match(vhost) && queues.is_match(name))
            .map(|(vhost, name, record)| (vhost, name, record.replicas.map(|r| r.members).unwrap_or_default()))
            .collect())
    }

    /// Queue `name` of `vhost`'s record, when it is replicated.
    fn replicated(&self, vhost: &str, name: &str) -> Result<QueueRecord, EngineError> {
        match self.queue_record(vhost, name) {
            Some(record) if record.replicas.is_some() => Ok(record),
            Some(_) => {
                Err(EngineError::Precondition(format!("queue '{name}' in vhost '{vhost}' is not a quorum queue")))
            }
            None => Err(EngineError::NotFound(crate::error::Resource::queue(vhost, name))),
        }
    }

    /// Moves every replicated queue whose home node is down and whose group this node leads
    /// here: the queue is taken over from its group (see [`replicas`]). When the home's node
    /// led the group too (as it asks to), the first running member by name starts an election
    /// at once rather than wait out the election timeout. Run four times a second.
    pub async fn fail_over(&self) {
        let me = charon_model::node_name();
        self.elect_metadata_leader(&me).await;
        // Four times a second over every queue: only the stranded ones are copied.
        let stranded = |record: &QueueRecord| {
            record.home != me
                && record.replicas.as_ref().is_some_and(|r| r.members.contains(&me))
                && self.liveness.down(&record.home)
        };
        for (vhost, name, record) in self.replicated_queues_where(stranded) {
            let Some(replicas) = record.replicas.as_ref() else { continue };
            let Some(group) = self.replicas.get(replicas.group) else { continue };
            if !group.status().leader {
                let home_led = group.leader().await.is_none_or(|l| l == charon_cluster::node_id(&record.home));
                let first = replicas.members.iter().filter(|m| self.is_running(m)).min() == Some(&me);
                if home_led && first && self.replicas.may_elect(replicas.group) {
                    tracing::info!(queue = name, vhost, "the queue's home node is down: this node calls an election");
                    if let Err(e) = group.elect().await {
                        tracing::warn!(queue = name, error = %e, "the queue's group did not start an election");
                    }
                }
                continue;
            }
            tracing::warn!(queue = name, vhost, "the queue's home node is down: this node takes the queue over");
            let command = MetaCommand::MoveQueue { vhost: vhost.clone(), name: name.clone(), home: me.clone() };
            if let Err(e) = self.write(&command).await {
                tracing::warn!(queue = name, vhost, error = %e, "the cluster did not move the queue here");
            }
        }
    }

    /// When the metadata group's leader is on a node that is down, the first running member
    /// by name starts an election at once: a failover writes to the metadata, and would wait
    /// out the election timeout otherwise.
    async fn elect_metadata_leader(&self, me: &str) {
        let group = self.group.get();
        if group.status().leader {
            return;
        }
        let members = group.members();
        let leader = group.leader().await;
        let leader_down =
            leader.is_some_and(|id| members.iter().any(|m| m.id == id && self.liveness.down(&m.peer.name)));
        let first = members.iter().filter(|m| self.is_running(&m.peer.name)).map(|m| &m.peer.name).min();
        if leader_down && first.is_some_and(|first| first == me) && self.replicas.may_elect(0) {
            tracing::info!("the metadata leader's node is down: this node calls an election");
            if let Err(e) = group.elect().await {
                tracing::warn!(error = %e, "the metadata group did not start an election");
            }
        }
    }

    /// Zaqar's metadata of `queue` in `project` (its JSON object's text), as this node applied
    /// it.
    #[must_use]
    pub fn zaqar_metadata(&self, project: &str, queue: &str) -> Option<String> {
        self.group.get().read(|meta| meta.zaqar_metadata().get(project).and_then(|q| q.get(queue)).cloned())
    }

    /// Every queue's Zaqar metadata in `project`, by queue.
    #[must_use]
    pub fn zaqar_project(&self, project: &str) -> std::collections::BTreeMap<String, String> {
        self.group.get().read(|meta| meta.zaqar_metadata().get(project).cloned().unwrap_or_default())
    }

    /// Sets (or, `None`, clears) `queue`'s Zaqar metadata through the cluster; answered once
    /// this node applied it.
    ///
    /// # Errors
    /// As [`Self::set_name`].
    pub async fn set_zaqar_metadata(
        &self,
        project: &str,
        queue: &str,
        metadata: Option<String>,
    ) -> Result<(), EngineError> {
        let command = MetaCommand::SetZaqarMetadata { project: project.to_owned(), queue: queue.to_owned(), metadata };
        self.write(&command).await.map(drop)
    }

    /// The record of redrive job `id` of `vhost`, as this node applied it.
    #[must_use]
    pub fn redrive(&self, vhost: &str, id: &str) -> Option<RedriveRecord> {
        self.group.get().read(|meta| meta.redrives().get(vhost).and_then(|jobs| jobs.get(id)).cloned())
    }

    /// The recorded redrive jobs of `vhost` (or of every vhost), with their vhost and id.
    #[must_use]
    pub fn redrives(&self, vhost: Option<&str>) -> Vec<(String, String, RedriveRecord)> {
        self.group.get().read(|meta| {
            let jobs = meta.redrives().iter().filter(|(name, _)| vhost.is_none_or(|v| v == *name));
            jobs.flat_map(|(v, jobs)| jobs.iter().map(|(id, r)| (v.clone(), id.clone(), r.clone()))).collect()
        })
    }

    /// Writes redrive job `id`'s record through the cluster.
    ///
    /// # Errors
    /// As RabbitMQ 4.3.6 words a metadata write that timed out on the minority side.
    pub(crate) async fn put_redrive(&self, vhost: &str, id: &str, record: RedriveRecord) -> Result<(), EngineError> {
        let command = MetaCommand::PutRedrive { vhost: vhost.to_owned(), id: id.to_owned(), record };
        self.write_or(&command, || "The metadata store operation timed out".to_owned()).await
    }

    /// Deletes redrive job `id`'s record through the cluster (its runner forgets it too).
    ///
    /// # Errors
    /// As [`Self::put_redrive`].
    pub(crate) async fn delete_redrive(&self, vhost: &str, id: &str) -> Result<(), EngineError> {
        let command = MetaCommand::DeleteRedrive { vhost: vhost.to_owned(), id: id.to_owned() };
        self.write_or(&command, || "The metadata store operation timed out".to_owned()).await
    }

    /// Asks `runner`, the node that runs redrive job `id` of `vhost`, to pause, resume or
    /// cancel it; the job's view (its JSON) as that node answers.
    ///
    /// # Errors
    /// The runner's refusal; [`RedriveError::Unavailable`] when it does not answer.
    pub(crate) async fn control_redrive(
        &self,
        runner: &str,
        vhost: &str,
        id: &str,
        control: crate::redrive::job::Control,
    ) -> Result<String, crate::redrive::RedriveError> {
        use charon_cluster::transport::{Connection, frame::Kind};
        use queues::wire::{self, Envelope, Reply, Request};
        let down = || {
            crate::redrive::RedriveError::Unavailable(format!(
                "node '{runner}' that runs redrive job '{id}' in vhost '{vhost}' is down or inaccessible"
            ))
        };
        let address = self.address_of(runner).ok_or_else(down)?;
        let mut connection = Connection::new(self.queues.identity().clone(), address);
        let request = Request::Redrive { vhost: vhost.to_owned(), id: id.to_owned(), control };
        let envelope = Envelope { from: self.queues.identity().name.clone(), boot: boot(), request };
        let patience = self.patience(runner, REDRIVE_TIMEOUT);
        let answer = tokio::time::timeout(patience, connection.call(0, Kind::Queue, wire::encode(&envelope, &[])));
        match answer.await {
            Ok(Ok(body)) => match wire::decode::<Reply>(body) {
                Ok((Reply::Redrive(answer), _)) => answer,
                _ => Err(down()),
            },
            _ => Err(down()),
        }
    }

    /// Each member of replicated queue `name` of `vhost` with its Raft state (`None`: the
    /// member is down, or did not answer within 2 s), in the record's order; `None` for a
    /// queue that is not replicated.
    pub async fn replica_statuses(
        &self,
        vhost: &str,
        name: &str,
    ) -> Option<Vec<(String, Option<replicas::MemberStatus>)>> {
        use charon_cluster::transport::{Connection, frame::Kind};
        use queues::wire::{self, Envelope, Reply, Request};
        let replicas = self.queue_record(vhost, name)?.replicas?;
        let me = charon_model::node_name();
        let mut statuses = Vec::with_capacity(replicas.members.len());
        for member in replicas.members {
            let status = if member == me {
                self.replicas.status(replicas.group)
            } else if let Some(address) = self.address_of(&member).filter(|_| self.is_running(&member)) {
                let mut connection = Connection::new(self.queues.identity().clone(), address);
                let request = Request::ReplicaStatus { group: replicas.group };
                let envelope = Envelope { from: me.clone(), boot: boot(), request };
                let call = connection.call(0, Kind::Queue, wire::encode(&envelope, &[]));
                match tokio::time::timeout(std::time::Duration::from_secs(2), call).await {
                    Ok(Ok(body)) => match wire::decode::<Reply>(body) {
                        Ok((Reply::ReplicaStatus(status), _)) => status,
                        _ => None,
                    },
                    _ => None,
                }
            } else {
                None
            };
            statuses.push((member, status));
        }
        Some(statuses)
    }

    /// Sets `user`'s topic permissions on `exchange` in `vhost` through the cluster.
    ///
    /// # Errors
    /// As [`Self::set_name`].
    pub async fn set_topic_permission(
        &self,
        vhost: &str,
        user: &str,
        exchange: &str,
        (write, read): (&str, &str),
    ) -> Result<(), EngineError> {
        let command = MetaCommand::SetTopicPermission {
            vhost: vhost.to_owned(),
            user: user.to_owned(),
            exchange: exchange.to_owned(),
            write: write.to_owned(),
            read: read.to_owned(),
        };
        self.write(&command).await.map(drop)
    }

    /// Clears `user`'s topic permissions in `vhost` (on one exchange, or all) through the
    /// cluster.
    ///
    /// # Errors
    /// As [`Self::set_name`].
    pub async fn clear_topic_permissions(
        &self,
        vhost: &str,
        user: &str,
        exchange: Option<&str>,
    ) -> Result<(), EngineError> {
        let command = MetaCommand::ClearTopicPermissions {
            vhost: vhost.to_owned(),
            user: user.to_owned(),
            exchange: exchange.map(str::to_owned),
        };
        self.write(&command).await.map(drop)
    }

    /// Sets limit `limit` of vhost or user `name` (`scope`) through the cluster.
    ///
    /// # Errors
    /// As [`Self::set_name`].
    pub async fn set_limit(
        &self,
        scope: crate::LimitScope,
        name: &str,
        limit: &str,
        value: i64,
    ) -> Result<(), EngineError> {
        let command =
            MetaCommand::SetLimit { scope: scope.as_str().into(), name: name.into(), limit: limit.into(), value };
        self.write(&command).await.map(drop)
    }

    /// Clears limit `limit` of vhost or user `name` through the cluster.
    ///
    /// # Errors
    /// As [`Self::set_name`].
    pub async fn clear_limit(&self, scope: crate::LimitScope, name: &str, limit: &str) -> Result<(), EngineError> {
        let command = MetaCommand::ClearLimit { scope: scope.as_str().into(), name: name.into(), limit: limit.into() };
        self.write(&command).await.map(drop)
    }

    /// Declares exchange `info` in `vhost` through the cluster (validated by the caller).
    ///
    /// # Errors
    /// RabbitMQ 4.3.6's answer when its metadata store does not take it (observed on the
    /// minority side of a partition): 541 `failed to declare exchange 'x' in vhost '/' because
    /// the operation timed out`.
    pub(crate) async fn declare_exchange(&self, vhost: &str, info: &ExchangeInfo) -> Result<(), EngineError> {
        let record = ExchangeRecord {
            kind: info.kind.as_str().to_owned(),
            durable: info.durable,
            auto_delete: info.auto_delete,
            internal: info.internal,
            arguments: EncodedTable::new(&info.arguments),
        };
        let command = MetaCommand::DeclareExchange { vhost: vhost.to_owned(), name: info.name.clone(), record };
        let resource = crate::error::Resource::exchange(vhost, &info.name);
        self.write_or(&command, || format!("failed to declare {resource} because the operation timed out")).await
    }

    /// Deletes exchange `name` of `vhost` through the cluster.
    ///
    /// # Errors
    /// As RabbitMQ 4.3.6 answers on the minority side: 541 `failed to delete exchange 'x' in
    /// vhost '/' due to a timeout`.
    pub(crate) async fn delete_exchange(&self, vhost: &str, name: &str) -> Result<(), EngineError> {
        let command = MetaCommand::DeleteExchange { vhost: vhost.to_owned(), name: name.to_owned() };
        let resource = crate::error::Resource::exchange(vhost, name);
        self.write_or(&command, || format!("failed to delete {resource} due to a timeout")).await
    }

    /// Binds `binding`'s destination (an exchange, or a queue the cluster recorded) to
    /// `source` in `vhost` (`bind`) or removes that binding, through the cluster.
    ///
    /// # Errors
    /// As RabbitMQ 4.3.6 answers on the minority side: 541 `Could not add binding due to
    /// timeout` (`remove` for an unbind).
    pub(crate) async fn bind(
        &self,
        vhost: &str,
        source: &str,
        binding: &crate::exchange::Binding,
        bind: bool,
    ) -> Result<(), EngineError> {
        let (destination, queue) = match &binding.destination {
            crate::exchange::Destination::Exchange(name) => (name, false),
            crate::exchange::Destination::Queue(name) => (name, true),
        };
        let record = BindingRecord {
            source: source.to_owned(),
            destination: destination.clone(),
            key: binding.key.clone(),
            arguments: EncodedTable::new(&binding.arguments),
        };
        let vhost = vhost.to_owned();
        let (command, verb) = match (bind, queue) {
            (true, false) => (MetaCommand::BindExchange { vhost, binding: record }, "add"),
            (false, false) => (MetaCommand::UnbindExchange { vhost, binding: record }, "remove"),
            (true, true) => (MetaCommand::BindQueue { vhost, binding: record }, "add"),
            (false, true) => (MetaCommand::UnbindQueue { vhost, binding: record }, "remove"),
        };
        self.write_or(&command, || format!("Could not {verb} binding due to timeout")).await
    }

    /// Declares queue `name` of `vhost` through the cluster, homed on node `home` (a quorum
    /// queue with `group_size` members, 3 when not given); true when this declare made it
    /// (false: another node's declare of the name came first).
    ///
    /// # Errors
    /// As RabbitMQ 4.3.6 answers on the minority side: 541 `Could not declare queue 'q' in
    /// vhost '/' on node 'n' because the metadata store operation timed out`.
    pub(crate) async fn declare_queue(
        &self,
        vhost: &str,
        name: &str,
        config: &crate::queue::QueueConfig,
        (home, group_size): (String, Option<usize>),
    ) -> Result<bool, EngineError> {
        let replicas = (config.queue_type == crate::queue::QueueType::Quorum && config.durable)
            .then(|| self.place_replicas(vhost, &home, group_size));
        let record = QueueRecord {
            home,
            durable: config.durable,
            auto_delete: config.auto_delete,
            arguments: EncodedTable::new(&config.arguments),
            owner: config.exclusive_owner,
            boot: boot(),
            replicas,
        };
        let command = MetaCommand::DeclareQueue { vhost: vhost.to_owned(), name: name.to_owned(), record };
        match self.write(&command).await {
            Ok(answer) => Ok(answer == metadata::CHANGED),
            Err(e) => {
                tracing::warn!(error = %e, "the cluster did not take a queue declare");
                Err(EngineError::Store(format!(
                    "Could not declare queue '{name}' in vhost '{vhost}' on node '{}' because the metadata \
                     store operation timed out",
                    charon_model::node_name()
                )))
            }
        }
    }

    /// A new quorum queue's members, as RabbitMQ's `rabbit_queue_location` places them: its
    /// home, then the running members with the fewest queues in `vhost` (by name among
    /// equals), `group_size` of them in all (default 3, fewer in a smaller cluster); its
    /// group's number, drawn. Where too few members run, members that do not
    /// fill the group (RabbitMQ would make it smaller): they catch up when they are back, and
    /// a queue declared while one node restarts still survives the loss of another.
    fn place_replicas(&self, vhost: &str, home: &str, group_size: Option<usize>) -> ReplicaSet {
        let wanted = group_size.unwrap_or(DEFAULT_GROUP_SIZE).max(1);
        let load = |member: &Member| member.report.as_ref().and_then(|r| r.vhosts.get(vhost)).map_or(0, |v| v.queues);
        let mut others: Vec<Member> = self.members().into_iter().filter(|m| m.name != home).collect();
        others.sort_by(|a, b| (!a.running, load(a), &a.name).cmp(&(!b.running, load(b), &b.name)));
        let mut members = vec![home.to_owned()];
        members.extend(others.into_iter().map(|m| m.name).take(wanted - 1));
        let group = loop {
            let drawn: u64 = rand::random();
            if drawn != 0 {
                break drawn;
            }
        };
        ReplicaSet { group, members }
    }

    /// Deletes queue `name` of `vhost` through the cluster, with its bindings.
    ///
    /// # Errors
    /// As RabbitMQ 4.3.6 answers on the minority side: 541 `The operation to delete the queue
    /// from the metadata store timed out`.
    pub(crate) async fn delete_queue(&self, vhost: &str, name: &str) -> Result<(), EngineError> {
        let command = MetaCommand::DeleteQueue { vhost: vhost.to_owned(), name: name.to_owned() };
        self.write_or(&command, || "The operation to delete the queue from the metadata store timed out".to_owned())
            .await
    }

    /// Sets `policy` in `vhost` through the cluster.
    ///
    /// # Errors
    /// As [`Self::set_name`].
    pub(crate) async fn set_policy(&self, vhost: &str, policy: &Policy) -> Result<(), EngineError> {
        let record = PolicyRecord {
            pattern: policy.pattern.clone(),
            apply_to: policy.apply_to.as_str().to_owned(),
            priority: policy.priority,
            definition: EncodedTable::new(&policy.definition),
        };
        let operator = policy.kind() == PolicyKind::Operator;
        let command = MetaCommand::SetPolicy { vhost: vhost.to_owned(), name: policy.name.clone(), operator, record };
        self.write(&command).await.map(drop)
    }

    /// Clears policy `name` of `kind` in `vhost` through the cluster.
    ///
    /// # Errors
    /// As [`Self::set_name`].
    pub(crate) async fn clear_policy(&self, vhost: &str, kind: PolicyKind, name: &str) -> Result<(), EngineError> {
        let operator = kind == PolicyKind::Operator;
        self.write(&MetaCommand::ClearPolicy { vhost: vhost.to_owned(), name: name.to_owned(), operator })
            .await
            .map(drop)
    }

    /// As [`Self::write`], refused with `refusal` (RabbitMQ's words for the operation, 541)
    /// when the cluster does not take it; the reason is logged.
    async fn write_or(&self, command: &MetaCommand, refusal: impl FnOnce() -> String) -> Result<(), EngineError> {
        match self.write(command).await {
            Ok(_) => Ok(()),
            Err(e) => {
                tracing::warn!(error = %e, "the cluster did not take a metadata change");
                Err(EngineError::Store(refusal()))
            }
        }
    }

    async fn write(&self, command: &MetaCommand) -> Result<Vec<u8>, EngineError> {
        let bytes = serde_json::to_vec(command).map_err(|e| EngineError::Store(e.to_string()))?;
        match self.group.get().write(bytes).await {
            Ok(answer) if answer.starts_with(metadata::REFUSED.as_bytes()) => {
                Err(EngineError::Store(String::from_utf8_lossy(&answer).into_owned()))
            }
            Ok(answer) => Ok(answer),
            Err(e) => Err(EngineError::Store(e.to_string())),
        }
    }
}
