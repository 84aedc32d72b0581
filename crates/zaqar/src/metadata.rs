//! Queue metadata: Zaqar's free-form JSON object per queue, kept by the gateway (the engine's
//! queues have fixed arguments) and written to `<data dir>/zaqar/metadata.json` before a change
//! is answered, so that it survives restarts with the queues.
//!
//! The whole document is small (Zaqar caps a queue's metadata at 64 KiB, and only queues
//! with metadata are in it); a change rewrites it atomically (write, fsync, rename) on the
//! blocking pool, one change at a time.
//!
//! On a node of a cluster the metadata is the cluster's instead: read from the replicated
//! metadata this node applied, changed through the cluster (a change on the minority side of a
//! partition is refused with 503); the file is left as it was.

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
    /// The broker, whose cluster keeps the metadata once it runs in one.
    broker: std::sync::Weak<charon_engine::Broker>,
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
    pub(crate) fn open(
        data_dir: Option<PathBuf>,
        broker: &std::sync::Arc<charon_engine::Broker>,
    ) -> Result<Self, MetadataError> {
        let path = data_dir.map(|dir| dir.join("zaqar").join("metadata.json"));
        let document = match &path {
            Some(path) => match std::fs::read(path) {
                Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| MetadataError::Parse(path.clone(), e))?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Document::new(),
                Err(e) => return Err(MetadataError::Read(path.clone(), e)),
            },
            None => Document::new(),
        };
        let state = parking_lot::Mutex::new(document);
        Ok(Self { state, writing: tokio::sync::Mutex::new(()), path, broker: std::sync::Arc::downgrade(broker) })
    }

    /// The cluster's metadata of `project` (queue by queue), on a clustered node.
    fn clustered(&self, project: &str) -> Option<BTreeMap<String, Metadata>> {
        let broker = self.broker.upgrade()?;
        let recorded = broker.cluster()?.zaqar_project(project);
        Some(
            recorded.into_iter().filter_map(|(queue, text)| Some((queue, serde_json::from_str(&text).ok()?))).collect(),
        )
    }

    /// A queue's metadata (empty when it has none).
    pub(crate) fn get(&self, project: &str, queue: &str) -> Metadata {
        if let Some(broker) = self.broker.upgrade()
            && let Some(cluster) = broker.cluster()
        {
            return cluster
                .zaqar_metadata(project, queue)
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or_default();
        }
        self.state.lock().get(project).and_then(|queues| queues.get(queue)).cloned().unwrap_or_default()
    }

    /// The queues of `project` whose `_dead_letter_queue` is `queue`.
    pub(crate) fn dead_letter_sources(&self, project: &str, queue: &str) -> Vec<String> {
        let sources = |queues: &BTreeMap<String, Metadata>| -> Vec<String> {
            queues
                .iter()
                .filter(|(name, meta)| {
                    name.as_str() != queue && meta.get("_dead_letter_queue").and_then(Value::as_str) == Some(queue)
                })
                .map(|(name, _)| name.clone())
                .collect()
        };
        if let Some(queues) = self.clustered(project) {
            return sources(&queues);
        }
        self.state.lock().get(project).map(sources).unwrap_or_default()
    }

    /// Replaces a queue's metadata (`None`: forgets it), on disk before returning.
    ///
    /// # Errors
    /// 503 when the file could not be written.
    pub(crate) async fn set(&self, project: &str, queue: &str, metadata: Option<Metadata>) -> Result<(), ZaqarError> {
        if let Some(broker) = self.broker.upgrade()
            && let Some(cluster) = broker.cluster()
        {
            let text = metadata.filter(|m| !m.is_empty()).map(|m| Value::Object(m).to_string());
            return cluster
                .set_zaqar_metadata(project, queue, text)
                .await
                .map_err(|e| ZaqarError::unavailable(format!("Metadata could not be written: {e}")));
        }
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
        let broker = charon_engine::Broker::new(charon_engine::BrokerConfig::default());
        let open = || MetadataStore::open(Some(dir.path().to_owned()), &broker).unwrap();
        let store = open();
        let mut meta = Metadata::new();
        meta.insert("_max_claim_count".into(), 3.into());
        store.set("p", "q", Some(meta.clone())).await.unwrap();
        let reopened = open();
        assert_eq!(reopened.get("p", "q"), meta);
        reopened.set("p", "q", None).await.unwrap();
        assert!(open().get("p", "q").is_empty());
    }
}
