//! Who may do what: users, their tags and passwords, their permissions per vhost, and the
//! checks every protocol path and the HTTP API make before acting.
//!
//! RabbitMQ's model, from its internal authentication backend: a user reaches a vhost only
//! with a permission entry there; the entry's three patterns grant configure (declare,
//! delete), write (publish, bind to) and read (consume, get, purge, bind from) on queue and
//! exchange names. The checks are made by the protocol adapters and the HTTP API, where
//! RabbitMQ's channel makes them, through [`Access::authorize`], so the rule and its error
//! text exist once. Changes are durable (the metadata store) before they apply.

mod account;
mod error;
mod password;
mod permission;
mod principal;
mod tags;
mod topic;
mod user;
mod write_grants;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use charon_store::access::{AccessSnapshot, StoredPermission, StoredTopicPermission, StoredVhost};
use charon_store::meta::MetaError;
use parking_lot::RwLock;

pub use account::Account;
pub use charon_queue::action::Action;
pub use error::AccessError;
pub use password::{HashingAlgorithm, PasswordHash};
pub use permission::Permission;
pub use principal::Principal;
pub use tags::Tags;
pub use topic::TopicPermission;
pub use user::User;
pub use write_grants::WriteGrants;

use crate::error::{EngineError, Resource, ResourceKind};
use crate::persist::Persistence;

/// A vhost's description and tags, as the management API shows them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VhostInfo {
    /// Free text.
    pub description: String,
    /// Tags.
    pub tags: Tags,
}

/// Users, vhost records and permissions, durable when the broker has a store.
#[derive(Debug)]
pub struct Access {
    state: RwLock<State>,
    store: Option<Arc<Persistence>>,
    /// Serialises changes, so that the store commits them in the order memory applies them.
    changes: tokio::sync::Mutex<()>,
    /// Moves on every change, so that a connection may cache a granted check until then.
    generation: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    users: BTreeMap<String, Account>,
    /// By user, then vhost: a check looks both up by `&str`, allocating nothing.
    permissions: HashMap<String, HashMap<String, Permission>>,
    vhosts: BTreeMap<String, VhostInfo>,
    /// By user, vhost, then exchange.
    topics: HashMap<String, HashMap<String, HashMap<String, TopicPermission>>>,
}

/// What the configuration file asks for on a first start.
#[derive(Clone, Debug)]
pub struct Seed {
    /// Users with full permissions on the listed vhosts (`None`: every seeded vhost).
    pub users: Vec<(Account, Option<Vec<String>>)>,
    /// Vhosts.
    pub vhosts: Vec<String>,
}

impl Access {
    /// Access without a store: the seed is the whole state, and changes last until exit.
    #[must_use]
    pub fn in_memory(seed: Seed) -> Self {
        Self::with_state(State::from_seed(seed), None)
    }

    /// Access from the store: the stored state when it was seeded before, else `seed`,
    /// written to the store (once: later starts keep what the API changed).
    ///
    /// # Errors
    /// When the store cannot be read or written, or holds a user it cannot decode.
    pub fn open(store: Arc<Persistence>, seed: Seed) -> Result<Self, EngineError> {
        let snapshot: AccessSnapshot = store.meta().access().load().map_err(store_error)?;
        let state = if snapshot.seeded {
            State::from_snapshot(snapshot)?
        } else {
            let state = State::from_seed(seed);
            let (users, vhosts, permissions) = state.to_stored();
            store.meta().access().seed(&users, &vhosts, &permissions).map_err(store_error)?;
            state
        };
        Ok(Self::with_state(state, Some(store)))
    }

    fn with_state(state: State, store: Option<Arc<Persistence>>) -> Self {
        Self { state: RwLock::new(state), store, changes: tokio::sync::Mutex::new(()), generation: AtomicU64::new(0) }
    }

    /// Moves on every change to users or permissions.
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The user `name` with password `password`, if both are right.
    #[must_use]
    pub fn authenticate(&self, name: &str, password: &str) -> Option<User> {
        let state = self.state.read();
        let account = state.users.get(name)?;
        account.verify(password).then(|| User::new(account.name().to_owned(), account.tags().clone()))
    }

    /// The user `name`, without a password check (a client certificate, SASL ANONYMOUS mapped
    /// to a user).
    #[must_use]
    pub fn user(&self, name: &str) -> Option<User> {
        let state = self.state.read();
        state.users.get(name).map(|a| User::new(a.name().to_owned(), a.tags().clone()))
    }

    /// Whether `user` may open `vhost`: it has a permission entry there, as RabbitMQ's
    /// `check_vhost_access`.
    #[must_use]
    pub fn can_open(&self, user: &User, vhost: &str) -> bool {
        self.state.read().permissions.get(&user.name).is_some_and(|by_vhost| by_vhost.contains_key(vhost))
    }

