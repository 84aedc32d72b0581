//! Three members of one group on loopback, over the real transport: they elect a leader,
//! apply what it commits in the same order, take a restarted member back from its data, and
//! refuse a node with another secret.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use charon_cluster::transport::frame::Kind;
use charon_cluster::transport::{CallError, Connection, Identity, handshake::HandshakeError, serve};
use charon_cluster::{Effects, Group, GroupError, LogStore, Machine, MachineError, Peer, Timing};
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Keeps every command with the index it was applied at.
#[derive(Default)]
struct Journal(Vec<(u64, Vec<u8>)>);

impl Machine for Journal {
    fn apply(&mut self, index: u64, command: &[u8]) -> Vec<u8> {
        self.0.push((index, command.to_vec()));
        index.to_be_bytes().to_vec()
    }

    fn snapshot(&self) -> Vec<u8> {
        serde_json::to_vec(&self.0).unwrap_or_default()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), MachineError> {
        self.0 = serde_json::from_slice(snapshot).map_err(|e| MachineError(e.to_string()))?;
        Ok(())
    }
}

struct Node {
    group: Arc<Group<Journal>>,
    server: JoinHandle<()>,
}

fn timing() -> Timing {
    Timing {
        heartbeat: Duration::from_millis(50),
        election: (Duration::from_millis(300), Duration::from_millis(600)),
        compaction: 5000,
    }
}

fn identity(n: u64, address: std::net::SocketAddr, secret: &[u8]) -> Identity {
    Identity { name: format!("charon-{n}@localhost"), secret: Arc::new(secret.to_vec()), address, tls: None }
}

async fn start(n: u64, listener: TcpListener, dir: &TempDir) -> Node {
    start_with(n, listener, dir, (timing(), None), None).await
}

/// Member `n` on `listener`, with `timing` and `effects`, over TLS with `tls`.
async fn start_with(
    n: u64,
    listener: TcpListener,
    dir: &TempDir,
    (timing, effects): (Timing, Option<Arc<dyn Effects>>),
    tls: Option<Arc<charon_cluster::transport::NodeTls>>,
) -> Node {
    let me = Identity { tls, ..identity(n, listener.local_addr().unwrap(), b"cookie") };
    let db = LogStore::open_database(&dir.path().join(format!("node-{n}.redb"))).unwrap();
    let group = Arc::new(Group::start((n, 0), me.clone(), timing, db, (Journal::default(), effects)).await.unwrap());
    let server = tokio::spawn(serve(listener, me, Arc::clone(&group) as Arc<dyn charon_cluster::transport::Dispatch>));
    Node { group, server }
}

