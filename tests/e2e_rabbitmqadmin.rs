//! RabbitMQ's own CLI, `rabbitmqadmin` v2 (the Rust one, unmodified), against the broker: the
//! everyday commands run and do what they say, checked through the CLI's own listings, the
//! message that comes back and the AMQP connection it closes.
//!
//! The binary comes from `CHARON_RABBITMQADMIN` (scripts/test.sh installs it into a cache and
//! sets it), else the same cache path. Without it the test is skipped with a message, unless
//! `CI` is set. By default it runs against a Charon it starts; with
//! `CHARON_RABBITMQADMIN_TARGET=amqp://guest:guest@127.0.0.1:5682` it runs against that broker
//! instead (RabbitMQ 4.0.5, to check the test itself), its API found 10000 ports above, as the
//! conformance suite finds it. Every command runs even when an earlier one failed; the test
//! prints a table of the outcomes and fails if any command did.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use lapin::options::{BasicConsumeOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};

/// The broker under test: host, AMQP port, HTTP port, user, password.
struct Target {
    host: String,
    amqp: u16,
    http: u16,
    user: String,
    password: String,
}

impl Target {
    fn from_url(url: &str) -> Self {
        let rest = url.strip_prefix("amqp://").expect("an amqp:// URL");
        let authority = rest.split('/').next().unwrap_or_default();
        let (credentials, address) = authority.rsplit_once('@').unwrap_or(("guest:guest", authority));
        let (user, password) = credentials.split_once(':').unwrap_or((credentials, ""));
        let (host, port) = address.rsplit_once(':').unwrap_or((address, "5672"));
        let amqp: u16 = port.parse().expect("port");
        Self { host: host.into(), amqp, http: amqp + 10000, user: user.into(), password: password.into() }
    }
}

/// Runs the CLI and records the outcome of each command.
struct Cli {
    binary: PathBuf,
    target: Target,
    config: tempfile::TempDir,
    outcomes: Vec<(String, Result<(), String>)>,
}

impl Cli {
    /// `rabbitmqadmin <args>`: stdout on success, stdout and stderr on failure.
    fn run(&self, args: &[&str]) -> Result<String, String> {
        let output = Command::new(&self.binary)
            .env("RABBITMQADMIN_CONFIG_FILE_PATH", self.config.path().join("rabbitmqadmin.conf"))
            .args(["--non-interactive", "-H", &self.target.host, "-P", &self.target.http.to_string()])
            .args(["-u", &self.target.user, "-p", &self.target.password])
            .args(args)
            .output()
            .expect("run rabbitmqadmin");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() {
            Ok(stdout)
        } else {
            Err(format!("{} {stdout}{}", output.status, String::from_utf8_lossy(&output.stderr)))
        }
    }

    /// Runs a command, then `check` on its output; records the outcome under `name`.
    fn step(&mut self, name: &str, args: &[&str], check: impl FnOnce(&Self, &str) -> Result<(), String>) {
        let outcome = self.run(args).and_then(|out| check(self, &out));
        self.outcomes.push((name.to_owned(), outcome));
    }

    /// `rabbitmqadmin <listing>` mentions every one of `words`.
    fn lists(&self, listing: &[&str], words: &[&str]) -> Result<(), String> {
        let out = self.run(listing)?;
        match words.iter().find(|w| !out.contains(**w)) {
            None => Ok(()),
            Some(missing) => Err(format!("`{}` does not show {missing:?}: {out}", listing.join(" "))),
        }
    }

    /// `rabbitmqadmin <listing>` mentions none of `words`.
    fn lists_not(&self, listing: &[&str], words: &[&str]) -> Result<(), String> {
        let out = self.run(listing)?;
        match words.iter().find(|w| out.contains(**w)) {
            None => Ok(()),
            Some(seen) => Err(format!("`{}` still shows {seen:?}: {out}", listing.join(" "))),
        }
    }
}

