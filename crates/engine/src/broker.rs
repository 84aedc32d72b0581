//! The broker: users and permissions (through [`Access`]), virtual hosts and id allocation.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;
use tokio::sync::watch;

use crate::access::{Access, AccessError, Account, PasswordHash, Seed, Tags, User, VhostInfo};
use crate::alarms::{Alarms, Resources};
use crate::connections::Connections;
use crate::limits::{ConnectionSlot, Limits};
use crate::login::{LoginConfig, LoginPolicy};
use crate::reply_to::ReplyConsumers;

use charon_store::segment_log::{Placed, Record, RecoveredQueue};

use crate::clock::now_ms;
use crate::error::EngineError;
use crate::persist::Persistence;
use crate::vhost::{DeadLetterOptions, VHost};
pub use charon_model::node_name;

/// A user the configuration seeds on the first start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserConfig {
    /// Login name.
    pub name: String,
    /// Password (PLAIN / AMQPLAIN), stored salted and hashed.
    pub password: String,
    /// Vhosts the user gets full permissions on; `None` means every configured vhost.
    pub vhosts: Option<Vec<String>>,
    /// Tags (`administrator`, `monitoring`, `policymaker`, `management`, ...).
    pub tags: Vec<String>,
}

/// Everything the broker needs at start.
#[derive(Clone, Debug)]
pub struct BrokerConfig {
    /// Users written to the store on the first start (later starts keep the store's).
    pub users: Vec<UserConfig>,
    /// Virtual hosts created on the first start.
    pub vhosts: Vec<String>,
    /// Keep the dead letters RabbitMQ drops silently in each vhost's fallback queue
    /// (`amq.charon.dead-letters`, see [`crate::dead_letter::FALLBACK_QUEUE`]).
    pub dead_letter_fallback: bool,
    /// Charon's at-least-once dead lettering for every queue with a dead-letter exchange (a
    /// `charon-dead-letter-guarantee` policy overrides it per queue).
    pub dead_letter_guarantee: bool,
    /// Who may log in from where, and how failed logins are slowed.
    pub login: LoginConfig,
    /// RabbitMQ's `consumer_timeout` in ms, for queues whose argument or policy sets none;
    /// `None` turns it off. The 0.9.1 channels enforce it; the management API shows it.
    pub consumer_timeout: Option<u64>,
}

impl Default for BrokerConfig {
    /// RabbitMQ's out-of-the-box setup: user `guest`/`guest`, vhost `/`.
    fn default() -> Self {
        Self {
            users: vec![UserConfig {
                name: "guest".into(),
                password: "guest".into(),
                vhosts: None,
                tags: vec!["administrator".into()],
            }],
            vhosts: vec!["/".into()],
            dead_letter_fallback: true,
            dead_letter_guarantee: false,
            login: LoginConfig::default(),
            consumer_timeout: Some(crate::queue::DEFAULT_CONSUMER_TIMEOUT_MS),
        }
    }
}

impl BrokerConfig {
    fn dead_letter_options(&self) -> DeadLetterOptions {
        DeadLetterOptions { fallback: self.dead_letter_fallback, guarantee: self.dead_letter_guarantee }
    }

    /// The users and vhosts to seed, `extra_vhosts` (named by stored topology) included.
    fn seed(&self, extra_vhosts: &[String]) -> Seed {
        let users = self
            .users
            .iter()
            .map(|u| {
                let account = Account::new(
                    u.name.clone(),
                    Some(PasswordHash::new(&u.password)),
                    Tags::new(u.tags.iter().cloned()),
                );
                (account, u.vhosts.clone())
            })
            .collect();
        let mut vhosts = self.vhosts.clone();
        for name in extra_vhosts {
            if !vhosts.contains(name) {
                vhosts.push(name.clone());
            }
        }
        Seed { users, vhosts }
    }
}

