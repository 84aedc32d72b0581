//! The engine's durable storage: the message log and the metadata store, behind the seams the
//! queues and vhosts already had.
//!
//! RabbitMQ's rules decide what is stored: durable exchanges; durable, non-exclusive queues;
//! bindings whose both ends are durable; every policy. Messages are journalled by the queues
//! themselves ([`crate::queue`]).

use std::sync::Arc;

use charon_store::meta::{MetaStore, StoredBinding, StoredExchange, StoredPolicy, StoredQueue};
use charon_store::segment_log::{MessageLog, Record};

use crate::error::EngineError;
use crate::exchange::{Binding, Destination, ExchangeInfo};
use crate::policy::Policy;
use crate::queue::QueueConfig;

/// The broker's store.
#[derive(Debug)]
pub struct Persistence {
    /// The message log.
    pub log: MessageLog,
    meta: MetaStore,
}

fn store_error(error: impl std::fmt::Display) -> EngineError {
    tracing::error!(%error, "the durable store failed");
    EngineError::Store(format!("store failure: {error}"))
}

impl Persistence {
    /// Wraps an opened log and metadata store.
    #[must_use]
    pub fn new(log: MessageLog, meta: MetaStore) -> Arc<Self> {
        Arc::new(Self { log, meta })
    }

    /// The metadata store (recovery reads it).
    #[must_use]
    pub fn meta(&self) -> &MetaStore {
        &self.meta
    }

    pub(crate) fn save_exchange(&self, vhost: &str, info: &ExchangeInfo) -> Result<(), EngineError> {
        if !info.durable {
            return Ok(());
        }
        let stored = StoredExchange {
            vhost: vhost.to_owned(),
            name: info.name.clone(),
            kind: info.kind.as_str().to_owned(),
            auto_delete: info.auto_delete,
            internal: info.internal,
            arguments: info.arguments.clone(),
        };
        self.meta.put_exchange(&stored).map_err(store_error)
    }

    pub(crate) fn forget_exchange(&self, vhost: &str, name: &str) {
        if let Err(error) = self.meta.delete_exchange(vhost, name) {
            store_error(error);
        }
    }

    pub(crate) fn save_queue(&self, id: u64, config: &QueueConfig) -> Result<(), EngineError> {
        if !config.durable {
            return Ok(());
        }
        let stored = StoredQueue {
            vhost: config.vhost.clone(),
            name: config.name.clone(),
            id,
            auto_delete: config.auto_delete,
            arguments: config.arguments.clone(),
        };
        self.meta.put_queue(&stored).map_err(store_error)
    }

    /// A durable queue is gone: its record, its bindings and all its messages.
    pub(crate) fn forget_queue(&self, id: u64, config: &QueueConfig) {
        if !config.durable {
            return;
        }
        if let Err(error) = self.meta.delete_queue(&config.vhost, &config.name) {
            store_error(error);
        }
        self.log.append(vec![Record::DropQueue { queue: id }], None);
    }

    fn stored_binding(vhost: &str, source: &str, binding: &Binding) -> StoredBinding {
        let (to_exchange, destination) = match &binding.destination {
            Destination::Queue(name) => (false, name.clone()),
            Destination::Exchange(name) => (true, name.clone()),
        };
        StoredBinding {
            vhost: vhost.to_owned(),
            source: source.to_owned(),
            to_exchange,
            destination,
            key: binding.key.clone(),
            arguments: binding.arguments.clone(),
        }
    }

    /// Records a binding whose both ends are durable (the caller checks).
    pub(crate) fn save_binding(&self, vhost: &str, source: &str, binding: &Binding) -> Result<(), EngineError> {
        self.meta.put_binding(&Self::stored_binding(vhost, source, binding)).map_err(store_error)
    }

    pub(crate) fn forget_binding(&self, vhost: &str, source: &str, binding: &Binding) {
        if let Err(error) = self.meta.delete_binding(&Self::stored_binding(vhost, source, binding)) {
            store_error(error);
        }
    }

    pub(crate) fn save_policy(&self, vhost: &str, policy: &Policy) -> Result<(), EngineError> {
        let stored = StoredPolicy {
            vhost: vhost.to_owned(),
            name: policy.name.clone(),
            pattern: policy.pattern.clone(),
            apply_to: policy.apply_to.as_str().to_owned(),
            priority: policy.priority,
            definition: policy.definition.clone(),
        };
        self.meta.put_policy(&stored).map_err(store_error)
    }

    pub(crate) fn forget_policy(&self, vhost: &str, name: &str) {
        if let Err(error) = self.meta.delete_policy(vhost, name) {
            store_error(error);
        }
    }
}
