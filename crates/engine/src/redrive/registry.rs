//! The broker's redrive jobs: created, listed, paused, resumed, cancelled and deleted by the
//! API; restored from the store at start.
//!
//! In a cluster a job runs on the node it was created on (its task reaches queues of other
//! nodes through their proxies) and its record is in the cluster's metadata too, written with
//! each save of its own store's: every node lists every job; a control asked on another node
//! is sent to the runner; a finished job is deleted through the metadata, wherever it ran.
//! The runner restores its jobs from its own store (they resume before the cluster answers).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use parking_lot::Mutex;

use super::error::RedriveError;
use super::job::{Control, Job, JobState, JobView, StoredJob};
use super::lifecycle::Lifecycle;
use super::runner;
use super::spec::JobSpec;
use crate::cluster::ClusterSlot;
use crate::cluster::metadata::RedriveRecord;
use crate::persist::Persistence;
use crate::vhost::VHost;

/// Every job of the broker, in creation order.
#[derive(Debug)]
pub struct Redrives {
    jobs: Mutex<Vec<Arc<Job>>>,
    lifecycle: Lifecycle,
}

fn store_error(e: crate::error::EngineError) -> RedriveError {
    RedriveError::Store(e.to_string())
}

impl Redrives {
    /// No jobs yet; records go to `store` when there is one, and to the cluster's metadata
    /// once the node is in one.
    pub(crate) fn new(store: Option<Arc<Persistence>>, ids: Arc<AtomicU64>, cluster: ClusterSlot) -> Self {
        Self { jobs: Mutex::new(Vec::new()), lifecycle: Lifecycle::new(store, ids, cluster) }
    }

    /// Restores the stored jobs: unfinished ones start again (running or paused, as they
    /// were), finished ones are listed. A job whose vhost is gone is restored as failed.
    pub(crate) fn restore(&self, store: &Persistence, vhosts: &HashMap<String, Arc<VHost>>) {
        let stored = match store.meta().load_redrives() {
            Ok(stored) => stored,
            Err(error) => {
                tracing::error!(%error, "redrive jobs could not be read; none restored");
                return;
            }
        };
        let mut views: Vec<StoredJob> = stored
            .into_iter()
            .filter_map(|s| match serde_json::from_slice::<StoredJob>(&s.record) {
                Ok(job) => Some(job),
                Err(error) => {
                    tracing::error!(vhost = %s.vhost, job = %s.id, %error, "a stored redrive job does not decode; skipped");
                    None
                }
            })
            .collect();
        views.sort_by_key(|v| v.view.created_at);
        for StoredJob { mut view, sweep, clustered } in views {
            let vhost = vhosts.get(&view.vhost).cloned();
            if vhost.is_none() && !view.state.is_finished() {
                view.state = JobState::Failed;
                view.reason = Some(format!("vhost '{}' no longer exists", view.vhost));
            }
            let job = Arc::new(Job::restored(view, sweep, clustered));
            let state = job.read(|v| v.state);
            if let Some(vhost) = vhost.filter(|_| !state.is_finished()) {
                tracing::info!(vhost = %vhost.name(), job = %job.read(|v| v.id.clone()), state = state.as_str(), "redrive job resumed");
                runner::spawn(Arc::clone(&job), vhost, self.lifecycle.clone());
            }
            self.jobs.lock().push(job);
        }
    }

    /// Creates and starts a job on `vhost`, once its record is committed.
    ///
    /// # Errors
    /// 400 for an invalid spec, 404 when the source queue does not exist, 409 when another
    /// job runs on it; a store failure.
    pub async fn create(&self, vhost: &Arc<VHost>, spec: JobSpec) -> Result<JobView, RedriveError> {
        spec.validate()?;
        if !vhost.queue_names().contains(&spec.source) {
            return Err(RedriveError::NotFound(format!("no queue '{}' in vhost '{}'", spec.source, vhost.name())));
        }
        let id = format!("{:012x}", rand::random::<u64>() >> 16);
        let job = {
            let mut jobs = self.jobs.lock();
            self.free(&jobs, vhost.name(), &spec.source)?;
            let job = Arc::new(Job::new(JobView::new(id, vhost.name(), spec)));
            jobs.push(Arc::clone(&job));
            job
        };
        // The cluster records it first: a node that cannot reach a majority makes none.
        let saved = match self.lifecycle.replicate(&job).await {
            Ok(()) => self.lifecycle.save(&job).wait().await.map_err(store_error),
            Err(e) => Err(e),
        };
        if let Err(e) = saved {
            self.jobs.lock().retain(|j| !Arc::ptr_eq(j, &job));
            return Err(e);
        }
        // The job as created (its task may finish a small job before the caller reads it).
        let view = job.view();
        super::events::announce(vhost, &view);
        runner::spawn(Arc::clone(&job), Arc::clone(vhost), self.lifecycle.clone());
        Ok(view)
    }