/// The broker.
#[derive(Debug)]
pub struct Broker {
    access: Access,
    vhosts: RwLock<HashMap<String, Arc<VHost>>>,
    /// What a vhost created at runtime is built with.
    store: Option<Arc<Persistence>>,
    dead_letter_options: DeadLetterOptions,
    ids: Arc<AtomicU64>,
    /// RabbitMQ's memory and disk alarms: publishers are blocked while one is on, and
    /// consumers go on.
    resources: Arc<Resources>,
    /// Vhost and user limits, and the connections and channels counted against them.
    limits: Arc<Limits>,
    /// Open connections by user and vhost.
    connections: Arc<Connections>,
    /// The sockets the node listens on, as the gateway bound them.
    listeners: crate::listeners::Listeners,
    /// When the node started, for `uptime`.
    started: std::time::Instant,
    /// `loopback_users`, the failed-login throttle, the certificate login name.
    login: LoginPolicy,
    /// Direct reply-to consumers, by address (broker-wide, as in RabbitMQ).
    reply_consumers: Arc<ReplyConsumers>,
    /// See [`BrokerConfig::consumer_timeout`].
    consumer_timeout: Option<u64>,
    /// Redrive jobs (issue 20).
    redrives: crate::redrive::Redrives,
    /// The cluster, when the node runs in one (set once, at start).
    cluster: crate::cluster::ClusterSlot,
    /// The HTTP services that answer requests other nodes forward here.
    services: crate::cluster::forward::Services,
}

impl Broker {
    /// Creates the broker with its users and vhosts, without a store. Must run inside the
    /// runtime (the fallback queues start their tasks).
    #[must_use]
    pub fn new(config: BrokerConfig) -> Arc<Self> {
        let ids = Arc::new(AtomicU64::new(1));
        let limits = Limits::restore(None, &[]);
        let options = config.dead_letter_options();
        let cluster = crate::cluster::ClusterSlot::default();
        let access = Access::in_memory(config.seed(&[]));
        let vhosts = access
            .vhosts()
            .into_iter()
            .map(|(name, _)| {
                let vhost =
                    VHost::new(&name, Arc::clone(&ids), None, Arc::clone(&limits), options, Arc::clone(&cluster));
                vhost.ensure_fallback_queue();
                (name, vhost)
            })
            .collect();
        let login = LoginPolicy::new(config.login.clone());
        let redrives = crate::redrive::Redrives::new(None, Arc::clone(&ids), Arc::clone(&cluster));
        Arc::new(Self {
            access,
            vhosts: RwLock::new(vhosts),
            store: None,
            dead_letter_options: options,
            ids,
            resources: Arc::default(),
            limits,
            connections: Arc::default(),
            listeners: crate::listeners::Listeners::default(),
            started: std::time::Instant::now(),
            login,
            reply_consumers: Arc::default(),
            consumer_timeout: config.consumer_timeout,
            redrives,
            cluster,
            services: crate::cluster::forward::Services::default(),
        })
    }

