//! Every case-run as its own named test, for a `harness = false` test target.
//!
//! [`Harness::run`] hands the catalogue to libtest-mimic, which parses the usual `cargo test`
//! arguments, so a failure names the case and the usual filters work:
//!
//! ```text
//! cargo test -p charon --test conformance -- dlx.routing      # the dlx.routing.* cases
//! cargo test -p charon --test conformance -- dlx_routing      # the cases of cases/dlx_routing.rs
//! cargo test -p charon --test conformance -- --exact 'dlx.routing.missing_exchange[classic,091>10]'
//! cargo test -p charon --test conformance -- --list
//! ```
//!
//! Each test is listed as `[area] name`: the area is the module under `cases/` that defines the
//! case, the name is the case name with its variant suffix, exactly as the CLI prints it. The
//! broker is started once, on the first test that runs (`--list` starts nothing), and every test
//! shares it, as the CLI's run does; cases tagged `serial` run alone.

use crate::{
    runner::RunConfig,
    session::{Planned, Session, plan},
};
use libtest_mimic::{Arguments, Completion, Failed, Trial};
use std::{
    any::Any,
    panic::{AssertUnwindSafe, catch_unwind},
    process::ExitCode,
    sync::{Arc, Mutex, OnceLock, RwLock},
    time::Duration,
};

/// Test threads when neither `--test-threads` nor `RUST_TEST_THREADS` says: the CLI's default
/// `--jobs`. Cases mostly wait on the broker, so more of them than cores run well.
const DEFAULT_THREADS: usize = 4;

/// How long dropping the shared runtime waits for the cases' leftover tasks.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A started broker: where it listens, and whatever keeps it running until the tests are done.
pub struct Target {
    config: RunConfig,
    _guard: Box<dyn Any + Send + Sync>,
}

impl Target {
    /// `config` says where the broker listens; `guard` is dropped (stopping the broker, when
    /// it owns the process) after the last test.
    pub fn new(config: RunConfig, guard: impl Any + Send + Sync) -> Self {
        Self { config, _guard: Box::new(guard) }
    }
}

/// What a test whose case is a [deliberate difference](crate::Case::deliberate) reports when
/// the case fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deliberate {
    /// It fails: the broker is Charon, which must behave as the case asserts.
    MustPass,
    /// It is ignored, with the difference as the reason: the broker is RabbitMQ, which does
    /// what the case deliberately does not accept.
    MayDiffer,
}

/// The catalogue as libtest-mimic trials.
#[derive(Debug, Clone, Copy)]
pub struct Harness {
    deliberate: Deliberate,
}

impl Default for Harness {
    fn default() -> Self {
        Self::new()
    }
}

impl Harness {
    /// A harness for Charon: every case must pass, deliberate differences included.
    pub fn new() -> Self {
        Self { deliberate: Deliberate::MustPass }
    }

    /// A harness for a reference broker: a deliberate difference that fails is reported as
    /// ignored, with the reason, instead of failing.
    #[must_use]
    pub fn deliberate_differences_allowed(mut self) -> Self {
        self.deliberate = Deliberate::MayDiffer;
        self
    }

    /// Parses the test arguments, runs the selected cases against the broker `start` brings
    /// up (called once, when the first selected test runs), and returns the exit code.
    pub fn run<S>(self, start: S) -> ExitCode
    where
        S: FnOnce() -> Result<Target, String> + Send + 'static,
    {
        let args = arguments();
        let shared = Arc::new(Shared::new(Box::new(start), self.deliberate));
        let trials = plan(None)
            .into_iter()
            .map(|planned| {
                let shared = Arc::clone(&shared);
                trial(planned, move |planned| shared.run(planned))
            })
            .collect();
        let conclusion = libtest_mimic::run(&args, trials);
        // The trials are gone; this drops the runtime, then the broker.
        drop(shared);
        conclusion.exit_code()
    }

    /// Lists every case-run as a test that is ignored with `reason` when it would run: for a
    /// target whose broker is not configured.
    pub fn skip(self, reason: &'static str) -> ExitCode {
        let trials = plan(None)
            .into_iter()
            .map(|planned| trial(planned, move |_| Ok(Completion::ignored_with(reason))))
            .collect();
        libtest_mimic::run(&arguments(), trials).exit_code()
    }
}

