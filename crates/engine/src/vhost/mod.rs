//! A virtual host: the operations protocol adapters call.

mod clustered;
mod dead_letters;
mod policies;
mod restore;
mod teardown;

pub use policies::AppliedPolicies;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use charon_model::{Routing, Table, Value};
use charon_store::meta::StoredQueue;
use parking_lot::RwLock;

use crate::access::{Action, Principal};
use crate::dead_letter::events::{BUFFER_CAPACITY, DeadLetterEvents};
use crate::dead_letter::{DeadLetterSink, Drops, FALLBACK_QUEUE};
use crate::error::{EngineError, Resource, ResourceKind, quoted};
use crate::exchange::{Binding, Destination, ExchangeInfo, ExchangeKind};
use crate::limits::Limits;
use crate::metrics::Churn;
use crate::persist::{MetaDone, Persistence};
use crate::policy::Policy;
use crate::queue::args::{self, QueueType};
use crate::queue::{QueueConfig, QueueLinks, QueueRef};
use crate::reservation::{Reservation, Reserved, reserve};
use crate::route_cache::RouteCache;
use crate::session::SessionId;
use crate::topology::Topology;

/// An `exchange.declare`.
#[derive(Clone, Debug, Default)]
pub struct ExchangeDeclare {
    /// Name.
    pub name: String,
    /// Type name as sent (`direct`, `fanout`, `topic`, `headers`).
    pub kind: String,
    /// Only check that it exists.
    pub passive: bool,
    /// Durable.
    pub durable: bool,
    /// Auto-delete.
    pub auto_delete: bool,
    /// Internal.
    pub internal: bool,
    /// Arguments.
    pub arguments: Table,
}

/// A `queue.declare`.
#[derive(Clone, Debug, Default)]
pub struct QueueDeclare {
    /// Name; empty asks the server to name it.
    pub name: String,
    /// Only check that it exists.
    pub passive: bool,
    /// Durable.
    pub durable: bool,
    /// Owned by the declaring connection.
    pub exclusive: bool,
    /// Deleted after its last consumer goes.
    pub auto_delete: bool,
    /// Arguments.
    pub arguments: Table,
}

/// Answer to a queue declare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclareOk {
    /// The queue's name (generated for server-named queues).
    pub name: String,
    /// Ready messages.
    pub messages: u32,
    /// Consumers.
    pub consumers: u32,
    /// Whether this declare created the queue.
    pub created: bool,
}

/// The broker's dead-lettering options a vhost applies to its queues.
#[derive(Clone, Copy, Debug)]
pub struct DeadLetterOptions {
    /// Keep what RabbitMQ drops silently in the fallback queue.
    pub fallback: bool,
    /// Charon's at-least-once guarantee by default.
    pub guarantee: bool,
}

/// A virtual host.
///
/// Its topology and policies sit behind locks that routing takes on every publish and dead
/// letter, so no lock is ever held across a metadata commit: a change is validated (and a new
/// name reserved) under the lock, its commit is submitted there (ordering the store's commits as
/// the changes), the commit is awaited with the lock released, and a durable exchange, queue or
/// binding is published only once committed. Removals take effect at once; their -ok still waits
/// for the commit.
pub struct VHost {
    name: String,
    /// Shared (weakly) with the dead-letter routes its queues hold.
    topology: Arc<RwLock<Topology>>,
    /// Bumped under the write lock on every topology change; route caches compare it.
    version: AtomicU64,
    ids: Arc<AtomicU64>,
    me: Weak<VHost>,
    /// Where this vhost's queues hand their dead letters.
    dead_letters: Arc<dyn DeadLetterSink>,
    /// The dead-letter event stream its queues report deaths to.
    events: Arc<DeadLetterEvents>,
    /// Policies by name.
    policies: RwLock<Vec<Policy>>,
    /// Operator policies by name (taken after `policies` when both are held).
    operator_policies: RwLock<Vec<Policy>>,
    /// The durable store, when the broker has one.
    store: Option<Arc<Persistence>>,
    /// The broker's limits (`max-queues` is checked here).
    limits: Arc<Limits>,
    /// Dead letters dropped where RabbitMQ drops them silently, shared with the routes.
    drops: Arc<Drops>,
    /// Whether such dead letters are kept in the fallback queue.
    fallback: bool,
    /// The broker's `dead_letter_guarantee`: Charon's at-least-once for every queue with a
    /// dead-letter exchange unless a policy says otherwise.
    dead_letter_guarantee: bool,
    /// Set when the vhost is deleted: connections still holding it can create nothing more.
    deleted: std::sync::atomic::AtomicBool,
    /// The cluster, once the node joined one: exchanges, their bindings and policies change
    /// through it on every node.
    cluster: crate::cluster::ClusterSlot,
    /// Serialises the moves of replicated queues (a metadata change and the node's own check
    /// may find the same move at once; two new homes would take the queue over twice).
    moves: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for VHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VHost").field("name", &self.name).finish_non_exhaustive()
    }
}

fn generated_name(prefix: &str) -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut rng = rand::rng();
    let suffix: String = (0..22)
        .map(|_| char::from(ALPHABET.get(rng.random_range(0..ALPHABET.len())).copied().unwrap_or(b'A')))
        .collect();
    format!("{prefix}-{suffix}")
}

