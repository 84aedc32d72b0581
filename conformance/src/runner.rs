//! Selecting cases, running them concurrently with a timeout each, and summarising.

use crate::{broker::Broker, case::Case, cases, ctx::Ctx};
use futures_util::StreamExt;
use std::{
    fmt,
    time::{Duration, Instant},
};

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
    cases::all()
}

/// Expands variants and applies the filter: `(run name, case, variant)`.
fn selected(filter: Option<&str>) -> Vec<(String, Case, crate::Variant)> {
    let mut out = Vec::new();
    for case in all_cases() {
        for &variant in case.variants {
            let name = if case.variants.len() > 1 {
                format!("{}{}", case.name, variant.suffix())
            } else {
                case.name.to_owned()
            };
            if filter.is_none_or(|f| name.contains(f)) {
                out.push((name, case, variant));
            }
        }
    }
    out
}

/// Names of the cases a run with this filter would execute.
pub fn list(filter: Option<&str>) -> Vec<String> {
    selected(filter).into_iter().map(|(n, _, _)| n).collect()
}

/// Runs the selected cases and returns the summary.
pub async fn run(config: RunConfig) -> Summary {
    run_with(config, |_| {}).await
}

/// Runs the selected cases, calling `on_outcome` as each one finishes (for streaming output).
pub async fn run_with(config: RunConfig, mut on_outcome: impl FnMut(&CaseOutcome)) -> Summary {
    let mut summary = Summary::default();
    let broker = match Broker::parse(&config.url) {
        Ok(mut b) => {
            if let Some(http) = &config.http_url {
                b.http = http.trim_end_matches('/').to_owned();
            }
            if let Some(metrics) = &config.metrics_url {
                b.metrics = metrics.clone();
            }
            b
        }
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
    let run_id = format!("{:06x}", rand::random::<u32>() & 0xff_ffff);
    let timeout = config.case_timeout;
    let jobs = config.jobs.max(1);
    // Cases tagged `serial` (they read broker-wide counters) run after all others, one at a time.
    let (serial, parallel): (Vec<_>, Vec<_>) = selected(config.filter.as_deref())
        .into_iter()
        .enumerate()
        .partition(|(_, (_, case, _))| case.tags.contains(&"serial"));
    for (batch, jobs) in [(parallel, jobs), (serial, 1)] {
        let mut stream = futures_util::stream::iter(batch)
            .map(|(index, (name, case, variant))| {
                let ctx = Ctx::new(broker.clone(), case.name, index, &run_id, variant);
                run_one(name, case, ctx, timeout)
            })
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

async fn run_one(name: String, case: Case, ctx: Ctx, timeout: Duration) -> CaseOutcome {
    let start = Instant::now();
    let handle = tokio::spawn((case.run)(ctx.clone()));
    let abort = handle.abort_handle();
    let error = match tokio::time::timeout(timeout, handle).await {
        Ok(Ok(Ok(()))) => None,
        Ok(Ok(Err(e))) => Some(e.to_string()),
        Ok(Err(join)) => Some(format!("case panicked: {join}")),
        Err(_) => {
            abort.abort();
            Some(format!("timed out after {} s", timeout.as_secs()))
        }
    };
    let duration = start.elapsed();
    cleanup(&ctx).await;
    CaseOutcome { name, error, duration, deliberate: case.deliberate }
}

/// Closes the case's amqprs connections and deletes every queue and exchange it named.
async fn cleanup(ctx: &Ctx) {
    for conn in ctx.take_amqprs_connections() {
        if conn.is_open() {
            let _ = tokio::time::timeout(Duration::from_secs(3), conn.close()).await;
        }
    }
    for policy in ctx.tracked_policies() {
        let _ = ctx.delete_policy(&policy).await;
    }
    let queues = ctx.tracked_queues();
    let exchanges = ctx.tracked_exchanges();
    if queues.is_empty() && exchanges.is_empty() {
        return;
    }
    let work = async {
        let Ok((conn, mut ch)) = ctx.lapin_channel().await else {
            return;
        };
        for q in &queues {
            if ch.queue_delete(q.as_str().into(), Default::default()).await.is_err() {
                // A failed delete closes the channel; carry on with a fresh one.
                match conn.create_channel().await {
                    Ok(c) => ch = c,
                    Err(_) => return,
                }
            }
        }
        for x in &exchanges {
            if ch.exchange_delete(x.as_str().into(), Default::default()).await.is_err() {
                match conn.create_channel().await {
                    Ok(c) => ch = c,
                    Err(_) => return,
                }
            }
        }
        let _ = conn.close(200, "cleanup done".into()).await;
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), work).await;
}