/// The test for one case-run: named after it, of its area's kind, running `runner` on it.
fn trial(planned: Planned, runner: impl FnOnce(&Planned) -> Result<Completion, Failed> + Send + 'static) -> Trial {
    let name = planned.name().to_owned();
    let area = planned.area();
    Trial::ignorable_test(name, move || runner(&planned)).with_kind(area)
}

/// The `cargo test` arguments, with a thread count when they name none.
fn arguments() -> Arguments {
    with_default_threads(Arguments::from_args(), std::env::var("RUST_TEST_THREADS").ok().as_deref())
}

/// `--test-threads` if given, else `RUST_TEST_THREADS` (as libtest reads it), else
/// [`DEFAULT_THREADS`].
fn with_default_threads(mut args: Arguments, env: Option<&str>) -> Arguments {
    if args.test_threads.is_none() {
        args.test_threads = Some(env.and_then(|n| n.parse().ok()).filter(|&n| n > 0).unwrap_or(DEFAULT_THREADS));
    }
    args
}

type Start = Box<dyn FnOnce() -> Result<Target, String> + Send>;

/// What every trial shares: the broker, started by the first trial that runs.
struct Shared {
    start: Mutex<Option<Start>>,
    live: OnceLock<Result<Live, String>>,
    /// Held for reading by every case-run, for writing by a serial one.
    exclusive: RwLock<()>,
    deliberate: Deliberate,
}

/// The started broker and the runtime the cases run on.
struct Live {
    runtime: Option<tokio::runtime::Runtime>,
    session: Session,
    _target: Target,
}

impl Drop for Live {
    fn drop(&mut self) {
        // A case's leftover task (a client's reader on a socket the broker never closes) must
        // not hold the test binary open.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(SHUTDOWN_GRACE);
        }
    }
}

impl Shared {
    fn new(start: Start, deliberate: Deliberate) -> Self {
        Self { start: Mutex::new(Some(start)), live: OnceLock::new(), exclusive: RwLock::new(()), deliberate }
    }

    /// The started broker; the first call starts it, and every call after a failed start
    /// returns the same error.
    fn live(&self) -> Result<&Live, &str> {
        self.live
            .get_or_init(|| {
                let start = self.start.lock().ok().and_then(|mut start| start.take());
                let start = start.ok_or("the broker was started before")?;
                let target = catch_unwind(AssertUnwindSafe(start))
                    .map_err(|panic| format!("starting the broker panicked: {}", panic_text(&*panic)))??;
                let session = Session::new(&target.config).map_err(|e| e.to_string())?;
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("tokio runtime: {e}"))?;
                Ok(Live { runtime: Some(runtime), session, _target: target })
            })
            .as_ref()
            .map_err(String::as_str)
    }

    /// Runs one case-run: `Ok` when it passed, `Err` with the case's own error when it failed.
    fn run(&self, planned: &Planned) -> Result<Completion, Failed> {
        let live = self.live().map_err(|e| format!("the broker did not start: {e}"))?;
        let runtime = live.runtime.as_ref().ok_or("the runtime is shut down")?;
        // A case that failed while holding the lock poisons it; the others still run.
        let outcome = if planned.is_serial() {
            let _alone = self.exclusive.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            runtime.block_on(live.session.run(planned))
        } else {
            let _shared = self.exclusive.read().unwrap_or_else(std::sync::PoisonError::into_inner);
            runtime.block_on(live.session.run(planned))
        };
        match (outcome.error, outcome.deliberate, self.deliberate) {
            (None, _, _) => Ok(Completion::Completed),
            (Some(error), Some(why), Deliberate::MayDiffer) => {
                Ok(Completion::ignored_with(format!("deliberate difference ({why}): {error}")))
            }
            (Some(error), _, _) => Err(error.into()),
        }
    }
}