impl VHost {
    pub(crate) fn new(
        name: &str,
        ids: Arc<AtomicU64>,
        store: Option<Arc<Persistence>>,
        limits: Arc<Limits>,
        dead_letters: DeadLetterOptions,
        cluster: crate::cluster::ClusterSlot,
    ) -> Arc<Self> {
        let DeadLetterOptions { fallback, guarantee: dead_letter_guarantee } = dead_letters;
        let topology = Arc::new(RwLock::new(Topology::with_standard_exchanges()));
        let drops = Arc::new(Drops::default());
        let listened = topology.read().events_listened();
        // The event stream's own publisher routes without reporting, keeping or counting.
        let event_routes =
            Arc::new(dead_letters::DeadLetterRoutes::new(name, Arc::downgrade(&topology), Arc::default(), false, None));
        let events = Arc::new(DeadLetterEvents::new(name, listened, BUFFER_CAPACITY, event_routes));
        let dead_letters: Arc<dyn DeadLetterSink> = Arc::new(dead_letters::DeadLetterRoutes::new(
            name,
            Arc::downgrade(&topology),
            Arc::clone(&drops),
            fallback,
            Some(Arc::clone(&events)),
        ));
        Arc::new_cyclic(|me| Self {
            name: name.to_owned(),
            topology,
            version: AtomicU64::new(1),
            ids,
            me: me.clone(),
            dead_letters,
            events,
            policies: RwLock::new(Vec::new()),
            operator_policies: RwLock::new(Vec::new()),
            store,
            limits,
            drops,
            fallback,
            dead_letter_guarantee,
            deleted: std::sync::atomic::AtomicBool::new(false),
            cluster,
            moves: tokio::sync::Mutex::new(()),
        })
    }

    /// Whether the node runs in a cluster, through which this vhost's exchanges, their
    /// bindings and its policies change.
    #[must_use]
    pub fn clustered(&self) -> bool {
        self.cluster.get().is_some()
    }

    /// Refuses changes to a deleted vhost, as RabbitMQ refuses a vhost that is gone (530).
    fn check_live(&self) -> Result<(), EngineError> {
        if self.deleted.load(Ordering::Acquire) {
            return Err(EngineError::VhostNotFound(self.name.clone()));
        }
        Ok(())
    }

    /// Marks the vhost deleted (before its contents go).
    pub(crate) fn mark_deleted(&self) {
        self.deleted.store(true, Ordering::Release);
    }

    /// The durable store, if any.
    pub(crate) fn store(&self) -> Option<&Arc<Persistence>> {
        self.store.as_ref()
    }

    /// What a queue task of this vhost is linked to: the message log, this vhost's dead-letter
    /// routes, the topology it leaves when it deletes itself, and a replicated quorum queue's
    /// group (`replica`: the group, the queue's name, and whether the metadata change that made
    /// it here was just applied — a queue restored at start is not).
    pub(crate) fn queue_links(&self, replica: Option<(u64, &str, bool)>) -> QueueLinks {
        let me = self.me.clone();
        let replica = replica.map(|(group, name, current)| {
            let queue = (self.name.clone(), name.to_owned());
            crate::cluster::replicator::Replicator::new(Arc::clone(&self.cluster), group, queue, current)
                as Arc<dyn charon_queue::Replicate>
        });
        QueueLinks {
            replica,
            log: self.store.as_ref().map(|store| Arc::clone(&store.log)),
            dead_letters: Arc::clone(&self.dead_letters),
            on_self_delete: Box::new(move |queue| {
                if let Some(vhost) = me.upgrade() {
                    // The queue is gone: it need not wait for the store to forget it.
                    drop(vhost.remove_queue(queue));
                    vhost.deleted_itself(queue);
                }
            }),
        }
    }

    /// Submits the store's forgetting of the durable exchanges the last topology change
    /// removed (under the topology lock, so in the order of the changes).
    fn forget_removed_exchanges(&self, topology: &mut Topology) -> Vec<MetaDone> {
        let removed = std::mem::take(&mut topology.removed_durable_exchanges);
        match &self.store {
            Some(store) => removed.iter().map(|name| store.forget_exchange(&self.name, name)).collect(),
            None => Vec::new(),
        }
    }

    /// Waits for `done` in a task of its own, so that the change is published even when the
    /// caller goes away meanwhile, then runs `publish` under the topology lock with whether it
    /// was committed.
    async fn after_commit(
        &self,
        done: MetaDone,
        publish: impl FnOnce(&Self, &mut Topology, bool) + Send + 'static,
    ) -> Result<(), EngineError> {
        let Some(vhost) = self.me.upgrade() else {
            return Err(EngineError::Store(format!("store failure: vhost '{}' is gone", self.name)));
        };
        let committed = tokio::spawn(async move {
            let result = done.wait().await;
            let mut topology = vhost.topology.write();
            publish(&vhost, &mut topology, result.is_ok());
            result
        });
        committed.await.map_err(|e| EngineError::Store(format!("store failure: {e}")))?
    }

    /// The vhost's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The vhost's dead-letter event stream (its counters).
    #[must_use]
    pub fn dead_letter_events(&self) -> &DeadLetterEvents {
        &self.events
    }

    fn changed(&self) {
        self.version.fetch_add(1, Ordering::Release);
    }

    /// The exchange graph grew (an exchange, a queue or a binding was added): besides
    /// [`Self::changed`], queues with dead letters waiting (RabbitMQ's at-least-once, Charon's
    /// guarantee) try them again, as they may have a route now (RabbitMQ waits for a policy
    /// change or its 180 s timer).
    fn grew(&self, topology: &Topology) {
        self.changed();
        Self::retry_waiting(topology);
    }

    fn retry_waiting(topology: &Topology) {
        let waiting = |q: &&QueueRef| q.dead_letters_pending.load(Ordering::Relaxed) > 0;
        for queue in topology.queues.values().filter(waiting) {
            queue.topology_changed();
        }
    }

