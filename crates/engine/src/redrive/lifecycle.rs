//! What every state change of a job does, whoever makes it (the API or the job's task): the
//! view changes, the store keeps the new record, the cluster's metadata too when the node is
//! in one, and the event stream hears of it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::error::RedriveError;
use super::events::announce;
use super::job::{Job, JobState};
use crate::cluster::ClusterSlot;
use crate::cluster::metadata::RedriveRecord;
use crate::persist::{MetaDone, Persistence};
use crate::vhost::VHost;

/// How long a job's write to the cluster that failed waits before it is made again.
const REPLICATE_RETRY: Duration = Duration::from_secs(1);

/// The store, cluster and id source jobs share with their registry.
#[derive(Debug, Clone)]
pub(crate) struct Lifecycle {
    store: Option<Arc<Persistence>>,
    ids: Arc<AtomicU64>,
    cluster: ClusterSlot,
    /// Told when the node joins its cluster (jobs it records wait for that at start).
    joined: Arc<tokio::sync::Notify>,
}

impl Lifecycle {
    pub(crate) fn new(store: Option<Arc<Persistence>>, ids: Arc<AtomicU64>, cluster: ClusterSlot) -> Self {
        Self { store, ids, cluster, joined: Arc::default() }
    }

    /// A fresh broker-unique id (internal sessions and consumers).
    pub(crate) fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed)
    }

    /// Wakes the jobs waiting for the node to join its cluster.
    pub(crate) fn cluster_joined(&self) {
        self.joined.notify_waiters();
    }

    /// Returns once the node is in its cluster.
    pub(crate) async fn until_clustered(&self) {
        loop {
            // Made before the check: a join between the two still wakes it.
            let joined = self.joined.notified();
            if self.cluster.get().is_some() {
                return;
            }
            joined.await;
        }
    }

    /// The cluster, when the node is in one.
    pub(crate) fn cluster(&self) -> Option<&crate::cluster::Cluster> {
        self.cluster.get()
    }

    /// Writes the job's record (nothing without a store, or once the job was deleted); in a
    /// cluster, the metadata's copy follows ([`Self::replicate`], at most one write under way
    /// per job, the latest record each time, made again until it is taken).
    pub(crate) fn save(&self, job: &Arc<Job>) -> MetaDone {
        if self.cluster.get().is_some() && !job.is_removed() && job.start_replicating() {
            let (lifecycle, job) = (self.clone(), Arc::clone(job));
            tokio::spawn(async move {
                while job.take_change() && !job.is_removed() {
                    if let Err(error) = lifecycle.replicate(&job).await {
                        tracing::debug!(%error, "a redrive job's record did not reach the cluster; retrying");
                        tokio::time::sleep(REPLICATE_RETRY).await;
                        job.start_replicating();
                    }
                }
            });
        }
        match &self.store {
            Some(store) if !job.is_removed() => {
                let (vhost, id) = job.read(|v| (v.vhost.clone(), v.id.clone()));
                store.save_redrive(&vhost, &id, job.record())
            }
            _ => MetaDone::ready(Ok(())),
        }
    }

    /// Writes the job's record to the cluster's metadata, answered once this node applied it
    /// (nothing for a single node).
    ///
    /// # Errors
    /// The cluster did not take it (this node is on the minority side of a partition).
    pub(crate) async fn replicate(&self, job: &Job) -> Result<(), RedriveError> {
        let Some(cluster) = self.cluster.get() else { return Ok(()) };
        let (vhost, id, runner) = job.read(|v| (v.vhost.clone(), v.id.clone(), v.node.clone()));
        // Marked first: the record carries it, so a snapshot's restore can tell it from a
        // job this node had before it clustered.
        job.set_clustered();
        // A runner restarted from its store counts on from the cluster's record; one that has
        // not applied that record yet wrote under it, and writes again above it.
        for _ in 0..3 {
            let recorded = cluster.redrive(&vhost, &id).map_or(0, |r| r.seq);
            let seq = job.next_seq(recorded);
            let record = RedriveRecord { runner: runner.clone(), seq, job: job.record_text() };
            cluster.put_redrive(&vhost, &id, record).await.map_err(|e| RedriveError::Store(e.to_string()))?;
            // Taken, or a later write of this run's was.
            if cluster.redrive(&vhost, &id).is_none_or(|r| r.seq >= seq && r.seq <= job.last_seq()) {
                return Ok(());
            }
        }
        Err(RedriveError::Store(format!("redrive job '{id}': the cluster kept a later record")))
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
    pub(crate) fn transition(
        &self,
        job: &Arc<Job>,
        vhost: &VHost,
        state: JobState,
        reason: Option<String>,
    ) -> MetaDone {
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
