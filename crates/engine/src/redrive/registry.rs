//! The broker's redrive jobs: created, listed, paused, resumed, cancelled and deleted by the
//! API; restored from the store at start.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use parking_lot::Mutex;

use super::error::RedriveError;
use super::job::{Control, Job, JobState, JobView, StoredJob};
use super::lifecycle::Lifecycle;
use super::runner;
use super::spec::JobSpec;
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
    /// No jobs yet; records go to `store` when there is one.
    pub(crate) fn new(store: Option<Arc<Persistence>>, ids: Arc<AtomicU64>) -> Self {
        Self { jobs: Mutex::new(Vec::new()), lifecycle: Lifecycle::new(store, ids) }
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
        for StoredJob { mut view, sweep } in views {
            let vhost = vhosts.get(&view.vhost).cloned();
            if vhost.is_none() && !view.state.is_finished() {
                view.state = JobState::Failed;
                view.reason = Some(format!("vhost '{}' no longer exists", view.vhost));
            }
            let job = Arc::new(Job::restored(view, sweep));
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
            if let Some(running) = jobs.iter().find(|j| Self::runs_on(j, vhost.name(), &spec.source)) {
                return Err(RedriveError::Conflict(format!(
                    "redrive job '{}' is already running on queue '{}'",
                    running.read(|v| v.id.clone()),
                    spec.source
                )));
            }
            let job = Arc::new(Job::new(JobView::new(id, vhost.name(), spec)));
            jobs.push(Arc::clone(&job));
            job
        };
        if let Err(e) = self.lifecycle.save(&job).wait().await {
            self.jobs.lock().retain(|j| !Arc::ptr_eq(j, &job));
            return Err(store_error(e));
        }
        // The job as created (its task may finish a small job before the caller reads it).
        let view = job.view();
        super::events::announce(vhost, &view);
        runner::spawn(Arc::clone(&job), Arc::clone(vhost), self.lifecycle.clone());
        Ok(view)
    }

    fn runs_on(job: &Job, vhost: &str, source: &str) -> bool {
        job.read(|v| v.state == JobState::Running && v.vhost == vhost && v.source == source)
    }

    /// Every job, or those of one vhost, in creation order.
    #[must_use]
    pub fn list(&self, vhost: Option<&str>) -> Vec<JobView> {
        self.jobs.lock().iter().map(|j| j.view()).filter(|v| vhost.is_none_or(|name| v.vhost == name)).collect()
    }

    fn find(&self, vhost: &str, id: &str) -> Result<Arc<Job>, RedriveError> {
        self.jobs
            .lock()
            .iter()
            .find(|j| j.read(|v| v.vhost == vhost && v.id == id))
            .cloned()
            .ok_or_else(|| RedriveError::NotFound(format!("no redrive job '{id}' in vhost '{vhost}'")))
    }

    /// One job.
    ///
    /// # Errors
    /// 404 when there is no such job.
    pub fn get(&self, vhost: &str, id: &str) -> Result<JobView, RedriveError> {
        Ok(self.find(vhost, id)?.view())
    }

    /// Pauses a running job: it stops taking messages and settles those in flight.
    ///
    /// # Errors
    /// 404; 409 unless it is running.
    pub async fn pause(&self, vhost: &Arc<VHost>, id: &str) -> Result<JobView, RedriveError> {
        let job = self.find(vhost.name(), id)?;
        match job.read(|v| v.state) {
            JobState::Running => {}
            JobState::Paused => return Ok(job.view()),
            other => return Err(RedriveError::Conflict(format!("redrive job '{id}' is {}", other.as_str()))),
        }
        job.set_control(Control::Pause);
        self.lifecycle.transition(&job, vhost, JobState::Paused, None).wait().await.map_err(store_error)?;
        Ok(job.view())
    }

    /// Resumes a paused job with a new pass over its source.
    ///
    /// # Errors
    /// 404; 409 unless it is paused, or when another job runs on its source.
    pub async fn resume(&self, vhost: &Arc<VHost>, id: &str) -> Result<JobView, RedriveError> {
        let job = self.find(vhost.name(), id)?;
        let done = {
            let jobs = self.jobs.lock();
            match job.read(|v| v.state) {
                JobState::Paused => {}
                JobState::Running => return Ok(job.view()),
                other => return Err(RedriveError::Conflict(format!("redrive job '{id}' is {}", other.as_str()))),
            }
            let source = job.read(|v| v.source.clone());
            if let Some(running) = jobs.iter().find(|j| Self::runs_on(j, vhost.name(), &source)) {
                return Err(RedriveError::Conflict(format!(
                    "redrive job '{}' is already running on queue '{source}'",
                    running.read(|v| v.id.clone())
                )));
            }
            // Running from here on (under the lock: a concurrent create or resume sees it).
            self.lifecycle.transition(&job, vhost, JobState::Running, None)
        };
        job.set_control(Control::Run);
        done.wait().await.map_err(store_error)?;
        Ok(job.view())
    }

    /// Cancels a running or paused job: messages in flight are settled, the rest stay.
    ///
    /// # Errors
    /// 404; 409 when it is finished.
    pub async fn cancel(&self, vhost: &Arc<VHost>, id: &str) -> Result<JobView, RedriveError> {
        let job = self.find(vhost.name(), id)?;
        let state = job.read(|v| v.state);
        if state.is_finished() {
            return Err(RedriveError::Conflict(format!("redrive job '{id}' is {}", state.as_str())));
        }
        job.set_control(Control::Cancel);
        self.lifecycle.transition(&job, vhost, JobState::Cancelled, None).wait().await.map_err(store_error)?;
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

    /// Deletes a finished job (its record too).
    ///
    /// # Errors
    /// 404; 409 while it is running or paused.
    pub async fn delete(&self, vhost: &str, id: &str) -> Result<(), RedriveError> {
        let job = self.find(vhost, id)?;
        let state = job.read(|v| v.state);
        if !state.is_finished() {
            return Err(RedriveError::Conflict(format!("redrive job '{id}' is {}: cancel it first", state.as_str())));
        }
        job.mark_removed();
        self.jobs.lock().retain(|j| !Arc::ptr_eq(j, &job));
        self.lifecycle.forget(&job).wait().await.map_err(store_error)
    }
}