    /// A node of the cluster is back: dead letters waiting for a queue there are tried again
    /// now (not at the next 180 s timer).
    pub fn retry_dead_letters(&self) {
        Self::retry_waiting(&self.topology.read());
    }

    fn exchange_resource(&self, name: &str) -> Resource {
        Resource::exchange(&self.name, name)
    }

    fn queue_resource(&self, name: &str) -> Resource {
        Resource::queue(&self.name, name)
    }

    /// Declares (or checks) an exchange.
    ///
    /// # Errors
    /// RabbitMQ's channel errors: 403 for the default exchange or an `amq.` name, 404 for a
    /// passive declare of a missing exchange, 406 for an unknown type or an inequivalent
    /// redeclare.
    pub async fn declare_exchange(&self, declare: &ExchangeDeclare) -> Result<(), EngineError> {
        self.declare_exchange_as(declare, None).await
    }

    /// Declares (or checks) an exchange for a user, checked where RabbitMQ's channel checks:
    /// configure on the exchange (a passive declare needs nothing); for a new exchange with an
    /// `alternate-exchange`, read on it and write on the alternate.
    ///
    /// # Errors
    /// As [`Self::declare_exchange`], and ACCESS_REFUSED.
    pub async fn declare_exchange_as(
        &self,
        declare: &ExchangeDeclare,
        by: Option<Principal<'_>>,
    ) -> Result<(), EngineError> {
        self.check_live()?;
        if declare.name.is_empty() {
            return Err(EngineError::DefaultExchange);
        }
        if declare.passive {
            return match self.topology.read().exchanges.contains_key(&declare.name) {
                true => Ok(()),
                false => Err(EngineError::NotFound(self.exchange_resource(&declare.name))),
            };
        }
        let kind = ExchangeKind::parse(&declare.kind)?;
        if let Some(by) = by {
            by.check(Action::Configure, &self.exchange_resource(&declare.name))?;
        }
        let Some(cluster) = self.cluster.get() else {
            return self.create_exchange(declare, kind, by).await;
        };
        // An equivalent redeclare is answered from this node's state, as RabbitMQ 4.3.6
        // answers it on the minority side of a partition too.
        if let Some(existing) = self.exchange(&declare.name) {
            return self.assert_exchange_equivalent(&existing, kind, declare);
        }
        let info = self.new_exchange(declare, kind, by)?;
        cluster.declare_exchange(&self.name, &info).await?;
        // This node followed the committed declare before the write was answered; when
        // another node's declare of the name came first, this node has that one.
        match self.exchange(&declare.name) {
            Some(existing) => self.assert_exchange_equivalent(&existing, kind, declare),
            None => Err(EngineError::Store(format!("failed to declare {}", self.exchange_resource(&declare.name)))),
        }
    }

    /// Declares on this node an exchange the cluster committed.
    ///
    /// # Errors
    /// As [`Self::declare_exchange`] (an inequivalent declare that lost the race to another).
    pub(crate) async fn follow_exchange_declare(&self, declare: &ExchangeDeclare) -> Result<(), EngineError> {
        self.check_live()?;
        self.create_exchange(declare, ExchangeKind::parse(&declare.kind)?, None).await
    }

    /// The exchange `declare` makes, checked as RabbitMQ checks a new one: not an `amq.` name,
    /// a text `alternate-exchange`, and for a user, read on it and write on the alternate.
    fn new_exchange(
        &self,
        declare: &ExchangeDeclare,
        kind: ExchangeKind,
        by: Option<Principal<'_>>,
    ) -> Result<ExchangeInfo, EngineError> {
        if declare.name.starts_with("amq.") {
            return Err(EngineError::ReservedName { kind: ResourceKind::Exchange, name: declare.name.clone() });
        }
        if let Some(value) = declare.arguments.get("alternate-exchange")
            && value.as_str().is_none()
        {
            return Err(EngineError::Precondition(format!(
                "invalid type '{}' for arg 'alternate-exchange' in {}",
                value.rabbit_type_name(),
                self.exchange_resource(&declare.name)
            )));
        }
        if let (Some(by), Some(alternate)) = (by, declare.arguments.get("alternate-exchange").and_then(|v| v.as_str()))
        {
            by.check(Action::Read, &self.exchange_resource(&declare.name))?;
            by.check(Action::Write, &self.exchange_resource(alternate))?;
        }
        Ok(ExchangeInfo {
            name: declare.name.clone(),
            kind,
            durable: declare.durable,
            auto_delete: declare.auto_delete,
            internal: declare.internal,
            arguments: declare.arguments.clone(),
        })
    }

    /// Makes the exchange `declare` asks for on this node, or checks the one there.
    async fn create_exchange(
        &self,
        declare: &ExchangeDeclare,
        kind: ExchangeKind,
        by: Option<Principal<'_>>,
    ) -> Result<(), EngineError> {
        loop {
            let step = {
                let mut topology = self.topology.write();
                if let Some(existing) = topology.exchanges.get(&declare.name) {
                    return self.assert_exchange_equivalent(&existing.info, kind, declare);
                }
                if let Some(reserved) = topology.reserved_exchanges.get(&declare.name) {
                    Err(reserved.clone())
                } else {
                    let info = self.new_exchange(declare, kind, by)?;
                    let Some(store) = self.store.as_ref().filter(|_| info.durable) else {
                        let name = info.name.clone();
                        topology.add_exchange(info);
                        self.note_policy_alternate(&mut topology, &name);
                        self.grew(&topology);
                        return Ok(());
                    };
                    let done = store.save_exchange(&self.name, &info);
                    let (reservation, reserved) = reserve();
                    topology.reserved_exchanges.insert(info.name.clone(), reserved);
                    Ok((info, done, reservation))
                }
            };
            let (info, done, reservation) = match step {
                Ok(committing) => committing,
                Err(reserved) => {
                    reserved.wait().await;
                    continue;
                }
            };
            return self
                .after_commit(done, move |vhost, topology, committed| {
                    topology.reserved_exchanges.remove(&info.name);
                    if committed {
                        let name = info.name.clone();
                        topology.add_exchange(info);
                        vhost.note_policy_alternate(topology, &name);
                        vhost.grew(topology);
                    }
                    drop(reservation);
                })
                .await;
        }
    }

