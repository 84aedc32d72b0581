//! A per-publisher cache of routing results.
//!
//! Routing a message through exchanges takes the vhost's read lock and walks bindings. Most
//! publishers send many messages to few `(exchange, routing key)` pairs, so each channel keeps
//! the result and reuses it while the vhost's topology version is unchanged: a cache hit costs
//! one atomic load and two hash lookups, with no lock, and a publisher that sends to the same
//! pair again (an AMQP 1.0 link to one address, a 0.9.1 channel publishing to one queue) finds
//! it in the last pair used, two string comparisons (the two lookups were 2 % of the broker's
//! CPU in S10). Results that depend on message headers are never cached.

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
    /// The pair found or stored last, with its route.
    last: Option<(String, String, Arc<[QueueRef]>)>,
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
        self.last = None;
    }

    pub(crate) fn get(&mut self, exchange: &str, key: &str) -> Option<Arc<[QueueRef]>> {
        if let Some((last_exchange, last_key, queues)) = &self.last
            && charon_model::text::same(last_exchange, exchange)
            && charon_model::text::same(last_key, key)
        {
            return Some(Arc::clone(queues));
        }
        let queues = self.by_exchange.get(exchange)?.get(key).cloned()?;
        self.remember(exchange, key, &queues);
        Some(queues)
    }

    /// Makes `(exchange, key)` the pair looked at first, reusing the strings' allocations.
    fn remember(&mut self, exchange: &str, key: &str, queues: &Arc<[QueueRef]>) {
        let (mut last_exchange, mut last_key) = match self.last.take() {
            Some((e, k, _)) => (e, k),
            None => (String::new(), String::new()),
        };
        last_exchange.clear();
        last_exchange.push_str(exchange);
        last_key.clear();
        last_key.push_str(key);
        self.last = Some((last_exchange, last_key, Arc::clone(queues)));
    }

    pub(crate) fn insert(&mut self, exchange: &str, key: &str, queues: Arc<[QueueRef]>) {
        if self.entries >= MAX_ENTRIES {
            self.clear();
        }
        self.remember(exchange, key, &queues);
        let keys = self.by_exchange.entry(exchange.to_owned()).or_default();
        if keys.insert(key.to_owned(), queues).is_none() {
            self.entries += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::queue::QueueHandle;

    fn route(names: &[&str]) -> Arc<[QueueRef]> {
        names.iter().map(|name| QueueHandle::detached(1, name)).collect()
    }

    fn names(queues: &Arc<[QueueRef]>) -> Vec<&str> {
        queues.iter().map(|queue| queue.name()).collect()
    }

    #[test]
    fn each_pair_gets_its_own_route_whichever_was_used_last() {
        let mut cache = RouteCache::new();
        cache.validate(1);
        cache.insert("x", "a", route(&["qa"]));
        cache.insert("x", "b", route(&["qb"]));
        cache.insert("y", "a", route(&["qya"]));
        for _ in 0..2 {
            assert_eq!(names(&cache.get("x", "a").unwrap()), ["qa"]);
            assert_eq!(names(&cache.get("x", "a").unwrap()), ["qa"]);
            assert_eq!(names(&cache.get("x", "b").unwrap()), ["qb"]);
            assert_eq!(names(&cache.get("y", "a").unwrap()), ["qya"]);
            assert!(cache.get("y", "b").is_none());
            assert!(cache.get("xa", "").is_none(), "not a concatenation of exchange and key");
        }
    }

    #[test]
    fn a_new_topology_version_forgets_the_last_pair_too() {
        let mut cache = RouteCache::new();
        cache.validate(1);
        cache.insert("x", "a", route(&["qa"]));
        assert!(cache.get("x", "a").is_some());
        cache.validate(2);
        assert!(cache.get("x", "a").is_none());
        cache.validate(2);
        cache.insert("x", "a", route(&["qa2"]));
        assert_eq!(names(&cache.get("x", "a").unwrap()), ["qa2"]);
    }
}