    /// Checks that `user` may do `action` on `resource`.
    ///
    /// # Errors
    /// ACCESS_REFUSED with RabbitMQ's text, `configure access to queue 'q' in vhost '/'
    /// refused for user 'u'`. The default exchange is checked, and named, as `amq.default`.
    pub fn authorize(&self, user: &User, action: Action, resource: &Resource) -> Result<(), EngineError> {
        let name = match (resource.kind, resource.name.as_str()) {
            (ResourceKind::Exchange, "") => "amq.default",
            (_, name) => name,
        };
        let granted = self
            .state
            .read()
            .permissions
            .get(&user.name)
            .and_then(|by_vhost| by_vhost.get(&resource.vhost))
            .is_some_and(|permission| permission.allows(action, name));
        if granted {
            return Ok(());
        }
        let resource = Resource { kind: resource.kind, vhost: resource.vhost.clone(), name: name.to_owned() };
        Err(EngineError::PermissionRefused { action, resource, user: user.name.clone() })
    }

    /// Whether `user` has topic permissions on `exchange` of `vhost` (only then are its
    /// routing keys checked).
    #[must_use]
    pub fn has_topic_permission(&self, user: &User, vhost: &str, exchange: &str) -> bool {
        let state = self.state.read();
        state.topics.get(&user.name).and_then(|v| v.get(vhost)).is_some_and(|x| x.contains_key(exchange))
    }

    /// Checks that `user` may publish (write) or bind (read) to the topic exchange `exchange`
    /// of `vhost` with `routing_key`; granted when it has no topic permissions there.
    ///
    /// # Errors
    /// ACCESS_REFUSED with RabbitMQ's text, `write access to topic 'k' in exchange 'x' in vhost
    /// '/' refused for user 'u'`.
    pub fn authorize_topic(
        &self,
        user: &User,
        action: Action,
        vhost: &str,
        exchange: &str,
        routing_key: &str,
    ) -> Result<(), EngineError> {
        let state = self.state.read();
        let permission = state.topics.get(&user.name).and_then(|v| v.get(vhost)).and_then(|x| x.get(exchange));
        if permission.is_none_or(|p| p.allows(action, routing_key)) {
            return Ok(());
        }
        Err(EngineError::TopicRefused {
            action,
            routing_key: routing_key.to_owned(),
            exchange: Resource::exchange(vhost, exchange),
            user: user.name.clone(),
        })
    }

    /// Every topic permission: vhost, user, exchange, write, read; sorted.
    #[must_use]
    pub fn topic_permissions(&self) -> Vec<(String, String, String, String, String)> {
        let state = self.state.read();
        let mut all = Vec::new();
        for (user, by_vhost) in &state.topics {
            for (vhost, by_exchange) in by_vhost {
                for (exchange, p) in by_exchange {
                    let (write, read) = p.patterns();
                    all.push((vhost.clone(), user.clone(), exchange.clone(), write.to_owned(), read.to_owned()));
                }
            }
        }
        all.sort();
        all
    }

    /// Sets a user's topic permissions on an exchange of a vhost.
    ///
    /// # Errors
    /// No such user or vhost, a pattern that does not compile, or a store failure.
    pub async fn set_topic_permission(
        &self,
        vhost: &str,
        user: &str,
        exchange: &str,
        write: &str,
        read: &str,
    ) -> Result<(), AccessError> {
        let _serial = self.changes.lock().await;
        self.check_exists(vhost, user)?;
        let permission = TopicPermission::new(user, vhost, write, read)?;
        let stored = StoredTopicPermission {
            vhost: vhost.to_owned(),
            user: user.to_owned(),
            exchange: exchange.to_owned(),
            write: write.to_owned(),
            read: read.to_owned(),
        };
        self.persist(move |store| store.meta().access().put_topic_permission(&stored)).await?;
        let mut state = self.state.write();
        let by_exchange = state.topics.entry(user.to_owned()).or_default().entry(vhost.to_owned()).or_default();
        by_exchange.insert(exchange.to_owned(), permission);
        drop(state);
        self.changed();
        Ok(())
    }

    /// Clears a user's topic permissions in a vhost, on one exchange or all; false when there
    /// were none.
    ///
    /// # Errors
    /// No such user or vhost, or a store failure.
    pub async fn clear_topic_permissions(
        &self,
        vhost: &str,
        user: &str,
        exchange: Option<&str>,
    ) -> Result<bool, AccessError> {
        let _serial = self.changes.lock().await;
        self.check_exists(vhost, user)?;
        let had = {
            let state = self.state.read();
            let by_exchange = state.topics.get(user).and_then(|v| v.get(vhost));
            by_exchange.is_some_and(|x| exchange.map_or(!x.is_empty(), |name| x.contains_key(name)))
        };
        if !had {
            return Ok(false);
        }
        let (owned_vhost, owned_user, owned_exchange) =
            (vhost.to_owned(), user.to_owned(), exchange.map(str::to_owned));
        self.persist(move |store| {
            store.meta().access().delete_topic_permissions(&owned_vhost, &owned_user, owned_exchange.as_deref())
        })
        .await?;
        if let Some(by_exchange) = self.state.write().topics.get_mut(user).and_then(|v| v.get_mut(vhost)) {
            match exchange {
                Some(name) => drop(by_exchange.remove(name)),
                None => by_exchange.clear(),
            }
        }
        self.changed();
        Ok(true)
    }