    fn assert_exchange_equivalent(
        &self,
        existing: &ExchangeInfo,
        kind: ExchangeKind,
        declare: &ExchangeDeclare,
    ) -> Result<(), EngineError> {
        let resource = self.exchange_resource(&declare.name);
        let fields = [
            ("type", existing.kind.as_str().to_owned(), kind.as_str().to_owned()),
            ("durable", existing.durable.to_string(), declare.durable.to_string()),
            ("auto_delete", existing.auto_delete.to_string(), declare.auto_delete.to_string()),
            ("internal", existing.internal.to_string(), declare.internal.to_string()),
        ];
        for (field, current, received) in fields {
            if current != received {
                return Err(EngineError::inequivalent(resource, field, quoted(received), quoted(current)));
            }
        }
        let (old, new) = (existing.arguments.get("alternate-exchange"), declare.arguments.get("alternate-exchange"));
        let same = match (old, new) {
            (None, None) => true,
            (Some(a), Some(b)) => a.rabbit_type_name() == b.rabbit_type_name() && a.equivalent(b),
            _ => false,
        };
        if same {
            Ok(())
        } else {
            let (received, current) = args::describe_pair(new, old);
            Err(EngineError::inequivalent(resource, "alternate-exchange", received, current))
        }
    }

    /// Deletes an exchange (a missing one is fine, as in RabbitMQ).
    ///
    /// # Errors
    /// 403 for the default and `amq.*` exchanges, 406 when `if_unused` and it has bindings.
    pub async fn delete_exchange(&self, name: &str, if_unused: bool) -> Result<(), EngineError> {
        if name.is_empty() {
            return Err(EngineError::DefaultExchange);
        }
        if name.starts_with("amq.") {
            return Err(EngineError::SystemExchange(self.exchange_resource(name)));
        }
        let Some(cluster) = self.cluster.get() else {
            return self.remove_exchange(name, if_unused).await;
        };
        {
            let topology = self.topology.read();
            if !topology.exchanges.contains_key(name) {
                return Ok(());
            }
            if if_unused && topology.has_bindings_from(name) {
                return Err(EngineError::InUse(self.exchange_resource(name)));
            }
        }
        cluster.delete_exchange(&self.name, name).await
    }

    /// Deletes on this node an exchange whose deletion the cluster committed.
    pub(crate) async fn follow_exchange_delete(&self, name: &str) {
        // Not unused-checked: never refused.
        let _ = self.remove_exchange(name, false).await;
    }

    async fn remove_exchange(&self, name: &str, if_unused: bool) -> Result<(), EngineError> {
        let forgotten = {
            let mut topology = self.topology.write();
            if !topology.exchanges.contains_key(name) {
                return Ok(());
            }
            if if_unused && topology.has_bindings_from(name) {
                return Err(EngineError::InUse(self.exchange_resource(name)));
            }
            topology.remove_exchange(name);
            self.changed();
            self.forget_removed_exchanges(&mut topology)
        };
        // Forgetting failures are logged by the store; the exchange is gone either way.
        let _ = MetaDone::all(forgotten).await;
        Ok(())
    }

    /// The exchange's declared properties.
    #[must_use]
    pub fn exchange(&self, name: &str) -> Option<Arc<ExchangeInfo>> {
        self.topology.read().exchanges.get(name).map(|e| Arc::clone(&e.info))
    }

    /// Declares (or checks) a queue on behalf of connection `session`.
    ///
    /// # Errors
    /// 403 for an `amq.` name, 404 for a passive declare of a missing queue, 405 for another
    /// connection's exclusive queue, 406 for invalid or inequivalent arguments and properties.
    pub async fn declare_queue(&self, declare: &QueueDeclare, session: SessionId) -> Result<DeclareOk, EngineError> {
        self.declare_queue_as(declare, session, None).await
    }

    /// Declares (or checks) a queue for a user, checked where RabbitMQ's channel checks:
    /// configure on the queue's name (the generated one for a server-named queue; a passive
    /// declare needs nothing); for a new queue with a dead-letter exchange, read on the queue
    /// and write on the exchange — the DLX page's rule.
    ///
    /// # Errors
    /// As [`Self::declare_queue`], and ACCESS_REFUSED.
    pub async fn declare_queue_as(
        &self,
        declare: &QueueDeclare,
        session: SessionId,
        by: Option<Principal<'_>>,
    ) -> Result<DeclareOk, EngineError> {
        self.check_live()?;
        let declared = self.declare_queue_counted(declare, session, by).await;
        if let Ok(ok) = &declared {
            crate::metrics::global().churn(Churn::QueuesDeclared);
            if ok.created {
                crate::metrics::global().churn(Churn::QueuesCreated);
            }
        }
        declared
    }

