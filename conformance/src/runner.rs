//! Selecting cases, running them concurrently with a timeout each, and summarising.

use crate::{
    case::Case,
    cases,
    session::{Planned, Session, plan},
};
use futures_util::StreamExt;
use std::{fmt, time::Duration};

/// How to run the suite.
///
/// `RunConfig { url, filter: None, jobs: 4, ..Default::default() }` is the usual shape.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Broker URL, `amqp://user:pass@host:port/vhost`.
    pub url: String,
    /// Run only cases whose (expanded) name contains this substring.
    pub filter: Option<String>,
    /// How many cases run at once (at least 1).
    pub jobs: usize,
    /// Wall-clock limit per case; a case still running then is a failure, not a hang.
    pub case_timeout: Duration,
    /// The HTTP management API (`http://host:port`); default: AMQP port + 10000.
    pub http_url: Option<String>,
    /// The Prometheus endpoint URL; default: `http://host:<AMQP port + 10020>/metrics`.
    pub metrics_url: Option<String>,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            url: "amqp://guest:guest@127.0.0.1:5672/".to_owned(),
            filter: None,
            jobs: 4,
            case_timeout: Duration::from_secs(15),
            http_url: None,
            metrics_url: None,
        }
    }
}

/// The result of one case run.
#[derive(Debug, Clone)]
pub struct CaseOutcome {
    /// Case name, with the variant suffix when the case runs in several variants.
    pub name: String,
    /// `None` when the case passed, else why it failed.
    pub error: Option<String>,
    /// Time the case body took (cleanup excluded).
    pub duration: Duration,
    /// Why the case deliberately differs from RabbitMQ 4.0.5, when it does ([`Case::deliberate`]).
    pub deliberate: Option<&'static str>,
}

impl CaseOutcome {
    /// Whether the case passed.
    pub fn passed(&self) -> bool {
        self.error.is_none()
    }

    /// Whether the case failed but is a documented, deliberate difference from RabbitMQ.
    pub fn differs(&self) -> bool {
        self.error.is_some() && self.deliberate.is_some()
    }

    /// Whether the case failed and is not a deliberate difference.
    pub fn failed(&self) -> bool {
        self.error.is_some() && self.deliberate.is_none()
    }
}

impl fmt::Display for CaseOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.error, self.deliberate) {
            (None, _) => write!(f, "ok    {} ({} ms)", self.name, self.duration.as_millis()),
            (Some(e), Some(why)) => write!(f, "DIFF  {} (deliberate: {why}): {e}", self.name),
            (Some(e), None) => write!(f, "FAIL  {}: {e}", self.name),
        }
    }
}

/// What a whole run produced.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Number of cases that passed.
    pub passed: usize,
    /// Number of cases that failed (including timeouts and a bad URL), deliberate
    /// differences excluded.
    pub failed: usize,
    /// Number of cases marked as deliberate differences that behaved like RabbitMQ 4.0.5
    /// does, not like Charon means to (they fail against RabbitMQ by design).
    pub deliberate: usize,
    /// Every outcome, in completion order.
    pub outcomes: Vec<CaseOutcome>,
}

impl fmt::Display for Summary {
    /// The failing lines, the deliberate differences, then `N passed, M failed`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for o in self.outcomes.iter().filter(|o| o.failed()) {
            writeln!(f, "{o}")?;
        }
        for o in self.outcomes.iter().filter(|o| o.differs()) {
            writeln!(f, "{o}")?;
        }
        write!(f, "{}", self.closing_line())
    }
}

impl Summary {
    /// `N passed, M failed`, plus `, K deliberate differences` when there are any.
    pub fn closing_line(&self) -> String {
        if self.deliberate == 0 {
            format!("{} passed, {} failed", self.passed, self.failed)
        } else {
            format!("{} passed, {} failed, {} deliberate differences", self.passed, self.failed, self.deliberate)
        }
    }
}

/// Every case the crate knows, in registry order (unexpanded).
pub fn all_cases() -> Vec<Case> {
    cases::by_area().into_iter().flat_map(|(_, cases)| cases).collect()
}

/// Names of the cases a run with this filter would execute.
pub fn list(filter: Option<&str>) -> Vec<String> {
    plan(filter).into_iter().map(|p| p.name().to_owned()).collect()
}

/// Runs the selected cases and returns the summary.
pub async fn run(config: RunConfig) -> Summary {
    run_with(config, |_| {}).await
}

/// Runs the selected cases, calling `on_outcome` as each one finishes (for streaming output).
pub async fn run_with(config: RunConfig, mut on_outcome: impl FnMut(&CaseOutcome)) -> Summary {
    let mut summary = Summary::default();
    let session = match Session::new(&config) {
        Ok(session) => session,
        Err(e) => {
            let o = CaseOutcome {
                name: "config.url".to_owned(),
                error: Some(e.to_string()),
                duration: Duration::ZERO,
                deliberate: None,
            };
            on_outcome(&o);
            summary.failed = 1;
            summary.outcomes.push(o);
            return summary;
        }
    };
    let jobs = config.jobs.max(1);
    // Cases tagged `serial` (they read broker-wide counters) run after all others, one at a time.
    let (serial, parallel): (Vec<_>, Vec<_>) = plan(config.filter.as_deref()).into_iter().partition(Planned::is_serial);
    for (batch, jobs) in [(parallel, jobs), (serial, 1)] {
        let session = &session;
        let mut stream = futures_util::stream::iter(batch)
            .map(|planned| async move { session.run(&planned).await })
            .buffer_unordered(jobs);
        while let Some(outcome) = stream.next().await {
            if outcome.passed() {
                summary.passed += 1;
            } else if outcome.differs() {
                summary.deliberate += 1;
            } else {
                summary.failed += 1;
            }
            on_outcome(&outcome);
            summary.outcomes.push(outcome);
        }
    }
    summary
}
