//! Joining the cluster at start (`--cluster-listen`): the shared secret, the cluster listener,
//! the metadata group on its own database in the data directory, and the first membership.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use charon_cluster::transport::{Dispatch, Identity, Liveness, NodeDispatch, NodeTls, serve};
use charon_cluster::{Current, Group, GroupError, LogStore, Peer, Timing, node_id};
use charon_engine::Broker;
use charon_engine::cluster::metadata::Metadata;
use charon_engine::cluster::replicas::{Groups, Replicas};
use charon_engine::cluster::{Cluster, Home, NodeReport, Queues, Restart};
use tokio::sync::watch;

use crate::config::ClusterConfig;
use crate::running::Running;

/// The metadata group's timings: a heartbeat every 150 ms, an election after 0.6–1.2 s without
/// one (openraft's defaults, 50 ms and 150–300 ms, are for a LAN under no load; a node busy
/// with a flood of messages must not lose its leadership to a late heartbeat, while a failover
/// of a quorum queue writes to the metadata and waits for its election when the leader's node
/// went too); a snapshot every 5,000 changes (openraft's default).
const TIMING: Timing = Timing {
    heartbeat: Duration::from_millis(150),
    election: (Duration::from_millis(600), Duration::from_millis(1200)),
    compaction: 5000,
};

/// RabbitMQ's Erlang cookie has 20 upper-case letters; so has a generated secret.
fn generated_secret() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..20).map(|_| char::from(b'A' + rng.random_range(0..26u8))).collect()
}

/// The shared secret: read from `file`, or from `$HOME/.charon.cookie`, which is created
/// (readable by its owner only) when missing, as Erlang creates its cookie.
fn secret(file: Option<&Path>) -> anyhow::Result<Vec<u8>> {
    let path = match file {
        Some(path) => path.to_owned(),
        None => {
            let home =
                std::env::var_os("HOME").context("no HOME for the default cluster secret: set cluster_secret_file")?;
            let path = PathBuf::from(home).join(".charon.cookie");
            create_secret(&path)?;
            path
        }
    };
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading the cluster secret {}", path.display()))?;
    let secret = text.trim();
    if secret.is_empty() {
        bail!("the cluster secret {} is empty", path.display());
    }
    Ok(secret.as_bytes().to_vec())
}

/// Creates `path` with a new secret unless it exists (another node on this machine may create
/// it at the same moment: whichever creates it first, both read the same).
fn create_secret(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o400).open(path) {
        Ok(mut file) => {
            file.write_all(generated_secret().as_bytes())?;
            file.sync_all()?;
            tracing::info!(path = %path.display(), "created the cluster secret");
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating the cluster secret {}", path.display())),
    }
}

/// TLS between the nodes from this node's certificate, key and the cluster's CA (PEM files).
fn node_tls(cert: &Path, key: &Path, ca: &Path) -> anyhow::Result<Arc<NodeTls>> {
    let read = |path: &Path| std::fs::read(path).with_context(|| format!("reading {}", path.display()));
    let tls = NodeTls::from_pem(&read(cert)?, &read(key)?, &read(ca)?)
        .with_context(|| format!("cluster_tls with {}, {} and {}", cert.display(), key.display(), ca.display()))?;
    tracing::info!("TLS between nodes: on");
    Ok(Arc::new(tls))
}