    /// Every user.
    #[must_use]
    pub fn accounts(&self) -> Vec<Account> {
        self.state.read().users.values().cloned().collect()
    }

    /// One user.
    #[must_use]
    pub fn account(&self, name: &str) -> Option<Account> {
        self.state.read().users.get(name).cloned()
    }

    /// Every permission entry: vhost, user, permission; by vhost then user.
    #[must_use]
    pub fn permissions(&self) -> Vec<(String, String, Permission)> {
        let state = self.state.read();
        let mut all: Vec<(String, String, Permission)> = state
            .permissions
            .iter()
            .flat_map(|(user, by_vhost)| by_vhost.iter().map(|(vhost, p)| (vhost.clone(), user.clone(), p.clone())))
            .collect();
        all.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        all
    }

    /// The vhost records, by name.
    #[must_use]
    pub fn vhosts(&self) -> Vec<(String, VhostInfo)> {
        self.state.read().vhosts.iter().map(|(n, i)| (n.clone(), i.clone())).collect()
    }

    /// Whether the vhost record exists.
    #[must_use]
    pub fn has_vhost(&self, name: &str) -> bool {
        self.state.read().vhosts.contains_key(name)
    }

    /// Creates or replaces a user.
    ///
    /// # Errors
    /// A store failure; nothing changed.
    pub async fn put_user(&self, account: Account) -> Result<(), AccessError> {
        let _serial = self.changes.lock().await;
        let stored = account.to_stored();
        self.persist(move |store| store.meta().access().put_user(&stored)).await?;
        self.state.write().users.insert(account.name().to_owned(), account);
        self.changed();
        Ok(())
    }

    /// Deletes a user and its permissions.
    ///
    /// # Errors
    /// No such user, or a store failure.
    pub async fn delete_user(&self, name: &str) -> Result<(), AccessError> {
        let _serial = self.changes.lock().await;
        if !self.state.read().users.contains_key(name) {
            return Err(AccessError::NoSuchUser(name.to_owned()));
        }
        let owned = name.to_owned();
        self.persist(move |store| store.meta().access().delete_user(&owned)).await?;
        let mut state = self.state.write();
        state.users.remove(name);
        state.permissions.remove(name);
        state.topics.remove(name);
        drop(state);
        self.changed();
        Ok(())
    }

    /// Sets a user's permissions in a vhost.
    ///
    /// # Errors
    /// No such user or vhost, or a store failure.
    pub async fn set_permission(&self, vhost: &str, user: &str, permission: Permission) -> Result<(), AccessError> {
        let _serial = self.changes.lock().await;
        self.check_exists(vhost, user)?;
        let (configure, write, read) = permission.patterns();
        let stored = StoredPermission {
            vhost: vhost.to_owned(),
            user: user.to_owned(),
            configure: configure.to_owned(),
            write: write.to_owned(),
            read: read.to_owned(),
        };
        self.persist(move |store| store.meta().access().put_permission(&stored)).await?;
        self.state.write().permissions.entry(user.to_owned()).or_default().insert(vhost.to_owned(), permission);
        self.changed();
        Ok(())
    }

    /// Clears a user's permissions in a vhost; false when it had none.
    ///
    /// # Errors
    /// No such user or vhost, or a store failure.
    pub async fn clear_permission(&self, vhost: &str, user: &str) -> Result<bool, AccessError> {
        let _serial = self.changes.lock().await;
        self.check_exists(vhost, user)?;
        let had = self.state.read().permissions.get(user).is_some_and(|by_vhost| by_vhost.contains_key(vhost));
        if !had {
            return Ok(false);
        }
        let (owned_vhost, owned_user) = (vhost.to_owned(), user.to_owned());
        self.persist(move |store| store.meta().access().delete_permission(&owned_vhost, &owned_user)).await?;
        if let Some(by_vhost) = self.state.write().permissions.get_mut(user) {
            by_vhost.remove(vhost);
        }
        self.changed();
        Ok(true)
    }

