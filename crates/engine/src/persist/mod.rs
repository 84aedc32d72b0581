//! The engine's durable storage: the message log and the metadata store, behind the seams the
//! queues and vhosts already had.
//!
//! RabbitMQ's rules decide what is stored: durable exchanges; durable, non-exclusive queues;
//! bindings whose both ends are durable; every policy. Messages are journalled by the queues
//! themselves ([`crate::queue`]).

mod redrives;
mod writer;

use std::sync::Arc;

use charon_store::meta::{MetaError, MetaStore, StoredBinding, StoredExchange, StoredPolicy, StoredQueue};
use charon_store::segment_log::{MessageLog, Record};

use crate::error::EngineError;
use crate::exchange::{Binding, Destination, ExchangeInfo};
use crate::policy::PolicyKind;

pub(crate) use writer::MetaDone;
use writer::MetaWriter;

/// The broker's store.
///
/// Metadata changes are committed by the metadata writer ([`writer`]), in the order they are
/// submitted; each method returns at once with the [`MetaDone`] to await.
#[derive(Debug)]
pub struct Persistence {
    /// The message log (shared with every queue task, which journals to it).
    pub log: Arc<MessageLog>,
    meta: Arc<MetaStore>,
    writer: MetaWriter,
}

fn store_error(error: impl std::fmt::Display) -> EngineError {
    tracing::error!(%error, "the durable store failed");
    EngineError::Store(format!("store failure: {error}"))
}

impl Persistence {
    /// Wraps an opened log and metadata store, and starts the metadata writer.
    #[must_use]
    pub fn new(log: MessageLog, meta: MetaStore) -> Arc<Self> {
        Arc::new(Self { log: Arc::new(log), meta: Arc::new(meta), writer: MetaWriter::start() })
    }

    /// The metadata store (recovery reads it).
    #[must_use]
    pub fn meta(&self) -> &MetaStore {
        &self.meta
    }

    /// Commits `change` on the metadata writer, after everything submitted before it.
    fn submit(&self, change: impl FnOnce(&MetaStore) -> Result<(), MetaError> + Send + 'static) -> MetaDone {
        let meta = Arc::clone(&self.meta);
        self.writer.submit(Box::new(move || change(&meta).map_err(store_error)))
    }

    pub(crate) fn save_exchange(&self, vhost: &str, info: &ExchangeInfo) -> MetaDone {
        if !info.durable {
            return MetaDone::ready(Ok(()));
        }
        let stored = StoredExchange {
            vhost: vhost.to_owned(),
            name: info.name.clone(),
            kind: info.kind.as_str().to_owned(),
            auto_delete: info.auto_delete,
            internal: info.internal,
            arguments: info.arguments.clone(),
        };
        self.submit(move |meta| meta.put_exchange(&stored))
    }

    pub(crate) fn forget_exchange(&self, vhost: &str, name: &str) -> MetaDone {
        let (vhost, name) = (vhost.to_owned(), name.to_owned());
        self.submit(move |meta| meta.delete_exchange(&vhost, &name))
    }

    /// Records a durable queue (the caller checks that it is one).
    pub(crate) fn save_queue(&self, stored: StoredQueue) -> MetaDone {
        self.submit(move |meta| meta.put_queue(&stored))
    }

    /// A durable queue is gone: its record and its bindings, then all its messages (so a crash
    /// in between leaves a queue with its messages, never a queue without them).
    pub(crate) fn forget_queue(self: &Arc<Self>, id: u64, vhost: &str, name: &str) -> MetaDone {
        let (vhost, name) = (vhost.to_owned(), name.to_owned());
        let store = Arc::clone(self);
        self.writer.submit(Box::new(move || {
            let forgotten = store.meta.delete_queue(&vhost, &name).map_err(store_error);
            // Its dead letters' spills are keyed apart (see `queue::LETTER_LOG_KEY`).
            let letters = id | crate::queue::LETTER_LOG_KEY;
            store.log.append(vec![Record::DropQueue { queue: id }, Record::DropQueue { queue: letters }], None);
            forgotten
        }))
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
    pub(crate) fn save_binding(&self, vhost: &str, source: &str, binding: &Binding) -> MetaDone {
        let stored = Self::stored_binding(vhost, source, binding);
        self.submit(move |meta| meta.put_binding(&stored))
    }

    pub(crate) fn forget_binding(&self, vhost: &str, source: &str, binding: &Binding) -> MetaDone {
        let stored = Self::stored_binding(vhost, source, binding);
        self.submit(move |meta| meta.delete_binding(&stored))
    }

    /// Records a policy of either kind, each in its own table.
    pub(crate) fn save_policy(&self, kind: PolicyKind, stored: StoredPolicy) -> MetaDone {
        match kind {
            PolicyKind::User => self.submit(move |meta| meta.put_policy(&stored)),
            PolicyKind::Operator => self.submit(move |meta| meta.put_operator_policy(&stored)),
        }
    }

    pub(crate) fn forget_policy(&self, kind: PolicyKind, vhost: &str, name: &str) -> MetaDone {
        let (vhost, name) = (vhost.to_owned(), name.to_owned());
        match kind {
            PolicyKind::User => self.submit(move |meta| meta.delete_policy(&vhost, &name)),
            PolicyKind::Operator => self.submit(move |meta| meta.delete_operator_policy(&vhost, &name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use charon_model::Table;
    use charon_store::segment_log::LogOptions;

    use super::*;
    use crate::exchange::ExchangeKind;

    fn store() -> (Arc<Persistence>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let meta = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
        let (log, _) = MessageLog::open(&dir.path().join("log"), LogOptions::default()).unwrap();
        (Persistence::new(log, meta), dir)
    }

    fn queue(id: u64) -> StoredQueue {
        StoredQueue {
            vhost: "/".into(),
            name: "q".into(),
            id,
            auto_delete: false,
            arguments: Table::new(),
            home: None,
            replica: None,
        }
    }

    #[tokio::test]
    async fn changes_commit_in_the_order_they_were_submitted() {
        let (store, _dir) = store();
        // A declare, a delete and a re-declare of the same name, submitted back to back: only
        // the order of submission keeps the second queue.
        let done = vec![store.save_queue(queue(1)), store.forget_queue(1, "/", "q"), store.save_queue(queue(2))];
        MetaDone::all(done).await.unwrap();
        let ids: Vec<u64> = store.meta().load().unwrap().queues.iter().map(|q| q.id).collect();
        assert_eq!(ids, [2]);
    }

    #[tokio::test]
    async fn a_transient_exchange_needs_no_commit_and_a_durable_one_is_stored() {
        let (store, _dir) = store();
        let info = |name: &str, durable| ExchangeInfo {
            name: name.into(),
            kind: ExchangeKind::Topic,
            durable,
            auto_delete: false,
            internal: false,
            arguments: Table::new(),
        };
        store.save_exchange("/", &info("t", false)).wait().await.unwrap();
        store.save_exchange("/", &info("d", true)).wait().await.unwrap();
        let names: Vec<String> = store.meta().load().unwrap().exchanges.into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["d"]);
    }
}