/// The message of a panic payload (`panic!` with a literal or with a format).
fn panic_text(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use super::*;

    fn shared(start: impl FnOnce() -> Result<Target, String> + Send + 'static, deliberate: Deliberate) -> Shared {
        Shared::new(Box::new(start), deliberate)
    }

    /// The failure of a test that must fail (`Completion` has no `Debug` for `unwrap_err`).
    fn failure(result: Result<Completion, Failed>) -> Failed {
        match result {
            Err(failed) => failed,
            Ok(_) => panic!("the test passed or was ignored"),
        }
    }

    fn one(name: &str) -> Planned {
        let mut planned = plan(Some(name));
        assert_eq!(planned.len(), 1, "{name} names one case-run");
        planned.remove(0)
    }

    #[test]
    fn a_trial_is_named_after_the_case_run_and_filtered_by_name_or_area() {
        let trials: Vec<Trial> = plan(Some("dlx.routing.missing_exchange["))
            .into_iter()
            .map(|p| trial(p, |_| Ok(Completion::Completed)))
            .collect();
        assert_eq!(trials.len(), 8);
        assert_eq!(trials[1].name(), "dlx.routing.missing_exchange[classic,091>10]");
        assert_eq!(trials[1].kind(), "dlx_routing");
        for filter in ["dlx_routing", "dlx.routing", "missing_exchange[classic"] {
            let args = Arguments::from_iter(["conformance", filter]);
            assert!(!args.is_filtered_out(&trials[1]), "{filter} selects it");
        }
        let args = Arguments::from_iter(["conformance", "dlx_history"]);
        assert!(args.is_filtered_out(&trials[1]));
        let exact = Arguments::from_iter(["conformance", "--exact", "dlx.routing.missing_exchange[classic,091>10]"]);
        assert!(!exact.is_filtered_out(&trials[1]));
        assert!(exact.is_filtered_out(&trials[0]));
    }

    #[test]
    fn a_failing_case_fails_its_test_with_the_case_error() {
        // Nothing listens on port 1: the case fails at its first connection.
        let s = shared(
            || Ok(Target::new(RunConfig { url: "amqp://127.0.0.1:1/".to_owned(), ..Default::default() }, ())),
            Deliberate::MustPass,
        );
        let error = failure(s.run(&one("returns.non_mandatory_dropped_silently")));
        let message = error.message().unwrap();
        assert!(message.contains("onnect") || message.contains("refused"), "{message}");
    }

    #[test]
    fn the_broker_starts_once_and_a_failed_start_fails_every_test() {
        let starts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&starts);
        let s = shared(
            move || {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Err("no binary".to_owned())
            },
            Deliberate::MustPass,
        );
        let planned = one("returns.non_mandatory_dropped_silently");
        for _ in 0..2 {
            let error = failure(s.run(&planned));
            assert_eq!(error.message(), Some("the broker did not start: no binary"));
        }
        assert_eq!(starts.load(std::sync::atomic::Ordering::SeqCst), 1);
        let panicking = shared(|| panic!("port taken"), Deliberate::MustPass);
        let error = failure(panicking.run(&planned));
        assert_eq!(error.message(), Some("the broker did not start: starting the broker panicked: port taken"));
    }

    #[test]
    fn a_failing_deliberate_difference_is_ignored_only_against_a_reference_broker() {
        let deliberate = plan(None).into_iter().find(|p| p.case().deliberate.is_some()).expect("a deliberate case");
        let target = || Ok(Target::new(RunConfig { url: "amqp://127.0.0.1:1/".to_owned(), ..Default::default() }, ()));
        assert!(shared(target, Deliberate::MustPass).run(&deliberate).is_err());
        match shared(target, Deliberate::MayDiffer).run(&deliberate) {
            Ok(Completion::Ignored { reason: Some(reason) }) => {
                assert!(reason.starts_with("deliberate difference ("), "{reason}");
            }
            other => panic!("expected an ignored test, got {:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn the_thread_count_comes_from_the_arguments_then_the_environment_then_the_default() {
        let bare = || Arguments::from_iter(["conformance"]);
        assert_eq!(with_default_threads(bare(), None).test_threads, Some(DEFAULT_THREADS));
        assert_eq!(with_default_threads(bare(), Some("2")).test_threads, Some(2));
        assert_eq!(with_default_threads(bare(), Some("zero")).test_threads, Some(DEFAULT_THREADS));
        assert_eq!(with_default_threads(bare(), Some("0")).test_threads, Some(DEFAULT_THREADS));
        let told = Arguments::from_iter(["conformance", "--test-threads", "1"]);
        assert_eq!(with_default_threads(told, Some("2")).test_threads, Some(1));
    }
}
