//! What every state change of a job does, whoever makes it (the API or the job's task): the
//! view changes, the store keeps the new record, and the event stream hears of it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::events::announce;
use super::job::{Job, JobState};
use crate::persist::{MetaDone, Persistence};
use crate::vhost::VHost;

/// The store and id source jobs share with their registry.
#[derive(Debug, Clone)]
pub(crate) struct Lifecycle {
    store: Option<Arc<Persistence>>,
    ids: Arc<AtomicU64>,
}

impl Lifecycle {
    pub(crate) fn new(store: Option<Arc<Persistence>>, ids: Arc<AtomicU64>) -> Self {
        Self { store, ids }
    }

    /// A fresh broker-unique id (internal sessions and consumers).
    pub(crate) fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed)
    }

    /// Writes the job's record (nothing without a store, or once the job was deleted).
    pub(crate) fn save(&self, job: &Job) -> MetaDone {
        match &self.store {
            Some(store) if !job.is_removed() => {
                let (vhost, id) = job.read(|v| (v.vhost.clone(), v.id.clone()));
                store.save_redrive(&vhost, &id, job.record())
            }
            _ => MetaDone::ready(Ok(())),
        }
    }

    /// Forgets the job's record.
    pub(crate) fn forget(&self, job: &Job) -> MetaDone {
        match &self.store {
            Some(store) => {
                let (vhost, id) = job.read(|v| (v.vhost.clone(), v.id.clone()));
                store.forget_redrive(&vhost, &id)
            }
            None => MetaDone::ready(Ok(())),
        }
    }

    /// Moves the job to `state` with `reason`; when that changes anything, saves the record
    /// and announces it (the returned commit may be awaited or not: a lost record of a change
    /// only replays the job from its previous state).
    pub(crate) fn transition(&self, job: &Job, vhost: &VHost, state: JobState, reason: Option<String>) -> MetaDone {
        let changed = job.update(|v| {
            let changed = v.state != state || v.reason != reason;
            v.state = state;
            v.reason = reason;
            changed
        });
        if !changed {
            return MetaDone::ready(Ok(()));
        }
        let view = job.view();
        tracing::info!(vhost = %view.vhost, job = %view.id, source = %view.source, state = view.state.as_str(),
            reason = view.reason.as_deref().unwrap_or(""), "redrive job changed state");
        announce(vhost, &view);
        self.save(job)
    }
}
