//! Three `charon` processes form a cluster from RabbitMQ-style peer flags and replicate their
//! metadata (the cluster's name, vhosts, users, permissions, exchanges and the bindings between
//! them, policies, limits): a change made through any node is there on that node when it
//! answers and on the others soon after; a node killed with
//! `kill -9` comes back from its data directory and catches up; a node with another secret is
//! refused, and a node that cannot reach a majority refuses metadata changes.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ExchangeBindOptions, ExchangeDeclareOptions, ExchangeDeleteOptions,
    QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use support::Charon;
use support::http::Call;

/// The issue's ports, beside `rmq-cluster.sh`'s 58xx.
fn cluster_port(n: u16) -> u16 {
    25900 + n
}

fn peers() -> Vec<String> {
    (1..=3)
        .flat_map(|n| ["--cluster-peer".to_owned(), format!("charon-{n}@localhost=127.0.0.1:{}", cluster_port(n))])
        .collect()
}

fn start(n: u16, data: &Path, secret: &Path, peers: &[String]) -> Charon {
    start_with(n, data, secret, peers, &[])
}

fn start_with(n: u16, data: &Path, secret: &Path, peers: &[String], extra: &[&str]) -> Charon {
    let mut args = vec![
        "--node-name".to_owned(),
        format!("charon-{n}@localhost"),
        "--cluster-listen".to_owned(),
        format!("127.0.0.1:{}", cluster_port(n)),
        "--cluster-secret-file".to_owned(),
        secret.display().to_string(),
    ];
    args.extend(peers.iter().cloned());
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Charon::start_on(data, &args)
}

fn name_on(node: &Charon) -> String {
    let reply = Call::api(node.http_port, "GET", "/api/cluster-name").send_blocking();
    reply.json()["name"].as_str().unwrap_or_default().to_owned()
}

fn set_name(node: &Charon, name: &str) -> u16 {
    let body = serde_json::json!({ "name": name }).to_string();
    let reply = Call::api(node.http_port, "PUT", "/api/cluster-name").body(body).send_blocking();
    // A refusal is RabbitMQ 4.3.6's: 500 with an empty body.
    assert!(reply.status != 500 || reply.body.is_empty(), "{reply:?}");
    reply.status
}

