//! `--definitions FILE` / `load_definitions`: RabbitMQ's definitions imported at start, once
//! the store is open and before anything listens, through the same import as
//! `POST /api/definitions` ([`charon_management::definitions::import`]).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use charon_engine::Broker;
use charon_management::definitions::import;

/// Imports `path`: a file, or every `.json` file of a directory in name order, as RabbitMQ's
/// `rabbit_definitions_import_local_filesystem` reads a directory.
///
/// # Errors
/// A file that cannot be read, is not a definitions document, or does not import: the start
/// stops with the file's name and RabbitMQ's reason.
pub(crate) async fn load(broker: &Broker, path: &Path) -> anyhow::Result<()> {
    let files = if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("reading the definitions directory {}", path.display()))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    for file in files {
        // Off the runtime's workers: a definitions file is read once, but can be large.
        let read = file.clone();
        let body = tokio::task::spawn_blocking(move || std::fs::read(&read))
            .await
            .context("reading the definitions file")?
            .with_context(|| format!("reading the definitions file {}", file.display()))?;
        let definitions = match import::parse(&body) {
            Ok(definitions) => definitions,
            Err(e) => bail!("importing definitions from {}: {e} (not a JSON object)", file.display()),
        };
        import::cluster(broker, &definitions, None)
            .await
            .with_context(|| format!("importing definitions from {}", file.display()))?;
        tracing::info!(file = %file.display(), "imported definitions");
    }
    Ok(())
}
