//! One redrive job: what the API shows and the store keeps ([`JobView`]), and how its task is
//! told to pause, resume or stop ([`Control`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
    /// The node whose task runs it (the one it was created on), as a queue names its node.
    /// Records from before clustering have none: they are this node's.
    #[serde(default)]
    pub node: String,
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
            node: charon_model::node_name(),
        }
    }

    /// How many more messages `max_messages` allows (`u64::MAX`: no limit).
    #[must_use]
    pub fn allowance(&self) -> u64 {
        self.max_messages.map_or(u64::MAX, |max| max.saturating_sub(self.progress.moved))
    }
}

/// What a job's task is asked to do (and, sent to the node that runs a job, what the API
/// asked of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Its record is in the cluster's metadata (it was written there once): a snapshot
    /// without it means it was deleted while this node was away.
    clustered: AtomicBool,
    /// The last of its writes to the cluster ([`crate::cluster::metadata::RedriveRecord::seq`]).
    seq: AtomicU64,
    /// A write to the cluster is under way ([`super::lifecycle::Lifecycle::save`] keeps at
    /// most one per job), and whether the record changed since it was made.
    replicating: AtomicBool,
    changed: AtomicBool,
}

impl Job {
    /// A job with `view`, its task asked to run or stay paused as the view's state says.
    #[must_use]
    pub fn new(view: JobView) -> Self {
        Self::restored(view, None, false)
    }

    /// A job as the store kept it: its view and where its sweep was.
    #[must_use]
    pub fn restored(mut view: JobView, sweep: Option<Sweep>, clustered: bool) -> Self {
        if view.node.is_empty() {
            view.node = charon_model::node_name();
        }
        let initial = if view.state == JobState::Paused { Control::Pause } else { Control::Run };
        Self {
            view: Mutex::new(view),
            sweep: Mutex::new(sweep),
            control: watch::Sender::new(initial),
            removed: AtomicBool::new(false),
            clustered: AtomicBool::new(clustered),
            seq: AtomicU64::new(0),
            replicating: AtomicBool::new(false),
            changed: AtomicBool::new(false),
        }
    }

    /// The number of its next write to the cluster, which recorded `recorded` last (a restarted
    /// runner counts on from there).
    pub(crate) fn next_seq(&self, recorded: u64) -> u64 {
        let previous = self.seq.fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| Some(s.max(recorded) + 1));
        previous.unwrap_or_else(|s| s).max(recorded) + 1
    }

    /// The number of its latest write to the cluster in this run.
    pub(crate) fn last_seq(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }

    /// Whether its record is in the cluster's metadata.
    #[must_use]
    pub fn is_clustered(&self) -> bool {
        self.clustered.load(Ordering::Acquire)
    }

    /// Notes that the cluster has its record.
    pub(crate) fn set_clustered(&self) {
        self.clustered.store(true, Ordering::Release);
    }

    /// Notes a change to replicate; whether the caller is to start the write (none is under
    /// way).
    pub(crate) fn start_replicating(&self) -> bool {
        self.changed.store(true, Ordering::Release);
        !self.replicating.swap(true, Ordering::AcqRel)
    }

    /// Takes the change the write under way is to carry: whether there was one since the last
    /// write (when none, the write ends, unless another change just started one).
    pub(crate) fn take_change(&self) -> bool {
        if self.changed.swap(false, Ordering::AcqRel) {
            return true;
        }
        self.replicating.store(false, Ordering::Release);
        // A change made between the two steps above found the write still under way.
        self.changed.load(Ordering::Acquire) && !self.replicating.swap(true, Ordering::AcqRel)
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

    /// [`Self::record`] as text (the cluster's metadata is JSON).
    #[must_use]
    pub fn record_text(&self) -> String {
        String::from_utf8(self.record()).unwrap_or_default()
    }

    /// The JSON record the store keeps: the view, and the sweep when there is one.
    #[must_use]
    pub fn record(&self) -> Vec<u8> {
        let sweep = self.sweep();
        let view = self.view.lock();
        // A view of strings, numbers and maps of them always serializes.
        let clustered = self.is_clustered();
        serde_json::to_vec(&Record { view: &view, sweep, clustered }).unwrap_or_default()
    }
}

/// A job's record as written.
#[derive(Serialize)]
struct Record<'a> {
    #[serde(flatten)]
    view: &'a JobView,
    #[serde(skip_serializing_if = "Option::is_none")]
    sweep: Option<Sweep>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    clustered: bool,
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
    /// Its record is in the cluster's metadata.
    #[serde(default)]
    pub clustered: bool,
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
        // Writes to the cluster count on from the cluster's record (a restarted runner's).
        let counts: Vec<u64> = [0, 0, 57, 3].into_iter().map(|recorded| job.next_seq(recorded)).collect();
        assert_eq!((counts, job.last_seq()), (vec![1, 2, 58, 59], 59));
        // The API's JSON (the view) has no sweep.
        assert!(serde_json::to_value(job.view()).unwrap().get("sweep").is_none());
    }
}