/// Waits up to `seconds` for `done` to hold, asking again every 100 ms; panics with its last
/// reason when it never does. The one wait of these tests: every one is on a condition.
fn until(seconds: u64, mut done: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        match done() {
            Ok(()) => return,
            Err(reason) if Instant::now() > deadline => panic!("{reason}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// `Ok` when `condition` holds, else `reason`.
fn holds(condition: bool, reason: impl FnOnce() -> String) -> Result<(), String> {
    if condition { Ok(()) } else { Err(reason()) }
}

/// Names the cluster through `node`, waiting out an election (at most 2 s each).
fn set_name_when_led(node: &Charon, name: &str) {
    until(20, || {
        let status = set_name(node, name);
        holds(status == 204, || format!("PUT /api/cluster-name answered {status}"))
    });
}

/// `charon ctl cluster_status` against `node`.
fn cluster_status(node: &Charon) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_charon"))
        .args(["ctl", "--url", &format!("http://127.0.0.1:{}", node.http_port), "cluster_status"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

/// The section of `cluster_status` headed `title`, up to the next blank line after its own.
fn section(status: &str, title: &str) -> Vec<String> {
    let lines: Vec<&str> = status.lines().collect();
    let start = lines.iter().position(|l| *l == title).unwrap() + 2;
    lines[start..].iter().take_while(|l| !l.is_empty()).map(|l| (*l).to_owned()).collect()
}

/// Whether `node`'s `/api/nodes` says `name` runs.
fn runs(node: &Charon, name: &str) -> bool {
    let nodes = Call::api(node.http_port, "GET", "/api/nodes").send_blocking().json();
    nodes.as_array().unwrap().iter().any(|n| n["name"] == name && n["running"] == true)
}

/// Blocks on `work` with a runtime of its own (these tests are blocking; lapin is async).
fn block<T>(work: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(work)
}

/// A channel on `node` as guest, with its connection (kept open by the caller).
async fn channel(node: &Charon) -> (Connection, Channel) {
    let url = format!("amqp://guest:guest@127.0.0.1:{}/%2F", node.port);
    let connection = Connection::connect(&url, ConnectionProperties::default()).await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    (connection, channel)
}

/// A step declaring exchange `name` of `kind`.
fn declare_exchange(name: &str, kind: ExchangeKind, durable: bool) -> impl AsyncFnOnce(Channel) -> lapin::Result<()> {
    let name = name.to_owned();
    async move |channel: Channel| {
        let options = ExchangeDeclareOptions { durable, ..ExchangeDeclareOptions::default() };
        channel.exchange_declare(name.as_str().into(), kind, options, FieldTable::default()).await
    }
}

/// Runs `step` on a fresh channel on `node` (connection and step on one runtime), 60 s at most.
fn on<T>(node: &Charon, step: impl AsyncFnOnce(Channel) -> T) -> T {
    let work = async {
        let (connection, channel) = channel(node).await;
        let result = step(channel).await;
        drop(connection);
        result
    };
    block(async { tokio::time::timeout(Duration::from_secs(60), work).await.expect("an AMQP step hung") })
}

fn eventually_named(node: &Charon, name: &str) {
    until(20, || {
        let now = name_on(node);
        holds(now == name, || format!("{} still named {now:?}", node.http_port))
    });
}

/// Waits until `node`'s `/api/nodes` says whether `name` runs as `running`.
fn eventually_runs(node: &Charon, name: &str, running: bool) {
    until(10, || {
        holds(runs(node, name) == running, || format!("{name} running is not {running}, as {} sees it", node.http_port))
    });
}

#[test]
fn three_nodes_replicate_metadata_survive_a_kill_9_and_refuse_strangers() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "COOKIECOOKIECOOKIE").unwrap();
    let data: Vec<_> = (1..=3).map(|n| dir.path().join(format!("node-{n}"))).collect();
    let mut nodes: Vec<Charon> = (1..=3).map(|n| start(n, &data[usize::from(n) - 1], &secret, &peers())).collect();

    // Named through node 2: there when it answers, then on the other two.
    set_name_when_led(&nodes[1], "prod");
    assert_eq!(name_on(&nodes[1]), "prod");
    eventually_named(&nodes[0], "prod");
    eventually_named(&nodes[2], "prod");
    let overview = Call::api(nodes[0].http_port, "GET", "/api/overview").send_blocking().json();
    assert_eq!(overview["cluster_name"], "prod");
    let all: Vec<String> = (1..=3).map(|n| format!("charon-{n}@localhost")).collect();
    for name in &all {
        eventually_runs(&nodes[0], name, true);
    }
    let status = cluster_status(&nodes[0]);
    assert!(
        status.starts_with("Cluster status of node charon-1@localhost ...\nBasics\n\nCluster name: prod\n"),
        "{status}"
    );
    assert_eq!((section(&status, "Disk Nodes"), section(&status, "Running Nodes")), (all.clone(), all.clone()));
    assert_eq!(section(&status, "Alarms"), vec!["(none)".to_owned()]);

    // A vhost made through node 2 is on every node, with its creator's permissions, and goes
    // from every node when deleted through node 1.
    let get = |node: &Charon, path: &str| Call::api(node.http_port, "GET", path).send_blocking().status;
    let eventually = |node: &Charon, path: &str, status: u16| {
        until(20, || holds(get(node, path) == status, || format!("{path} on {} is not {status}", node.http_port)));
    };
    let put = Call::api(nodes[1].http_port, "PUT", "/api/vhosts/shared").body(r#"{"description":"one for all"}"#);
    assert_eq!(put.send_blocking().status, 201);
    assert_eq!(get(&nodes[1], "/api/permissions/shared/guest"), 200);
    for node in [&nodes[0], &nodes[2]] {
        eventually(node, "/api/permissions/shared/guest", 200);
        let vhost = Call::api(node.http_port, "GET", "/api/vhosts/shared").send_blocking().json();
        assert_eq!(vhost["description"], "one for all");
    }
    let again = Call::api(nodes[2].http_port, "PUT", "/api/vhosts/shared").body("{}").send_blocking();
    assert_eq!(again.status, 204);
    assert_eq!(Call::api(nodes[0].http_port, "DELETE", "/api/vhosts/shared").send_blocking().status, 204);
    assert_eq!(get(&nodes[0], "/api/vhosts/shared"), 404);
    eventually(&nodes[1], "/api/vhosts/shared", 404);
    eventually(&nodes[2], "/api/vhosts/shared", 404);

    // A user made through node 3 logs in on node 1 with its password (the hash travelled, not
    // the password); permissions set through node 1 are on node 2; deleted through node 2, the
    // user is gone everywhere.
    let put =
        Call::api(nodes[2].http_port, "PUT", "/api/users/app").body(r#"{"password":"s3cret","tags":"management"}"#);
    assert_eq!(put.send_blocking().status, 201);
    eventually(&nodes[0], "/api/users/app", 200);
    let whoami =
        |node: &Charon| Call::new(node.http_port, "GET", "/api/whoami").basic("app", "s3cret").send_blocking().status;
    assert_eq!(whoami(&nodes[0]), 200);
    let grant = Call::api(nodes[0].http_port, "PUT", "/api/permissions/%2F/app")
        .body(r#"{"configure":"^app-","write":".*","read":".*"}"#);
    assert_eq!(grant.send_blocking().status, 201);
    eventually(&nodes[1], "/api/permissions/%2F/app", 200);
    let granted = Call::api(nodes[1].http_port, "GET", "/api/permissions/%2F/app").send_blocking().json();
    assert_eq!(granted["configure"], "^app-");
    assert_eq!(Call::api(nodes[1].http_port, "DELETE", "/api/users/app").send_blocking().status, 204);
    eventually(&nodes[2], "/api/users/app", 404);
    eventually(&nodes[0], "/api/users/app", 404);
    assert_eq!(whoami(&nodes[0]), 401);

    // Topology: an exchange declared over AMQP through node 1 is on every node, as durable as
    // declared; an inequivalent redeclare through node 2 is refused as one node refuses it; an
    // exchange-to-exchange binding made through node 2 routes on node 3 (to a queue node 3
    // binds itself); deleted through node 3, the exchange is gone everywhere.
    on(&nodes[0], declare_exchange("orders", ExchangeKind::Topic, true)).unwrap();
    on(&nodes[0], declare_exchange("audit", ExchangeKind::Fanout, false)).unwrap();
    for node in [&nodes[1], &nodes[2]] {
        eventually(node, "/api/exchanges/%2F/audit", 200);
        let orders = Call::api(node.http_port, "GET", "/api/exchanges/%2F/orders").send_blocking().json();
        assert_eq!((orders["type"].as_str(), orders["durable"].as_bool()), (Some("topic"), Some(true)));
    }
    let refused = on(&nodes[1], declare_exchange("orders", ExchangeKind::Direct, true)).unwrap_err().to_string();
    assert!(refused.contains("PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'orders'"), "{refused}");
    on(&nodes[1], async |channel: Channel| {
        let bind = channel.exchange_bind(
            "audit".into(),
            "orders".into(),
            "order.#".into(),
            ExchangeBindOptions::default(),
            FieldTable::default(),
        );
        bind.await.unwrap();
    });
    until(20, || {
        let bindings =
            Call::api(nodes[2].http_port, "GET", "/api/exchanges/%2F/orders/bindings/source").send_blocking();
        let found = bindings.json().as_array().is_some_and(|b| b.iter().any(|b| b["destination"] == "audit"));
        holds(found, || format!("no orders -> audit binding on node 3: {bindings:?}"))
    });
    on(&nodes[2], async |channel: Channel| {
        let get = async {
            channel.queue_declare("audit-3".into(), QueueDeclareOptions::default(), FieldTable::default()).await?;
            let bind = QueueBindOptions::default();
            channel.queue_bind("audit-3".into(), "audit".into(), "".into(), bind, FieldTable::default()).await?;
            let publish = BasicPublishOptions::default();
            let props = BasicProperties::default();
            channel.basic_publish("orders".into(), "order.new".into(), publish, b"o-1", props).await?.await?;
            let mut got = None;
            for _ in 0..50 {
                got = channel.basic_get("audit-3".into(), BasicGetOptions { no_ack: true }).await?;
                if got.is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert_eq!(got.map(|m| m.delivery.data), Some(b"o-1".to_vec()));
            lapin::Result::Ok(())
        };
        get.await.unwrap();
    });
    on(&nodes[2], async |channel: Channel| {
        channel.exchange_delete("orders".into(), ExchangeDeleteOptions::default()).await.unwrap();
    });
    assert_eq!(get(&nodes[2], "/api/exchanges/%2F/orders"), 404);
    eventually(&nodes[0], "/api/exchanges/%2F/orders", 404);
    eventually(&nodes[1], "/api/exchanges/%2F/orders", 404);

    // A policy, an operator policy, a topic permission and a vhost limit set through one node
    // are on the others, and the policy applies to a queue there.
    let policy = r#"{"pattern":"^capped","definition":{"max-length":1},"apply-to":"queues"}"#;
    let put = Call::api(nodes[2].http_port, "PUT", "/api/policies/%2F/cap").body(policy);
    assert_eq!(put.send_blocking().status, 201);
    let operator = r#"{"pattern":"^capped","definition":{"max-length":5},"apply-to":"queues"}"#;
    let put = Call::api(nodes[0].http_port, "PUT", "/api/operator-policies/%2F/ceiling").body(operator);
    assert_eq!(put.send_blocking().status, 201);
    let topic = r#"{"exchange":"amq.topic","write":"^app[.]","read":".*"}"#;
    let put = Call::api(nodes[1].http_port, "PUT", "/api/topic-permissions/%2F/guest").body(topic);
    assert_eq!(put.send_blocking().status, 201);
    let put = Call::api(nodes[0].http_port, "PUT", "/api/vhost-limits/%2F/max-queues").body(r#"{"value":500}"#);
    assert_eq!(put.send_blocking().status, 204);
    eventually(&nodes[0], "/api/policies/%2F/cap", 200);
    eventually(&nodes[2], "/api/operator-policies/%2F/ceiling", 200);
    until(20, || {
        let topics = Call::api(nodes[2].http_port, "GET", "/api/topic-permissions/%2F/guest").send_blocking().json();
        let limits = Call::api(nodes[1].http_port, "GET", "/api/vhost-limits/%2F").send_blocking().json();
        let there = topics[0]["write"] == "^app[.]" && limits[0]["value"]["max-queues"] == 500;
        holds(there, || format!("topic permission or limit missing: {topics} {limits}"))
    });
    on(&nodes[0], async |channel: Channel| {
        let declare = channel.queue_declare("capped-1".into(), QueueDeclareOptions::default(), FieldTable::default());
        declare.await.unwrap();
    });
    let queue = Call::api(nodes[0].http_port, "GET", "/api/queues/%2F/capped-1").send_blocking().json();
    assert_eq!((queue["policy"].as_str(), queue["operator_policy"].as_str()), (Some("cap"), Some("ceiling")));
    assert_eq!(Call::api(nodes[1].http_port, "DELETE", "/api/policies/%2F/cap").send_blocking().status, 204);
    eventually(&nodes[0], "/api/policies/%2F/cap", 404);
    assert_eq!(Call::api(nodes[1].http_port, "DELETE", "/api/policies/%2F/cap").send_blocking().status, 404);

    // Definitions imported through node 2 are made on every node.
    let definitions = serde_json::json!({
        "vhosts": [{ "name": "imported" }],
        "users": [{ "name": "imp", "password": "p", "tags": "" }],
        "permissions": [{ "user": "imp", "vhost": "imported", "configure": ".*", "write": ".*", "read": ".*" }],
        "topic_permissions": [{ "user": "imp", "vhost": "imported", "exchange": "amq.topic", "write": "^i", "read": ".*" }],
        "exchanges": [{ "name": "imp-x", "vhost": "imported", "type": "fanout", "durable": true,
                        "auto_delete": false, "internal": false, "arguments": {} }],
        "policies": [{ "vhost": "imported", "name": "imp-p", "pattern": "^imp", "apply-to": "queues",
                       "definition": { "max-length": 3 }, "priority": 0 }]
    });
    let import = Call::api(nodes[1].http_port, "POST", "/api/definitions").body(definitions.to_string());
    let imported = import.send_blocking();
    assert!(imported.status == 200 || imported.status == 204, "{imported:?}");
    for path in [
        "/api/vhosts/imported",
        "/api/users/imp",
        "/api/permissions/imported/imp",
        "/api/topic-permissions/imported/imp",
        "/api/exchanges/imported/imp-x",
        "/api/policies/imported/imp-p",
    ] {
        eventually(&nodes[2], path, 200);
        eventually(&nodes[0], path, 200);
    }

    // Node 3 dies; the other two are a majority and take a change; node 3 comes back from its
    // data directory and catches up.
    nodes[2].kill9();
    set_name_when_led(&nodes[0], "prod-2");
    assert_eq!(name_on(&nodes[0]), "prod-2");
    // Down after three missed pings: still a disk node, no longer running.
    eventually_runs(&nodes[0], "charon-3@localhost", false);
    let status = cluster_status(&nodes[0]);
    assert_eq!((section(&status, "Disk Nodes"), section(&status, "Running Nodes")), (all.clone(), all[..2].to_vec()));
    nodes[2] = start(3, &data[2], &secret, &peers());
    eventually_named(&nodes[2], "prod-2");

    // Each node lists the others with what they report of themselves; the overview adds up
    // the queues and messages of every node.
    until(20, || {
        let listed = Call::api(nodes[0].http_port, "GET", "/api/nodes/charon-2@localhost").send_blocking().json();
        let pid = nodes[1].pid().to_string();
        let reported = listed["os_pid"] == pid.as_str() && listed["mem_limit"].as_u64() > Some(0);
        holds(reported && listed["fd_used"].as_u64() > Some(0), || format!("node 2 as node 1 lists it: {listed}"))
    });
    // RabbitMQ's own CLI lists the three (when scripts/test.sh installed it).
    if let Some(admin) = support::rabbitmqadmin() {
        let output = std::process::Command::new(admin)
            .args(["--non-interactive", "-H", "127.0.0.1", "-P", &nodes[2].http_port.to_string()])
            .args(["-u", "guest", "-p", "guest", "list", "nodes"])
            .output()
            .unwrap();
        let listed = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{output:?}");
        for name in &all {
            assert!(listed.contains(name.as_str()), "rabbitmqadmin list nodes:\n{listed}");
        }
    }
    let messages = |node: &Charon| {
        let overview = Call::api(node.http_port, "GET", "/api/overview").send_blocking().json();
        (overview["queue_totals"]["messages"].as_u64().unwrap(), overview["message_stats"]["publish"].as_u64().unwrap())
    };
    let (before, published) = messages(&nodes[0]);
    on(&nodes[1], async |channel: Channel| {
        channel.queue_declare("totals-2".into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
        for body in [&b"a"[..], b"b", b"c"] {
            let publish = channel.basic_publish(
                "".into(),
                "totals-2".into(),
                BasicPublishOptions::default(),
                body,
                BasicProperties::default(),
            );
            publish.await.unwrap().await.unwrap();
        }
    });
    until(20, || {
        let (now, publishes) = messages(&nodes[0]);
        let counted = now == before + 3 && publishes == published + 3;
        holds(counted, || {
            format!("node 1's overview: {now} messages, {publishes} publishes, not 3 more than {before}, {published}")
        })
    });

    // A node in memory alarm blocks the publishers of the others too: node 3 restarted with a
    // watermark below what it uses; a publisher on node 1 is blocked while node 3 runs, and let
    // go once node 3 is down (its alarm goes with it, as RabbitMQ's does).
    nodes[2].kill9();
    nodes[2] = start_with(3, &data[2], &secret, &peers(), &["--vm-memory-high-watermark-absolute", "1MB"]);
    until(20, || {
        let check = Call::api(nodes[0].http_port, "GET", "/api/health/checks/alarms").send_blocking();
        let named = check.json()["alarms"][0]["node"] == "charon-3@localhost";
        holds(check.status == 503 && named, || format!("node 1's alarms check: {check:?}"))
    });
    assert_eq!(Call::api(nodes[0].http_port, "GET", "/api/health/checks/local-alarms").send_blocking().status, 200);
    assert!(
        section(&cluster_status(&nodes[0]), "Alarms").contains(&"Memory alarm on node charon-3@localhost".to_owned())
    );
    block(async {
        let (connection, channel) = channel(&nodes[0]).await;
        let publish = channel.basic_publish(
            "".into(),
            "nowhere".into(),
            BasicPublishOptions::default(),
            b"x",
            BasicProperties::default(),
        );
        publish.await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !connection.status().blocked() {
            assert!(Instant::now() < deadline, "node 1 did not block its publisher");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        nodes[2].kill9();
        while connection.status().blocked() {
            assert!(Instant::now() < deadline + Duration::from_secs(10), "node 1 kept its publisher blocked");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    nodes[2] = start(3, &data[2], &secret, &peers());
    eventually_named(&nodes[2], "prod-2");

    // A fourth node with another secret, configured with node 1 as its only peer: node 1
    // refuses it, and the stranger, with no majority, refuses a metadata change.
    let other = dir.path().join("other-secret");
    std::fs::write(&other, "NOTTHESAMECOOKIE").unwrap();
    let stranger_peers = vec![
        "--cluster-peer".to_owned(),
        format!("charon-4@localhost=127.0.0.1:{}", cluster_port(4)),
        "--cluster-peer".to_owned(),
        format!("charon-1@localhost=127.0.0.1:{}", cluster_port(1)),
    ];
    let stranger = start(4, &dir.path().join("node-4"), &other, &stranger_peers);
    until(20, || {
        let log = nodes[0].stderr();
        let refused = log.contains("node 'charon-4@localhost' does not hold this cluster's secret");
        holds(refused, || format!("node 1 did not refuse the stranger:\n{log}"))
    });
    assert_eq!(set_name(&stranger, "mine"), 500);
    assert_eq!(name_on(&stranger), "charon-4@localhost");
    assert_eq!(name_on(&nodes[0]), "prod-2");

    // A fifth node, listed with the three and itself, joins at runtime: it gets the name,
    // and every node lists it. Stopped, it is forgotten through node 1.
    let mut with_five = peers();
    with_five.extend(["--cluster-peer".to_owned(), format!("charon-5@localhost=127.0.0.1:{}", cluster_port(5))]);
    let mut fifth = start(5, &dir.path().join("node-5"), &secret, &with_five);
    eventually_named(&fifth, "prod-2");
    let five: Vec<String> = [1, 2, 3, 5].iter().map(|n| format!("charon-{n}@localhost")).collect();
    until(10, || {
        let status = cluster_status(&nodes[0]);
        holds(section(&status, "Running Nodes") == five, || format!("node 5 not listed running:\n{status}"))
    });
    let forget = |node: &Charon, name: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_charon"))
            .args(["ctl", "--url", &format!("http://127.0.0.1:{}", node.http_port), "forget_cluster_node", name])
            .output()
            .unwrap()
    };
    // Refused while it runs, with the reason.
    let refused = forget(&nodes[0], "charon-5@localhost");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("charon-5@localhost is running"), "{refused:?}");
    fifth.kill9();
    let mut removed = String::new();
    until(10, || {
        let done = forget(&nodes[0], "charon-5@localhost");
        removed = String::from_utf8_lossy(&done.stdout).trim().to_owned();
        holds(done.status.success(), || format!("{done:?}"))
    });
    assert_eq!(removed, "Removing node charon-5@localhost from the cluster");
    assert_eq!(section(&cluster_status(&nodes[1]), "Disk Nodes"), all);

    // A sixth node started alone, a cluster of its own with its own name, joins this one with
    // `charon ctl join_cluster` (reset first, as rabbitmqctl's): it takes this cluster's name,
    // and every node lists it; asked again, it is refused, being clustered.
    let alone = vec!["--cluster-peer".to_owned(), format!("charon-6@localhost=127.0.0.1:{}", cluster_port(6))];
    let mut sixth = start(6, &dir.path().join("node-6"), &secret, &alone);
    set_name_when_led(&sixth, "solo");
    let ctl = |node: &Charon, args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_charon"))
            .args(["ctl", "--url", &format!("http://127.0.0.1:{}", node.http_port)])
            .args(args)
            .output()
            .unwrap()
    };
    let target = format!("charon-1@localhost=127.0.0.1:{}", cluster_port(1));
    let joined = ctl(&sixth, &["join_cluster", &target]);
    assert!(joined.status.success(), "{joined:?}");
    assert_eq!(
        String::from_utf8_lossy(&joined.stdout).trim(),
        "Clustering node charon-6@localhost with charon-1@localhost"
    );
    eventually_named(&sixth, "prod-2");
    until(20, || {
        let status = cluster_status(&nodes[1]);
        let listed = section(&status, "Running Nodes").contains(&"charon-6@localhost".to_owned());
        holds(listed, || format!("node 6 not listed running:\n{status}"))
    });
    let again = ctl(&sixth, &["join_cluster", &target]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("already clustered with"), "{again:?}");
    sixth.kill9();
    until(10, || {
        let done = forget(&nodes[0], "charon-6@localhost");
        holds(done.status.success(), || format!("{done:?}"))
    });
    set_name_when_led(&nodes[2], "prod-3");
    eventually_named(&nodes[0], "prod-3");

    // A clustered node stops on SIGTERM as a single one does.
    nodes[1].terminate();
    assert_eq!(nodes[1].wait_exit(Duration::from_secs(20)), Some(true));
}

/// Routing rules that cut one node's cluster address off from the others' (both ways), taken
/// away when dropped. The nodes' connections leave from their cluster addresses, so rules by
/// source and destination address cut exactly the cluster traffic; the `local` table's rule
/// moves behind them meanwhile (it comes first on a fresh machine, before any `prohibit`).
struct Partition {
    rules: Vec<[String; 2]>,
}

fn ip_rule(args: &[&str]) -> bool {
    std::process::Command::new("ip").arg("rule").args(args).status().is_ok_and(|s| s.success())
}

impl Partition {
    fn cut(node: &str, others: &[&str]) -> Self {
        assert!(ip_rule(&["add", "pref", "100", "lookup", "local"]), "ip rule needs root");
        ip_rule(&["del", "pref", "0", "lookup", "local"]);
        let mut rules = Vec::new();
        for other in others {
            rules.push([(*node).to_owned(), (*other).to_owned()]);
            rules.push([(*other).to_owned(), (*node).to_owned()]);
        }
        for [from, to] in &rules {
            assert!(ip_rule(&["add", "pref", "10", "from", from, "to", to, "prohibit"]));
        }
        Self { rules }
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        for [from, to] in &self.rules {
            ip_rule(&["del", "pref", "10", "from", from, "to", to, "prohibit"]);
        }
        ip_rule(&["add", "pref", "0", "lookup", "local"]);
        ip_rule(&["del", "pref", "100", "lookup", "local"]);
    }
}

#[test]
fn a_node_cut_off_refuses_metadata_changes_and_catches_up_when_healed() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "PARTITIONCOOKIE").unwrap();
    let address = |n: u16| format!("127.0.0.2{n}");
    let peers: Vec<String> = (1..=3)
        .flat_map(|n| ["--cluster-peer".to_owned(), format!("charon-{n}@localhost={}:{}", address(n), 25910 + n)])
        .collect();
    let nodes: Vec<Charon> = (1..=3)
        .map(|n| {
            let mut args = vec![
                "--node-name".to_owned(),
                format!("charon-{n}@localhost"),
                "--cluster-listen".to_owned(),
                format!("{}:{}", address(n), 25910 + n),
                "--cluster-secret-file".to_owned(),
                secret.display().to_string(),
            ];
            args.extend(peers.iter().cloned());
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            Charon::start_on(&dir.path().join(format!("node-{n}")), &args)
        })
        .collect();
    set_name_when_led(&nodes[0], "before");
    eventually_named(&nodes[2], "before");

    on(&nodes[0], declare_exchange("before-x", ExchangeKind::Direct, true)).unwrap();
    eventually_exchange(&nodes[2], "before-x");
    on(&nodes[2], async |channel: Channel| {
        channel.queue_declare("kept-3".into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    });

    let partition = Partition::cut(&address(3), &[&address(1), &address(2)]);
    // The majority side goes on (after an election, if node 3 led); node 3 refuses, keeps
    // what it had and is seen down.
    set_name_when_led(&nodes[0], "during");
    let started = Instant::now();
    assert_eq!(set_name(&nodes[2], "minority"), 500);
    assert!(started.elapsed() < Duration::from_secs(15), "the refusal took {:?}", started.elapsed());
    assert_eq!(name_on(&nodes[2]), "before");
    // An exchange: RabbitMQ 4.3.6's answer on the minority side (observed: after 30 s there);
    // an equivalent redeclare of one it has is answered at once, as 4.3.6 answers it.
    let started = Instant::now();
    let refused = on(&nodes[2], declare_exchange("minority-x", ExchangeKind::Direct, false)).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(15), "the refusal took {:?}", started.elapsed());
    let expected =
        "INTERNAL_ERROR - failed to declare exchange 'minority-x' in vhost '/' because the operation timed out";
    assert!(refused.to_string().contains(expected), "{refused}");
    on(&nodes[2], declare_exchange("before-x", ExchangeKind::Direct, true)).unwrap();
    // Queues: a declare and a delete get RabbitMQ 4.3.6's answers there; the queue node 3
    // had before the cut keeps serving its clients.
    let declare = |name: &str| {
        let name = name.to_owned();
        async move |channel: Channel| {
            channel.queue_declare(name.as_str().into(), QueueDeclareOptions::default(), FieldTable::default()).await
        }
    };
    let refused = on(&nodes[2], declare("minority-q")).unwrap_err().to_string();
    let expected = "INTERNAL_ERROR - Could not declare queue 'minority-q' in vhost '/' on node \
                    'charon-3@localhost' because the metadata store operation timed out";
    assert!(refused.contains(expected), "{refused}");
    let refused = on(&nodes[2], async |channel: Channel| {
        let delete = channel.queue_delete("kept-3".into(), lapin::options::QueueDeleteOptions::default());
        delete.await.unwrap_err().to_string()
    });
    assert!(refused.contains("The operation to delete the queue from the metadata store timed out"), "{refused}");
    let served = on(&nodes[2], async |channel: Channel| {
        let props = BasicProperties::default();
        channel.basic_publish("".into(), "kept-3".into(), BasicPublishOptions::default(), b"k", props).await?.await?;
        let got = channel.basic_get("kept-3".into(), BasicGetOptions { no_ack: true }).await?;
        lapin::Result::Ok(got.map(|m| m.delivery.data))
    });
    assert_eq!(served.unwrap(), Some(b"k".to_vec()));
    eventually_named(&nodes[1], "during");
    eventually_runs(&nodes[0], "charon-3@localhost", false);

    // Healed: node 3 catches up and is seen again; the minority's attempt left no trace.
    drop(partition);
    eventually_named(&nodes[2], "during");
    eventually_runs(&nodes[0], "charon-3@localhost", true);
    set_name_when_led(&nodes[2], "after");
    eventually_named(&nodes[0], "after");
    let status = Call::api(nodes[2].http_port, "GET", "/api/exchanges/%2F/minority-x").send_blocking().status;
    assert_eq!(status, 404);
}

fn eventually_exchange(node: &Charon, name: &str) {
    let path = format!("/api/exchanges/%2F/{name}");
    until(20, || {
        let status = Call::api(node.http_port, "GET", &path).send_blocking().status;
        holds(status == 200, || format!("{path} on {} is {status}", node.http_port))
    });
}

/// A CA in `dir` (`ca.pem`) and, per node, a certificate it signed for `localhost` and
/// 127.0.0.1 (`node-N.pem`, `node-N.key`), good to connect and to accept.
fn pki(dir: &Path, nodes: u16) {
    use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    std::fs::write(dir.join("ca.pem"), ca_params.self_signed(&ca_key).unwrap().pem()).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    for n in 1..=nodes {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        std::fs::write(dir.join(format!("node-{n}.pem")), params.signed_by(&key, &issuer).unwrap().pem()).unwrap();
        std::fs::write(dir.join(format!("node-{n}.key")), key.serialize_pem()).unwrap();
    }
}

#[test]
fn nodes_with_tls_between_them_form_a_cluster_and_a_node_without_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "TLSCOOKIE").unwrap();
    pki(dir.path(), 3);
    let port = |n: u16| 25940 + n;
    let peers: Vec<String> = (1..=3)
        .flat_map(|n| ["--cluster-peer".to_owned(), format!("charon-{n}@localhost=127.0.0.1:{}", port(n))])
        .collect();
    let file = |name: String| dir.path().join(name).display().to_string();
    let start = |n: u16, tls: bool| {
        let mut args = vec![
            "--node-name".to_owned(),
            format!("charon-{n}@localhost"),
            "--cluster-listen".to_owned(),
            format!("127.0.0.1:{}", port(n)),
            "--cluster-secret-file".to_owned(),
            secret.display().to_string(),
        ];
        args.extend(peers.iter().cloned());
        if tls {
            for (flag, value) in [
                ("--cluster-tls", "true".to_owned()),
                ("--tls-cert", file(format!("node-{n}.pem"))),
                ("--tls-key", file(format!("node-{n}.key"))),
                ("--tls-ca", file("ca.pem".to_owned())),
                ("--tls-listen", "127.0.0.1:0".to_owned()),
                ("--https-listen", "127.0.0.1:0".to_owned()),
            ] {
                args.extend([flag.to_owned(), value]);
            }
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Charon::start_on(&dir.path().join(format!("node-{n}")), &args)
    };
    let mut nodes = vec![start(1, true), start(2, true)];
    set_name_when_led(&nodes[0], "encrypted");
    eventually_named(&nodes[1], "encrypted");

    // Node 3 without TLS (the secret alone) is refused by the others and joins nothing.
    let plain = start(3, false);
    until(20, || {
        let log = nodes[0].stderr();
        // Its plain handshake is no TLS record to node 1.
        let refused = log.contains("error=peer unreachable: received corrupt message of type InvalidContentType");
        holds(refused, || format!("node 1 did not refuse node 3:\n{log}"))
    });
    assert_eq!(name_on(&plain), "charon-3@localhost");
    drop(plain);
    // With TLS it comes in and gets the name.
    std::fs::remove_dir_all(dir.path().join("node-3")).unwrap();
    nodes.push(start(3, true));
    eventually_named(&nodes[2], "encrypted");
}

/// A queue declared on node 1 takes publishes through node 2, with their confirms, and serves
/// a consumer and a `basic.get` on node 3; the other nodes show it on node 1. With node 1
/// killed, node 3 answers RabbitMQ's "home node ... is down or inaccessible" and node 2 refuses
/// the confirms of what it could not hand over; node 1 back from its data directory serves the
/// queue again, its messages kept.
#[test]
fn a_queue_on_one_node_serves_publishers_and_consumers_on_the_others() {
    use futures_util::StreamExt;
    use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions, ConfirmSelectOptions};

    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "QUEUESCOOKIE").unwrap();
    let start = |n: u16| cluster_node(25920, n, dir.path(), &secret);
    let mut nodes: Vec<Charon> = (1..=3).map(start).collect();
    set_name_when_led(&nodes[0], "queues");

    // Zaqar's queue metadata, set through node 1's gateway, is node 2's and node 3's too.
    let zaqar = |node: &Charon, method: &str, path: &str, body: &str| {
        let call = Call::new(node.zaqar_port.unwrap(), method, path)
            .header("client-id", "0123456789abcdef0123456789abcdef")
            .header("x-project-id", "/")
            .header("content-type", "application/json");
        call.body(body).send_blocking()
    };
    // (Its dead-letter queue lives on node 2.)
    assert_eq!(zaqar(&nodes[1], "PUT", "/v2/queues/zdlq", "{}").status, 201);
    let metadata = r#"{"_max_claim_count": 3, "_dead_letter_queue": "zdlq", "team": "a"}"#;
    let created = zaqar(&nodes[0], "PUT", "/v2/queues/zq", metadata);
    assert_eq!(created.status, 201, "{created:?}");
    for node in [&nodes[1], &nodes[2]] {
        until(20, || {
            let shown = zaqar(node, "GET", "/v2/queues/zq", "");
            let there = shown.status == 200 && shown.json()["team"] == "a" && shown.json()["_max_claim_count"] == 3;
            holds(there, || format!("zq's metadata on {}: {shown:?}", node.http_port))
        });
    }

    // Its messages, whichever node is asked: posted through node 2, listed through node 3,
    // claimed through node 2 and deleted under that claim through node 3 (node 1 answers
    // each: the queue, its numbers and its claims are there).
    let posted =
        zaqar(&nodes[1], "POST", "/v2/queues/zq/messages", r#"{"messages":[{"body":1},{"body":2},{"body":3}]}"#);
    assert_eq!(posted.status, 201, "{posted:?}");
    let hrefs: Vec<String> =
        posted.json()["resources"].as_array().unwrap().iter().map(|h| h.as_str().unwrap().to_owned()).collect();
    assert_eq!(hrefs.len(), 3);
    let listed = zaqar(&nodes[2], "GET", "/v2/queues/zq/messages?echo=true", "");
    let bodies: Vec<i64> =
        listed.json()["messages"].as_array().unwrap().iter().map(|m| m["body"].as_i64().unwrap()).collect();
    assert_eq!(bodies, [1, 2, 3], "{listed:?}");
    let claimed = zaqar(&nodes[1], "POST", "/v2/queues/zq/claims?limit=2", r#"{"ttl":60,"grace":60}"#);
    assert_eq!(claimed.status, 201, "{claimed:?}");
    let href = claimed.json()["messages"][0]["href"].as_str().unwrap().to_owned();
    assert!(href.contains("claim_id="), "{href}");
    assert_eq!(zaqar(&nodes[2], "DELETE", &href, "").status, 204);
    let stats = zaqar(&nodes[0], "GET", "/v2/queues/zq/stats", "").json();
    assert_eq!((stats["messages"]["total"].clone(), stats["messages"]["claimed"].clone()), (2.into(), 1.into()));
    // Claimed and released through node 3 until their claim count moves them to the
    // dead-letter queue on node 2.
    let claim_of = |href: &str| href.rsplit("claim_id=").next().unwrap().to_owned();
    assert_eq!(zaqar(&nodes[2], "DELETE", &format!("/v2/queues/zq/claims/{}", claim_of(&href)), "").status, 204);
    for _ in 0..8 {
        let claimed = zaqar(&nodes[2], "POST", "/v2/queues/zq/claims?limit=10", r#"{"ttl":60,"grace":60}"#);
        if claimed.status == 204 {
            break;
        }
        assert_eq!(claimed.status, 201, "{claimed:?}");
        let claim = claim_of(claimed.json()["messages"][0]["href"].as_str().unwrap());
        assert_eq!(zaqar(&nodes[2], "DELETE", &format!("/v2/queues/zq/claims/{claim}"), "").status, 204);
    }
    let total = |queue: &str| {
        zaqar(&nodes[2], "GET", &format!("/v2/queues/{queue}/stats"), "").json()["messages"]["total"].clone()
    };
    assert_eq!((total("zq"), total("zdlq")), (0.into(), 2.into()));

    // Declared and bound on node 1; the other nodes show it there.
    on(&nodes[0], async |channel: Channel| {
        let durable = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
        channel.queue_declare("homed".into(), durable, FieldTable::default()).await.unwrap();
        let bind = QueueBindOptions::default();
        channel.queue_bind("homed".into(), "amq.direct".into(), "k".into(), bind, FieldTable::default()).await.unwrap();
    });
    for node in [&nodes[1], &nodes[2]] {
        until(20, || {
            let queue = Call::api(node.http_port, "GET", "/api/queues/%2F/homed").send_blocking();
            let homed = queue.status == 200 && queue.json()["node"] == "charon-1@localhost";
            holds(homed, || format!("homed on {}: {queue:?}", node.http_port))
        });
    }

    // 200 publishes through node 2, by name and through the binding, all confirmed.
    let publish_on = |node: &Charon, count: usize| {
        let publish = async move |channel: Channel| {
            channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
            let mut confirms = Vec::new();
            for i in 0..count {
                let (exchange, key) = if i % 2 == 0 { ("", "homed") } else { ("amq.direct", "k") };
                let body = format!("m-{i}");
                let options = BasicPublishOptions::default();
                let props = BasicProperties::default().with_delivery_mode(2);
                let sent = channel.basic_publish(exchange.into(), key.into(), options, body.as_bytes(), props);
                confirms.push(sent.await.unwrap());
            }
            let mut acked = 0;
            for confirm in confirms {
                acked += usize::from(confirm.await.unwrap().is_ack());
            }
            acked
        };
        on(node, publish)
    };
    assert_eq!(publish_on(&nodes[1], 200), 200);
    let depth = |node: &Charon| {
        let queue = Call::api(node.http_port, "GET", "/api/queues/%2F/homed").send_blocking().json();
        (queue["messages"].as_u64(), queue["state"].as_str().map(str::to_owned))
    };
    assert_eq!(depth(&nodes[0]).0, Some(200));
    assert_eq!(depth(&nodes[2]).0, Some(200));

    // Node 3 consumes 150 (prefetch 10), in order, acknowledging each, and gets one more.
    let consumed = on(&nodes[2], async |channel: Channel| {
        channel.basic_qos(10, BasicQosOptions::default()).await.unwrap();
        let options = BasicConsumeOptions::default();
        let mut consumer =
            channel.basic_consume("homed".into(), "c3".into(), options, FieldTable::default()).await.unwrap();
        let mut bodies = Vec::new();
        while bodies.len() < 150 {
            let delivery = consumer.next().await.unwrap().unwrap();
            bodies.push(String::from_utf8(delivery.data.clone()).unwrap());
            delivery.ack(BasicAckOptions::default()).await.unwrap();
        }
        channel.basic_cancel("c3".into(), lapin::options::BasicCancelOptions::default()).await.unwrap();
        let got = channel.basic_get("homed".into(), BasicGetOptions { no_ack: false }).await.unwrap().unwrap();
        let last = String::from_utf8(got.delivery.data.clone()).unwrap();
        got.delivery.ack(BasicAckOptions::default()).await.unwrap();
        (bodies, last, got.message_count)
    });
    let expected: Vec<String> = (0..150).map(|i| format!("m-{i}")).collect();
    assert_eq!(consumed.0, expected);
    // The ten the consumer held unacknowledged when it was cancelled stay with its channel
    // (as RabbitMQ keeps them), so the get takes the next; they go back when it closes.
    assert_eq!((consumed.1.as_str(), consumed.2), ("m-160", 39));
    until(10, || {
        let now = depth(&nodes[0]).0;
        holds(now == Some(49), || format!("node 1 holds {now:?} messages, not 49"))
    });

    // Node 1 dies: node 3 gets RabbitMQ's answer, node 2's publishes are refused, and the
    // queue is listed down.
    nodes[0].kill9();
    let refused = on(&nodes[2], async |channel: Channel| {
        let passive = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
        channel.queue_declare("homed".into(), passive, FieldTable::default()).await.unwrap_err().to_string()
    });
    let expected =
        "NOT_FOUND - home node 'charon-1@localhost' of durable queue 'homed' in vhost '/' is down or inaccessible";
    assert!(refused.contains(expected), "{refused}");
    assert_eq!(publish_on(&nodes[1], 4), 0);
    assert_eq!(depth(&nodes[1]).1.as_deref(), Some("down"));

    // Back from its data directory, node 1 serves the queue again, its messages kept.
    nodes[0] = start(1);
    until(30, || {
        let now = depth(&nodes[2]);
        holds(now == (Some(49), Some("running".to_owned())), || format!("homed seen from node 3: {now:?}"))
    });
    assert_eq!(publish_on(&nodes[1], 2), 2);
    until(10, || holds(depth(&nodes[0]).0 == Some(51), || format!("node 1: {:?}", depth(&nodes[0]))));

    // AMQP 1.0 the same way, to a queue of its own on node 1: 20 sent through node 2, received
    // on node 3 with credit 5, every other one rejected (discarded), none left on node 1.
    on(&nodes[0], async |channel: Channel| {
        channel.queue_declare("homed-10".into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    });
    eventually_queue(&nodes[1], "homed-10");
    eventually_queue(&nodes[2], "homed-10");
    // RabbitMQ's balanced locator: declared through node 1, which has the most queues, the
    // queue goes to the node with the fewest (node 3: node 2 has Zaqar's dead-letter queue too).
    let balanced =
        support::field_table(&[("x-queue-leader-locator", lapin::types::AMQPValue::LongString("balanced".into()))]);
    on(&nodes[0], async |channel: Channel| {
        channel.queue_declare("placed".into(), QueueDeclareOptions::default(), balanced).await.unwrap();
    });
    let placed = Call::api(nodes[0].http_port, "GET", "/api/queues/%2F/placed").send_blocking().json();
    assert_eq!(placed["node"], "charon-3@localhost", "{placed}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        use fe2o3_amqp::{Receiver, Sender, Session};
        let mut to = nodes[1].open_amqp10("sender-2").await;
        let mut session = Session::begin(&mut to).await.unwrap();
        let mut sender = Sender::attach(&mut session, "s", "/queues/homed-10").await.unwrap();
        for i in 0..20 {
            sender.send(format!("one-{i}")).await.unwrap().accepted_or("refused").unwrap();
        }
        let mut from = nodes[2].open_amqp10("receiver-3").await;
        let mut session = Session::begin(&mut from).await.unwrap();
        let mut receiver = Receiver::builder()
            .name("r")
            .source("/queues/homed-10")
            .credit_mode(fe2o3_amqp::link::receiver::CreditMode::Auto(5))
            .attach(&mut session)
            .await
            .unwrap();
        for i in 0..20 {
            let delivery = tokio::time::timeout(Duration::from_secs(10), receiver.recv::<String>()).await;
            let delivery = delivery.unwrap().unwrap();
            assert_eq!(delivery.body(), &format!("one-{i}"));
            match i % 2 {
                0 => receiver.accept(&delivery).await.unwrap(),
                _ => receiver.reject(&delivery, None).await.unwrap(),
            }
        }
        receiver.close().await.unwrap();
    });
    until(10, || {
        let queue = Call::api(nodes[0].http_port, "GET", "/api/queues/%2F/homed-10").send_blocking().json();
        holds(queue["messages"] == 0, || format!("homed-10 on node 1 after the 1.0 run: {queue}"))
    });

    // Deleted through node 2: gone from every node.
    on(&nodes[1], async |channel: Channel| {
        let deleted = channel.queue_delete("homed".into(), lapin::options::QueueDeleteOptions::default()).await;
        assert_eq!(deleted.unwrap(), 51);
    });
    let gone_everywhere = |nodes: &[Charon], name: &str| {
        for node in nodes {
            let path = format!("/api/queues/%2F/{name}");
            until(20, || {
                let status = Call::api(node.http_port, "GET", &path).send_blocking().status;
                holds(status == 404, || format!("{name} still on {}: {status}", node.http_port))
            });
        }
    };
    gone_everywhere(&nodes, "homed");

    // An exclusive, server-named queue of a connection on node 3 (an RPC client's reply
    // queue) takes a reply published on node 2; a connection on node 2 may not consume it
    // (405, as RabbitMQ); it goes from every node with its connection.
    let (owner, owned) = runtime.block_on(channel(&nodes[2]));
    let exclusive = QueueDeclareOptions { exclusive: true, ..QueueDeclareOptions::default() };
    let reply_queue = runtime.block_on(owned.queue_declare("".into(), exclusive, FieldTable::default())).unwrap();
    let reply_queue = reply_queue.name().to_string();
    let bind = QueueBindOptions::default();
    let bound = owned.queue_bind(
        reply_queue.as_str().into(),
        "amq.direct".into(),
        "replies".into(),
        bind,
        FieldTable::default(),
    );
    runtime.block_on(bound).unwrap();
    until(20, || {
        let queue = Call::api(nodes[1].http_port, "GET", &format!("/api/queues/%2F/{reply_queue}")).send_blocking();
        let there = queue.status == 200 && queue.json()["exclusive"] == true;
        holds(there, || format!("{reply_queue} on node 2: {queue:?}"))
    });
    let locked = on(&nodes[1], async |channel: Channel| {
        // Through its binding, made by its owner on node 3.
        let props = BasicProperties::default();
        channel
            .basic_publish("amq.direct".into(), "replies".into(), BasicPublishOptions::default(), b"reply", props)
            .await?
            .await?;
        let key = reply_queue.as_str();
        let options = BasicConsumeOptions::default();
        channel.basic_consume(key.into(), "thief".into(), options, FieldTable::default()).await.map(drop)
    });
    let locked = locked.unwrap_err().to_string();
    assert!(locked.contains("RESOURCE_LOCKED - cannot obtain exclusive access to locked queue"), "{locked}");
    let reply = runtime.block_on(async {
        for _ in 0..100 {
            let got = owned.basic_get(reply_queue.as_str().into(), BasicGetOptions { no_ack: true }).await.unwrap();
            if let Some(got) = got {
                return Some(got.delivery.data);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    });
    assert_eq!(reply, Some(b"reply".to_vec()));
    runtime.block_on(owner.close(200, "bye".into())).unwrap();
    gone_everywhere(&nodes, &reply_queue);

    // Direct reply-to across nodes: a client on node 3 asks through a queue a server on node 2
    // reads, and gets the reply the server publishes on node 2 to its address; node 2 finds
    // the address live (a passive declare), and not once the client is gone.
    let (client, asking) = runtime.block_on(channel(&nodes[2]));
    let address = runtime.block_on(async {
        let no_ack = BasicConsumeOptions { no_ack: true, ..BasicConsumeOptions::default() };
        let replies =
            asking.basic_consume("amq.rabbitmq.reply-to".into(), "rpc".into(), no_ack, FieldTable::default()).await?;
        asking.queue_declare("rpc-requests".into(), QueueDeclareOptions::default(), FieldTable::default()).await?;
        let props = BasicProperties::default().with_reply_to("amq.rabbitmq.reply-to".into());
        asking.basic_publish("".into(), "rpc-requests".into(), BasicPublishOptions::default(), b"ask", props).await?;
        lapin::Result::Ok(replies)
    });
    let mut replies = address.unwrap();
    let server = on(&nodes[1], async |channel: Channel| {
        for _ in 0..100 {
            let got = channel.basic_get("rpc-requests".into(), BasicGetOptions { no_ack: true }).await?;
            if let Some(request) = got {
                let to = request.delivery.properties.reply_to().clone().unwrap().to_string();
                let passive = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
                channel.queue_declare(to.as_str().into(), passive, FieldTable::default()).await?;
                let props = BasicProperties::default();
                channel
                    .basic_publish("".into(), to.as_str().into(), BasicPublishOptions::default(), b"answer", props)
                    .await?;
                return lapin::Result::Ok(to);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("no request reached the server on node 2")
    });
    let to = server.unwrap();
    assert!(to.starts_with("amq.rabbitmq.reply-to."), "{to}");
    let answer = runtime.block_on(async {
        let next = tokio::time::timeout(Duration::from_secs(10), replies.next()).await;
        next.ok().flatten().map(|delivery| delivery.unwrap().data)
    });
    assert_eq!(answer, Some(b"answer".to_vec()));
    runtime.block_on(client.close(200, "bye".into())).unwrap();
    // An address naming no member of the cluster (a client's forgery): a reply to it is
    // dropped, and it is not found.
    let forged = "amq.rabbitmq.reply-to.AQEBAQEBAQEBAQEBAQEBAQEBAQE=.AgICAgICAgICAgICAgICAg==";
    let refused = on(&nodes[1], async |channel: Channel| {
        let props = BasicProperties::default();
        channel.basic_publish("".into(), forged.into(), BasicPublishOptions::default(), b"x", props).await.unwrap();
        let passive = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
        channel.queue_declare(forged.into(), passive, FieldTable::default()).await.unwrap_err().to_string()
    });
    assert!(refused.contains("NOT_FOUND"), "{refused}");
    let gone = on(&nodes[1], async |channel: Channel| {
        let passive = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
        channel.queue_declare(to.as_str().into(), passive, FieldTable::default()).await.unwrap_err().to_string()
    });
    assert!(gone.contains("NOT_FOUND"), "{gone}");
}

/// Dead letters from a queue on node 1 into a queue on node 2 lose nothing when either node
/// is killed with `kill -9` while they move: the source keeps each one until the target
/// confirmed it (Charon's crash-atomic forwarding, across nodes), then sends it again.
#[test]
fn dead_letters_into_another_nodes_queue_survive_a_kill_9_of_either_node() {
    use std::collections::BTreeSet;

    use futures_util::StreamExt;
    use lapin::options::{BasicConsumeOptions, ConfirmSelectOptions};
    use lapin::types::AMQPValue;

    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "DEADLETTERCOOKIE").unwrap();
    let start = |n: u16| cluster_node(25960, n, dir.path(), &secret);
    let mut nodes: Vec<Charon> = (1..=3).map(start).collect();
    set_name_when_led(&nodes[0], "dead-letters");
    let durable = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
    on(&nodes[1], async |channel: Channel| {
        channel.queue_declare("dlq".into(), durable, FieldTable::default()).await.unwrap();
        declare_exchange("dlx", ExchangeKind::Direct, true)(channel.clone()).await.unwrap();
        let bind = QueueBindOptions::default();
        channel.queue_bind("dlq".into(), "dlx".into(), "dead".into(), bind, FieldTable::default()).await.unwrap();
    });
    eventually_queue(&nodes[0], "dlq");
    until(20, || {
        let bindings = Call::api(nodes[0].http_port, "GET", "/api/bindings/%2F/e/dlx/q/dlq").send_blocking().json();
        holds(bindings.as_array().is_some_and(|b| !b.is_empty()), || format!("dlx -> dlq on node 1: {bindings}"))
    });
    // Messages die 300 ms after they arrive, through an exchange into the queue on node 2
    // (after a restart, node 1 routes them there from what it restored).
    let arguments = support::field_table(&[
        ("x-message-ttl", AMQPValue::LongInt(300)),
        ("x-dead-letter-exchange", AMQPValue::LongString("dlx".into())),
        ("x-dead-letter-routing-key", AMQPValue::LongString("dead".into())),
    ]);
    on(&nodes[0], async |channel: Channel| {
        channel.queue_declare("src".into(), durable, arguments).await.unwrap();
    });
    let publish = |node: &Charon, prefix: &'static str, count: usize| {
        on(node, async move |channel: Channel| {
            channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
            let mut confirms = Vec::new();
            for i in 0..count {
                let body = format!("{prefix}-{i}");
                let props = BasicProperties::default().with_delivery_mode(2);
                let sent = channel.basic_publish(
                    "".into(),
                    "src".into(),
                    BasicPublishOptions::default(),
                    body.as_bytes(),
                    props,
                );
                confirms.push(sent.await.unwrap());
            }
            for confirm in confirms {
                assert!(confirm.await.unwrap().is_ack());
            }
        });
    };
    let count = 1000;
    // The target's node dies as the letters start to die, and comes back.
    publish(&nodes[0], "a", count);
    nodes[1].kill9();
    eventually_runs(&nodes[0], "charon-2@localhost", false);
    nodes[1] = start(2);
    // The source's node dies while they move, and comes back.
    publish(&nodes[0], "b", count);
    std::thread::sleep(Duration::from_millis(200));
    nodes[0].kill9();
    nodes[0] = start(1);

    // Every confirmed message is in the dead-letter queue, some perhaps twice.
    let expected: BTreeSet<String> =
        ["a", "b"].iter().flat_map(|p| (0..count).map(move |i| format!("{p}-{i}"))).collect();
    let got = on(&nodes[2], async |channel: Channel| {
        let options = BasicConsumeOptions { no_ack: true, ..BasicConsumeOptions::default() };
        let mut consumer =
            channel.basic_consume("dlq".into(), "all".into(), options, FieldTable::default()).await.unwrap();
        let mut got = BTreeSet::new();
        while got.len() < 2 * count {
            let next = tokio::time::timeout(Duration::from_secs(30), consumer.next()).await;
            let Ok(Some(Ok(delivery))) = next else { break };
            got.insert(String::from_utf8(delivery.data).unwrap());
        }
        got
    });
    let lost: Vec<&String> = expected.difference(&got).collect();
    let depth = |path: &str| Call::api(nodes[0].http_port, "GET", path).send_blocking().json()["messages"].clone();
    let src = depth("/api/queues/%2F/src");
    let fallback = depth("/api/queues/%2F/amq.charon.dead-letters");
    assert!(
        lost.is_empty(),
        "{} lost, e.g. {:?}; src {src}, fallback {fallback}, got {}",
        lost.len(),
        lost.first(),
        got.len()
    );
}

/// Starts node `n` of a three-node cluster on 127.0.0.1 whose cluster ports are `base + 1`
/// to `base + 3`, its data in `dir/node-n`.
fn cluster_node(base: u16, n: u16, dir: &Path, secret: &Path) -> Charon {
    let peers: Vec<String> = (1..=3)
        .flat_map(|m| ["--cluster-peer".to_owned(), format!("charon-{m}@localhost=127.0.0.1:{}", base + m)])
        .collect();
    let mut args = vec![
        "--node-name".to_owned(),
        format!("charon-{n}@localhost"),
        "--cluster-listen".to_owned(),
        format!("127.0.0.1:{}", base + n),
        "--cluster-secret-file".to_owned(),
        secret.display().to_string(),
    ];
    args.extend(peers);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Charon::start_on(&dir.join(format!("node-{n}")), &args)
}

fn eventually_queue(node: &Charon, name: &str) {
    let path = format!("/api/queues/%2F/{name}");
    until(20, || {
        let status = Call::api(node.http_port, "GET", &path).send_blocking().status;
        holds(status == 200, || format!("{path} on {} is {status}", node.http_port))
    });
}

/// The redrive jobs of `node`'s `/api/charon/redrives`, by id.
fn jobs_on(node: &Charon) -> std::collections::BTreeMap<String, serde_json::Value> {
    let jobs = Call::api(node.http_port, "GET", "/api/charon/redrives").send_blocking().json();
    let jobs = jobs.as_array().cloned().unwrap_or_default();
    jobs.into_iter().map(|job| (job["id"].as_str().unwrap_or_default().to_owned(), job)).collect()
}

/// Waits until `node` lists job `id` with `field` equal to `value` (`null`: not at all).
fn eventually_job(node: &Charon, id: &str, field: &str, value: &serde_json::Value) {
    until(30, || {
        let job = jobs_on(node).remove(id);
        let now = job.as_ref().map_or(serde_json::Value::Null, |job| job[field].clone());
        holds(now == *value, || format!("job {id} on {}: {field} is {now}, not {value}", node.http_port))
    });
}

#[test]
fn the_dead_letter_browser_and_redrive_jobs_work_from_any_node() {
    use serde_json::json;

    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "REDRIVECOOKIE").unwrap();
    let start = |n: u16| cluster_node(25980, n, dir.path(), &secret);
    let mut nodes: Vec<Charon> = (1..=3).map(start).collect();
    set_name_when_led(&nodes[0], "redrives");
    let durable = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
    let count = 300;
    // `dlq` on node 1, `back` on node 2.
    on(&nodes[1], async |channel: Channel| {
        channel.queue_declare("back".into(), durable, FieldTable::default()).await.unwrap();
    });
    on(&nodes[0], async |channel: Channel| {
        channel.queue_declare("dlq".into(), durable, FieldTable::default()).await.unwrap();
        let props = BasicProperties::default().with_delivery_mode(2);
        for i in 0..count {
            let body = format!("m-{i}");
            let sent = channel.basic_publish(
                "".into(),
                "dlq".into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                props.clone(),
            );
            sent.await.unwrap();
        }
    });
    let depth = |node: &Charon, queue: &str| {
        let queue = Call::api(node.http_port, "GET", &format!("/api/queues/%2F/{queue}")).send_blocking().json();
        queue["messages"].as_u64().unwrap_or(u64::MAX)
    };
    until(20, || holds(depth(&nodes[0], "dlq") == count, || format!("dlq holds {}", depth(&nodes[0], "dlq"))));

    // The dead-letter browser of node 1's queue, through the others: a page through node 2,
    // one message deleted through node 3, one moved to `back` through node 2.
    let browse = "/api/charon/queues/%2F/dlq/messages";
    let page = Call::api(nodes[1].http_port, "GET", &format!("{browse}?page_size=3")).send_blocking();
    assert_eq!(page.status, 200, "{page:?}");
    let items = page.json()["items"].as_array().unwrap().clone();
    let payloads: Vec<&str> = items.iter().map(|i| i["payload"].as_str().unwrap()).collect();
    assert_eq!(payloads, ["m-0", "m-1", "m-2"]);
    let ids: Vec<&str> = items.iter().map(|i| i["id"].as_str().unwrap()).collect();
    let delete = json!({"ids": [ids[0]]}).to_string();
    let deleted = Call::api(nodes[2].http_port, "POST", &format!("{browse}/delete")).body(delete).send_blocking();
    assert_eq!((deleted.status, deleted.json()), (200, json!({"deleted": 1})));
    let move_one = json!({"ids": [ids[1]], "destination": {"type": "queue", "queue": "back"}}).to_string();
    let moved = Call::api(nodes[1].http_port, "POST", &format!("{browse}/move")).body(move_one).send_blocking();
    assert_eq!((moved.status, moved.json()), (200, json!({"moved": 1, "failed": 0})));
    let count = count - 2;
    until(20, || holds(depth(&nodes[1], "back") == 1, || format!("back holds {}", depth(&nodes[1], "back"))));

    // A job made on node 3 (40 messages a second: it runs for a while), which runs it through
    // the proxies of `dlq` and `back`, is on every node.
    let spec = json!({"source": "dlq", "destination": {"type": "queue", "queue": "back"}, "rate": 40}).to_string();
    let created = Call::api(nodes[2].http_port, "POST", "/api/charon/redrives/%2F").body(spec.clone()).send_blocking();
    assert_eq!(created.status, 201, "{created:?}");
    let id = created.json()["id"].as_str().unwrap().to_owned();
    for node in &nodes[..2] {
        eventually_job(node, &id, "node", &json!("charon-3@localhost"));
    }
    // Another on the same source, asked on node 2, is refused as it would be on node 3.
    let second = Call::api(nodes[1].http_port, "POST", "/api/charon/redrives/%2F").body(spec).send_blocking();
    assert_eq!(second.status, 409, "{second:?}");
    assert!(second.json()["reason"].as_str().unwrap().contains(&id), "{second:?}");

    // Paused through node 1, resumed through node 2: node 3 does it, every node shows it.
    let control = |node: &Charon, action: &str| {
        Call::api(node.http_port, "POST", &format!("/api/charon/redrives/%2F/{id}/{action}")).send_blocking()
    };
    let paused = control(&nodes[0], "pause");
    assert_eq!((paused.status, paused.json()["state"].clone()), (200, json!("paused")), "{paused:?}");
    for node in &nodes {
        eventually_job(node, &id, "state", &json!("paused"));
    }
    let resumed = control(&nodes[1], "resume");
    assert_eq!((resumed.status, resumed.json()["state"].clone()), (200, json!("running")), "{resumed:?}");
    eventually_job(&nodes[0], &id, "state", &json!("running"));
    until(20, || holds(depth(&nodes[1], "back") > 1, || "nothing moved yet".to_owned()));

    // Its node killed: the others still list it; a pause asked of them is 503, a delete 409.
    nodes[2].kill9();
    eventually_runs(&nodes[0], "charon-3@localhost", false);
    assert_eq!(jobs_on(&nodes[0])[&id]["state"], "running");
    let unavailable = control(&nodes[0], "pause");
    assert_eq!((unavailable.status, unavailable.json()["error"].clone()), (503, json!("service_unavailable")));
    let path = format!("/api/charon/redrives/%2F/{id}");
    assert_eq!(Call::api(nodes[1].http_port, "DELETE", &path).send_blocking().status, 409);

    // Back from its store, it finishes; every node sees it completed, every message moved.
    nodes[2] = start(3);
    for node in &nodes[..2] {
        eventually_job(node, &id, "state", &json!("completed"));
    }
    // Its counts as its node has them (counted since the last save before the kill: a few
    // moves of the killed run may be uncounted, none lost).
    let progress = jobs_on(&nodes[2])[&id]["progress"].clone();
    eventually_job(&nodes[0], &id, "progress", &progress);
    assert!(progress["moved"].as_u64().unwrap() > count / 2, "{progress}");
    until(20, || holds(depth(&nodes[1], "back") > count, || format!("back holds {}", depth(&nodes[1], "back"))));
    assert_eq!(depth(&nodes[0], "dlq"), 0);

    // Deleted through node 1: gone everywhere, and not restored when its node starts again.
    assert_eq!(Call::api(nodes[0].http_port, "DELETE", &path).send_blocking().status, 204);
    for node in &nodes {
        eventually_job(node, &id, "id", &serde_json::Value::Null);
    }
    nodes[2].kill9();
    nodes[2] = start(3);
    eventually_queue(&nodes[2], "back");
    assert_eq!(Call::api(nodes[2].http_port, "GET", &path).send_blocking().status, 404);

    // A job whose node leaves the cluster for good runs nowhere: another node cancels it (its
    // record says so) and deletes it.
    on(&nodes[0], async |channel: Channel| {
        for i in 0..5 {
            let props = BasicProperties::default().with_delivery_mode(2);
            let body = format!("late-{i}");
            channel
                .basic_publish("".into(), "dlq".into(), BasicPublishOptions::default(), body.as_bytes(), props)
                .await
                .unwrap();
        }
    });
    let slow = json!({"source": "dlq", "destination": {"type": "queue", "queue": "back"}, "rate": 1}).to_string();
    let created = Call::api(nodes[2].http_port, "POST", "/api/charon/redrives/%2F").body(slow).send_blocking();
    assert_eq!(created.status, 201, "{created:?}");
    let orphan = created.json()["id"].as_str().unwrap().to_owned();
    eventually_job(&nodes[0], &orphan, "state", &json!("running"));
    nodes[2].kill9();
    until(20, || {
        let done = std::process::Command::new(env!("CARGO_BIN_EXE_charon"))
            .args(["ctl", "--url", &format!("http://127.0.0.1:{}", nodes[0].http_port)])
            .args(["forget_cluster_node", "charon-3@localhost"])
            .output()
            .unwrap();
        holds(done.status.success(), || format!("{done:?}"))
    });
    let path = format!("/api/charon/redrives/%2F/{orphan}");
    let cancelled = Call::api(nodes[1].http_port, "POST", &format!("{path}/cancel")).send_blocking();
    assert_eq!((cancelled.status, cancelled.json()["state"].clone()), (200, json!("cancelled")), "{cancelled:?}");
    eventually_job(&nodes[0], &orphan, "state", &json!("cancelled"));
    assert_eq!(Call::api(nodes[0].http_port, "DELETE", &path).send_blocking().status, 204);
    eventually_job(&nodes[1], &orphan, "id", &serde_json::Value::Null);
}

/// Issue 42, item 1: a quorum queue is a Raft group of three members; its home confirms a
/// publish once a majority of them has it on disk, and a home restarted with `kill -9` takes
/// its queue back from the group.
#[test]
fn a_quorum_queue_confirms_once_a_majority_of_its_members_has_the_message() {
    use lapin::options::ConfirmSelectOptions;
    use lapin::types::AMQPValue;
    use serde_json::json;

    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "QUORUMQUEUECOOKIE").unwrap();
    let start = |n: u16| cluster_node(26010, n, dir.path(), &secret);
    let mut nodes: Vec<Charon> = (1..=3).map(start).collect();
    set_name_when_led(&nodes[0], "quorum");
    let durable = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
    let quorum = support::field_table(&[("x-queue-type", AMQPValue::LongString("quorum".into()))]);
    on(&nodes[0], async |channel: Channel| {
        channel.queue_declare("qq".into(), durable, quorum).await.unwrap();
    });
    for node in &nodes {
        eventually_queue(node, "qq");
    }
    // Every member keeps the queue's group.
    for n in 1..=3 {
        let groups = dir.path().join(format!("node-{n}/cluster/quorum"));
        until(10, || {
            let files = std::fs::read_dir(&groups).map(|d| d.count()).unwrap_or(0);
            holds(files == 1, || format!("{} holds {files} group files", groups.display()))
        });
    }
    // The queue's members as RabbitMQ 4.3.6 lists them, from any node; its group's members'
    // Raft states, the home leading (it asks to).
    let names: Vec<String> = (1..=3).map(|n| format!("charon-{n}@localhost")).collect();
    until(10, || {
        let queue = Call::api(nodes[1].http_port, "GET", "/api/queues/%2F/qq").send_blocking().json();
        let shown = (&queue["leader"], &queue["members"], &queue["online"]);
        holds(shown == (&json!(names[0]), &json!(names), &json!(names)), || format!("{queue}"))
    });
    until(20, || {
        let status = Call::api(nodes[2].http_port, "GET", "/api/queues/quorum/%2F/qq/status").send_blocking().json();
        let states: Vec<(String, String)> = status
            .as_array()
            .map(|members| {
                let field = |m: &serde_json::Value, key: &str| m[key].as_str().unwrap_or_default().to_owned();
                members.iter().map(|m| (field(m, "Node Name"), field(m, "Raft State"))).collect()
            })
            .unwrap_or_default();
        let expected: Vec<(String, String)> =
            names.iter().zip(["leader", "follower", "follower"]).map(|(n, s)| (n.clone(), s.to_owned())).collect();
        holds(states == expected, || format!("member states {status}"))
    });
    let health = |node: &Charon, path: &str| {
        let reply = Call::api(node.http_port, "GET", &format!("/api/health/checks/{path}")).send_blocking();
        (reply.status, reply.json())
    };
    assert_eq!(health(&nodes[0], "node-is-quorum-critical"), (200, json!({"status": "ok"})));
    let props = BasicProperties::default().with_delivery_mode(2);
    let publish = |node: &Charon, range: std::ops::Range<usize>| {
        on(node, async |channel: Channel| {
            channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
            let mut confirms = Vec::new();
            for i in range {
                let body = format!("m-{i}");
                let sent = channel.basic_publish(
                    "".into(),
                    "qq".into(),
                    BasicPublishOptions::default(),
                    body.as_bytes(),
                    props.clone(),
                );
                confirms.push(sent.await.unwrap());
            }
            for confirm in confirms {
                assert!(confirm.await.unwrap().is_ack());
            }
        });
    };
    publish(&nodes[0], 0..100);

    // Both other members down: the home has the message on its disk, but no majority does, and
    // no confirm comes; one member back, and it does.
    nodes[1].kill9();
    nodes[2].kill9();
    // One runtime for the connection and the wait for its confirm.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (connection, channel, confirm) = runtime.block_on(async {
        let (connection, channel) = channel(&nodes[0]).await;
        channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
        let sent =
            channel.basic_publish("".into(), "qq".into(), BasicPublishOptions::default(), b"m-100", props.clone());
        let confirm = sent.await.unwrap();
        (connection, channel, confirm)
    });
    let mut confirm = Box::pin(confirm);
    let early = runtime.block_on(async { tokio::time::timeout(Duration::from_secs(3), &mut confirm).await });
    assert!(early.is_err(), "confirmed without a majority: {early:?}");
    // Meanwhile the home shows the queue in a minority and without a leader, as RabbitMQ does.
    let listed = json!([{
        "name": "qq",
        "readable_name": "queue 'qq' in vhost '/'",
        "type": "rabbit_quorum_queue",
        "virtual_host": "/",
    }]);
    let without = health(&nodes[0], "quorum-queues-without-elected-leaders/all-vhosts/");
    let reason = "Detected quorum queues without an elected leader";
    assert_eq!(without, (503, json!({"status": "failed", "reason": reason, "queues": listed})));
    let queue = Call::api(nodes[0].http_port, "GET", "/api/queues/%2F/qq").send_blocking().json();
    assert_eq!((&queue["state"], &queue["online"]), (&json!("minority"), &json!([names[0]])));
    nodes[1] = start(2);
    let late = runtime.block_on(async { tokio::time::timeout(Duration::from_secs(30), &mut confirm).await });
    assert!(late.expect("confirmed once a majority has it").unwrap().is_ack());
    drop((channel, connection));
    // Two of three up: either one's stop would lose the majority, the metadata's too.
    let (status, critical) = health(&nodes[0], "node-is-quorum-critical");
    assert_eq!(
        (status, &critical["queues"][0], &critical["queues"][1]["name"]),
        (503, &listed[0], &json!("rabbitmq_metadata"))
    );
    assert_eq!(health(&nodes[0], "quorum-queues-without-elected-leaders/vhost/%2F/").0, 200);

    nodes[2] = start(3);

    // The home dies: a member takes the queue over, with every confirmed message, and takes
    // publishes; the old home comes back as a proxy for the new one.
    nodes[0].kill9();
    // Gets until `count` came, on a new channel after an error (a get that reached the old
    // home's proxy closes its channel).
    let get_all = |node: &Charon, count: usize| {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while got.len() < count && Instant::now() < deadline {
            on(node, async |channel: Channel| {
                while got.len() < count && Instant::now() < deadline {
                    match channel.basic_get("qq".into(), BasicGetOptions { no_ack: true }).await {
                        Ok(Some(message)) => got.push(String::from_utf8(message.delivery.data.clone()).unwrap()),
                        Ok(None) => tokio::time::sleep(Duration::from_millis(100)).await,
                        Err(_) => break,
                    }
                }
            });
            std::thread::sleep(Duration::from_millis(100));
        }
        got
    };
    let got = get_all(&nodes[1], 101);
    let expected: Vec<String> = (0..=100).map(|i| format!("m-{i}")).collect();
    assert_eq!(got, expected);
    publish(&nodes[2], 200..210);
    nodes[0] = start(1);
    let queue = Call::api(nodes[1].http_port, "GET", "/api/queues/%2F/qq").send_blocking().json();
    assert_ne!(queue["node"], "charon-1@localhost", "{queue}");
    let got = get_all(&nodes[0], 10);
    let expected: Vec<String> = (200..210).map(|i| format!("m-{i}")).collect();
    assert_eq!(got, expected);
}

/// Issue 42 item 6, the short run: `scripts/jepsen-queue.py` against three nodes of this build,
/// three `kill -9`s of the quorum queue's leader's node under confirmed publishing; every
/// confirmed message is drained at the end (lost 0, unexpected 0). The long run, with
/// partitions, is the same script (docs/clustering.md).
#[test]
fn a_short_jepsen_run_of_leader_kills_loses_no_confirmed_message() {
    let python = std::env::var("CHARON_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| support::workspace_root().join(".venv/bin/python"));
    assert!(python.exists(), "{} is missing: run scripts/test.sh or set CHARON_PYTHON", python.display());
    let root = support::workspace_root();
    let output = std::process::Command::new(python)
        .current_dir(&root)
        .args([
            "scripts/jepsen-queue.py",
            "--broker",
            "charon",
            "--cycles",
            "3",
            "--binary",
            env!("CARGO_BIN_EXE_charon"),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("lost: 0, unexpected: 0"), "{stdout}");
    let ok: u64 =
        stdout.split(" ok, ").next().and_then(|head| head.rsplit(' ').next()).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(ok > 100, "too few confirmed to show anything: {stdout}");
}

/// `charon ctl` against `node`, with `args`; its stdout (the verb must succeed).
fn ctl(node: &Charon, args: &[&str]) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_charon"))
        .args(["ctl", "--url", &format!("http://127.0.0.1:{}", node.http_port)])
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "ctl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

/// Issue 42 item 4: rabbitmq-queues' membership verbs through `charon ctl`, under confirmed
/// publishing: a quorum queue of two members grows to three (the new member votes once it
/// caught up), loses one, and every confirmed message is there at the end.
#[test]
fn quorum_queue_members_are_added_and_removed_under_load() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use lapin::options::ConfirmSelectOptions;
    use lapin::types::AMQPValue;

    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "MEMBERSHIPCOOKIE").unwrap();
    let nodes: Vec<Charon> = (1..=3).map(|n| cluster_node(26030, n, dir.path(), &secret)).collect();
    set_name_when_led(&nodes[0], "members");
    let arguments = support::field_table(&[
        ("x-queue-type", AMQPValue::LongString("quorum".into())),
        ("x-quorum-initial-group-size", AMQPValue::LongInt(2)),
    ]);
    let durable = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
    on(&nodes[0], async |channel: Channel| {
        channel.queue_declare("grown".into(), durable, arguments).await.unwrap();
    });
    let members = |node: &Charon| -> Vec<String> {
        let queue = Call::api(node.http_port, "GET", "/api/queues/%2F/grown").send_blocking().json();
        queue["members"].as_array().into_iter().flatten().filter_map(|m| m.as_str().map(str::to_owned)).collect()
    };
    until(20, || {
        let now = members(&nodes[2]);
        holds(now.len() == 2, || format!("members {now:?}"))
    });
    let outsider = ["charon-1@localhost", "charon-2@localhost", "charon-3@localhost"]
        .into_iter()
        .find(|n| !members(&nodes[0]).iter().any(|m| m == n))
        .unwrap();
    // A publisher with confirms through node 2, all along.
    let running = Arc::new(AtomicBool::new(true));
    let publisher = {
        let (running, port) = (Arc::clone(&running), nodes[1].port);
        std::thread::spawn(move || {
            block(async move {
                let url = format!("amqp://guest:guest@127.0.0.1:{port}/%2F");
                let connection = Connection::connect(&url, ConnectionProperties::default()).await.unwrap();
                let channel = connection.create_channel().await.unwrap();
                channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
                let mut confirmed = Vec::new();
                let mut i = 0;
                while running.load(Ordering::Relaxed) {
                    let body = format!("g-{i}");
                    let props = BasicProperties::default().with_delivery_mode(2);
                    let sent = channel
                        .basic_publish(
                            "".into(),
                            "grown".into(),
                            BasicPublishOptions::default(),
                            body.as_bytes(),
                            props,
                        )
                        .await
                        .unwrap();
                    if sent.await.unwrap().is_ack() {
                        confirmed.push(body);
                    }
                    i += 1;
                }
                confirmed
            })
        })
    };
    // Publishing is under way (the queue holds what it confirmed) before and after each change.
    let depth = |node: &Charon| {
        let queue = Call::api(node.http_port, "GET", "/api/queues/%2F/grown").send_blocking().json();
        queue["messages"].as_u64().unwrap_or(0)
    };
    let grows_past = |node: &Charon, floor: u64| {
        until(20, || {
            let now = depth(node);
            holds(now >= floor + 50, || format!("{now} messages, not yet {floor} + 50"))
        });
    };
    grows_past(&nodes[0], 0);
    let added = ctl(&nodes[2], &["add_member", "grown", outsider]);
    assert!(added.contains(&format!("on node {outsider}")), "{added}");
    assert_eq!(members(&nodes[0]).len(), 3);
    let status = ctl(&nodes[0], &["quorum_status", "grown"]);
    let voters = status.lines().filter(|l| l.contains("\tvoter\t")).count();
    assert_eq!(voters, 3, "{status}");
    grows_past(&nodes[0], depth(&nodes[0]));
    // The member added goes again, through the verb that removes a node from every queue.
    let shrunk = ctl(&nodes[1], &["shrink", outsider]);
    assert!(shrunk.contains("\tgrown\t2\tok"), "{shrunk}");
    until(20, || {
        let now = members(&nodes[1]);
        holds(now.len() == 2 && !now.iter().any(|m| m == outsider), || format!("members {now:?}"))
    });
    let gone = dir.path().join(format!("node-{}/cluster/quorum", &outsider["charon-".len()..="charon-".len()]));
    until(20, || {
        let files = std::fs::read_dir(&gone).map(|d| d.count()).unwrap_or(0);
        holds(files == 0, || format!("{} holds {files} group files", gone.display()))
    });
    running.store(false, Ordering::Relaxed);
    let confirmed = publisher.join().unwrap();
    assert!(confirmed.len() > 10, "{} confirmed", confirmed.len());
    let got = on(&nodes[2], async |channel: Channel| {
        let mut got = Vec::new();
        while let Ok(Some(message)) = channel.basic_get("grown".into(), BasicGetOptions { no_ack: true }).await {
            got.push(String::from_utf8(message.delivery.data.clone()).unwrap());
        }
        got
    });
    assert_eq!(got, confirmed);

    // A policy's `initial-cluster-size` sizes a queue declared without the argument.
    let policy =
        serde_json::json!({"pattern": "^sized", "apply-to": "queues", "definition": {"initial-cluster-size": 1}});
    let reply =
        Call::api(nodes[0].http_port, "PUT", "/api/policies/%2F/sizes").body(policy.to_string()).send_blocking();
    assert!(reply.status == 201 || reply.status == 204, "{reply:?}");
    let quorum = support::field_table(&[("x-queue-type", AMQPValue::LongString("quorum".into()))]);
    on(&nodes[1], async |channel: Channel| {
        channel.queue_declare("sized".into(), durable, quorum).await.unwrap();
    });
    let queue = Call::api(nodes[1].http_port, "GET", "/api/queues/%2F/sized").send_blocking().json();
    assert_eq!(queue["members"], serde_json::json!(["charon-2@localhost"]), "{queue}");
}
