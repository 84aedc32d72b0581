//! The whole conformance catalogue against the real binary on an ephemeral port.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_catalogue_passes_against_charon() {
    // RabbitMQ 4.0.5's default configuration logs SASL ANONYMOUS in as guest; the catalogue
    // expects that, so Charon runs with the same setting (it is off unless configured).
    let charon = support::Charon::start_with(&["--anonymous-user", "guest"]);
    let summary = conformance::run(conformance::RunConfig {
        url: format!("amqp://guest:guest@127.0.0.1:{}/", charon.port),
        http_url: Some(format!("http://127.0.0.1:{}", charon.http_port)),
        metrics_url: Some(format!("http://127.0.0.1:{}/metrics", charon.prometheus_port)),
        filter: std::env::var("CONFORMANCE_FILTER").ok(),
        jobs: 4,
        ..Default::default()
    })
    .await;
    assert!(summary.passed > 0, "no case ran: {summary}");
    assert_eq!(summary.failed, 0, "{summary}");
    // A deliberate difference asserts Charon's behaviour, so against Charon it must pass.
    assert_eq!(summary.deliberate, 0, "{summary}");
}
