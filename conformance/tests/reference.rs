//! Runs the whole suite against the broker named by `CONFORMANCE_URL`, on request:
//!
//! `CONFORMANCE_URL=amqp://guest:guest@127.0.0.1:5682/ cargo test -p conformance --test reference -- --ignored`
//!
//! (`cargo test` runs the catalogue against Charon itself through `tests/conformance.rs`.)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a broker: set CONFORMANCE_URL and pass --ignored"]
async fn suite_passes_against_configured_broker() {
    let url = std::env::var("CONFORMANCE_URL").expect("CONFORMANCE_URL must name the broker to test");
    let summary = conformance::run(conformance::RunConfig {
        url,
        filter: std::env::var("CONFORMANCE_FILTER").ok(),
        jobs: 4,
        ..Default::default()
    })
    .await;
    assert_eq!(summary.failed, 0, "{summary}");
}
