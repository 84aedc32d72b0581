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
    let broker = match Broker::with_store(config.broker_config(), Arc::clone(&store), recovery.queues) {
        Ok(broker) => broker,
        Err(error) => {
            // Opening the log took its clean-stop mark. Dropped open, the log would leave none,
            // and the next start would recover as after a crash (every recovered message of a
            // classic queue redelivered) although nothing ran. Nothing ran, so the log closes
            // as the last run left it: clean after a clean stop, unclean after a crash, whose
            // redeliveries the next start still owes.
            let closed = if after_crash { store.log.close_unclean() } else { store.log.close() };
            if let Err(close) = closed {
                tracing::error!(error = %close, "closing the message log after a failed restore");
            }
            return Err(anyhow::Error::new(error).context("restoring the broker's durable state"));
        }
    };
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::Parser;

    use super::*;
    use crate::config::{Cli, FileConfig};

    /// A metadata store whose `queues` table holds a row no decoder reads. The last run's
    /// metadata writer thread may still hold the file for a moment after its runtime is gone.
    fn corrupt_the_metadata(data_dir: &std::path::Path) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let db = loop {
            match redb::Database::open(data_dir.join("meta.redb")) {
                Err(redb::DatabaseError::DatabaseAlreadyOpen) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                opened => break opened.unwrap(),
            }
        };
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(redb::TableDefinition::<&[u8], &[u8]>::new("queues")).unwrap();
            table.insert(&[0xff_u8][..], &[][..]).unwrap();
        }
        txn.commit().unwrap();
    }

    /// Opens the data directory, optionally closes its log cleanly, corrupts the metadata, and
    /// returns whether a start after the failed restore recovers as after a crash. Each start
    /// runs in a runtime of its own, dropped with its queue tasks as a process would end.
    fn after_a_failed_restore(close_cleanly: bool) -> bool {
        let runtime = || tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().to_str().unwrap();
        let config =
            Config::resolve(&Cli::parse_from(["charon", "--data-dir", data_dir]), FileConfig::default()).unwrap();
        runtime().block_on(async {
            let (_broker, store, _lock) = open(&config).unwrap();
            if close_cleanly {
                store.log.close().unwrap();
            }
            // Otherwise dropped open, as a crash leaves it.
        });
        corrupt_the_metadata(dir.path());
        let failed = runtime().block_on(async { open(&config).err().unwrap() });
        assert!(format!("{failed:#}").contains("restoring the broker's durable state"), "{failed:#}");
        let log_dir = DataDir::open(dir.path()).unwrap().log_dir();
        let (_log, recovery) = MessageLog::open(&log_dir, LogOptions::default()).unwrap();
        recovery.after_crash
    }

    #[test]
    fn a_restore_that_fails_leaves_the_log_as_the_last_run_left_it() {
        assert!(!after_a_failed_restore(true), "after a clean stop the next start is not after a crash");
        assert!(after_a_failed_restore(false), "after a crash the next start still recovers as after one");
    }
}