    /// Creates the broker on a durable store: the configured vhosts plus every vhost the store
    /// knows, each restored from the metadata, with the messages the log recovered (by queue
    /// id). Messages of queues the metadata no longer has are dropped from the log. Must run
    /// inside the runtime (queues start their tasks).
    ///
    /// # Errors
    /// When the metadata cannot be read.
    pub fn with_store(
        config: BrokerConfig,
        store: Arc<Persistence>,
        mut messages: HashMap<u64, RecoveredQueue>,
    ) -> Result<Arc<Self>, EngineError> {
        let snapshot = store.meta().load().map_err(|e| EngineError::Store(e.to_string()))?;
        // Ids above every stored queue id and every id an earlier run can have used.
        let stored_max = snapshot.queues.iter().map(|q| q.id).max().unwrap_or(0);
        let clock_floor = u64::try_from(now_ms()).unwrap_or(0) << 20;
        let ids = Arc::new(AtomicU64::new(stored_max.saturating_add(1).max(clock_floor)));
        let stored_names = snapshot.queues.iter().map(|q| &q.vhost).chain(snapshot.exchanges.iter().map(|e| &e.vhost));
        let mut topology_names: Vec<String> = Vec::new();
        let policy_names = snapshot.policies.iter().chain(&snapshot.operator_policies).map(|p| &p.vhost);
        for name in stored_names.chain(policy_names) {
            if !topology_names.contains(name) {
                topology_names.push(name.clone());
            }
        }
        // A data directory from before vhosts were stored seeds the vhosts its topology names.
        let access = Access::open(Arc::clone(&store), config.seed(&topology_names))?;
        let mut names: Vec<String> = access.vhosts().into_iter().map(|(name, _)| name).collect();
        for name in topology_names {
            if !names.contains(&name) {
                // Topology whose vhost record is gone (a vhost deletion cut short by a crash):
                // restored, so that no message is dropped unseen; the operator deletes it.
                tracing::warn!(vhost = %name, "stored topology names a vhost without a record; restoring it");
                names.push(name);
            }
        }
        let limits = Limits::restore(Some(Arc::clone(&store)), &snapshot.limits);
        let cluster = crate::cluster::ClusterSlot::default();
        let mut vhosts = HashMap::new();
        for name in names {
            let vhost = VHost::new(
                &name,
                Arc::clone(&ids),
                Some(Arc::clone(&store)),
                Arc::clone(&limits),
                config.dead_letter_options(),
                Arc::clone(&cluster),
            );
            vhost.restore(&snapshot, &mut messages);
            vhost.ensure_fallback_queue();
            vhosts.insert(name, vhost);
        }
        let orphans: Vec<Record> = messages.into_keys().map(|queue| Record::DropQueue { queue }).collect();
        if !orphans.is_empty() {
            tracing::warn!(queues = orphans.len(), "logged messages of unknown queues dropped");
            store.log.append(orphans, None);
        }
        let login = LoginPolicy::new(config.login.clone());
        let redrives = crate::redrive::Redrives::new(Some(Arc::clone(&store)), Arc::clone(&ids), Arc::clone(&cluster));
        redrives.restore(&store, &vhosts);
        let broker = Arc::new(Self {
            access,
            vhosts: RwLock::new(vhosts),
            store: Some(Arc::clone(&store)),
            dead_letter_options: config.dead_letter_options(),
            ids,
            resources: Arc::default(),
            limits,
            connections: Arc::default(),
            listeners: crate::listeners::Listeners::default(),
            started: std::time::Instant::now(),
            login,
            reply_consumers: Arc::default(),
            consumer_timeout: config.consumer_timeout,
            redrives,
            cluster,
            services: crate::cluster::forward::Services::default(),
        });
        let weak = Arc::downgrade(&broker);
        store.log.set_relocation_listener(Box::new(move |placed| {
            if let Some(broker) = weak.upgrade() {
                broker.relocated(placed);
            }
        }));
        Ok(broker)
    }

    /// Compaction moved messages: their queues learn the new places (before the old segment
    /// is deleted). Rare, so finding the queues by id is a scan.
    fn relocated(&self, placed: Vec<Placed>) {
        let mut by_queue: HashMap<u64, Vec<Placed>> = HashMap::new();
        for p in placed {
            // A dead letter's spill is keyed apart from its queue's records.
            by_queue.entry(p.queue & !crate::queue::LETTER_LOG_KEY).or_default().push(p);
        }
        for vhost in self.vhosts() {
            for queue in vhost.queues() {
                if let Some(placed) = by_queue.remove(&queue.id) {
                    queue.placed(placed);
                }
            }
        }
    }

    /// The resource alarms and their measurements.
    #[must_use]
    pub fn resources(&self) -> &Arc<Resources> {
        &self.resources
    }

    /// The vhost and user limits.
    #[must_use]
    pub fn limits(&self) -> &Arc<Limits> {
        &self.limits
    }

    /// RabbitMQ's `consumer_timeout` (ms) for queues that set none; `None`: off.
    #[must_use]
    pub fn consumer_timeout(&self) -> Option<u64> {
        self.consumer_timeout
    }

    /// The redrive jobs.
    #[must_use]
    pub fn redrives(&self) -> &crate::redrive::Redrives {
        &self.redrives
    }

