//! Command-line runner: `conformance --url amqp://guest:guest@127.0.0.1:5682/`.

use clap::Parser;
use std::{process::ExitCode, time::Duration};

/// Runs Charon's AMQP conformance cases against a broker.
#[derive(Parser, Debug)]
#[command(name = "conformance", version, about)]
struct Args {
    /// Broker URL.
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/")]
    url: String,
    /// Run only cases whose name contains this substring.
    #[arg(long)]
    filter: Option<String>,
    /// Print the selected case names (with descriptions) and exit.
    #[arg(long)]
    list: bool,
    /// Cases run concurrently.
    #[arg(long, default_value_t = 4)]
    jobs: usize,
    /// Per-case timeout in seconds.
    #[arg(long, default_value_t = 15)]
    timeout: u64,
    /// HTTP management API base URL (default: the AMQP port + 10000, e.g. http://127.0.0.1:15672).
    #[arg(long)]
    http_url: Option<String>,
    /// Prometheus URL (default: http://<host>:<AMQP port + 10020>/metrics).
    #[arg(long)]
    metrics_url: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if args.list {
        for name in conformance::runner::list(args.filter.as_deref()) {
            println!("{name}");
        }
        return ExitCode::SUCCESS;
    }
    let config = conformance::RunConfig {
        url: args.url,
        filter: args.filter,
        jobs: args.jobs,
        case_timeout: Duration::from_secs(args.timeout),
        http_url: args.http_url,
        metrics_url: args.metrics_url,
    };
    let summary = conformance::run_with(config, |o| println!("{o}")).await;
    for o in summary.outcomes.iter().filter(|o| o.differs()) {
        println!("{o}");
    }
    println!("{}", summary.closing_line());
    if summary.failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