fn contains(out: &str, word: &str) -> Result<(), String> {
    if out.contains(word) { Ok(()) } else { Err(format!("output lacks {word:?}: {out}")) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmqadmin_v2_runs_the_everyday_commands() {
    let Some(binary) = support::rabbitmqadmin() else {
        assert!(std::env::var_os("CI").is_none(), "rabbitmqadmin is missing: scripts/test.sh installs it");
        eprintln!(
            "SKIPPED: no rabbitmqadmin binary (set CHARON_RABBITMQADMIN, or run scripts/test.sh once to install it)"
        );
        return;
    };
    let charon;
    let target = match std::env::var("CHARON_RABBITMQADMIN_TARGET") {
        Ok(url) => Target::from_url(&url),
        Err(_) => {
            charon = support::Charon::start();
            let target = Target::from_url(&format!("amqp://guest:guest@127.0.0.1:{}", charon.port));
            Target { http: charon.http_port, ..target }
        }
    };
    let amqp = target.amqp;
    // A configuration file of its own (its `default` node, empty: the flags say everything), so
    // that a user's ~/.rabbitmqadmin.conf does not steer the test.
    let config = tempfile::tempdir().unwrap();
    std::fs::write(config.path().join("rabbitmqadmin.conf"), "[default]\n").unwrap();
    let mut cli = Cli { binary, target, config, outcomes: Vec::new() };
    let run = std::process::id();
    let vhost = format!("ra-e2e-{run}");
    let user = format!("ra-user-{run}");
    let v = vhost.as_str();

    cli.step("show overview", &["show", "overview"], |_, out| contains(out, "4.0.5"));
    cli.step("declare vhost", &["declare", "vhost", "--name", v], |c, _| c.lists(&["list", "vhosts"], &[v]));
    cli.step(
        "declare user",
        &["declare", "user", "--name", &user, "--password", "ra-pw", "--tags", "management"],
        |c, _| c.lists(&["list", "users"], &[&user]),
    );
    let grant =
        ["-V", v, "declare", "permissions", "--username", &user, "--configure", ".*", "--write", ".*", "--read", ".*"];
    cli.step("declare permissions", &grant, |c, _| c.lists(&["list", "permissions"], &[&user, v]));
    let policy = ["-V", v, "declare", "policy", "--name", "ra-pol", "--pattern", "^ra-ttl", "--apply-to", "queues"];
    let policy = [&policy[..], &["--definition", r#"{"message-ttl":60000}"#]].concat();
    cli.step("declare policy", &policy, |c, _| c.lists(&["-V", v, "list", "policies"], &["ra-pol", "^ra-ttl"]));
    let exchange = ["-V", v, "declare", "exchange", "--name", "ra-x", "--type", "direct", "--durable", "true"];
    cli.step("declare exchange", &exchange, |c, _| c.lists(&["-V", v, "list", "exchanges"], &["ra-x"]));
    let queue = ["-V", v, "declare", "queue", "--name", "ra-q", "--type", "classic", "--durable", "true"];
    cli.step("declare queue", &queue, |c, _| c.lists(&["-V", v, "list", "queues"], &["ra-q"]));
    let binding = ["-V", v, "declare", "binding", "--source", "ra-x", "--destination-type", "queue"];
    let binding = [&binding[..], &["--destination", "ra-q", "--routing-key", "ra-key"]].concat();
    cli.step("declare binding", &binding, |c, _| c.lists(&["-V", v, "list", "bindings"], &["ra-x", "ra-q", "ra-key"]));

    // An operator policy caps a queue whatever its user policy allows: of two messages the
    // queue keeps the newer.
    let operator = ["-V", v, "declare", "operator_policy", "--name", "ra-op", "--pattern", "^ra-opq$"];
    let operator = [&operator[..], &["--apply-to", "queues", "--definition", r#"{"max-length":1}"#]].concat();
    cli.step("declare operator_policy", &operator, |c, _| {
        c.lists(&["-V", v, "list", "operator_policies"], &["ra-op", "^ra-opq$", "max-length"])
    });
    let refused = ["-V", v, "declare", "operator_policy", "--name", "ra-op-bad", "--pattern", "^x", "--apply-to"];
    let refused = [&refused[..], &["queues", "--definition", r#"{"dead-letter-exchange":"x"}"#]].concat();
    cli.step("operator_policy refuses a key", &["list", "operator_policies"], |c, _| match c.run(&refused) {
        Ok(out) => Err(format!("accepted: {out}")),
        Err(e) if e.contains("are not recognised policy settings") => Ok(()),
        Err(e) => Err(format!("refused otherwise: {e}")),
    });
    let opq = ["-V", v, "declare", "queue", "--name", "ra-opq", "--type", "classic", "--durable", "true"];
    cli.step("operator_policy caps a queue", &opq, |c, _| {
        let bind = ["-V", v, "declare", "binding", "--source", "ra-x", "--destination-type", "queue"];
        c.run(&[&bind[..], &["--destination", "ra-opq", "--routing-key", "ra-opkey"]].concat())?;
        for body in ["op-first", "op-second"] {
            c.run(&["-V", v, "publish", "message", "-e", "ra-x", "-k", "ra-opkey", "-m", body])?;
        }
        let out = c.run(&["-V", v, "get", "messages", "-q", "ra-opq", "--count", "2"])?;
        match (out.contains("op-second"), out.contains("op-first")) {
            (true, false) => Ok(()),
            _ => Err(format!("expected only op-second: {out}")),
        }
    });

    let publish = ["-V", v, "publish", "message", "-e", "ra-x", "-k", "ra-key", "-m", "hello-ra"];
    cli.step("publish message", &publish, |_, out| contains(out, "routed"));
    cli.step("get messages", &["-V", v, "get", "messages", "-q", "ra-q"], |_, out| contains(out, "hello-ra"));
    cli.step("purge queue", &["-V", v, "purge", "queue", "--name", "ra-q"], |c, _| {
        c.run(&publish)?;
        c.run(&["-V", v, "purge", "queue", "--name", "ra-q"])?;
        let out = c.run(&["-V", v, "get", "messages", "-q", "ra-q"])?;
        if out.contains("hello-ra") { Err(format!("purged, yet: {out}")) } else { Ok(()) }
    });

    // Export, delete the queue, import: the queue is back.
    let file = cli.config.path().join("definitions.json");
    let export = ["export", "definitions", "--file", file.to_str().unwrap()];
    cli.step("export definitions", &export, |_, _| {
        let text = std::fs::read_to_string(&file).map_err(|e| e.to_string())?;
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
        let ours = |key: &str| json[key].as_array().into_iter().flatten().any(|o| o["vhost"] == v || o["name"] == v);
        // Operator policies travel as `operator_policy` runtime parameters, as 4.0.5 exports them.
        let operator = json["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["vhost"] == v && p["component"] == "operator_policy" && p["name"] == "ra-op");
        if ours("vhosts") && ours("queues") && ours("bindings") && operator {
            Ok(())
        } else {
            Err(format!("incomplete: {text}"))
        }
    });
    cli.step("delete queue", &["-V", v, "delete", "queue", "--name", "ra-q"], |c, _| {
        c.lists_not(&["-V", v, "list", "queues"], &["ra-q"])
    });
    let import = ["import", "definitions", "--file", file.to_str().unwrap()];
    cli.step("import definitions", &import, |c, _| c.lists(&["-V", v, "list", "queues"], &["ra-q"]));

    // A client connection with a channel and a consumer, seen and closed by the CLI.
    // As the test's own user, whose name picks its connection out of the listing.
    let url = format!("amqp://{user}:ra-pw@127.0.0.1:{amqp}/{v}");
    let props = ConnectionProperties::default().with_connection_name("ra-e2e-client".into());
    match Connection::connect(&url, props).await {
        Ok(connection) => connection_steps(&mut cli, &connection, v, &user).await,
        Err(e) => cli.outcomes.push(("AMQP connection for the connection commands".into(), Err(e.to_string()))),
    }

    let amqp_port = amqp.to_string();
    for (check, args) in [
        ("local_alarms", vec!["health_check", "local_alarms"]),
        ("cluster_wide_alarms", vec!["health_check", "cluster_wide_alarms"]),
        ("node_is_quorum_critical", vec!["health_check", "node_is_quorum_critical"]),
        ("port_listener", vec!["health_check", "port_listener", "--port", &amqp_port]),
        ("protocol_listener", vec!["health_check", "protocol_listener", "--protocol", "amqp"]),
    ] {
        cli.step(&format!("health_check {check}"), &args, |_, _| Ok(()));
    }

    // Deleted, and gone from the listings.
    let unbind = ["-V", v, "delete", "binding", "--source", "ra-x", "--destination-type", "queue"];
    let unbind = [&unbind[..], &["--destination", "ra-q", "--routing-key", "ra-key"]].concat();
    cli.step("delete binding", &unbind, |c, _| c.lists_not(&["-V", v, "list", "bindings"], &["ra-key"]));
    cli.step("delete exchange", &["-V", v, "delete", "exchange", "--name", "ra-x"], |c, _| {
        c.lists_not(&["-V", v, "list", "exchanges"], &["ra-x"])
    });
    cli.step("delete policy", &["-V", v, "delete", "policy", "--name", "ra-pol"], |c, _| {
        c.lists_not(&["-V", v, "list", "policies"], &["ra-pol"])
    });
    cli.step("delete operator_policy", &["-V", v, "delete", "operator_policy", "--name", "ra-op"], |c, _| {
        c.lists_not(&["-V", v, "list", "operator_policies"], &["ra-op"])
    });
    cli.step("delete permissions", &["-V", v, "delete", "permissions", "--username", &user], |c, _| {
        c.lists_not(&["list", "permissions"], &[&user])
    });
    cli.step("delete user", &["delete", "user", "--name", &user], |c, _| c.lists_not(&["list", "users"], &[&user]));
    cli.step("delete vhost", &["delete", "vhost", "--name", v], |c, _| c.lists_not(&["list", "vhosts"], &[v]));

    let failed: Vec<&(String, Result<(), String>)> = cli.outcomes.iter().filter(|(_, o)| o.is_err()).collect();
    eprintln!("rabbitmqadmin against 127.0.0.1:{}:", cli.target.http);
    for (name, outcome) in &cli.outcomes {
        eprintln!("  {:<36} {}", name, if outcome.is_ok() { "ok" } else { "FAILED" });
    }
    for (name, outcome) in &failed {
        eprintln!("--- {name}: {}", outcome.as_ref().err().map(String::as_str).unwrap_or_default());
    }
    assert!(failed.is_empty(), "{} of {} rabbitmqadmin commands failed", failed.len(), cli.outcomes.len());
}

/// `list connections|channels|consumers` and `close connection` with `connection` open, a
/// channel and a consumer on it.
async fn connection_steps(cli: &mut Cli, connection: &Connection, v: &str, user: &str) {
    let consumer = async {
        let channel = connection.create_channel().await?;
        let durable = QueueDeclareOptions { durable: true, ..Default::default() };
        channel.queue_declare("ra-q".into(), durable, FieldTable::default()).await?;
        let consume = BasicConsumeOptions::default();
        channel.basic_consume("ra-q".into(), "ra-consumer".into(), consume, FieldTable::default()).await
    };
    let _consumer = match consumer.await {
        Ok(consumer) => consumer,
        Err(e) => return cli.outcomes.push(("a channel and a consumer for the listings".into(), Err(e.to_string()))),
    };
    // RabbitMQ's listings come from its statistics, refreshed every 5 s.
    let listed = |c: &Cli, listing: &[&str], word: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(12);
        loop {
            match c.lists(listing, &[word]) {
                Err(_) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(500)),
                other => return other,
            }
        }
    };
    cli.step("list connections", &["list", "connections"], |c, _| listed(c, &["list", "connections"], user));
    cli.step("list channels", &["list", "channels"], |c, _| listed(c, &["list", "channels"], v));
    cli.step("list consumers", &["list", "consumers"], |c, _| listed(c, &["list", "consumers"], "ra-consumer"));
    let name = connection_name(cli, user);
    cli.step("close connection", &["close", "connection", "--name", name.as_deref().unwrap_or("unknown")], |_, _| {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while connection.status().connected() {
            if std::time::Instant::now() > deadline {
                return Err("the connection is still open".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    });
}

/// The broker's name for the connection of `user` (the first column of `list connections`).
fn connection_name(cli: &Cli, user: &str) -> Option<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(12);
    loop {
        let out = cli.run(&["list", "connections"]).unwrap_or_default();
        if let Some(line) = out.lines().find(|l| l.split_whitespace().any(|w| w == user)) {
            // The name is the first column: `127.0.0.1:port -> 127.0.0.1:port`.
            let name: Vec<&str> = line.split_whitespace().take(3).collect();
            return Some(name.join(" "));
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}
