//! The Prometheus endpoint: the `metrics` recorder is installed at start and its rendering is
//! served on `/metrics`, RabbitMQ's path (`rabbitmq_prometheus`, port 15692).

use anyhow::Context;
use axum::Router;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Installs the recorder and creates RabbitMQ's dead-letter series at zero.
pub(crate) fn install() -> anyhow::Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new().install_recorder().context("installing the metrics recorder")?;
    charon_engine::metrics::register();
    Ok(handle)
}

/// Serves `/metrics` until `shutdown` turns true.
pub(crate) async fn serve(listener: TcpListener, handle: PrometheusHandle, mut shutdown: watch::Receiver<bool>) {
    let app = Router::new().route("/metrics", get(move || std::future::ready(handle.render())));
    let stopped = async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    };
    if let Err(error) = axum::serve(listener, app).with_graceful_shutdown(stopped).await {
        tracing::error!(%error, "the Prometheus endpoint failed");
    }
}