    /// [`Self::declare_queue_as`] without the churn counts.
    async fn declare_queue_counted(
        &self,
        declare: &QueueDeclare,
        session: SessionId,
        by: Option<Principal<'_>>,
    ) -> Result<DeclareOk, EngineError> {
        let queue = if declare.passive {
            self.queue(&declare.name, session)?
        } else {
            loop {
                match self.create_or_check_queue(declare, session, (Declarer::Client, None), by)? {
                    Created::New(name) => {
                        return Ok(DeclareOk { name, messages: 0, consumers: 0, created: true });
                    }
                    Created::Existing(queue) => break queue,
                    Created::Propose(config) => return self.declare_through_cluster(&config).await,
                    Created::Reserved(reserved) => reserved.wait().await,
                    Created::Committing { queue, done, reservation } => {
                        let name = queue.name().to_owned();
                        self.after_commit(done, move |vhost, topology, committed| {
                            vhost.publish_queue(topology, queue, committed, reservation);
                        })
                        .await?;
                        return Ok(DeclareOk { name, messages: 0, consumers: 0, created: true });
                    }
                }
            }
        };
        let stats = queue.declared().await?;
        Ok(DeclareOk {
            name: queue.name().to_owned(),
            messages: stats.ready,
            consumers: stats.consumers,
            created: false,
        })
    }

    /// Publishes a durable queue once its commit is done (drops it if the commit failed).
    fn publish_queue(&self, topology: &mut Topology, queue: QueueRef, committed: bool, reservation: Reservation) {
        topology.reserved_queues.remove(queue.name());
        if committed {
            topology.queues.insert(queue.name().to_owned(), queue);
            self.grew(topology);
        }
        drop(reservation);
    }

    /// Makes queue `declare` (`replica`: the group of a replicated quorum queue, whose home
    /// this node is), or checks the one there against it.
    fn create_or_check_queue(
        &self,
        declare: &QueueDeclare,
        session: SessionId,
        (declarer, replica): (Declarer, Option<u64>),
        by: Option<Principal<'_>>,
    ) -> Result<Created, EngineError> {
        let mut arguments = declare.arguments.clone();
        if !arguments.contains("x-queue-type") {
            arguments.insert("x-queue-type", Value::long_str(QueueType::Classic.as_str()));
        }
        let requested_type = args::queue_type_of(&arguments);
        let name = if declare.name.is_empty() {
            if requested_type == QueueType::Quorum {
                return Err(EngineError::Precondition(format!(
                    "Cannot declare a server-named queue for type {}",
                    requested_type.module()
                )));
            }
            generated_name("amq.gen")
        } else {
            declare.name.clone()
        };
        let owner = declare.exclusive.then_some(session);
        let durable = declare.durable && !declare.exclusive;
        let resource = self.queue_resource(&name);

        // Before looking for an existing queue, as RabbitMQ's `check_name` comes first: even
        // an existing `amq.` queue cannot be declared other than passively.
        if name.starts_with("amq.") && !declare.name.is_empty() && declarer == Declarer::Client {
            return Err(EngineError::ReservedName { kind: ResourceKind::Queue, name });
        }
        if let Some(by) = by {
            by.check(Action::Configure, &resource)?;
        }
        let mut topology = self.topology.write();
        if let Some(existing) = topology.queues.get(&name) {
            Self::assert_queue_equivalent(existing, owner, durable, declare.auto_delete, &arguments)?;
            return Ok(Created::Existing(Arc::clone(existing)));
        }
        if let Some(reserved) = topology.reserved_queues.get(&name) {
            return Ok(Created::Reserved(reserved.clone()));
        }
        // Only for a queue this declare creates, as RabbitMQ 4.0.5 checks it.
        if let (Some(by), Some(dlx)) = (by, arguments.get("x-dead-letter-exchange").and_then(|v| v.as_str())) {
            by.check(Action::Read, &resource)?;
            by.check(Action::Write, &self.exchange_resource(dlx))?;
        }
        // The broker's own queues do not count against the vhost's limit.
        let own = usize::from(topology.queues.contains_key(FALLBACK_QUEUE));
        if let Some(max) = self.limits.max_queues(&self.name)
            && declarer == Declarer::Client
            && (topology.queues.len() + topology.reserved_queues.len()).saturating_sub(own) as u64 >= max
        {
            return Err(EngineError::QueueLimit { queue: name, vhost: self.name.clone(), max });
        }
        let queue_type = args::validate_declare(&resource, &arguments)?;
        if queue_type == QueueType::Quorum {
            let refused = [
                (declare.auto_delete, "auto-delete"),
                (declare.exclusive, "exclusive-owner"),
                (!durable, "non-durable"),
            ];
            if let Some((_, property)) = refused.iter().find(|(bad, _)| *bad) {
                return Err(EngineError::Precondition(format!("invalid property '{property}' for {resource}")));
            }
        }
        let config = QueueConfig {
            name: name.clone(),
            vhost: self.name.clone(),
            durable,
            auto_delete: declare.auto_delete,
            exclusive_owner: owner,
            arguments,
            queue_type,
        };
        // In a cluster, a client's queue is declared through it: its node makes it, every
        // other node a proxy for it.
        if declarer == Declarer::Client && self.clustered() {
            return Ok(Created::Propose(config));
        }
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let stored = durable.then(|| StoredQueue {
            vhost: self.name.clone(),
            name: name.clone(),
            id,
            auto_delete: config.auto_delete,
            arguments: config.arguments.clone(),
            home: None,
            replica,
        });
        let settings = self.settings_for(&name, queue_type, &config.arguments);
        // The task starts now; until the queue is published nobody can reach it, and should its
        // commit fail, dropping the handle stops it.
        let links = self.queue_links(replica.map(|group| (group, name.as_str(), true)));
        let queue = crate::queue::spawn(id, config, settings, links, Default::default());
        let Some((store, stored)) = self.store.as_ref().zip(stored) else {
            topology.queues.insert(name.clone(), queue);
            self.grew(&topology);
            return Ok(Created::New(name));
        };
        let done = store.save_queue(stored);
        let (reservation, reserved) = reserve();
        topology.reserved_queues.insert(name, reserved);
        Ok(Created::Committing { queue, done, reservation })
    }

