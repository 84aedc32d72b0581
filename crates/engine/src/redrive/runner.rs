//! A job's task: runs passes while the job is asked to run, waits while it is paused, and
//! records how it ended. One task per unfinished job; it ends with the job.

use std::sync::Arc;
use std::time::Duration;

use super::job::{Control, Job, JobState};
use super::lifecycle::Lifecycle;
use super::pass::{self, PassEnd};
use crate::vhost::VHost;

/// How long a job waits for its node's cluster before it says so in the log.
const PATIENCE: Duration = Duration::from_secs(30);
/// How long a job whose source's node does not answer waits before it tries again.
const RETRY: Duration = Duration::from_secs(1);

/// Starts the task of `job` (running or paused, as its control says).
pub(crate) fn spawn(job: Arc<Job>, vhost: Arc<VHost>, lifecycle: Lifecycle) {
    tokio::spawn(run(job, vhost, lifecycle));
}

async fn run(job: Arc<Job>, vhost: Arc<VHost>, lifecycle: Lifecycle) {
    let mut control = job.control();
    // A job the cluster records, restored at start, runs once this node is back in its cluster:
    // every change it makes is then written there too, and its queues of other nodes answer.
    if job.is_clustered() && tokio::time::timeout(PATIENCE, lifecycle.until_clustered()).await.is_err() {
        tracing::warn!(job = %job.read(|v| v.id.clone()), "a clustered redrive job waits for this node to join its cluster");
        lifecycle.until_clustered().await;
    }
    loop {
        let asked = *control.borrow_and_update();
        match asked {
            Control::Cancel => {
                let _ = lifecycle.transition(&job, &vhost, JobState::Cancelled, None).wait().await;
                return;
            }
            Control::Pause => {
                if job.read(|v| v.state) != JobState::Paused {
                    let reason = job.read(|v| v.reason.clone());
                    drop(lifecycle.transition(&job, &vhost, JobState::Paused, reason));
                }
                if control.changed().await.is_err() {
                    return;
                }
            }
            Control::Run => {
                drop(lifecycle.transition(&job, &vhost, JobState::Running, None));
                let end = pass::run(&job, &vhost, &lifecycle, &mut control).await;
                let (state, reason) = match end {
                    PassEnd::Completed => (JobState::Completed, None),
                    PassEnd::Cancelled => (JobState::Cancelled, None),
                    PassEnd::Failed(reason) => (JobState::Failed, Some(reason)),
                    PassEnd::Unavailable(reason) => {
                        tracing::debug!(job = %job.read(|v| v.id.clone()), %reason, "a redrive job waits for its source");
                        tokio::select! {
                            () = tokio::time::sleep(RETRY) => {}
                            changed = control.changed() => if changed.is_err() { return },
                        }
                        continue;
                    }
                    PassEnd::Paused(reason) => {
                        // A refusal pauses the job until someone resumes it; a user's pause
                        // is the control already.
                        if reason.is_some() {
                            job.set_control(Control::Pause);
                        }
                        drop(lifecycle.transition(&job, &vhost, JobState::Paused, reason));
                        let _ = control.borrow_and_update();
                        if *control.borrow() == Control::Pause && control.changed().await.is_err() {
                            return;
                        }
                        continue;
                    }
                };
                let _ = lifecycle.transition(&job, &vhost, state, reason).wait().await;
                // The final record (progress included) is written even when the state was set
                // already (a cancel the API recorded).
                let _ = lifecycle.save(&job).wait().await;
                return;
            }
        }
    }
}
