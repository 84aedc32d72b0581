//! RabbitMQ's vhost limits (`set_vhost_limits`: `max-connections`, `max-queues`) and user
//! limits (`set_user_limits`: `max-connections`, `max-channels`), durable in the metadata
//! store, with the counts they are checked against and RabbitMQ 4.0.5's refusal texts
//! (observed on the live broker).
//!
//! A negative value means no limit, as in RabbitMQ; 0 refuses everything.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use charon_model::erlang;
use charon_store::meta::StoredLimit;
use parking_lot::{Mutex, RwLock};

use crate::error::EngineError;
use crate::metrics::Churn;
use crate::persist::Persistence;

/// Whose limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LimitScope {
    /// A virtual host's.
    Vhost,
    /// A user's.
    User,
}

impl LimitScope {
    /// The limits RabbitMQ knows for this scope.
    #[must_use]
    pub fn known(self) -> &'static [&'static str] {
        match self {
            Self::Vhost => &["max-connections", "max-queues"],
            Self::User => &["max-connections", "max-channels"],
        }
    }

    /// Its name in the store and in the cluster's records.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Vhost => "vhost",
            Self::User => "user",
        }
    }

    /// The scope named by [`Self::as_str`].
    pub(crate) fn parse(name: &str) -> Option<Self> {
        match name {
            "vhost" => Some(Self::Vhost),
            "user" => Some(Self::User),
            _ => None,
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    vhost_connections: HashMap<String, u64>,
    user_connections: HashMap<String, u64>,
    user_channels: HashMap<String, u64>,
}

/// Every limit that is set, and the counts behind them.
#[derive(Debug, Default)]
pub struct Limits {
    set: RwLock<BTreeMap<(LimitScope, String), BTreeMap<String, i64>>>,
    counts: Mutex<Counts>,
    store: Option<Arc<Persistence>>,
}

impl Limits {
    /// Limits on `store` (none without), starting with what it holds.
    pub(crate) fn restore(store: Option<Arc<Persistence>>, stored: &[StoredLimit]) -> Arc<Self> {
        let mut set: BTreeMap<(LimitScope, String), BTreeMap<String, i64>> = BTreeMap::new();
        for limit in stored {
            let scope = if limit.scope == "user" { LimitScope::User } else { LimitScope::Vhost };
            set.entry((scope, limit.name.clone())).or_default().insert(limit.limit.clone(), limit.value);
        }
        Arc::new(Self { set: RwLock::new(set), counts: Mutex::default(), store })
    }

    /// The limits set for `name`, by limit name.
    #[must_use]
    pub fn get(&self, scope: LimitScope, name: &str) -> BTreeMap<String, i64> {
        self.set.read().get(&(scope, name.to_owned())).cloned().unwrap_or_default()
    }

    /// Every name of `scope` with limits, and its limits.
    #[must_use]
    pub fn all(&self, scope: LimitScope) -> Vec<(String, BTreeMap<String, i64>)> {
        let set = self.set.read();
        set.iter().filter(|((s, _), _)| *s == scope).map(|((_, name), limits)| (name.clone(), limits.clone())).collect()
    }

    /// Whether `scope` knows `limit`.
    ///
    /// # Errors
    /// RabbitMQ's validation text for a limit it does not know.
    pub fn check(scope: LimitScope, limit: &str, value: i64) -> Result<(), EngineError> {
        if scope.known().contains(&limit) {
            return Ok(());
        }
        let term = erlang::tuple(&[erlang::text(limit), value.to_string()]);
        Err(EngineError::Precondition(format!("Unrecognised terms [{term}] in limits")))
    }

    /// Sets one limit, durably first.
    ///
    /// # Errors
    /// A limit the scope does not know (RabbitMQ's validation text), or a store failure.
    pub async fn set(&self, scope: LimitScope, name: &str, limit: &str, value: i64) -> Result<(), EngineError> {
        Self::check(scope, limit, value)?;
        let stored = StoredLimit { scope: scope.as_str().into(), name: name.into(), limit: limit.into(), value };
        self.persist(move |store| store.meta().put_limit(&stored)).await?;
        self.set.write().entry((scope, name.to_owned())).or_default().insert(limit.to_owned(), value);
        Ok(())
    }

    /// Clears one limit; false when it was not set.
    ///
    /// # Errors
    /// A store failure.
    pub async fn clear(&self, scope: LimitScope, name: &str, limit: &str) -> Result<bool, EngineError> {
        if !self.get(scope, name).contains_key(limit) {
            return Ok(false);
        }
        let (scope_name, owned, limit_name) = (scope.as_str(), name.to_owned(), limit.to_owned());
        self.persist(move |store| store.meta().delete_limit(scope_name, &owned, &limit_name)).await?;
        let mut set = self.set.write();
        if let Some(limits) = set.get_mut(&(scope, name.to_owned())) {
            limits.remove(limit);
            if limits.is_empty() {
                set.remove(&(scope, name.to_owned()));
            }
        }
        Ok(true)
    }

    /// Clears every limit of `name` (its vhost or user was deleted).
    ///
    /// # Errors
    /// A store failure.
    pub async fn forget(&self, scope: LimitScope, name: &str) -> Result<(), EngineError> {
        for limit in self.get(scope, name).into_keys() {
            self.clear(scope, name, &limit).await?;
        }
        Ok(())
    }

    /// Runs a metadata write off the runtime's workers.
    async fn persist(
        &self,
        write: impl FnOnce(&Persistence) -> Result<(), charon_store::meta::MetaError> + Send + 'static,
    ) -> Result<(), EngineError> {
        let Some(store) = self.store.clone() else { return Ok(()) };
        tokio::task::spawn_blocking(move || write(&store))
            .await
            .map_err(|e| EngineError::Store(e.to_string()))?
            .map_err(|e| EngineError::Store(e.to_string()))
    }

    /// A limit's value, when one is in force (set and not negative).
    fn limit(&self, scope: LimitScope, name: &str, limit: &str) -> Option<u64> {
        let set = self.set.read();
        set.get(&(scope, name.to_owned())).and_then(|l| l.get(limit)).and_then(|v| u64::try_from(*v).ok())
    }

    /// The `max-queues` of `vhost`, when set.
    #[must_use]
    pub fn max_queues(&self, vhost: &str) -> Option<u64> {
        self.limit(LimitScope::Vhost, vhost, "max-queues")
    }

    /// Counts a connection of `user` to `vhost`, unless a limit refuses it; the slot gives it
    /// back when dropped.
    ///
    /// # Errors
    /// NOT_ALLOWED with RabbitMQ 4.0.5's text for the vhost's or the user's connection limit.
    pub fn connect(self: &Arc<Self>, user: &str, vhost: &str) -> Result<ConnectionSlot, EngineError> {
        let vhost_max = self.limit(LimitScope::Vhost, vhost, "max-connections");
        let user_max = self.limit(LimitScope::User, user, "max-connections");
        let mut counts = self.counts.lock();
        let in_vhost = counts.vhost_connections.get(vhost).copied().unwrap_or(0);
        if let Some(max) = vhost_max.filter(|max| in_vhost >= *max) {
            return Err(EngineError::LimitReached(format!(
                "access to vhost '{vhost}' refused for user '{user}': connection limit ({max}) is reached"
            )));
        }
        let of_user = counts.user_connections.get(user).copied().unwrap_or(0);
        if let Some(max) = user_max.filter(|max| of_user >= *max) {
            return Err(EngineError::LimitReached(format!(
                "connection refused for user '{user}': user connection limit ({max}) is reached"
            )));
        }
        *counts.vhost_connections.entry(vhost.to_owned()).or_default() += 1;
        *counts.user_connections.entry(user.to_owned()).or_default() += 1;
        crate::metrics::global().churn(Churn::ConnectionsOpened);
        Ok(ConnectionSlot { limits: Arc::clone(self), user: user.to_owned(), vhost: vhost.to_owned() })
    }

    /// Open channels by user.
    #[must_use]
    pub fn channels_by_user(&self) -> BTreeMap<String, u64> {
        self.counts.lock().user_channels.iter().filter(|(_, n)| **n > 0).map(|(u, n)| (u.clone(), *n)).collect()
    }

    /// Counts a channel of `user`, unless the user's `max-channels` refuses it; the slot gives
    /// it back when dropped.
    ///
    /// # Errors
    /// NOT_ALLOWED with RabbitMQ 4.0.5's text. RabbitMQ prints its node name where the user's
    /// name belongs ("channels opened for user 'rabbit@host'"); so does Charon, with its own.
    pub fn open_channel(self: &Arc<Self>, user: &str) -> Result<ChannelSlot, EngineError> {
        let max = self.limit(LimitScope::User, user, "max-channels");
        let mut counts = self.counts.lock();
        let open = counts.user_channels.get(user).copied().unwrap_or(0);
        if let Some(max) = max.filter(|max| open >= *max) {
            return Err(EngineError::LimitReached(format!(
                "number of channels opened for user '{}' has reached the maximum allowed user limit of ({max})",
                charon_model::node_name()
            )));
        }
        *counts.user_channels.entry(user.to_owned()).or_default() += 1;
        crate::metrics::global().churn(Churn::ChannelsOpened);
        Ok(ChannelSlot { limits: Arc::clone(self), user: user.to_owned() })
    }
}

fn release(counts: &mut HashMap<String, u64>, key: &str) {
    if let Some(n) = counts.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            counts.remove(key);
        }
    }
}