    /// Creates or updates a vhost record (the broker creates the vhost itself).
    ///
    /// # Errors
    /// A store failure.
    pub(crate) async fn put_vhost(&self, name: &str, info: VhostInfo) -> Result<(), AccessError> {
        let _serial = self.changes.lock().await;
        let stored = StoredVhost {
            name: name.to_owned(),
            description: info.description.clone(),
            tags: info.tags.as_slice().to_vec(),
        };
        self.persist(move |store| store.meta().access().put_vhost(&stored)).await?;
        self.state.write().vhosts.insert(name.to_owned(), info);
        self.changed();
        Ok(())
    }

    /// Forgets a vhost record and every permission in it.
    ///
    /// # Errors
    /// A store failure.
    pub(crate) async fn delete_vhost(&self, name: &str) -> Result<(), AccessError> {
        let _serial = self.changes.lock().await;
        let owned = name.to_owned();
        self.persist(move |store| store.meta().access().delete_vhost(&owned)).await?;
        let mut state = self.state.write();
        state.vhosts.remove(name);
        for by_vhost in state.permissions.values_mut() {
            by_vhost.remove(name);
        }
        for by_vhost in state.topics.values_mut() {
            by_vhost.remove(name);
        }
        drop(state);
        self.changed();
        Ok(())
    }

    fn check_exists(&self, vhost: &str, user: &str) -> Result<(), AccessError> {
        let state = self.state.read();
        if !state.users.contains_key(user) {
            return Err(AccessError::NoSuchUser(user.to_owned()));
        }
        if !state.vhosts.contains_key(vhost) {
            return Err(AccessError::NoSuchVhost(vhost.to_owned()));
        }
        Ok(())
    }

    fn changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Runs a metadata write off the runtime's workers.
    async fn persist(
        &self,
        write: impl FnOnce(&Persistence) -> Result<(), MetaError> + Send + 'static,
    ) -> Result<(), AccessError> {
        let Some(store) = self.store.clone() else { return Ok(()) };
        tokio::task::spawn_blocking(move || write(&store))
            .await
            .map_err(|e| AccessError::Store(e.to_string()))?
            .map_err(|e| AccessError::Store(e.to_string()))
    }
}

fn store_error(error: MetaError) -> EngineError {
    EngineError::Store(error.to_string())
}

impl State {
    fn from_seed(seed: Seed) -> Self {
        let mut state =
            Self { vhosts: seed.vhosts.iter().map(|v| (v.clone(), VhostInfo::default())).collect(), ..Self::default() };
        for (account, vhosts) in seed.users {
            let granted = vhosts.unwrap_or_else(|| seed.vhosts.clone());
            let by_vhost = state.permissions.entry(account.name().to_owned()).or_default();
            for vhost in granted.into_iter().filter(|v| seed.vhosts.contains(v)) {
                by_vhost.insert(vhost, Permission::full());
            }
            state.users.insert(account.name().to_owned(), account);
        }
        state
    }

    fn from_snapshot(snapshot: AccessSnapshot) -> Result<Self, EngineError> {
        let mut state = Self::default();
        for stored in snapshot.users {
            let account = Account::from_stored(stored).map_err(|e| EngineError::Store(e.to_string()))?;
            state.users.insert(account.name().to_owned(), account);
        }
        for vhost in snapshot.vhosts {
            state.vhosts.insert(vhost.name, VhostInfo { description: vhost.description, tags: Tags::new(vhost.tags) });
        }
        for p in snapshot.permissions {
            // A pattern stored by this version compiled when it was set.
            let permission =
                Permission::new(&p.configure, &p.write, &p.read).map_err(|e| EngineError::Store(e.to_string()))?;
            state.permissions.entry(p.user).or_default().insert(p.vhost, permission);
        }
        for p in snapshot.topic_permissions {
            let permission = TopicPermission::new(&p.user, &p.vhost, &p.write, &p.read)
                .map_err(|e| EngineError::Store(e.to_string()))?;
            state.topics.entry(p.user).or_default().entry(p.vhost).or_default().insert(p.exchange, permission);
        }
        Ok(state)
    }

    fn to_stored(&self) -> (Vec<charon_store::access::StoredUser>, Vec<StoredVhost>, Vec<StoredPermission>) {
        let users = self.users.values().map(Account::to_stored).collect();
        let vhosts = self
            .vhosts
            .iter()
            .map(|(name, info)| StoredVhost {
                name: name.clone(),
                description: info.description.clone(),
                tags: info.tags.as_slice().to_vec(),
            })
            .collect();
        let mut permissions = Vec::new();
        for (user, by_vhost) in &self.permissions {
            for (vhost, permission) in by_vhost {
                let (configure, write, read) = permission.patterns();
                permissions.push(StoredPermission {
                    vhost: vhost.clone(),
                    user: user.clone(),
                    configure: configure.to_owned(),
                    write: write.to_owned(),
                    read: read.to_owned(),
                });
            }
        }
        (users, vhosts, permissions)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
