//! A per-publisher cache of routing results.
//!
//! Routing a message through exchanges takes the vhost's read lock and walks bindings. Most
//! publishers send many messages to few `(exchange, routing key)` pairs, so each channel keeps
//! the result and reuses it while the vhost's topology version is unchanged: a cache hit costs
//! one atomic load and two hash lookups, with no lock. Results that depend on message headers
//! are never cached.

use std::collections::HashMap;
use std::sync::Arc;

use crate::queue::QueueRef;

/// Entries kept before the cache starts over, bounding a publisher that uses many keys.
const MAX_ENTRIES: usize = 4096;

/// Cached routes for one publisher.
#[derive(Debug, Default)]
pub struct RouteCache {
    version: u64,
    entries: usize,
    by_exchange: HashMap<String, HashMap<String, Arc<[QueueRef]>>>,
}

impl RouteCache {
    /// An empty cache.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Drops everything if the topology changed since the cache was filled.
    pub(crate) fn validate(&mut self, version: u64) {
        if self.version != version {
            self.clear();
            self.version = version;
        }
    }

    fn clear(&mut self) {
        self.by_exchange.clear();
        self.entries = 0;
    }

    pub(crate) fn get(&self, exchange: &str, key: &str) -> Option<Arc<[QueueRef]>> {
        self.by_exchange.get(exchange)?.get(key).cloned()
    }

    pub(crate) fn insert(&mut self, exchange: &str, key: &str, queues: Arc<[QueueRef]>) {
        if self.entries >= MAX_ENTRIES {
            self.clear();
        }
        let keys = self.by_exchange.entry(exchange.to_owned()).or_default();
        if keys.insert(key.to_owned(), queues).is_none() {
            self.entries += 1;
        }
    }
}