/// Writes through node `n`, whichever node leads, waiting out an election.
async fn write(nodes: &BTreeMap<u64, Node>, n: u64, command: &[u8]) -> Vec<u8> {
    for _ in 0..100 {
        match nodes[&n].group.write(command.to_vec()).await {
            Ok(answer) => return answer,
            Err(GroupError::NoLeader(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(other) => panic!("write failed: {other}"),
        }
    }
    panic!("no leader took the command");
}

/// What node `n` applied, in order.
fn journal(nodes: &BTreeMap<u64, Node>, n: u64) -> Vec<Vec<u8>> {
    nodes[&n].group.read(|j| j.0.iter().map(|(_, c)| c.clone()).collect())
}

async fn applied(node: &Node, count: usize) -> Vec<Vec<u8>> {
    for _ in 0..100 {
        let commands: Vec<Vec<u8>> = node.group.read(|j| j.0.iter().map(|(_, c)| c.clone()).collect());
        if commands.len() >= count {
            return commands;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    node.group.read(|j| j.0.iter().map(|(_, c)| c.clone()).collect())
}

/// Listeners on loopback for members 1..=`count`, and the members as peers know them.
async fn listeners(count: u64) -> (BTreeMap<u64, TcpListener>, BTreeMap<u64, Peer>) {
    let (mut listeners, mut members) = (BTreeMap::new(), BTreeMap::new());
    for n in 1..=count {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        members.insert(n, Peer { name: format!("charon-{n}@localhost"), address });
        listeners.insert(n, listener);
    }
    (listeners, members)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_replicate_in_order_and_a_restarted_one_catches_up() {
    let dir = TempDir::new().unwrap();
    let (listeners, members) = listeners(3).await;
    let mut nodes = BTreeMap::new();
    for (n, listener) in listeners {
        nodes.insert(n, start(n, listener, &dir).await);
    }
    nodes[&1].group.initialize(members.clone()).await.unwrap();

    // Written through each node in turn (two of them forward to the leader): each write is
    // applied on the node that took it by the time it answers.
    let mut indexes = Vec::new();
    for (n, command) in [(1, &b"declare q1"[..]), (2, b"declare q2"), (3, b"declare q3")] {
        let answer = write(&nodes, n, command).await;
        indexes.push(u64::from_be_bytes(answer.try_into().unwrap()));
        assert_eq!(journal(&nodes, n).last().map(Vec::as_slice), Some(command));
    }
    assert!(indexes.is_sorted() && indexes.first() < indexes.last(), "{indexes:?}");
    let expected = vec![b"declare q1".to_vec(), b"declare q2".to_vec(), b"declare q3".to_vec()];
    for node in nodes.values() {
        assert_eq!(applied(node, 3).await, expected);
    }

    // Node 3 goes away; the other two are a majority and go on.
    let Node { group, server } = nodes.remove(&3).unwrap();
    group.shutdown().await;
    server.abort();
    let _ = server.await;
    drop(group);
    write(&nodes, 1, b"declare q4").await;

    // Back on its address and its data: it catches up.
    let address = members[&3].address.parse::<std::net::SocketAddr>().unwrap();
    let listener = TcpListener::bind(address).await.unwrap();
    nodes.insert(3, start(3, listener, &dir).await);
    let mut expected = expected;
    expected.push(b"declare q4".to_vec());
    assert_eq!(applied(&nodes[&3], 4).await, expected);

    // A node with another secret is refused, and nothing it sends reaches the group.
    let stranger = identity(9, "127.0.0.1:0".parse().unwrap(), b"not the cookie");
    let mut connection = Connection::new(stranger, members[&1].address.clone());
    let refused = connection.call(0, Kind::Vote, Vec::new()).await;
    // Node 1 checks the stranger's proof first and hangs up (it logs whom it refused).
    assert!(matches!(refused, Err(CallError::Handshake(HandshakeError::Io(_)))), "{refused:?}");
    for node in nodes.values() {
        node.group.shutdown().await;
    }
}

/// What a node's effects were given: each command, and each snapshot.
#[derive(Default)]
struct Recorded {
    commands: parking_lot::Mutex<Vec<Vec<u8>>>,
    snapshots: parking_lot::Mutex<Vec<Vec<u8>>>,
}

impl Effects for Recorded {
    fn apply<'a>(
        &'a self,
        command: &'a [u8],
        _answer: &'a [u8],
    ) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        self.commands.lock().push(command.to_vec());
        Box::pin(async {})
    }

    fn restored<'a>(
        &'a self,
        before: &'a [u8],
        after: &'a [u8],
    ) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        // A new member's machine was empty.
        assert_eq!(before, b"[]");
        self.snapshots.lock().push(after.to_vec());
        Box::pin(async {})
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_joins_after_the_log_was_compacted_gets_a_snapshot_and_its_effects_are_given_it() {
    let dir = TempDir::new().unwrap();
    let compacting = Timing { compaction: 5, ..timing() };
    let (mut listeners, members) = listeners(4).await;
    let fourth = listeners.remove(&4).unwrap();
    let mut nodes = BTreeMap::new();
    for (n, listener) in listeners {
        nodes.insert(n, start_with(n, listener, &dir, (compacting, None), None).await);
    }
    let first_three: BTreeMap<u64, Peer> =
        members.iter().filter(|(n, _)| **n < 4).map(|(n, p)| (*n, p.clone())).collect();
    nodes[&1].group.initialize(first_three).await.unwrap();

    // Twenty changes: the members snapshot every five and purge what the snapshots cover.
    let commands: Vec<Vec<u8>> = (0..20).map(|i| format!("c-{i}").into_bytes()).collect();
    for command in &commands {
        write(&nodes, 1, command).await;
    }
    for _ in 0..100 {
        if nodes.values().all(|node| node.group.status().snapshot >= 15) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(nodes[&1].group.status().snapshot >= 15, "{:?}", nodes[&1].group.status());

    // A fourth member joins: the log it would need is gone, so it is sent a snapshot.
    let recorded = Arc::new(Recorded::default());
    let effects = Some(Arc::clone(&recorded) as Arc<dyn Effects>);
    nodes.insert(4, start_with(4, fourth, &dir, (compacting, effects), None).await);
    nodes[&1].group.add_member(4, members[&4].clone()).await.unwrap();
    write(&nodes, 2, b"c-20").await;
    let mut commands = commands;
    commands.push(b"c-20".to_vec());
    assert_eq!(applied(&nodes[&4], 21).await, commands);
    // Its effects were given the leader's snapshot (the machine's, whole), then only the
    // commands after it.
    let snapshots = recorded.snapshots.lock().clone();
    assert_eq!(snapshots.len(), 1, "{snapshots:?}");
    let restored: Vec<(u64, Vec<u8>)> = serde_json::from_slice(&snapshots[0]).unwrap();
    let tail = recorded.commands.lock().clone();
    assert!(restored.len() >= 15 && restored.len() + tail.len() == 21, "{} + {}", restored.len(), tail.len());
    let mut seen: Vec<Vec<u8>> = restored.into_iter().map(|(_, c)| c).collect();
    seen.extend(tail);
    assert_eq!(seen, commands);
    for node in nodes.values() {
        node.group.shutdown().await;
    }
}

/// A CA and the PEM of one node certificate it signed (for `localhost` and 127.0.0.1, usable
/// to connect and to accept), with the CA's PEM.
fn pki() -> (String, impl Fn() -> (String, String)) {
    use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = ca_params.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca_params, ca_key);
    let node = move || {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        (params.signed_by(&key, &issuer).unwrap().pem(), key.serialize_pem())
    };
    (ca, node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_with_tls_replicate_and_a_node_without_the_cas_certificate_is_refused() {
    use charon_cluster::transport::NodeTls;
    let dir = TempDir::new().unwrap();
    let (ca, node_cert) = pki();
    let tls = |ca: &str, (cert, key): (String, String)| {
        Some(Arc::new(NodeTls::from_pem(cert.as_bytes(), key.as_bytes(), ca.as_bytes()).unwrap()))
    };
    let (listeners, members) = listeners(3).await;
    let mut nodes = BTreeMap::new();
    for (n, listener) in listeners {
        nodes.insert(n, start_with(n, listener, &dir, (timing(), None), tls(&ca, node_cert())).await);
    }
    nodes[&1].group.initialize(members.clone()).await.unwrap();
    for (n, command) in [(2, &b"over tls 1"[..]), (3, b"over tls 2")] {
        write(&nodes, n, command).await;
    }
    for node in nodes.values() {
        assert_eq!(applied(node, 2).await, vec![b"over tls 1".to_vec(), b"over tls 2".to_vec()]);
    }

    // With the cluster's secret but no TLS, or TLS from another CA: no answer.
    let address = members[&1].address.clone();
    let plain = identity(8, "127.0.0.1:0".parse().unwrap(), b"cookie");
    let refused = Connection::new(plain, address.clone()).call(0, Kind::Ping, Vec::new()).await;
    assert!(refused.is_err(), "{refused:?}");
    let (other_ca, other_cert) = pki();
    let stranger =
        Identity { tls: tls(&other_ca, other_cert()), ..identity(9, "127.0.0.1:0".parse().unwrap(), b"cookie") };
    let refused = Connection::new(stranger, address.clone()).call(0, Kind::Ping, Vec::new()).await;
    assert!(matches!(refused, Err(CallError::Unreachable(_))), "{refused:?}");
    // A member's own certificate gets an answer.
    let member = Identity { tls: tls(&ca, node_cert()), ..identity(7, "127.0.0.1:0".parse().unwrap(), b"cookie") };
    assert!(Connection::new(member, address).call(0, Kind::Ping, Vec::new()).await.is_ok());
    for node in nodes.values() {
        node.group.shutdown().await;
    }
}
