//! The metadata writer: one thread that commits metadata changes in the order they were
//! submitted.
//!
//! Every redb commit fsyncs, so none may run on a runtime worker or under the vhost's topology
//! or policy locks (a declare would hold up every publisher and dead-lettering queue routing
//! through the vhost). The vhost submits a change while it holds its lock — a channel send, no
//! I/O — and awaits the commit after letting go. Submitting under the lock makes the commit order
//! the order of the changes themselves, so the store always holds a prefix of the vhost's
//! history: a delete and a re-declare of the same name can never be committed the other way
//! round.

use std::sync::mpsc;

use tokio::sync::oneshot;

use crate::error::EngineError;

/// One metadata change, run on the writer thread.
pub(crate) type Job = Box<dyn FnOnce() -> Result<(), EngineError> + Send>;

type Submitted = (Job, oneshot::Sender<Result<(), EngineError>>);

/// The writer thread's inbox; the thread ends when this is dropped and its queue is empty.
#[derive(Debug)]
pub(crate) struct MetaWriter {
    jobs: Option<mpsc::Sender<Submitted>>,
}

impl MetaWriter {
    /// Starts the writer thread. Should the system refuse a thread, changes are committed on
    /// the caller's thread instead (logged: correct, only slower).
    pub(crate) fn start() -> Self {
        let (tx, rx) = mpsc::channel::<Submitted>();
        let started = std::thread::Builder::new().name("charon-meta".into()).spawn(move || {
            for (job, done) in rx {
                let _ = done.send(job());
            }
        });
        match started {
            Ok(_) => Self { jobs: Some(tx) },
            Err(error) => {
                tracing::error!(%error, "no metadata writer thread: metadata commits run on their callers");
                Self { jobs: None }
            }
        }
    }

    /// Queues `job` behind every job submitted before it.
    pub(crate) fn submit(&self, job: Job) -> MetaDone {
        let (tx, rx) = oneshot::channel();
        match &self.jobs {
            Some(jobs) => match jobs.send((job, tx)) {
                Ok(()) => MetaDone(Pending::Waiting(rx)),
                Err(mpsc::SendError((job, _))) => MetaDone::ready(job()),
            },
            None => MetaDone::ready(job()),
        }
    }
}

/// The outcome of a submitted metadata change, once it is committed.
#[derive(Debug)]
#[must_use = "a metadata change is durable only once its commit is awaited"]
pub(crate) struct MetaDone(Pending);

#[derive(Debug)]
enum Pending {
    Ready(Result<(), EngineError>),
    Waiting(oneshot::Receiver<Result<(), EngineError>>),
}

impl MetaDone {
    /// A change that needed no commit (or was committed already).
    pub(crate) fn ready(result: Result<(), EngineError>) -> Self {
        Self(Pending::Ready(result))
    }

    /// Waits for the commit.
    ///
    /// # Errors
    /// The commit's error, or a store error when the writer went away without answering.
    pub(crate) async fn wait(self) -> Result<(), EngineError> {
        match self.0 {
            Pending::Ready(result) => result,
            Pending::Waiting(rx) => rx
                .await
                .unwrap_or_else(|_| Err(EngineError::Store("store failure: the metadata writer stopped".into()))),
        }
    }

    /// Waits for every commit of `done`, in order; the first error, if any.
    pub(crate) async fn all(done: Vec<Self>) -> Result<(), EngineError> {
        let mut first = Ok(());
        for one in done {
            let result = one.wait().await;
            if first.is_ok() {
                first = result;
            }
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[tokio::test]
    async fn jobs_commit_in_submission_order_off_the_caller() {
        let writer = MetaWriter::start();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let caller = std::thread::current().id();
        let done: Vec<MetaDone> = (0..50)
            .map(|i| {
                let seen = Arc::clone(&seen);
                writer.submit(Box::new(move || {
                    assert_ne!(std::thread::current().id(), caller);
                    seen.lock().unwrap().push(i);
                    if i == 7 { Err(EngineError::Store("seven".into())) } else { Ok(()) }
                }))
            })
            .collect();
        let result = MetaDone::all(done).await;
        assert!(matches!(result, Err(EngineError::Store(ref text)) if text == "seven"), "{result:?}");
        assert_eq!(*seen.lock().unwrap(), (0..50).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_ready_outcome_needs_no_writer() {
        assert!(MetaDone::ready(Ok(())).wait().await.is_ok());
        assert!(MetaDone::all(Vec::new()).await.is_ok());
    }
}
