//! One run of the catalogue: the case-runs it plans and the broker session they share.
//!
//! The CLI ([`crate::run_with`]) and the `cargo test` harness ([`crate::harness`]) both plan with
//! [`plan`] and run each [`Planned`] case-run through one [`Session`], so a case behaves the same
//! whichever of them schedules it.

use crate::{
    broker::Broker,
    case::{Case, Variant},
    cases,
    ctx::Ctx,
    error::CaseError,
    runner::{CaseOutcome, RunConfig},
};
use std::time::{Duration, Instant};

/// One case in one protocol variant: the unit a runner schedules and a test harness names.
#[derive(Debug, Clone)]
pub struct Planned {
    name: String,
    area: &'static str,
    case: Case,
    variant: Variant,
    index: usize,
}

impl Planned {
    /// The case name, with [`Variant::suffix`] appended when the case runs in several variants
    /// (`dlx.routing.missing_exchange[quorum,091>10]`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The module under `conformance/src/cases/` that defines the case (`dlx_routing`).
    pub fn area(&self) -> &'static str {
        self.area
    }

    /// The case itself.
    pub fn case(&self) -> &Case {
        &self.case
    }

    /// The protocol combination this run of the case uses.
    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// Whether the case must run alone: cases tagged `serial` read broker-wide counters, which
    /// any other case running at the same time would move.
    pub fn is_serial(&self) -> bool {
        self.case.tags.contains(&"serial")
    }
}

/// Every case-run of the catalogue whose name contains `filter` (all when `None`), in registry
/// order with the [serial](Planned::is_serial) ones last.
///
/// A case-run's index, which keeps the resource names of concurrent cases apart, comes from its
/// place in the whole catalogue, so it does not depend on the filter.
pub fn plan(filter: Option<&str>) -> Vec<Planned> {
    let mut all = Vec::new();
    for (area, cases) in cases::by_area() {
        for case in cases {
            for &variant in case.variants {
                let name = if case.variants.len() > 1 {
                    format!("{}{}", case.name, variant.suffix())
                } else {
                    case.name.to_owned()
                };
                let index = all.len();
                all.push(Planned { name, area, case, variant, index });
            }
        }
    }
    all.retain(|p| filter.is_none_or(|f| p.name.contains(f)));
    // A stable sort: registry order within each group.
    all.sort_by_key(Planned::is_serial);
    all
}

/// What every case-run of one run shares: the broker, a run id that keeps this run's resource
/// names apart from any other run's on the same broker, and the per-case time limit.
#[derive(Debug, Clone)]
pub struct Session {
    broker: Broker,
    run_id: String,
    case_timeout: Duration,
}

impl Session {
    /// Parses the broker URL (with the HTTP API and Prometheus overrides) and draws a run id.
    pub fn new(config: &RunConfig) -> Result<Self, CaseError> {
        let mut broker = Broker::parse(&config.url)?;
        if let Some(http) = &config.http_url {
            http.trim_end_matches('/').clone_into(&mut broker.http);
        }
        if let Some(metrics) = &config.metrics_url {
            metrics.clone_into(&mut broker.metrics);
        }
        let run_id = format!("{:06x}", rand::random::<u32>() & 0xff_ffff);
        Ok(Self { broker, run_id, case_timeout: config.case_timeout })
    }

    /// The broker under test.
    pub fn broker(&self) -> &Broker {
        &self.broker
    }

