//! Queue metadata: Zaqar's free-form JSON object per queue, kept by the gateway (the engine's
//! queues have fixed arguments) and written to `<data dir>/zaqar/metadata.json` before a change
//! is answered, so that it survives restarts with the queues.
//!
//! The whole document is small (Zaqar caps a queue's metadata at 64 KiB, and only queues
//! with metadata are in it); a change rewrites it atomically (write, fsync, rename) on the
//! blocking pool, one change at a time.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::error::ZaqarError;

/// One queue's metadata.
pub(crate) type Metadata = Map<String, Value>;

/// Every project's queues' metadata.
type Document = BTreeMap<String, BTreeMap<String, Metadata>>;

/// Queue metadata, in memory and on disk.
#[derive(Debug)]
pub(crate) struct MetadataStore {
    state: parking_lot::Mutex<Document>,
    /// Serialises writes, so that the file ends with the last change.
    writing: tokio::sync::Mutex<()>,
    path: Option<PathBuf>,
}

/// Why the metadata could not be read at start.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    /// Reading the file failed.
    #[error("reading {0}: {1}")]
    Read(PathBuf, std::io::Error),
    /// The file is not a metadata document.
    #[error("{0} is not a Zaqar metadata document: {1}")]
    Parse(PathBuf, serde_json::Error),
}

impl MetadataStore {
    /// Loads the metadata kept under `data_dir` (none without a data directory).
    ///
    /// # Errors
    /// When the file exists but cannot be read or parsed.
    pub(crate) fn open(data_dir: Option<PathBuf>) -> Result<Self, MetadataError> {
        let path = data_dir.map(|dir| dir.join("zaqar").join("metadata.json"));
        let document = match &path {
            Some(path) => match std::fs::read(path) {
                Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| MetadataError::Parse(path.clone(), e))?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Document::new(),
                Err(e) => return Err(MetadataError::Read(path.clone(), e)),
            },
            None => Document::new(),
        };
        Ok(Self { state: parking_lot::Mutex::new(document), writing: tokio::sync::Mutex::new(()), path })
    }

    /// A queue's metadata (empty when it has none).
    pub(crate) fn get(&self, project: &str, queue: &str) -> Metadata {
        self.state.lock().get(project).and_then(|queues| queues.get(queue)).cloned().unwrap_or_default()
    }

    /// The queues of `project` whose `_dead_letter_queue` is `queue`.
    pub(crate) fn dead_letter_sources(&self, project: &str, queue: &str) -> Vec<String> {
        let state = self.state.lock();
        let Some(queues) = state.get(project) else { return Vec::new() };
        queues
            .iter()
            .filter(|(name, meta)| {
                name.as_str() != queue && meta.get("_dead_letter_queue").and_then(Value::as_str) == Some(queue)
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Replaces a queue's metadata (`None`: forgets it), on disk before returning.
    ///
    /// # Errors
    /// 503 when the file could not be written.
    pub(crate) async fn set(&self, project: &str, queue: &str, metadata: Option<Metadata>) -> Result<(), ZaqarError> {
        let _writing = self.writing.lock().await;
        let bytes = {
            let mut state = self.state.lock();
            match metadata {
                Some(meta) if !meta.is_empty() => {
                    state.entry(project.to_owned()).or_default().insert(queue.to_owned(), meta);
                }
                _ => {
                    let emptied = state.get_mut(project).map(|queues| {
                        queues.remove(queue);
                        queues.is_empty()
                    });
                    if emptied == Some(true) {
                        state.remove(project);
                    }
                }
            }
            self.path.as_ref().map(|_| serde_json::to_vec(&*state))
        };
        let (Some(path), Some(Ok(bytes))) = (self.path.clone(), bytes) else { return Ok(()) };
        tokio::task::spawn_blocking(move || write_atomically(&path, &bytes))
            .await
            .map_err(|e| ZaqarError::unavailable(format!("Metadata could not be written: {e}")))?
            .map_err(|e| ZaqarError::unavailable(format!("Metadata could not be written: {e}")))
    }
}

/// Writes `bytes` to `path` so that a crash leaves the old file or the new one.
fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or_else(|| std::path::Path::new("."));
    std::fs::create_dir_all(dir)?;
    let temporary = path.with_extension("json.tmp");
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn metadata_survives_a_reopen_and_forgetting_removes_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = MetadataStore::open(Some(dir.path().to_owned())).unwrap();
        let mut meta = Metadata::new();
        meta.insert("_max_claim_count".into(), 3.into());
        store.set("p", "q", Some(meta.clone())).await.unwrap();
        let reopened = MetadataStore::open(Some(dir.path().to_owned())).unwrap();
        assert_eq!(reopened.get("p", "q"), meta);
        reopened.set("p", "q", None).await.unwrap();
        assert!(MetadataStore::open(Some(dir.path().to_owned())).unwrap().get("p", "q").is_empty());
    }
}
