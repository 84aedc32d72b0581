//! `charon`: the broker binary. Configuration, listeners and wiring only; the broker lives in
//! the engine and protocol crates.

mod cluster;
mod config;
mod ctl;
mod definitions;
mod listener;
mod logging;
mod metrics;
mod prometheus;
mod resources;
mod running;
mod storage;
mod tls;

use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use tokio::sync::watch;

use crate::config::{Cli, Config};
use crate::running::Running;

/// How long a stop waits for the queues to hand the log their last records (see
/// [`charon_engine::Broker::flush_queues`]).
const FLUSH_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// jemalloc instead of glibc's malloc: glibc kept what each thread's arena had freed (92 MB
/// RSS after a few benchmark runs against 12 MB with jemalloc, 336 MB after a 100-queue
/// fanout), and its per-thread arenas held most of the memory a long queue costs. The
/// settings (one arena, pages returned after a second) are in `.cargo/config.toml`.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(config::Command::Ctl(args)) = &cli.command {
        return match ctl::run(args) {
            Ok(lines) => {
                lines.iter().for_each(|line| println!("{line}"));
                Ok(())
            }
            Err(error) => {
                eprintln!("Error: {error:#}");
                std::process::exit(1);
            }
        };
    }
    let config = Config::load(&cli)?;
    if let Some(name) = &config.node_name {
        charon_model::set_node_name(name.clone());
    }
    logging::init(&config.log_level, config.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.worker_threads)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(run(config))
}

async fn run(config: Config) -> anyhow::Result<()> {
    // Certificates first: a bad file stops the start before anything listens.
    let acceptors =
        config.tls.as_ref().map(tls::Acceptors::load).transpose().context("loading the TLS certificates")?;
    let metrics_handle = metrics::install()?;
    let (broker, store, _data_dir) = storage::open(&config)?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let mut running = Running::default();
    let started = start(&config, &broker, &store, acceptors, metrics_handle, &shutdown_rx, &mut running).await;
    match &started {
        Ok(()) => {
            wait_for_signal().await;
            tracing::info!("shutting down: closing connections with 320 CONNECTION_FORCED");
        }
        // What started stops as on a signal, so that the log closes cleanly: dropped open, it
        // would make the next start recover as after a crash (every recovered message of a
        // classic queue redelivered) although nothing crashed.
        // (The error itself is printed as the process exits.)
        Err(_) => tracing::error!("the start failed; stopping what started"),
    }
    let _ = shutdown_tx.send(true);
    let drained = running.stop().await;
    // The connections' last words to their queues (requeues, and their log records) are in
    // the queues' mailboxes; each queue hands its records to the log before the log closes.
    // Only then is the stop clean (see `charon_store::segment_log::MessageLog::close`).
    // A queue stuck behind a read that never ends must not hold the stop: past the grace
    // period the stop is not clean.
    let flushed = tokio::time::timeout(FLUSH_GRACE, broker.flush_queues()).await.is_ok();
    let closed = if drained && flushed {
        store.log.close().context("flushing the message log")
    } else {
        tracing::warn!(drained, flushed, "the stop was not clean: the next start recovers as after a crash");
        store.log.close_unclean().context("flushing the message log")
    };
    started.and(closed)
}