    /// The live direct reply-to consumers.
    #[must_use]
    pub fn reply_consumers(&self) -> &Arc<ReplyConsumers> {
        &self.reply_consumers
    }

    /// The login policy: `loopback_users`, the failed-login throttle, SASL EXTERNAL's name.
    #[must_use]
    pub fn login(&self) -> &LoginPolicy {
        &self.login
    }

    /// Opens a vhost for a connection of `user`, counted against the vhost's and the user's
    /// connection limits until the slot is dropped.
    ///
    /// # Errors
    /// NOT_ALLOWED as [`Self::open_vhost`], or when a connection limit is reached.
    pub fn connect(&self, user: &User, name: &str) -> Result<(Arc<VHost>, ConnectionSlot), EngineError> {
        let vhost = self.open_vhost(user, name)?;
        let slot = self.limits.connect(&user.name, name)?;
        Ok((vhost, slot))
    }

    /// Follows the resource alarms: publishing stops while one is on.
    #[must_use]
    pub fn alarms(&self) -> watch::Receiver<Alarms> {
        self.resources.watch()
    }

    /// A fresh broker-unique id (connections, consumers, queues).
    #[must_use]
    pub fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed)
    }

    /// Checks a user's password.
    #[must_use]
    pub fn authenticate(&self, name: &str, password: &str) -> Option<User> {
        self.access.authenticate(name, password)
    }

    /// A user, without a password check (SASL ANONYMOUS mapped to a user, a client
    /// certificate).
    #[must_use]
    pub fn user(&self, name: &str) -> Option<User> {
        self.access.user(name)
    }

    /// Users, permissions and their checks.
    #[must_use]
    pub fn access(&self) -> &Access {
        &self.access
    }

    /// Creates a vhost, or updates its description and tags; true when it was created.
    ///
    /// # Errors
    /// A store failure; nothing changed.
    pub async fn add_vhost(&self, name: &str, info: VhostInfo) -> Result<bool, AccessError> {
        self.access.put_vhost(name, info).await?;
        if self.vhosts.read().contains_key(name) {
            return Ok(false);
        }
        let vhost = VHost::new(
            name,
            Arc::clone(&self.ids),
            self.store.clone(),
            Arc::clone(&self.limits),
            self.dead_letter_options,
            Arc::clone(&self.cluster),
        );
        vhost.ensure_fallback_queue();
        Ok(self.vhosts.write().insert(name.to_owned(), vhost).is_none())
    }

    /// The sockets the node listens on.
    #[must_use]
    pub fn listeners(&self) -> &crate::listeners::Listeners {
        &self.listeners
    }

    /// How long the node has been up.
    #[must_use]
    pub fn uptime(&self) -> std::time::Duration {
        self.started.elapsed()
    }

    /// The open connections.
    #[must_use]
    pub fn connections(&self) -> &Arc<Connections> {
        &self.connections
    }

    /// Deletes a user, its permissions and limits, and closes its connections (`user 'u' is
    /// deleted`, as RabbitMQ).
    ///
    /// # Errors
    /// No such user, or a store failure.
    pub async fn delete_user(&self, name: &str) -> Result<(), AccessError> {
        self.access.delete_user(name).await?;
        self.connections.close_where(|user, _| user == name, &format!("user '{name}' is deleted"));
        self.limits.forget(crate::limits::LimitScope::User, name).await.map_err(|e| AccessError::Store(e.to_string()))
    }

    /// Deletes a vhost with everything in it: queues and their messages, exchanges, policies,
    /// limits and every user's permissions there; its connections are closed (`vhost 'v' is
    /// deleted`, as RabbitMQ).
    ///
    /// # Errors
    /// No such vhost, or a store failure.
    pub async fn delete_vhost(&self, name: &str) -> Result<(), AccessError> {
        // Permissions go first, as RabbitMQ does, so that no new connection opens it meanwhile.
        if !self.access.has_vhost(name) && !self.vhosts.read().contains_key(name) {
            return Err(AccessError::NoSuchVhost(name.to_owned()));
        }
        self.access.delete_vhost(name).await?;
        self.connections.close_where(|_, vhost| vhost == name, &format!("vhost '{name}' is deleted"));
        let removed = self.vhosts.write().remove(name);
        if let Some(vhost) = removed {
            vhost.tear_down().await;
        }
        self.limits
            .forget(crate::limits::LimitScope::Vhost, name)
            .await
            .map_err(|e| AccessError::Store(e.to_string()))?;
        Ok(())
    }

    /// Returns once every queue has applied what it was sent before and handed its log
    /// records to the log, and no dead letter is still on its way to a target (see
    /// [`crate::QueueHandle::flush`]): a clean stop runs it after the connections closed,
    /// before it closes the log, under a time limit.
    pub async fn flush_queues(&self) {
        loop {
            let mut settled = true;
            for vhost in self.vhosts() {
                for queue in vhost.queues() {
                    // A queue that is gone has nothing left to write.
                    settled &= queue.flush().await.unwrap_or(true);
                }
            }
            if settled {
                return;
            }
            // Dead letters still on their way: their targets' confirms, and the records that
            // then remove them from their sources, come within a log sync or two.
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// Hands `message` to the reply consumer at `address`: here, or, for a consumer of another
    /// node of the cluster, sent there (fire-and-forget, as a reply is; dropped when the
    /// consumer is gone or the node does not take it).
    pub fn deliver_reply(&self, address: &str, message: &Arc<charon_model::Message>) {
        match (self.reply_consumers.remote_node(address), self.cluster.get()) {
            (None, _) => {
                self.reply_consumers.deliver(address, message);
            }
            (Some(node), Some(cluster)) => cluster.queues().forward_reply(&self.cluster, node, address, message),
            (Some(_), None) => {}
        }
    }

    /// Whether `address` names a live reply consumer, here or on the node it names.
    pub async fn reply_is_live(&self, address: &str) -> bool {
        match (self.reply_consumers.remote_node(address), self.cluster.get()) {
            (None, _) => self.reply_consumers.is_live(address),
            (Some(node), Some(cluster)) => cluster.queues().reply_is_live(cluster, node, address).await,
            (Some(_), None) => false,
        }
    }

    /// The HTTP services that answer requests other nodes forward to this one.
    #[must_use]
    pub fn services(&self) -> &crate::cluster::forward::Services {
        &self.services
    }

    /// Makes this node a member of `cluster` (once, at start); false when it already is.
    pub fn join_cluster(&self, cluster: crate::cluster::Cluster) -> bool {
        let joined = self.cluster.set(cluster).is_ok();
        self.redrives.cluster_joined();
        joined
    }

    /// The cluster this node is a member of; `None` for a single node.
    #[must_use]
    pub fn cluster(&self) -> Option<&crate::cluster::Cluster> {
        self.cluster.get()
    }

    /// Every vhost, by name.
    #[must_use]
    pub fn vhosts(&self) -> Vec<Arc<VHost>> {
        let mut all: Vec<Arc<VHost>> = self.vhosts.read().values().cloned().collect();
        all.sort_by(|a, b| a.name().cmp(b.name()));
        all
    }

    /// The vhost named `name`, without a user check (gateways that map their own identities
    /// to vhosts, like Zaqar's projects): one map lookup, no listing.
    #[must_use]
    pub fn vhost(&self, name: &str) -> Option<Arc<VHost>> {
        self.vhosts.read().get(name).cloned()
    }

    /// Opens a vhost for a user.
    ///
    /// # Errors
    /// NOT_ALLOWED when the vhost does not exist or the user may not use it.
    pub fn open_vhost(&self, user: &User, name: &str) -> Result<Arc<VHost>, EngineError> {
        let vhost = self.vhosts.read().get(name).cloned().ok_or_else(|| EngineError::VhostNotFound(name.to_owned()))?;
        if !self.access.can_open(user, name) {
            return Err(EngineError::VhostAccessRefused { vhost: name.to_owned(), user: user.name.clone() });
        }
        Ok(vhost)
    }
}
