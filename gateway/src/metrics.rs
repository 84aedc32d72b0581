//! The Prometheus endpoint: the `metrics` recorder is installed at start and its rendering is
//! served on `/metrics`, RabbitMQ's path (`rabbitmq_prometheus`, port 15692).

use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::routing::get;
use charon_engine::Broker;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Installs the recorder and creates RabbitMQ's dead-letter series at zero.
pub(crate) fn install() -> anyhow::Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new().install_recorder().context("installing the metrics recorder")?;
    charon_engine::metrics::register();
    Ok(handle)
}

/// Serves `/metrics` until `shutdown` turns true: the facade's series, then the per-queue
/// series read from the live queues.
pub(crate) async fn serve(
    listener: TcpListener,
    handle: PrometheusHandle,
    broker: Arc<Broker>,
    mut shutdown: watch::Receiver<bool>,
) {
    let render = move || {
        let mut text = handle.render();
        text.push_str(&charon_engine::metrics::render_queue_counters(&broker));
        text.push_str(&charon_engine::metrics::render_resources(&broker));
        std::future::ready(text)
    };
    let app = Router::new().route("/metrics", get(render));
    let stopped = async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    };
    if let Err(error) = axum::serve(listener, app).with_graceful_shutdown(stopped).await {
        tracing::error!(%error, "the Prometheus endpoint failed");
    }
}