    /// Checks a redeclare against the queue there, as RabbitMQ's `check_queue_equivalence`.
    fn assert_queue_equivalent(
        existing: &QueueRef,
        owner: Option<SessionId>,
        durable: bool,
        auto_delete: bool,
        arguments: &Table,
    ) -> Result<(), EngineError> {
        let (config, resource) = (&existing.config, existing.resource());
        if config.exclusive_owner != owner {
            return Err(EngineError::ExclusiveLocked(resource));
        }
        for (field, current, received) in
            [("durable", config.durable, durable), ("auto_delete", config.auto_delete, auto_delete)]
        {
            if current != received {
                return Err(EngineError::inequivalent(resource, field, quoted(received), quoted(current)));
            }
        }
        args::assert_equivalent(&resource, config.queue_type, &config.arguments, arguments)
    }

    /// Looks up a queue that `session` may use.
    ///
    /// # Errors
    /// 404 when missing, 405 when another connection owns it.
    pub fn queue(&self, name: &str, session: SessionId) -> Result<QueueRef, EngineError> {
        let queue = self
            .topology
            .read()
            .queues
            .get(name)
            .cloned()
            .ok_or_else(|| EngineError::NotFound(self.queue_resource(name)))?;
        queue.check_access(session)?;
        Ok(queue)
    }

    /// Deletes a queue, returning its ready message count (0 when it did not exist).
    ///
    /// # Errors
    /// 405 for another connection's exclusive queue; 406 for `if_unused`/`if_empty` failures.
    pub async fn delete_queue(
        &self,
        name: &str,
        session: SessionId,
        if_unused: bool,
        if_empty: bool,
    ) -> Result<u32, EngineError> {
        let queue = match self.queue(name, session) {
            Ok(queue) => queue,
            Err(EngineError::NotFound(_)) => return Ok(0),
            Err(other) => return Err(other),
        };
        if self.recorded(name) {
            return self.delete_through_cluster(&queue, if_unused, if_empty).await;
        }
        let count = queue.delete(if_unused, if_empty).await?;
        self.forget_queue(&queue).await;
        Ok(count)
    }

    /// Deletes a queue unconditionally (exclusive queues when their connection closes); in a
    /// cluster, the other nodes drop their proxies for it.
    pub async fn drop_queue(&self, queue: &QueueRef) {
        self.drop_here(queue).await;
        self.deleted_itself(queue);
    }

    /// Deletes a queue of this node unconditionally (or forgets a proxy).
    pub(crate) async fn drop_here(&self, queue: &QueueRef) {
        let _ = queue.delete(false, false).await;
        self.forget_queue(queue).await;
    }

    /// Removes a queue that stopped from the topology, with its bindings, and waits until the
    /// store forgot it too.
    async fn forget_queue(&self, queue: &QueueRef) {
        // Forgetting failures are logged by the store; the queue is gone either way.
        let _ = MetaDone::all(self.remove_queue(queue)).await;
    }

    /// Removes a queue that stopped from the topology, with its bindings, and submits the
    /// store's forgetting of it (returned, to await or not).
    fn remove_queue(&self, queue: &QueueRef) -> Vec<MetaDone> {
        let mut topology = self.topology.write();
        let same = topology.queues.get(queue.name()).is_some_and(|q| q.id == queue.id);
        if !same {
            return Vec::new();
        }
        topology.queues.remove(queue.name());
        crate::metrics::global().churn(Churn::QueuesDeleted);
        topology.remove_bindings_to(&Destination::Queue(queue.name().to_owned()));
        self.changed();
        let mut forgotten = self.forget_removed_exchanges(&mut topology);
        if let Some(store) = self.store.as_ref().filter(|_| queue.config.durable) {
            forgotten.push(store.forget_queue(queue.id, &self.name, queue.name()));
        }
        forgotten
    }

    /// Binds `destination` to exchange `source`.
    ///
    /// # Errors
    /// 403 for the default exchange, 404 for a missing source or destination, 405 for another
    /// connection's exclusive queue, 406 for invalid headers-binding arguments and for what
    /// an `x-local-random` exchange does not bind.
    pub async fn bind(
        &self,
        source: &str,
        destination: Destination,
        key: &str,
        arguments: &Table,
        session: SessionId,
    ) -> Result<(), EngineError> {
        self.check_live()?;
        let binding = self.checked_binding(source, destination, key, arguments, session)?;
        match self.cluster.get().filter(|_| self.through_cluster(&binding.destination)) {
            Some(cluster) => {
                {
                    let topology = self.topology.read();
                    self.check_binding_ends(&topology, source, &binding.destination, Some(session))?;
                    Self::check_binding_arguments(&topology, source, &binding)?;
                }
                cluster.bind(&self.name, source, &binding, true).await
            }
            _ => self.add_binding(source, binding, Some(session)).await,
        }
    }

