//! `rabbitmq_identity_info` and `rabbitmq_build_info`: who this node is and what it runs.

use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;

use super::charon::escape_label;
use base64::Engine;

use super::family::{BUILD_INFO, IDENTITY_INFO};

/// The file in the data directory that keeps the cluster's permanent id across restarts.
const ID_FILE: &str = "cluster_permanent_id";

/// The node's identity labels, fixed at start.
#[derive(Clone, Debug)]
pub(crate) struct Identity {
    node: String,
    cluster_id: String,
}

impl Identity {
    /// The node name, and the permanent id kept in `data_dir` (created on the first start,
    /// as RabbitMQ creates `rabbitmq-cluster-id-...` once per cluster).
    pub(crate) fn load(data_dir: &Path) -> anyhow::Result<Self> {
        let path = data_dir.join(ID_FILE);
        let cluster_id = match std::fs::read_to_string(&path) {
            Ok(id) if !id.trim().is_empty() => id.trim().to_owned(),
            _ => {
                let id = format!("rabbitmq-cluster-id-{}", random_id());
                std::fs::write(&path, &id).map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
                id
            }
        };
        Ok(Self { node: charon_engine::broker::node_name(), cluster_id })
    }

    /// Both families. Charon runs no Erlang: `erlang_version` says `none`, and the client
    /// library version is Charon's own.
    pub(crate) fn render(&self, out: &mut String) {
        BUILD_INFO.header(super::family::PLAIN, out);
        let _ = writeln!(
            out,
            "rabbitmq_build_info{{rabbitmq_version=\"{}\",prometheus_plugin_version=\"{}\",\
             prometheus_client_version=\"{}\",erlang_version=\"none\"}} 1",
            charon_model::identity::VERSION,
            charon_model::identity::VERSION,
            env!("CARGO_PKG_VERSION"),
        );
        IDENTITY_INFO.header(super::family::PLAIN, out);
        let node = escape_label(&self.node);
        let _ = writeln!(
            out,
            "rabbitmq_identity_info{{rabbitmq_node=\"{node}\",rabbitmq_cluster=\"{node}\",\
             rabbitmq_cluster_permanent_id=\"{}\"}} 1",
            escape_label(&self.cluster_id)
        );
    }
}

/// 128 random bits in base64url, from the standard library's per-process random hash keys.
fn random_id() -> String {
    let mut bytes = Vec::with_capacity(16);
    for _ in 0..2 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher
            .write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
        bytes.extend_from_slice(&hasher.finish().to_le_bytes());
    }
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}
