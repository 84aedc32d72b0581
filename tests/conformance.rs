//! The conformance catalogue against the real binary on an ephemeral port, one test per
//! case-run (`conformance::harness`; this target has `harness = false`).
//!
//! ```text
//! cargo test -p charon --test conformance                      # every case-run
//! cargo test -p charon --test conformance -- dlx.routing       # by case name
//! cargo test -p charon --test conformance -- dlx_routing       # by area (file under cases/)
//! cargo test -p charon --test conformance -- --list
//! ```
//!
//! One `charon` serves every test; it starts with the first test that runs. A deliberate
//! difference from RabbitMQ asserts Charon's behaviour, so here it must pass like any case.

mod support;

use conformance::{Harness, RunConfig, Target};

fn main() -> std::process::ExitCode {
    Harness::new().run(|| {
        // Charon's defaults, as RabbitMQ's (SASL ANONYMOUS logs in as guest from loopback).
        let charon = support::Charon::start();
        let config = RunConfig {
            url: format!("amqp://guest:guest@127.0.0.1:{}/", charon.port),
            http_url: Some(format!("http://127.0.0.1:{}", charon.http_port)),
            metrics_url: Some(format!("http://127.0.0.1:{}/metrics", charon.prometheus_port)),
            ..Default::default()
        };
        Ok(Target::new(config, charon))
    })
}