    /// Adds on this node a binding the cluster committed (whoever owns an exclusive queue: the
    /// connection that asked was checked on its own node).
    ///
    /// # Errors
    /// As [`Self::bind`] (an end deleted meanwhile).
    pub(crate) async fn follow_bind(&self, source: &str, binding: Binding) -> Result<(), EngineError> {
        self.check_live()?;
        // The connection that asked was checked on its node.
        self.add_binding(source, binding, None).await
    }

    /// What the source exchange's type allows a binding to carry.
    fn check_binding_arguments(topology: &Topology, source: &str, binding: &Binding) -> Result<(), EngineError> {
        match topology.exchanges.get(source).map(|e| e.info.kind) {
            Some(ExchangeKind::Headers) => crate::exchange::validate_headers_binding(&binding.arguments),
            Some(ExchangeKind::LocalRandom) => {
                let queue_type = match &binding.destination {
                    Destination::Queue(name) => topology.queues.get(name).map(|q| q.config.queue_type),
                    Destination::Exchange(_) => None,
                };
                crate::exchange::local_random::validate_binding(&binding.key, queue_type)
            }
            _ => Ok(()),
        }
    }

    async fn add_binding(&self, source: &str, binding: Binding, session: Option<SessionId>) -> Result<(), EngineError> {
        let (done, ends) = {
            let mut topology = self.topology.write();
            self.check_binding_ends(&topology, source, &binding.destination, session)?;
            Self::check_binding_arguments(&topology, source, &binding)?;
            let durable = durable_ends(&topology, source, &binding.destination);
            match self.store.as_ref().filter(|_| durable && !topology.binding_exists(source, &binding)) {
                Some(store) => {
                    (store.save_binding(&self.name, source, &binding), Ends::of(&topology, source, &binding))
                }
                None => {
                    if topology.bind(source, binding) {
                        self.grew(&topology);
                    }
                    return Ok(());
                }
            }
        };
        let source = source.to_owned();
        self.after_commit(done, move |vhost, topology, committed| {
            // Published only if both ends are still the ones it was validated against: had one
            // been deleted meanwhile, the store already forgot the binding with it.
            if committed && ends.is_some_and(|ends| ends.still_in(topology)) && topology.bind(&source, binding) {
                vhost.grew(topology);
            }
        })
        .await
    }

    /// Removes a binding (a missing binding is fine).
    ///
    /// # Errors
    /// As [`Self::bind`], minus argument validation.
    pub async fn unbind(
        &self,
        source: &str,
        destination: Destination,
        key: &str,
        arguments: &Table,
        session: SessionId,
    ) -> Result<(), EngineError> {
        let binding = self.checked_binding(source, destination, key, arguments, session)?;
        match self.cluster.get().filter(|_| self.through_cluster(&binding.destination)) {
            Some(cluster) => {
                {
                    let topology = self.topology.read();
                    self.check_binding_ends(&topology, source, &binding.destination, Some(session))?;
                    if !topology.binding_exists(source, &binding) {
                        return Ok(());
                    }
                }
                cluster.bind(&self.name, source, &binding, false).await
            }
            _ => self.remove_binding(source, &binding, Some(session)).await,
        }
    }

    /// Removes on this node a binding whose removal the cluster committed.
    pub(crate) async fn follow_unbind(&self, source: &str, binding: &Binding) {
        // An end already gone took the binding with it.
        let _ = self.remove_binding(source, binding, None).await;
    }

    async fn remove_binding(
        &self,
        source: &str,
        binding: &Binding,
        session: Option<SessionId>,
    ) -> Result<(), EngineError> {
        let forgotten = {
            let mut topology = self.topology.write();
            self.check_binding_ends(&topology, source, &binding.destination, session)?;
            let durable = durable_ends(&topology, source, &binding.destination);
            if !(topology.binding_exists(source, binding) && topology.unbind(source, binding)) {
                return Ok(());
            }
            self.changed();
            let mut forgotten = Vec::new();
            if let Some(store) = self.store.as_ref().filter(|_| durable) {
                forgotten.push(store.forget_binding(&self.name, source, binding));
            }
            forgotten.extend(self.forget_removed_exchanges(&mut topology));
            forgotten
        };
        // Forgetting failures are logged by the store; the binding is gone either way.
        let _ = MetaDone::all(forgotten).await;
        Ok(())
    }

    fn checked_binding(
        &self,
        source: &str,
        destination: Destination,
        key: &str,
        arguments: &Table,
        _session: SessionId,
    ) -> Result<Binding, EngineError> {
        if matches!(&destination, Destination::Exchange(name) if name.is_empty()) || source.is_empty() {
            return Err(EngineError::DefaultExchange);
        }
        Ok(Binding { destination, key: key.to_owned(), arguments: arguments.clone() })
    }

    fn check_binding_ends(
        &self,
        topology: &Topology,
        source: &str,
        destination: &Destination,
        session: Option<SessionId>,
    ) -> Result<(), EngineError> {
        if !topology.exchanges.contains_key(source) {
            return Err(EngineError::NotFound(self.exchange_resource(source)));
        }
        match destination {
            Destination::Queue(name) => match (topology.queues.get(name), session) {
                (None, _) => Err(EngineError::NotFound(self.queue_resource(name))),
                (Some(queue), Some(session)) => queue.check_access(session),
                (Some(_), None) => Ok(()),
            },
            Destination::Exchange(name) => match topology.exchanges.contains_key(name) {
                true => Ok(()),
                false => Err(EngineError::NotFound(self.exchange_resource(name))),
            },
        }
    }