    /// Refuses a job on `source` while another runs on it (here, or on another node as the
    /// cluster's metadata says).
    fn free(&self, jobs: &[Arc<Job>], vhost: &str, source: &str) -> Result<(), RedriveError> {
        let here = jobs.iter().find(|j| Self::runs_on(j, vhost, source)).map(|j| j.read(|v| v.id.clone()));
        let elsewhere = || {
            self.recorded(jobs, Some(vhost))
                .into_iter()
                .find(|v| v.state == JobState::Running && v.source == source)
                .map(|v| v.id)
        };
        match here.or_else(elsewhere) {
            Some(running) => {
                Err(RedriveError::Conflict(format!("redrive job '{running}' is already running on queue '{source}'")))
            }
            None => Ok(()),
        }
    }

    /// The jobs the cluster's metadata records that this node does not run (none for a single
    /// node), as their runners last wrote them.
    fn recorded(&self, jobs: &[Arc<Job>], vhost: Option<&str>) -> Vec<JobView> {
        let Some(cluster) = self.lifecycle.cluster() else { return Vec::new() };
        let here = |vhost: &str, id: &str| jobs.iter().any(|j| j.read(|v| v.vhost == vhost && v.id == id));
        cluster
            .redrives(vhost)
            .into_iter()
            .filter(|(vhost, id, _)| !here(vhost, id))
            .filter_map(|(_, _, record)| serde_json::from_str::<StoredJob>(&record.job).ok().map(|stored| stored.view))
            .collect()
    }

    fn runs_on(job: &Job, vhost: &str, source: &str) -> bool {
        job.read(|v| v.state == JobState::Running && v.vhost == vhost && v.source == source)
    }

    /// The node joined its cluster: the jobs it records, restored at start, go on.
    pub(crate) fn cluster_joined(&self) {
        self.lifecycle.cluster_joined();
    }

    /// Every job, or those of one vhost, in creation order (in a cluster, every node's).
    #[must_use]
    pub fn list(&self, vhost: Option<&str>) -> Vec<JobView> {
        let jobs = self.jobs.lock();
        let mut views: Vec<JobView> =
            jobs.iter().map(|j| j.view()).filter(|v| vhost.is_none_or(|name| v.vhost == name)).collect();
        views.extend(self.recorded(&jobs, vhost));
        views.sort_by_key(|v| v.created_at);
        views
    }

    fn find(&self, vhost: &str, id: &str) -> Option<Arc<Job>> {
        self.jobs.lock().iter().find(|j| j.read(|v| v.vhost == vhost && v.id == id)).cloned()
    }

    fn not_found(vhost: &str, id: &str) -> RedriveError {
        RedriveError::NotFound(format!("no redrive job '{id}' in vhost '{vhost}'"))
    }

    /// A job this node does not run, as the cluster records it: its runner and view.
    fn elsewhere(&self, vhost: &str, id: &str) -> Result<(String, JobView), RedriveError> {
        let record =
            self.lifecycle.cluster().and_then(|c| c.redrive(vhost, id)).ok_or_else(|| Self::not_found(vhost, id))?;
        let stored: StoredJob =
            serde_json::from_str(&record.job).map_err(|e| RedriveError::Store(format!("redrive job '{id}': {e}")))?;
        Ok((record.runner, stored.view))
    }

    /// One job.
    ///
    /// # Errors
    /// 404 when there is no such job.
    pub fn get(&self, vhost: &str, id: &str) -> Result<JobView, RedriveError> {
        match self.find(vhost, id) {
            Some(job) => Ok(job.view()),
            None => self.elsewhere(vhost, id).map(|(_, view)| view),
        }
    }

    /// Pauses a running job: it stops taking messages and settles those in flight.
    ///
    /// # Errors
    /// 404; 409 unless it is running; 503 when another node runs it and does not answer.
    pub async fn pause(&self, vhost: &Arc<VHost>, id: &str) -> Result<JobView, RedriveError> {
        self.control(vhost, id, Control::Pause).await
    }

    /// Resumes a paused job with a new pass over its source.
    ///
    /// # Errors
    /// 404; 409 unless it is paused, or when another job runs on its source; 503 as
    /// [`Self::pause`].
    pub async fn resume(&self, vhost: &Arc<VHost>, id: &str) -> Result<JobView, RedriveError> {
        self.control(vhost, id, Control::Run).await
    }