    /// Runs one case-run, then deletes what it declared, whether it passed, failed or timed
    /// out. The case body is spawned (a panic in it is a failure, not a crash), so this must be
    /// awaited inside a Tokio runtime.
    pub async fn run(&self, planned: &Planned) -> CaseOutcome {
        let ctx = Ctx::new(self.broker.clone(), planned.case.name, planned.index, &self.run_id, planned.variant);
        let start = Instant::now();
        let handle = tokio::spawn((planned.case.run)(ctx.clone()));
        let abort = handle.abort_handle();
        let limit = planned.case.timeout.map_or(self.case_timeout, |t| t.max(self.case_timeout));
        let error = match tokio::time::timeout(limit, handle).await {
            Ok(Ok(Ok(()))) => None,
            Ok(Ok(Err(e))) => Some(e.to_string()),
            Ok(Err(join)) => Some(format!("case panicked: {join}")),
            Err(_) => {
                abort.abort();
                Some(format!("timed out after {} s", limit.as_secs()))
            }
        };
        let duration = start.elapsed();
        cleanup(&ctx).await;
        CaseOutcome { name: planned.name.clone(), error, duration, deliberate: planned.case.deliberate }
    }
}

/// Closes the case's amqprs connections and deletes every policy, operator policy, user, queue
/// and exchange it named.
async fn cleanup(ctx: &Ctx) {
    for conn in ctx.take_amqprs_connections() {
        if conn.is_open() {
            let _ = tokio::time::timeout(Duration::from_secs(3), conn.close()).await;
        }
    }
    for policy in ctx.tracked_policies() {
        let _ = ctx.delete_policy(&policy).await;
    }
    for policy in ctx.tracked_operator_policies() {
        let _ = ctx.delete_operator_policy(&policy).await;
    }
    for user in ctx.tracked_users() {
        let _ = ctx.delete_user(&user).await;
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use super::*;

    #[test]
    fn plan_expands_variants_and_names_the_area() {
        let runs: Vec<_> = plan(Some("dlx.routing.missing_exchange[")).into_iter().map(|p| (p.name, p.area)).collect();
        assert_eq!(runs.len(), 8, "{runs:?}");
        assert_eq!(runs[0], ("dlx.routing.missing_exchange[classic,091>091]".to_owned(), "dlx_routing"));
        assert_eq!(runs[7], ("dlx.routing.missing_exchange[quorum,10>10]".to_owned(), "dlx_routing"));
        let single = plan(Some("returns.non_mandatory_dropped_silently"));
        assert_eq!(single.len(), 1);
        assert_eq!(single[0].name(), "returns.non_mandatory_dropped_silently");
        assert_eq!(single[0].area(), "returns");
        assert_eq!(single[0].variant(), Variant::AMQP091);
    }

    #[test]
    fn plan_puts_serial_cases_last_and_keeps_indices_of_the_whole_catalogue() {
        let all = plan(None);
        let first_serial = all.iter().position(Planned::is_serial).expect("the catalogue has serial cases");
        assert!(first_serial > 0);
        assert!(all[first_serial..].iter().all(Planned::is_serial));
        let mut indices: Vec<_> = all.iter().map(|p| p.index).collect();
        indices.sort_unstable();
        assert_eq!(indices, (0..all.len()).collect::<Vec<_>>(), "indices are unique");
        // The filter does not renumber: a filtered case-run keeps its catalogue index.
        let last = all.last().unwrap();
        let alone = plan(Some(last.name()));
        assert_eq!(alone.iter().find(|p| p.name == last.name).map(|p| p.index), Some(last.index));
    }

    #[test]
    fn session_applies_the_endpoint_overrides() {
        let config = RunConfig {
            url: "amqp://u:p@127.0.0.1:5699/".to_owned(),
            http_url: Some("http://127.0.0.1:1234/".to_owned()),
            metrics_url: Some("http://127.0.0.1:4321/metrics".to_owned()),
            case_timeout: Duration::from_secs(7),
            ..Default::default()
        };
        let session = Session::new(&config).unwrap();
        assert_eq!(session.broker().port, 5699);
        assert_eq!(session.broker().http, "http://127.0.0.1:1234");
        assert_eq!(session.broker().metrics, "http://127.0.0.1:4321/metrics");
        assert_eq!(session.case_timeout, Duration::from_secs(7));
        assert_eq!(session.run_id.len(), 6);
        let bad = RunConfig { url: "http://x/".to_owned(), ..Default::default() };
        assert!(Session::new(&bad).unwrap_err().message().contains("only amqp:// URLs"));
    }
}
