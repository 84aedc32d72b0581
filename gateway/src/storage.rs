//! Opening the data directory: the lock, the metadata store and the message log, then the
//! broker restored from them.

use std::sync::Arc;

use anyhow::Context;
use charon_engine::Broker;
use charon_engine::persist::Persistence;
use charon_store::data_dir::DataDir;
use charon_store::meta::MetaStore;
use charon_store::segment_log::{FaultHook, LogOptions, MessageLog};

use crate::config::Config;

/// Opens (or creates) the data directory and recovers the broker from it. The returned
/// [`DataDir`] holds the directory's lock: keep it until the broker has stopped.
pub(crate) fn open(config: &Config) -> anyhow::Result<(Arc<Broker>, Arc<Persistence>, DataDir)> {
    let dir = DataDir::open(&config.data_dir)
        .with_context(|| format!("opening the data directory {}", config.data_dir.display()))?;
    let meta = MetaStore::open(&dir.meta_path()).context("opening the metadata store")?;
    let started = std::time::Instant::now();
    let (log, recovery) = MessageLog::open(&dir.log_dir(), log_options()).context("opening the message log")?;
    let messages: usize = recovery.queues.values().map(charon_store::segment_log::RecoveredQueue::len).sum();
    let after_crash = recovery.after_crash;
    tracing::info!(messages, after_crash, elapsed_ms = started.elapsed().as_millis(), "message log recovered");
    let store = Persistence::new(log, meta);
    let broker = Broker::with_store(config.broker_config(), Arc::clone(&store), recovery.queues)
        .context("restoring the broker's durable state")?;
    // The log's health is one cause of the disk alarm: publishers are blocked while it
    // cannot write.
    let resources = Arc::clone(broker.resources());
    store.log.set_health_listener(Box::new(move |failing| resources.set_log_failing(failing)));
    // A writer behind the publishers holds them until it catches up (bounded memory in front
    // of a slow disk).
    let resources = Arc::clone(broker.resources());
    store.log.set_backlog_listener(Box::new(move |behind| resources.set_store_behind(behind)));
    Ok((broker, store, dir))
}

/// The log's settings. `CHARON_FAULT_FILE` names a file whose existence makes every log write
/// fail with ENOSPC: the hook the end-to-end disk-full test uses (unset in production, where it
/// costs nothing).
fn log_options() -> LogOptions {
    let fault = std::env::var_os("CHARON_FAULT_FILE").map(|path| {
        let path = std::path::PathBuf::from(path);
        let hook: FaultHook = Arc::new(move || path.exists().then(|| std::io::Error::from_raw_os_error(28)));
        hook
    });
    LogOptions { fault, ..LogOptions::default() }
}