/// One counted connection; dropping it gives the count back.
#[derive(Debug)]
pub struct ConnectionSlot {
    limits: Arc<Limits>,
    user: String,
    vhost: String,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        crate::metrics::global().churn(Churn::ConnectionsClosed);
        let mut counts = self.limits.counts.lock();
        release(&mut counts.vhost_connections, &self.vhost);
        release(&mut counts.user_connections, &self.user);
    }
}

/// One counted channel; dropping it gives the count back.
#[derive(Debug)]
pub struct ChannelSlot {
    limits: Arc<Limits>,
    user: String,
}

impl Drop for ChannelSlot {
    fn drop(&mut self) {
        crate::metrics::global().churn(Churn::ChannelsClosed);
        release(&mut self.limits.counts.lock().user_channels, &self.user);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[tokio::test]
    async fn connection_and_channel_limits_count_and_give_back() {
        let limits = Limits::restore(None, &[]);
        let first = limits.connect("guest", "/").unwrap();
        limits.set(LimitScope::Vhost, "/", "max-connections", 1).await.unwrap();
        let refused = limits.connect("other", "/").unwrap_err();
        assert_eq!(
            refused.to_string(),
            "access to vhost '/' refused for user 'other': connection limit (1) is reached"
        );
        assert!(limits.connect("other", "elsewhere").is_ok());
        drop(first);
        let again = limits.connect("guest", "/").unwrap();
        limits.set(LimitScope::Vhost, "/", "max-connections", -1).await.unwrap();
        limits.set(LimitScope::User, "guest", "max-connections", 1).await.unwrap();
        let refused = limits.connect("guest", "/").unwrap_err();
        assert_eq!(refused.to_string(), "connection refused for user 'guest': user connection limit (1) is reached");
        drop(again);

        limits.set(LimitScope::User, "guest", "max-channels", 2).await.unwrap();
        let channels = [limits.open_channel("guest").unwrap(), limits.open_channel("guest").unwrap()];
        assert!(limits.open_channel("guest").unwrap_err().to_string().ends_with("maximum allowed user limit of (2)"));
        drop(channels);
        assert!(limits.open_channel("guest").is_ok());

        assert!(limits.set(LimitScope::User, "guest", "max-queues", 1).await.is_err());
        assert!(limits.clear(LimitScope::User, "guest", "max-channels").await.unwrap());
        assert!(!limits.clear(LimitScope::User, "guest", "max-channels").await.unwrap());
        assert_eq!(
            limits.all(LimitScope::User),
            [("guest".to_owned(), BTreeMap::from([("max-connections".to_owned(), 1)]))]
        );
    }
}
