//! `charon-bench`: runs a named scenario against any AMQP broker URL and prints throughput,
//! latency at a fixed rate, the broker's CPU seconds and peak memory (given its pid), and the
//! lost and duplicated counts. With `--compare` (and `--compare2`) it alternates two (three)
//! brokers round by round and prints the median ratio of A to each of the others, so one run
//! puts Charon beside both reference RabbitMQs under the same conditions.
//!
//! ```text
//! charon-bench s1b --url amqp://guest:guest@127.0.0.1:5672/%2f --pid 1234 \
//!     --compare amqp://guest:guest@127.0.0.1:5683/%2f --pid2 5678 \
//!     --compare2 amqp://guest:guest@127.0.0.1:5682/%2f --pid3 9012 --rounds 3
//! ```

mod amqp091;
mod amqprs091;
mod amqprs_publish;
mod api_poll;
mod consumers;
mod raw091;
mod report;
mod scenarios;
mod seqs;
mod target;
mod zaqar_http;

use anyhow::{Result, bail};
use clap::Parser;

use report::{Outcome, advantage, median};
use scenarios::{Params, Scenario};
use target::Target;

/// Command line.
#[derive(Debug, Parser)]
#[command(about = "Charon's load generator: named scenarios against any AMQP broker, side by side")]
struct Cli {
    /// The scenarios to run, in order.
    #[arg(required = true, value_enum)]
    scenarios: Vec<Scenario>,
    /// Broker A.
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    url: String,
    /// Broker A's process id (CPU seconds and memory).
    #[arg(long)]
    pid: Option<u32>,
    /// Where S1's queue is declared for broker A, when not through `--url` (a cluster: the
    /// queue lives on this node, and A's clients reach it through theirs).
    #[arg(long)]
    home: Option<String>,
    /// Broker B, run alternately with A.
    #[arg(long)]
    compare: Option<String>,
    /// Broker B's process id.
    #[arg(long)]
    pid2: Option<u32>,
    /// Broker C, run after B in each round (needs `--compare`).
    #[arg(long, requires = "compare")]
    compare2: Option<String>,
    /// Broker C's process id.
    #[arg(long)]
    pid3: Option<u32>,
    /// Where S1's queue is declared for broker C (as `--home` for A).
    #[arg(long, requires = "compare2")]
    home3: Option<String>,
    /// Rounds (A, B, [C,] A, B, [C,] ...).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Messages per run (each scenario has its own default).
    #[arg(long)]
    messages: Option<u64>,
    /// Publish at this fixed rate (msg/s) and report latency; full speed otherwise.
    #[arg(long)]
    rate: Option<u64>,
    /// Leave the memory scenario's queue and its messages in place (to measure a restart with
    /// that backlog, or the bytes it takes on disk); other scenarios clean up regardless.
    #[arg(long)]
    keep: bool,
    /// Turn Nagle's algorithm off in the AMQP 1.0 client (S10); fe2o3 leaves it on.
    #[arg(long)]
    nodelay: bool,
    /// The AMQP 0.9.1 client the consumers run on (publishers run on lapin).
    #[arg(long, value_enum, default_value_t)]
    consumer: consumers::Client,
    /// The AMQP 0.9.1 client S1a's and S1b's publisher runs on (other scenarios publish with lapin).
    #[arg(long, value_enum, default_value_t)]
    publisher: consumers::Client,
    /// Broker A's management API, `http://user:password@host:port` (for `--poll` and the
    /// `api-queues` scenario).
    #[arg(long)]
    api: Option<String>,
    /// Broker B's management API.
    #[arg(long)]
    api2: Option<String>,
    /// Broker A's Zaqar gateway, `host:port` (for the `zaqar` scenario).
    #[arg(long)]
    zaqar: Option<String>,
    /// Broker B's Zaqar gateway.
    #[arg(long)]
    zaqar2: Option<String>,
    /// Broker C's management API.
    #[arg(long)]
    api3: Option<String>,
    /// Poll this API path (e.g. `/api/queues`) once a second while each run lasts.
    #[arg(long)]
    poll: Option<String>,
    /// How long a time-boxed scenario (`s1a-raw`) runs, seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// `s2-drain`: drop the page cache (root) between filling the queue and draining it.
    #[arg(long)]
    drop_caches: bool,
    /// The raw publisher's body size in bytes (`s1a-raw`, `s2-drain`).
    #[arg(long, default_value_t = 16)]
    body_size: usize,
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let api = |url: &Option<String>| url.as_deref().map(api_poll::ApiUrl::parse).transpose();
    let mut targets = vec![Target {
        url: cli.url.clone(),
        pid: cli.pid,
        api: api(&cli.api)?,
        zaqar: cli.zaqar.clone(),
        home: cli.home.clone(),
    }];
    if let Some(url) = cli.compare.clone() {
        targets.push(Target { url, pid: cli.pid2, api: api(&cli.api2)?, zaqar: cli.zaqar2.clone(), home: None });
    }
    if let Some(url) = cli.compare2.clone() {
        targets.push(Target { url, pid: cli.pid3, api: api(&cli.api3)?, zaqar: None, home: cli.home3.clone() });
    }
    let mut failed = false;
    for scenario in &cli.scenarios {
        let params = Params {
            messages: cli.messages.unwrap_or(scenario.default_messages()),
            rate: cli.rate,
            keep: cli.keep,
            nodelay: cli.nodelay,
            consumer: cli.consumer,
            publisher: cli.publisher,
            seconds: cli.seconds,
            drop_caches: cli.drop_caches,
            body_size: cli.body_size,
        };
        let name = format!("{scenario:?}").to_lowercase();
        let mut runs: Vec<Vec<Outcome>> = vec![Vec::new(); targets.len()];
        for round in 1..=cli.rounds.max(1) {
            for (side, target) in targets.iter().enumerate() {
                let label = LABELS.get(side).copied().unwrap_or("?");
                let poll = cli.poll.as_deref().zip(target.api.as_ref()).map(|(path, api)| api.at(path));
                let poller = poll.map(api_poll::Poller::start);
                let outcome = scenarios::run(target, *scenario, params).await?;
                println!("{name} round {round} {label}: {}", outcome.line());
                if let Some(polled) = poller.map(api_poll::Poller::finish) {
                    println!(
                        "  API polled {} times ({} failed), slowest answer {} ms",
                        polled.polls,
                        polled.failures,
                        polled.slowest.as_millis()
                    );
                }
                failed |= outcome.lost > 0 || outcome.duplicates > 0;
                if let Some(runs) = runs.get_mut(side) {
                    runs.push(outcome);
                }
            }
        }
        summarize(&name, &runs);
    }
    if failed {
        bail!("messages were lost or duplicated");
    }
    Ok(())
}

/// The brokers' labels in the order they run in a round.
const LABELS: [&str; 3] = ["A", "B", "C"];

/// Prints each broker's median and A's advantage over each other broker (the median of the
/// per-round ratios, so a slow hour affects both sides of a ratio alike).
fn summarize(name: &str, runs: &[Vec<Outcome>]) {
    let Some((a, others)) = runs.split_first() else { return };
    let Some(score) = a.first().map(|o| o.score) else { return };
    let values = |runs: &[Outcome]| runs.iter().map(|o| o.value).collect::<Vec<_>>();
    let median_a = median(&values(a));
    if others.iter().all(Vec::is_empty) {
        println!("{name}: median {median_a:.1} over {} runs", a.len());
        return;
    }
    let mut line = format!("{name}: median A {median_a:.1}");
    for (label, other) in LABELS.iter().skip(1).zip(others) {
        line += &format!(", median {label} {:.1}", median(&values(other)));
    }
    for (label, other) in LABELS.iter().skip(1).zip(others) {
        let per_round: Vec<f64> = a.iter().zip(other).map(|(a, o)| advantage(score, a.value, o.value)).collect();
        line += &format!("; A/{label} advantage: median of rounds {:.2}x", median(&per_round));
    }
    println!("{line}");
}