/// Starts this node's cluster membership: listens for its peers, starts the metadata group
/// from `data_dir/cluster/` (a restarted node takes up from there) and, on a node that never
/// formed the cluster, makes the configured peers its first membership.
pub(crate) async fn start(
    config: &ClusterConfig,
    data_dir: &Path,
    broker: &Arc<Broker>,
    running: &mut Running,
    shutdown: &watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let secret = secret(config.secret_file.as_deref())?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding the cluster listener to {}", config.listen))?;
    let local = listener.local_addr().context("reading the cluster address")?;
    println!("charon: cluster listening on {local}");
    let tls = config.tls.as_ref().map(|(cert, key, ca)| node_tls(cert, key, ca)).transpose()?;
    let identity = Identity { name: config.node.clone(), secret: Arc::new(secret), address: local, tls };
    let dir = data_dir.join("cluster");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let db = LogStore::open_database(&dir.join("metadata.redb")).context("opening the cluster's metadata log")?;
    let id = node_id(&config.node);
    let effects: Arc<dyn charon_cluster::Effects> = Arc::new(charon_engine::cluster::Effects::new(broker));
    let metadata = (Metadata::default(), Some(Arc::clone(&effects)));
    let group = Group::start((id, 0), identity.clone(), TIMING, Arc::clone(&db), metadata)
        .await
        .context("starting the metadata group")?;
    let group = Arc::new(group);
    let current = Arc::new(Current::new(Arc::clone(&group)));
    // join_cluster: the group's storage emptied, the group started again on it.
    let restart: Restart = {
        let identity = identity.clone();
        Box::new(move || {
            let (identity, db, effects) = (identity.clone(), Arc::clone(&db), Arc::clone(&effects));
            Box::pin(async move {
                LogStore::wipe(&db).await.map_err(|e| GroupError::Stopped(e.to_string()))?;
                let metadata = (Metadata::default(), Some(effects));
                Group::start((id, 0), identity, TIMING, db, metadata).await.map(Arc::new)
            })
        })
    };
    // Until the stop: then the listener and every peer connection it accepted close.
    let weak = Arc::downgrade(broker);
    let report = move || weak.upgrade().and_then(|b| serde_json::to_vec(&NodeReport::of(&b)).ok()).unwrap_or_default();
    let home = Arc::new(Home::new(broker));
    let queues = Arc::clone(&home) as Arc<dyn Dispatch>;
    let replicas = Arc::new(Replicas::new(identity.clone(), dir.join("quorum")));
    let groups = Groups::new(Arc::clone(&current) as Arc<dyn Dispatch>, Arc::clone(&replicas));
    let node = NodeDispatch::new(Arc::new(groups), queues, Arc::new(report));
    let peers = serve(listener, identity.clone(), Arc::new(node));
    let mut stopping = shutdown.clone();
    running.serve(async move {
        tokio::select! {
            () = peers => {}
            _ = stopping.wait_for(|stop| *stop) => {}
        }
    });
    let members: BTreeMap<u64, Peer> = config
        .peers
        .iter()
        .map(|(name, address)| (node_id(name), Peer { name: name.clone(), address: address.clone() }))
        .collect();
    tracing::info!(node = config.node, id, "cluster member started");
    // Formation runs beside the start: the node serves its clients meanwhile.
    running.serve(form(Arc::clone(&group), id, members.clone(), shutdown.clone()));
    let members: Vec<Peer> = members.into_values().collect();
    let liveness = Liveness::start(&identity, members.clone());
    broker.join_cluster(Cluster::new(current, members, liveness, restart, (Queues::new(identity), replicas)));
    running.serve(follow_members(Arc::downgrade(broker), home, shutdown.clone()));
    running.serve(fail_over(Arc::downgrade(broker), shutdown.clone()));
    Ok(())
}

/// Every second, as the members' liveness and reports change: blocks this node's publishers
/// while another member is in alarm (and lets them go once none is), as RabbitMQ's alarms reach
/// every node; and closes the sessions of other nodes on this node's queues whose node is down
/// or started again (their unacknowledged deliveries go back to the queues).
async fn follow_members(broker: std::sync::Weak<Broker>, home: Arc<Home>, mut stop: watch::Receiver<bool>) {
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        let Some(broker) = broker.upgrade() else { return };
        if let Some(cluster) = broker.cluster() {
            cluster.follow_alarms(broker.resources());
            home.reap(&|node| cluster.is_running(node)).await;
            cluster.follow_replicas(&broker).await;
        }
    }
}

/// Four times a second: moves here the replicated quorum queues whose home node is down and
/// whose group this node leads (a failover waits for this check at most a quarter second).
async fn fail_over(broker: std::sync::Weak<Broker>, mut stop: watch::Receiver<bool>) {
    let mut ticks = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        let Some(broker) = broker.upgrade() else { return };
        if let Some(cluster) = broker.cluster() {
            cluster.fail_over().await;
        }
    }
}

/// How long a new node keeps asking its peers to let it join before it forms a cluster of the
/// configured peers itself (all peers of a fresh cluster start within this, or find it formed).
const JOIN_PATIENCE: Duration = Duration::from_secs(5);

/// RabbitMQ's classic config peer discovery, on Raft: a node already in a cluster (its data
/// directory says so) goes on; a new one asks each peer to add it and joins the first formed
/// cluster that does; when every peer it reached is new too, or none answers within
/// [`JOIN_PATIENCE`], it forms the cluster of the configured peers (every node of a fresh
/// cluster may: openraft elects one leader among identical memberships).
async fn form(group: Arc<Group<Metadata>>, id: u64, members: BTreeMap<u64, Peer>, mut stop: watch::Receiver<bool>) {
    if group.is_formed().await {
        return;
    }
    let me = members.get(&id).cloned();
    let deadline = tokio::time::Instant::now() + JOIN_PATIENCE;
    let others: Vec<&Peer> = members.iter().filter(|(other, _)| **other != id).map(|(_, p)| p).collect();
    loop {
        let mut all_new = !others.is_empty();
        for peer in &others {
            let Some(me) = me.clone() else { break };
            match group.join_through(&peer.address, id, me).await {
                Ok(()) => {
                    tracing::info!(through = peer.name, "joined the cluster");
                    return;
                }
                Err(e) => {
                    all_new &= matches!(e, GroupError::NotFormed);
                    tracing::debug!(peer = peer.name, error = %e, "not joined through this peer");
                }
            }
        }
        if all_new || others.is_empty() || tokio::time::Instant::now() >= deadline || group.is_formed().await {
            break;
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
    }
    match group.initialize(members).await {
        Ok(formed) => tracing::info!(formed, "cluster formed with the configured peers"),
        Err(e) => tracing::error!(error = %e, "the cluster could not be formed"),
    }
}