    /// Routes a message published to `exchange`, using and refreshing the caller's cache.
    ///
    /// # Errors
    /// 404 for a missing exchange, 403 for an internal one.
    pub fn route(
        &self,
        cache: &mut RouteCache,
        exchange: &str,
        routing: &Routing,
        headers: &Table,
    ) -> Result<Arc<[QueueRef]>, EngineError> {
        let version = self.version.load(Ordering::Acquire);
        cache.validate(version);
        if !routing.has_extra_keys()
            && let Some(hit) = cache.get(exchange, &routing.routing_key)
        {
            return Ok(hit);
        }
        let topology = self.topology.read();
        let Some(entry) = topology.exchanges.get(exchange) else {
            return Err(EngineError::NotFound(self.exchange_resource(exchange)));
        };
        if entry.info.internal {
            return Err(EngineError::InternalExchange(self.exchange_resource(exchange)));
        }
        let routed = topology.route(exchange, routing, headers);
        let queues: Arc<[QueueRef]> = routed.queues.into();
        if routed.cacheable && !routing.has_extra_keys() {
            cache.insert(exchange, &routing.routing_key, Arc::clone(&queues));
        }
        Ok(queues)
    }

    /// Routes a dead letter: like [`Self::route`] but without a cache and without the
    /// `internal` check (RabbitMQ calls `rabbit_exchange:route` directly). `None` when the
    /// exchange does not exist.
    #[must_use]
    pub fn route_dead_letter(&self, exchange: &str, routing: &Routing, headers: &Table) -> Option<Vec<QueueRef>> {
        self.topology.read().route_dead_letter(exchange, routing, headers)
    }

    /// The bindings from exchange `source` to `destination` (for management APIs).
    #[must_use]
    pub fn bindings_between(&self, source: &str, destination: &Destination) -> Vec<Binding> {
        self.topology.read().exchanges.get(source).map(|e| e.bindings.to_destination(destination)).unwrap_or_default()
    }

    /// Every exchange, the default and `amq.*` ones included, ordered by name.
    #[must_use]
    pub fn exchanges(&self) -> Vec<Arc<ExchangeInfo>> {
        let mut all: Vec<_> = self.topology.read().exchanges.values().map(|e| Arc::clone(&e.info)).collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Every binding as (source exchange, binding), ordered by source, then destination and key.
    /// RabbitMQ also lists a queue's implicit binding from the default exchange; management
    /// renderings add that themselves.
    #[must_use]
    pub fn bindings(&self) -> Vec<(String, Binding)> {
        self.topology.read().bindings()
    }

    /// Every queue.
    #[must_use]
    pub fn queues(&self) -> Vec<QueueRef> {
        self.topology.read().queues.values().cloned().collect()
    }

    /// The queues that live on this node (in a cluster, without the proxies for the queues
    /// of other nodes): what this node's own measurements count.
    #[must_use]
    pub fn local_queues(&self) -> Vec<QueueRef> {
        self.topology.read().queues.values().filter(|q| q.home.is_none()).cloned().collect()
    }

    /// How many queues the vhost has (RabbitMQ's `rabbitmq_queues`), without listing them.
    #[must_use]
    pub fn queue_count(&self) -> usize {
        self.topology.read().queues.len()
    }

    /// Names of all queues (for diagnostics and tests).
    #[must_use]
    pub fn queue_names(&self) -> Vec<String> {
        self.topology.read().queues.keys().cloned().collect()
    }
}

/// Whether a binding survives restarts: both its ends do (RabbitMQ's rule).
fn durable_ends(topology: &Topology, source: &str, destination: &Destination) -> bool {
    let exchange_durable = |name: &str| topology.exchanges.get(name).is_some_and(|e| e.info.durable);
    exchange_durable(source)
        && match destination {
            Destination::Queue(name) => topology.queues.get(name).is_some_and(|q| q.config.durable),
            Destination::Exchange(name) => exchange_durable(name),
        }
}

/// What a non-passive queue declare found or did under the topology lock.
/// Who declares a queue: clients may not use the reserved `amq.` prefix, the broker does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Declarer {
    Client,
    Broker,
}

enum Created {
    /// Created (not durable, or no store): published already.
    New(String),
    /// There already: checked equivalent.
    Existing(QueueRef),
    /// Another declare of the name is committing: wait for it, then look again.
    Reserved(Reserved),
    /// Valid and new: to be declared through the cluster.
    Propose(QueueConfig),
    /// Created, name reserved, commit submitted: publish once committed.
    Committing { queue: QueueRef, done: MetaDone, reservation: Reservation },
}

/// The two ends a durable binding was validated against, to publish it only if they are still
/// the same exchanges and queue once its commit is done.
struct Ends {
    source: Arc<ExchangeInfo>,
    destination: End,
}

enum End {
    Queue(QueueRef),
    Exchange(Arc<ExchangeInfo>),
}

impl Ends {
    fn of(topology: &Topology, source: &str, binding: &Binding) -> Option<Self> {
        let source = Arc::clone(&topology.exchanges.get(source)?.info);
        let destination = match &binding.destination {
            Destination::Queue(name) => End::Queue(Arc::clone(topology.queues.get(name)?)),
            Destination::Exchange(name) => End::Exchange(Arc::clone(&topology.exchanges.get(name)?.info)),
        };
        Some(Self { source, destination })
    }

    fn still_in(&self, topology: &Topology) -> bool {
        let exchange_is =
            |info: &Arc<ExchangeInfo>| topology.exchanges.get(&info.name).is_some_and(|e| Arc::ptr_eq(&e.info, info));
        exchange_is(&self.source)
            && match &self.destination {
                End::Queue(queue) => topology.queues.get(queue.name()).is_some_and(|q| Arc::ptr_eq(q, queue)),
                End::Exchange(info) => exchange_is(info),
            }
    }
}