    /// Cancels a running or paused job: messages in flight are settled, the rest stay.
    ///
    /// # Errors
    /// 404; 409 when it is finished; 503 as [`Self::pause`].
    pub async fn cancel(&self, vhost: &Arc<VHost>, id: &str) -> Result<JobView, RedriveError> {
        self.control(vhost, id, Control::Cancel).await
    }

    /// Pauses, resumes or cancels job `id`: here when this node runs it, else on the node
    /// that does. A job whose runner left the cluster runs nowhere: it may only be cancelled
    /// (its record says so).
    async fn control(&self, vhost: &Arc<VHost>, id: &str, control: Control) -> Result<JobView, RedriveError> {
        if let Some(job) = self.find(vhost.name(), id) {
            return self.control_job(vhost, &job, control).await;
        }
        let (runner, mut view) = self.elsewhere(vhost.name(), id)?;
        let Some(cluster) = self.lifecycle.cluster() else { return Err(Self::not_found(vhost.name(), id)) };
        let member = cluster.members().iter().any(|m| m.name == runner);
        if member && runner != charon_model::node_name() {
            let text = cluster.control_redrive(&runner, vhost.name(), id, control).await?;
            return serde_json::from_str(&text).map_err(|e| RedriveError::Store(e.to_string()));
        }
        // Its node is gone (forgotten), or this node lost its store: nothing runs it.
        if control != Control::Cancel || view.state.is_finished() {
            return Err(RedriveError::Conflict(format!(
                "redrive job '{id}' is {} and its node '{runner}' does not run it",
                view.state.as_str()
            )));
        }
        view.state = JobState::Cancelled;
        view.updated_at = crate::clock::now_ms();
        let orphan = Job::new(view);
        orphan.set_clustered();
        self.lifecycle.replicate(&orphan).await?;
        Ok(orphan.view())
    }

    /// What the node asked by another to control its job `id` of `vhost` answers: the job's
    /// view as JSON, or why not.
    pub(crate) async fn control_here(
        &self,
        broker: &crate::Broker,
        vhost: &str,
        id: &str,
        control: Control,
    ) -> Result<String, RedriveError> {
        let not_found = || Self::not_found(vhost, id);
        let (vhost, job) = broker.vhost(vhost).zip(self.find(vhost, id)).ok_or_else(not_found)?;
        let view = self.control_job(&vhost, &job, control).await?;
        serde_json::to_string(&view).map_err(|e| RedriveError::Store(e.to_string()))
    }

    async fn control_job(&self, vhost: &Arc<VHost>, job: &Arc<Job>, control: Control) -> Result<JobView, RedriveError> {
        let id = job.read(|v| v.id.clone());
        let state = job.read(|v| v.state);
        let refused = |state: JobState| RedriveError::Conflict(format!("redrive job '{id}' is {}", state.as_str()));
        let done = match control {
            Control::Pause => match state {
                JobState::Paused => return Ok(job.view()),
                JobState::Running => {
                    job.set_control(Control::Pause);
                    self.lifecycle.transition(job, vhost, JobState::Paused, None)
                }
                other => return Err(refused(other)),
            },
            Control::Run => match state {
                JobState::Running => return Ok(job.view()),
                JobState::Paused => {
                    let jobs = self.jobs.lock();
                    self.free(&jobs, vhost.name(), &job.read(|v| v.source.clone()))?;
                    // Running from here on (under the lock: a concurrent create or resume sees it).
                    let done = self.lifecycle.transition(job, vhost, JobState::Running, None);
                    job.set_control(Control::Run);
                    done
                }
                other => return Err(refused(other)),
            },
            Control::Cancel if state.is_finished() => return Err(refused(state)),
            Control::Cancel => {
                job.set_control(Control::Cancel);
                self.lifecycle.transition(job, vhost, JobState::Cancelled, None)
            }
        };
        done.wait().await.map_err(store_error)?;
        // Answered once the cluster's record says so too (every node lists the new state).
        self.lifecycle.replicate(job).await?;
        Ok(job.view())
    }

