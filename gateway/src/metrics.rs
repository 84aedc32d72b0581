//! The Prometheus endpoint on RabbitMQ's paths (`rabbitmq_prometheus`, port 15692):
//! `/metrics`, `/metrics/per-object` and `/metrics/detailed` (see [`crate::prometheus`]).

use anyhow::Context;
use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::prometheus::{Scraper, Selection};

/// RabbitMQ's content type (the text format, version 0.0.4).
const TEXT: &str = "text/plain; version=0.0.4";

/// Installs the recorder and creates RabbitMQ's dead-letter series at zero.
pub(crate) fn install() -> anyhow::Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new().install_recorder().context("installing the metrics recorder")?;
    charon_engine::metrics::register();
    Ok(handle)
}

/// The endpoint's routes.
pub(crate) fn router(scraper: Scraper) -> Router {
    Router::new()
        .route("/metrics", get(aggregated))
        .route("/metrics/per-object", get(per_object))
        .route("/metrics/detailed", get(detailed))
        .with_state(scraper)
}

async fn aggregated(State(scraper): State<Scraper>) -> impl IntoResponse {
    ([(CONTENT_TYPE, TEXT)], scraper.aggregated())
}

async fn per_object(State(scraper): State<Scraper>) -> impl IntoResponse {
    ([(CONTENT_TYPE, TEXT)], crate::prometheus::body(scraper.per_object()))
}

async fn detailed(State(scraper): State<Scraper>, RawQuery(query): RawQuery) -> impl IntoResponse {
    let selection = Selection::parse(query.as_deref());
    ([(CONTENT_TYPE, TEXT)], crate::prometheus::body(scraper.detailed(&selection)))
}

/// Serves the endpoint until `shutdown` turns true.
pub(crate) async fn serve(listener: TcpListener, scraper: Scraper, mut shutdown: watch::Receiver<bool>) {
    let stopped = async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    };
    if let Err(error) = axum::serve(listener, router(scraper)).with_graceful_shutdown(stopped).await {
        tracing::error!(%error, "the Prometheus endpoint failed");
    }
}
