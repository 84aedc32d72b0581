//! `charon`: the broker binary. Configuration, listeners and wiring only; the broker lives in
//! the engine and protocol crates.

mod config;
mod ctl;
mod definitions;
mod listener;
mod logging;
mod metrics;
mod prometheus;
mod resources;
mod storage;
mod tls;

use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use tokio::sync::watch;

use crate::config::{Cli, Config};

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
    if let Some(path) = &config.definitions {
        definitions::load(&broker, path).await?;
    }
    resources::start(
        broker.resources(),
        &store,
        config.data_dir.clone(),
        config.memory_watermark,
        config.disk_free_limit,
    )
    .context("starting the resource monitor")?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let settings = Arc::new(listener::Settings { amqp091: config.amqp091(), amqp10: config.amqp10() });
    let mut listeners = Vec::new();
    for address in &config.listen {
        let listener = tokio::net::TcpListener::bind(address).await.with_context(|| format!("binding {address}"))?;
        let local = listener.local_addr().context("reading the bound address")?;
        // Tests and scripts read this line to learn an ephemeral port.
        println!("charon: amqp listening on {local}");
        tracing::info!(%local, "listening for AMQP");
        broker.listeners().add("amqp", local);
        listeners.push(tokio::spawn(listener::accept_loop(
            listener,
            None,
            Arc::clone(&broker),
            Arc::clone(&settings),
            shutdown_rx.clone(),
        )));
    }
    // The management port serves the web UI's pages in front of the JSON API (one router: the
    // same sessions and rate samples over HTTP and HTTPS).
    let management = charon_ui::app(Arc::clone(&broker), charon_http::router(Arc::clone(&broker)));
    let mut https = None;
    if let (Some(tls), Some(acceptors)) = (&config.tls, &acceptors) {
        for address in &tls.listen {
            let listener =
                tokio::net::TcpListener::bind(address).await.with_context(|| format!("binding amqps to {address}"))?;
            let local = listener.local_addr().context("reading the bound address")?;
            // Tests and scripts read this line to learn an ephemeral port.
            println!("charon: amqps listening on {local}");
            tracing::info!(%local, "listening for AMQP over TLS");
            broker.listeners().add("amqp/ssl", local);
            listeners.push(tokio::spawn(listener::accept_loop(
                listener,
                Some(acceptors.amqp.clone()),
                Arc::clone(&broker),
                Arc::clone(&settings),
                shutdown_rx.clone(),
            )));
        }
        let listener = tokio::net::TcpListener::bind(&tls.https_listen)
            .await
            .with_context(|| format!("binding the HTTPS API to {}", tls.https_listen))?;
        let local = listener.local_addr().context("reading the HTTPS address")?;
        println!("charon: https listening on {local}");
        broker.listeners().add("https", local);
        https = Some(tokio::spawn(charon_http::serve_tls_router(
            listener,
            acceptors.https.clone(),
            management.clone().layer(axum::Extension(charon_ui::OverTls)),
            shutdown_rx.clone(),
        )));
    }
    // Before the management API: its line is the last one tests wait for.
    let zaqar = match &config.zaqar_listen {
        Some(address) => {
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
            let gateway =
                charon_zaqar::Zaqar::new(Arc::clone(&broker), settings).context("opening the Zaqar metadata")?;
            Some(tokio::spawn(charon_zaqar::serve(listener, gateway, shutdown_rx.clone())))
        }
        None => None,
    };
    let http = tokio::net::TcpListener::bind(&config.http_listen)
        .await
        .with_context(|| format!("binding the HTTP API to {}", config.http_listen))?;
    let local = http.local_addr().context("reading the HTTP address")?;
    println!("charon: http listening on {local}");
    broker.listeners().add("http", local);
    let api = tokio::spawn(charon_http::serve_router(http, management, shutdown_rx.clone()));
    let prometheus = tokio::net::TcpListener::bind(&config.prometheus_listen)
        .await
        .with_context(|| format!("binding the Prometheus endpoint to {}", config.prometheus_listen))?;
    let local = prometheus.local_addr().context("reading the Prometheus address")?;
    println!("charon: prometheus listening on {local}");
    broker.listeners().add("http/prometheus", local);
    let identity = prometheus::Identity::load(&config.data_dir).context("reading the cluster's permanent id")?;
    let scraper = prometheus::Scraper::new(Arc::clone(&broker), metrics_handle, identity);
    let metrics = tokio::spawn(metrics::serve(prometheus, scraper, shutdown_rx.clone()));
    wait_for_signal().await;
    tracing::info!("shutting down: closing connections with 320 CONNECTION_FORCED");
    let _ = shutdown_tx.send(true);
    let mut drained = true;
    for handle in listeners {
        drained &= handle.await.unwrap_or(false);
    }
    let _ = api.await;
    if let Some(https) = https {
        let _ = https.await;
    }
    let _ = metrics.await;
    if let Some(zaqar) = zaqar {
        let _ = zaqar.await;
    }
    // The connections' last words to their queues (requeues, and their log records) are in
    // the queues' mailboxes; each queue hands its records to the log before the log closes.
    // Only then is the stop clean (see `charon_store::segment_log::MessageLog::close`).
    // A queue stuck behind a read that never ends must not hold the stop: past the grace
    // period the stop is not clean.
    let flushed = tokio::time::timeout(FLUSH_GRACE, broker.flush_queues()).await.is_ok();
    if drained && flushed {
        store.log.close().context("flushing the message log")?;
    } else {
        tracing::warn!(drained, flushed, "the stop was not clean: the next start recovers as after a crash");
        store.log.close_unclean().context("flushing the message log")?;
    }
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
