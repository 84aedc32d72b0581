//! The catalogue against the broker named by `CONFORMANCE_URL` (RabbitMQ, to check the cases
//! themselves), one test per case-run (`conformance::harness`; `harness = false`):
//!
//! `CONFORMANCE_URL=amqp://guest:guest@127.0.0.1:5682/ cargo test -p conformance --test reference`
//!
//! Filters work as for any test target (`-- dlx.routing`, `-- dlx_routing`, `-- --list`). The
//! HTTP API and Prometheus are found by RabbitMQ's port convention (the AMQP port plus 10000
//! and plus 10020). A deliberate difference that fails is reported as ignored, with why.
//! Without `CONFORMANCE_URL` every test is ignored. (`cargo test` runs the catalogue against
//! Charon itself through `tests/conformance.rs`.)

use conformance::{Harness, RunConfig, Target};

fn main() -> std::process::ExitCode {
    let harness = Harness::new().deliberate_differences_allowed();
    match std::env::var("CONFORMANCE_URL") {
        Ok(url) => harness.run(move || Ok(Target::new(RunConfig { url, ..Default::default() }, ()))),
        Err(_) => harness.skip("set CONFORMANCE_URL to the broker to test"),
    }
}