    /// Moves the ready messages `ids` of queue `source` to `target` once, at least once (the
    /// dead-letter browser's move).
    ///
    /// # Errors
    /// 400 for more than [`super::oneshot::MAX_IDS`] ids, 404 when the queue is gone.
    pub async fn move_messages(
        &self,
        vhost: &Arc<VHost>,
        source: &str,
        ids: &[u64],
        target: &super::spec::Target,
    ) -> Result<super::oneshot::MoveOutcome, RedriveError> {
        if ids.len() > super::oneshot::MAX_IDS {
            return Err(RedriveError::Invalid(format!("at most {} ids at a time", super::oneshot::MAX_IDS)));
        }
        let session = self.lifecycle.next_id();
        let queue = vhost.queue(source, session).map_err(|e| RedriveError::NotFound(e.to_string()))?;
        super::oneshot::move_messages(vhost, &queue, ids, target, session)
            .await
            .map_err(|e| RedriveError::NotFound(e.to_string()))
    }

    /// Deletes a finished job (its record too, in the cluster's metadata as well: its runner,
    /// if another node, forgets it when it applies that).
    ///
    /// # Errors
    /// 404; 409 while it is running or paused (unless its runner left the cluster).
    pub async fn delete(&self, vhost: &str, id: &str) -> Result<(), RedriveError> {
        let (job, state) = match self.find(vhost, id) {
            Some(job) => {
                let state = job.read(|v| v.state);
                (Some(job), state)
            }
            None => {
                let (runner, view) = self.elsewhere(vhost, id)?;
                let runs = self.lifecycle.cluster().is_some_and(|c| c.members().iter().any(|m| m.name == runner));
                (None, if runs { view.state } else { JobState::Cancelled })
            }
        };
        if !state.is_finished() {
            return Err(RedriveError::Conflict(format!("redrive job '{id}' is {}: cancel it first", state.as_str())));
        }
        if let Some(cluster) = self.lifecycle.cluster() {
            cluster.delete_redrive(vhost, id).await.map_err(|e| RedriveError::Store(e.to_string()))?;
        }
        // Forgotten already when this node applied the delete, unless the cluster is none.
        match job.filter(|job| !job.is_removed()) {
            Some(job) => self.forget(&job).await,
            None => Ok(()),
        }
    }

    /// The cluster deleted job `id` of `vhost`: this node forgets it, if it has it.
    pub(crate) async fn follow_delete(&self, vhost: &str, id: &str) {
        if let Some(job) = self.find(vhost, id)
            && let Err(error) = self.forget(&job).await
        {
            tracing::error!(%error, job = id, "a redrive job the cluster deleted stays in this node's store");
        }
    }

    /// This node follows a snapshot of the cluster's `records`: a job of its own that the
    /// cluster had and no longer has was deleted while it was away.
    pub(crate) async fn follow_records(&self, records: &BTreeMap<String, BTreeMap<String, RedriveRecord>>) {
        let jobs = self.jobs.lock().clone();
        for job in jobs {
            let (vhost, id) = job.read(|v| (v.vhost.clone(), v.id.clone()));
            let recorded = records.get(&vhost).is_some_and(|r| r.contains_key(&id));
            if job.is_clustered() && !recorded {
                self.follow_delete(&vhost, &id).await;
            }
        }
    }

    async fn forget(&self, job: &Arc<Job>) -> Result<(), RedriveError> {
        job.mark_removed();
        job.set_control(Control::Cancel);
        self.jobs.lock().retain(|j| !Arc::ptr_eq(j, job));
        self.lifecycle.forget(job).wait().await.map_err(store_error)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    #[tokio::test]
    async fn a_snapshot_without_a_clustered_job_deletes_it_and_keeps_what_this_node_had_alone() {
        let redrives = Redrives::new(None, Arc::default(), ClusterSlot::default());
        let spec: JobSpec =
            serde_json::from_str(r#"{"source":"dlq","destination":{"type":"queue","queue":"q"}}"#).unwrap();
        for (id, clustered) in [("gone", true), ("alone", false), ("kept", true)] {
            let mut view = JobView::new(id.into(), "/", spec.clone());
            view.state = JobState::Completed;
            redrives.jobs.lock().push(Arc::new(Job::restored(view, None, clustered)));
        }
        let record = RedriveRecord { runner: charon_model::node_name(), seq: 3, job: String::new() };
        let records = BTreeMap::from([("/".to_owned(), BTreeMap::from([("kept".to_owned(), record)]))]);
        redrives.follow_records(&records).await;
        let ids: Vec<String> = redrives.list(None).into_iter().map(|v| v.id).collect();
        assert_eq!(ids, ["alone", "kept"]);
        // The cluster's delete of a job this node has, and of one it has not.
        redrives.follow_delete("/", "kept").await;
        redrives.follow_delete("/", "never").await;
        assert_eq!(redrives.list(None).into_iter().map(|v| v.id).collect::<Vec<_>>(), ["alone"]);
    }
}