/// Loads the definitions, starts the resource monitor and binds and serves every listener,
/// registering each task in `running` as it starts.
async fn start(
    config: &Config,
    broker: &Arc<charon_engine::Broker>,
    store: &Arc<charon_engine::persist::Persistence>,
    acceptors: Option<tls::Acceptors>,
    metrics_handle: metrics_exporter_prometheus::PrometheusHandle,
    shutdown_rx: &watch::Receiver<bool>,
    running: &mut Running,
) -> anyhow::Result<()> {
    if let Some(path) = &config.definitions {
        definitions::load(broker, path).await?;
    }
    if let Some(cluster) = &config.cluster {
        cluster::start(cluster, &config.data_dir, broker, running, shutdown_rx).await?;
    }
    resources::start(
        broker.resources(),
        store,
        config.data_dir.clone(),
        config.memory_watermark,
        config.disk_free_limit,
    )
    .context("starting the resource monitor")?;
    let settings = Arc::new(listener::Settings { amqp091: config.amqp091(), amqp10: config.amqp10() });
    for address in &config.listen {
        let listener = tokio::net::TcpListener::bind(address).await.with_context(|| format!("binding {address}"))?;
        let local = listener.local_addr().context("reading the bound address")?;
        // Tests and scripts read this line to learn an ephemeral port.
        println!("charon: amqp listening on {local}");
        tracing::info!(%local, "listening for AMQP");
        broker.listeners().add("amqp", local);
        running.listen(listener::accept_loop(
            listener,
            None,
            Arc::clone(broker),
            Arc::clone(&settings),
            shutdown_rx.clone(),
        ));
    }
    // The management port serves the web UI's pages in front of the JSON API (one router: the
    // same sessions and rate samples over HTTP and HTTPS).
    let management = charon_ui::app(Arc::clone(broker), charon_management::router(Arc::clone(broker)));
    charon_management::answer_forwarded(broker);
    if let (Some(tls), Some(acceptors)) = (&config.tls, &acceptors) {
        for address in &tls.listen {
            let listener =
                tokio::net::TcpListener::bind(address).await.with_context(|| format!("binding amqps to {address}"))?;
            let local = listener.local_addr().context("reading the bound address")?;
            // Tests and scripts read this line to learn an ephemeral port.
            println!("charon: amqps listening on {local}");
            tracing::info!(%local, "listening for AMQP over TLS");
            broker.listeners().add("amqp/ssl", local);
            running.listen(listener::accept_loop(
                listener,
                Some(acceptors.amqp.clone()),
                Arc::clone(broker),
                Arc::clone(&settings),
                shutdown_rx.clone(),
            ));
        }
        let listener = tokio::net::TcpListener::bind(&tls.https_listen)
            .await
            .with_context(|| format!("binding the HTTPS API to {}", tls.https_listen))?;
        let local = listener.local_addr().context("reading the HTTPS address")?;
        println!("charon: https listening on {local}");
        broker.listeners().add("https", local);
        running.serve(charon_management::serve_tls_router(
            listener,
            acceptors.https.clone(),
            management.clone().layer(axum::Extension(charon_ui::OverTls)),
            shutdown_rx.clone(),
        ));
    }
    // Before the management API: its line is the last one tests wait for.
    if let Some(address) = &config.zaqar_listen {
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| format!("binding the Zaqar gateway to {address}"))?;
        let local = listener.local_addr().context("reading the Zaqar address")?;
        println!("charon: zaqar listening on {local}");
        broker.listeners().add("http/zaqar", local);
        let settings = charon_zaqar::ZaqarConfig {
            data_dir: Some(config.data_dir.clone()),
            create_vhosts: config.zaqar_create_vhosts,
            auth: config.zaqar_auth,
        };
        let gateway = charon_zaqar::Zaqar::new(Arc::clone(broker), settings).context("opening the Zaqar metadata")?;
        running.serve(charon_zaqar::serve(listener, gateway, shutdown_rx.clone()));
    }
    let http = tokio::net::TcpListener::bind(&config.http_listen)
        .await
        .with_context(|| format!("binding the HTTP API to {}", config.http_listen))?;
    let local = http.local_addr().context("reading the HTTP address")?;
    println!("charon: http listening on {local}");
    broker.listeners().add("http", local);
    running.serve(charon_management::serve_router(http, management, shutdown_rx.clone()));
    let prometheus = tokio::net::TcpListener::bind(&config.prometheus_listen)
        .await
        .with_context(|| format!("binding the Prometheus endpoint to {}", config.prometheus_listen))?;
    let local = prometheus.local_addr().context("reading the Prometheus address")?;
    println!("charon: prometheus listening on {local}");
    broker.listeners().add("http/prometheus", local);
    let identity = prometheus::Identity::load(&config.data_dir).context("reading the cluster's permanent id")?;
    let scraper = prometheus::Scraper::new(Arc::clone(broker), metrics_handle, identity);
    running.serve(metrics::serve(prometheus, scraper, shutdown_rx.clone()));
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut terminate) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}
