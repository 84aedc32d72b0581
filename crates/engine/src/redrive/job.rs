//! One redrive job: what the API shows and the store keeps ([`JobView`]), and how its task is
//! told to pause, resume or stop ([`Control`]).

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::progress::{DryRunResult, Progress};
use super::spec::{Filter, JobSpec, Target};
use super::sweep::Sweep;
use crate::clock::now_ms;

/// Where a job is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Moving messages.
    Running,
    /// Stopped by a user or by a destination that refused a message; resumable.
    Paused,
    /// Saw every message that was in the source when its pass started, or moved its maximum.
    Completed,
    /// Cancelled by a user.
    Cancelled,
    /// Cannot go on (its source queue is gone).
    Failed,
}

impl JobState {
    /// The state as the API spells it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Completed => "completed",
            Self::Cancelled => "cancelled",
            Self::Failed => "failed",
        }
    }

    /// Whether the job is over (its task has ended).
    #[must_use]
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Completed | Self::Cancelled | Self::Failed)
    }
}

/// A job as the API renders it (field for field the JSON of the contract) and as the store
/// keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    /// Its id, unique in the broker.
    pub id: String,
    /// Its vhost.
    pub vhost: String,
    /// The source queue.
    pub source: String,
    /// Where messages go.
    pub destination: Target,
    /// Which messages.
    pub filter: Filter,
    /// Only counts.
    pub dry_run: bool,
    /// Messages per second (`None`: unlimited).
    pub rate: Option<u32>,
    /// At most this many moved (`None`: no limit).
    pub max_messages: Option<u64>,
    /// Its state.
    pub state: JobState,
    /// Why it is paused or failed.
    pub reason: Option<String>,
    /// Created, ms since the epoch.
    pub created_at: i64,
    /// Last changed, ms since the epoch.
    pub updated_at: i64,
    /// Its counts.
    pub progress: Progress,
    /// A completed dry run's counts.
    pub dry_run_result: Option<DryRunResult>,
}

impl JobView {
    /// A new, running job.
    #[must_use]
    pub fn new(id: String, vhost: &str, spec: JobSpec) -> Self {
        let now = now_ms();
        let JobSpec { source, destination, filter, dry_run, rate, max_messages } = spec;
        Self {
            id,
            vhost: vhost.to_owned(),
            source,
            destination,
            filter,
            dry_run,
            rate,
            max_messages,
            state: JobState::Running,
            reason: None,
            created_at: now,
            updated_at: now,
            progress: Progress::default(),
            dry_run_result: None,
        }
    }

    /// How many more messages `max_messages` allows (`u64::MAX`: no limit).
    #[must_use]
    pub fn allowance(&self) -> u64 {
        self.max_messages.map_or(u64::MAX, |max| max.saturating_sub(self.progress.moved))
    }
}

/// What a job's task is asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Move messages.
    Run,
    /// Stop moving, keep the job.
    Pause,
    /// Stop for good.
    Cancel,
}

/// A live job: its view behind a lock (read by the API, written by its task a batch at a
/// time), and the control its task follows.
#[derive(Debug)]
pub struct Job {
    view: Mutex<JobView>,
    /// A filtered job's cursor in its source (kept with the record, not shown by the API).
    sweep: Mutex<Option<Sweep>>,
    control: watch::Sender<Control>,
    /// Set when the job is deleted: its task's last saves must not write it back.
    removed: AtomicBool,
}

impl Job {
    /// A job with `view`, its task asked to run or stay paused as the view's state says.
    #[must_use]
    pub fn new(view: JobView) -> Self {
        Self::restored(view, None)
    }

    /// A job as the store kept it: its view and where its sweep was.
    #[must_use]
    pub fn restored(view: JobView, sweep: Option<Sweep>) -> Self {
        let initial = if view.state == JobState::Paused { Control::Pause } else { Control::Run };
        Self {
            view: Mutex::new(view),
            sweep: Mutex::new(sweep),
            control: watch::Sender::new(initial),
            removed: AtomicBool::new(false),
        }
    }

    /// Where its sweep is (`None`: a fresh sweep starts at the oldest message).
    #[must_use]
    pub fn sweep(&self) -> Option<Sweep> {
        *self.sweep.lock()
    }

    /// Records where its sweep is (written with the next save).
    pub fn set_sweep(&self, sweep: Option<Sweep>) {
        *self.sweep.lock() = sweep;
    }

    /// A copy of the view.
    #[must_use]
    pub fn view(&self) -> JobView {
        self.view.lock().clone()
    }

    /// Changes the view (the task's progress, a state change), stamping `updated_at`.
    pub fn update<T>(&self, change: impl FnOnce(&mut JobView) -> T) -> T {
        let mut view = self.view.lock();
        let out = change(&mut view);
        view.updated_at = now_ms();
        out
    }

    /// Reads the view without copying it.
    pub fn read<T>(&self, look: impl FnOnce(&JobView) -> T) -> T {
        look(&self.view.lock())
    }

    /// Asks the task to run, pause or cancel.
    pub fn set_control(&self, control: Control) {
        self.control.send_replace(control);
    }

    /// Follows the control (for the task).
    #[must_use]
    pub fn control(&self) -> watch::Receiver<Control> {
        self.control.subscribe()
    }

    /// Marks the job deleted.
    pub fn mark_removed(&self) {
        self.removed.store(true, Ordering::Release);
    }

    /// Whether the job was deleted.
    #[must_use]
    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// The JSON record the store keeps: the view, and the sweep when there is one.
    #[must_use]
    pub fn record(&self) -> Vec<u8> {
        let sweep = self.sweep();
        let view = self.view.lock();
        // A view of strings, numbers and maps of them always serializes.
        serde_json::to_vec(&Record { view: &view, sweep }).unwrap_or_default()
    }
}

/// A job's record as written.
#[derive(Serialize)]
struct Record<'a> {
    #[serde(flatten)]
    view: &'a JobView,
    #[serde(skip_serializing_if = "Option::is_none")]
    sweep: Option<Sweep>,
}

/// A job's record as read back (records written before sweeps existed have none).
#[derive(Debug, Deserialize)]
pub struct StoredJob {
    /// The view.
    #[serde(flatten)]
    pub view: JobView,
    /// The sweep.
    #[serde(default)]
    pub sweep: Option<Sweep>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_keeps_the_sweep_and_reads_records_without_one() {
        let spec: JobSpec = serde_json::from_str(
            r#"{"source":"dlq","destination":{"type":"queue","queue":"q"},"filter":{"reasons":["rejected"]}}"#,
        )
        .unwrap();
        let job = Job::new(JobView::new("a1".into(), "/", spec));
        let plain: StoredJob = serde_json::from_slice(&job.record()).unwrap();
        assert_eq!((plain.view, plain.sweep), (job.view(), None));
        let sweep = Sweep { after: Some(41), skipped: 7 };
        job.set_sweep(Some(sweep));
        let record = job.record();
        let stored: StoredJob = serde_json::from_slice(&record).unwrap();
        assert_eq!((stored.view, stored.sweep), (job.view(), Some(sweep)));
        // The API's JSON (the view) has no sweep.
        assert!(serde_json::to_value(job.view()).unwrap().get("sweep").is_none());
    }
}
