//! `charon ctl`: rabbitmqctl's everyday user, vhost and permission verbs, run against a
//! running broker through its management API (where rabbitmqctl talks to the Erlang node).
//!
//! Output follows rabbitmqctl's: an informational line, then tab-separated rows. Failures
//! print `Error: <reason>` and exit non-zero.

use anyhow::{Context, bail};
use base64::Engine;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

/// `charon ctl` options and verb.
#[derive(Debug, Args)]
pub(crate) struct CtlArgs {
    /// Base URL of the broker's management API.
    #[arg(long, default_value = "http://127.0.0.1:15672")]
    url: String,
    /// An administrator's name.
    #[arg(long, default_value = "guest")]
    username: String,
    /// Its password.
    #[arg(long, default_value = "guest")]
    password: String,
    #[command(subcommand)]
    verb: Verb,
}

/// The verbs, named as rabbitmqctl's.
#[derive(Debug, Subcommand)]
#[command(rename_all = "snake_case")]
enum Verb {
    /// Creates a user without tags (and without permissions).
    AddUser { name: String, password: String },
    /// Deletes a user and its permissions.
    DeleteUser { name: String },
    /// Sets a user's password.
    ChangePassword { name: String, password: String },
    /// Replaces a user's tags (none clears them).
    SetUserTags { name: String, tags: Vec<String> },
    /// Lists users and their tags.
    ListUsers,
    /// Creates a vhost. Through the API, the calling user gets full permissions on it.
    AddVhost { name: String },
    /// Deletes a vhost with everything in it.
    DeleteVhost { name: String },
    /// Lists vhosts.
    ListVhosts,
    /// Sets a user's configure, write and read patterns in a vhost.
    SetPermissions {
        /// The vhost.
        #[arg(short = 'p', long = "vhost", default_value = "/")]
        vhost: String,
        user: String,
        configure: String,
        write: String,
        read: String,
    },
    /// Clears a user's permissions in a vhost.
    ClearPermissions {
        /// The vhost.
        #[arg(short = 'p', long = "vhost", default_value = "/")]
        vhost: String,
        user: String,
    },
    /// Lists the permissions in a vhost.
    ListPermissions {
        /// The vhost.
        #[arg(short = 'p', long = "vhost", default_value = "/")]
        vhost: String,
    },
    /// The cluster's name, its members (disk nodes) and which of them run, as the node asked
    /// sees them (rabbitmqctl's sections Basics, Disk Nodes, Running Nodes, Alarms).
    ClusterStatus,
    /// Removes a member that is down from the cluster (run against another member).
    ForgetClusterNode { node: String },
    /// rabbitmq-queues' `add_member`: NODE becomes a member of quorum queue QUEUE (answered once
    /// it caught up and votes).
    AddMember {
        /// The vhost.
        #[arg(short = 'p', long = "vhost", default_value = "/")]
        vhost: String,
        queue: String,
        node: String,
    },
    /// rabbitmq-queues' `delete_member`: NODE stops being a member of quorum queue QUEUE (not
    /// its leader, nor its last member).
    DeleteMember {
        /// The vhost.
        #[arg(short = 'p', long = "vhost", default_value = "/")]
        vhost: String,
        queue: String,
        node: String,
    },
    /// rabbitmq-queues' `grow`: NODE joins every quorum queue matching the patterns (`all`), or
    /// those with an even number of members (`even`).
    Grow {
        node: String,
        /// `all` or `even`.
        strategy: String,
        /// The vhosts, as a regular expression.
        #[arg(long, default_value = ".*")]
        vhost_pattern: String,
        /// The queues, as a regular expression.
        #[arg(long, default_value = ".*")]
        queue_pattern: String,
    },
    /// rabbitmq-queues' `shrink`: NODE leaves every quorum queue it is a member of (but leads).
    Shrink { node: String },
    /// rabbitmq-queues' `quorum_status`: each member of quorum queue QUEUE with its Raft state.
    QuorumStatus {
        /// The vhost.
        #[arg(short = 'p', long = "vhost", default_value = "/")]
        vhost: String,
        queue: String,
    },
    /// Makes the node asked, alone in a cluster of its own, leave it and join the cluster of
    /// NODE (`NAME`, one of its configured peers, or `NAME=HOST:PORT`), as rabbitmqctl's verb
    /// (which resets the node first).
    JoinCluster { node: String },
}

/// A field of a JSON object (null when missing).
fn field<'a>(value: &'a Value, key: &str) -> &'a Value {
    value.get(key).unwrap_or(&Value::Null)
}

/// A blocking client of the management API.
struct Api {
    agent: ureq::Agent,
    base: String,
    authorization: String,
}

/// A path segment as the API expects it (`/` is `%2F`).
fn segment(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

impl Api {
    fn new(args: &CtlArgs) -> Self {
        let config = ureq::Agent::config_builder().http_status_as_error(false).build();
        let credentials =
            base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", args.username, args.password));
        Self {
            agent: ureq::Agent::new_with_config(config),
            base: args.url.trim_end_matches('/').to_owned(),
            authorization: format!("Basic {credentials}"),
        }
    }

    /// One request; the status and the body as JSON (`null` when empty).
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<(u16, Value)> {
        let request = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("authorization", &self.authorization)
            .header("content-type", "application/json")
            .body(body.map(|b| b.to_string()).unwrap_or_default())
            .context("building the request")?;
        let mut response = self.agent.run(request).with_context(|| format!("{method} {}{path}", self.base))?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().context("reading the response")?;
        let json =
            if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
        Ok((status, json))
    }

    /// A request that must succeed (2xx).
    fn expect_ok(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let (status, json) = self.call(method, path, body)?;
        if (200..300).contains(&status) {
            return Ok(json);
        }
        let reason = json.get("reason").and_then(Value::as_str).map_or_else(|| json.to_string(), str::to_owned);
        bail!("{status} {reason}")
    }

    /// The user's JSON, or rabbitmqctl's `no_such_user` error.
    fn user(&self, name: &str) -> anyhow::Result<Value> {
        match self.call("GET", &format!("/api/users/{}", segment(name)), None)? {
            (200, user) => Ok(user),
            (404, _) => bail!("no_such_user: {name}"),
            (status, body) => bail!("{status} {body}"),
        }
    }
}

/// Runs one verb; the lines to print.
pub(crate) fn run(args: &CtlArgs) -> anyhow::Result<Vec<String>> {
    let api = Api::new(args);
    let user_path = |name: &str| format!("/api/users/{}", segment(name));
    let lines = match &args.verb {
        Verb::AddUser { name, password } => {
            if api.call("GET", &user_path(name), None)?.0 == 200 {
                bail!("user_already_exists: {name}");
            }
            api.expect_ok("PUT", &user_path(name), Some(json!({ "password": password, "tags": "" })))?;
            vec![format!("Adding user \"{name}\" ...")]
        }
        Verb::DeleteUser { name } => {
            api.user(name)?;
            api.expect_ok("DELETE", &user_path(name), None)?;
            vec![format!("Deleting user \"{name}\" ...")]
        }
        Verb::ChangePassword { name, password } => {
            let user = api.user(name)?;
            api.expect_ok(
                "PUT",
                &user_path(name),
                Some(json!({ "password": password, "tags": field(&user, "tags") })),
            )?;
            vec![format!("Changing password for user \"{name}\" ...")]
        }
        Verb::SetUserTags { name, tags } => {
            let user = api.user(name)?;
            // The stored hash goes back with the new tags: a PUT without it clears the password.
            let body = json!({
                "password_hash": field(&user, "password_hash"),
                "hashing_algorithm": field(&user, "hashing_algorithm"),
                "tags": tags,
            });
            api.expect_ok("PUT", &user_path(name), Some(body))?;
            vec![format!("Setting tags for user \"{name}\" to [{}] ...", tags.join(", "))]
        }
        Verb::ListUsers => {
            let users = api.expect_ok("GET", "/api/users", None)?;
            let mut lines = vec!["Listing users ...".to_owned(), "user\ttags".to_owned()];
            for user in users.as_array().into_iter().flatten() {
                let tags: Vec<&str> =
                    field(user, "tags").as_array().into_iter().flatten().filter_map(Value::as_str).collect();
                lines.push(format!("{}\t[{}]", field(user, "name").as_str().unwrap_or_default(), tags.join(", ")));
            }
            lines
        }
        Verb::AddVhost { name } => {
            api.expect_ok("PUT", &format!("/api/vhosts/{}", segment(name)), Some(json!({})))?;
            vec![format!("Adding vhost \"{name}\" ...")]
        }
        Verb::DeleteVhost { name } => {
            if api.call("DELETE", &format!("/api/vhosts/{}", segment(name)), None)?.0 == 404 {
                bail!("no_such_vhost: {name}");
            }
            vec![format!("Deleting vhost \"{name}\" ...")]
        }
        Verb::ListVhosts => {
            let vhosts = api.expect_ok("GET", "/api/vhosts", None)?;
            let mut lines = vec!["Listing vhosts ...".to_owned(), "name".to_owned()];
            lines.extend(
                vhosts.as_array().into_iter().flatten().filter_map(|v| field(v, "name").as_str().map(str::to_owned)),
            );
            lines
        }
        Verb::SetPermissions { vhost, user, configure, write, read } => {
            api.user(user)?;
            let path = format!("/api/permissions/{}/{}", segment(vhost), segment(user));
            api.expect_ok("PUT", &path, Some(json!({ "configure": configure, "write": write, "read": read })))?;
            vec![format!("Setting permissions for user \"{user}\" in vhost \"{vhost}\" ...")]
        }
        Verb::ClearPermissions { vhost, user } => {
            api.user(user)?;
            let path = format!("/api/permissions/{}/{}", segment(vhost), segment(user));
            // Clearing permissions that are not there is not an error, as in rabbitmqctl.
            let (status, body) = api.call("DELETE", &path, None)?;
            if !(200..300).contains(&status) && status != 404 {
                bail!("{status} {body}");
            }
            vec![format!("Clearing permissions for user \"{user}\" in vhost \"{vhost}\" ...")]
        }
        Verb::ListPermissions { vhost } => {
            let all = api.expect_ok("GET", &format!("/api/vhosts/{}/permissions", segment(vhost)), None)?;
            let mut lines = vec![
                format!("Listing permissions for vhost \"{vhost}\" ..."),
                "user\tconfigure\twrite\tread".to_owned(),
            ];
            for p in all.as_array().into_iter().flatten() {
                let field = |k: &str| p[k].as_str().unwrap_or_default().to_owned();
                lines.push(format!("{}\t{}\t{}\t{}", field("user"), field("configure"), field("write"), field("read")));
            }
            lines
        }
        Verb::ClusterStatus => cluster_status(&api)?,
        Verb::JoinCluster { node } => {
            let (name, address) = match node.split_once('=') {
                Some((name, address)) => (name, Some(address)),
                None => (node.as_str(), None),
            };
            let me = api.expect_ok("GET", "/api/overview", None)?;
            let body = serde_json::json!({ "node": name, "address": address });
            api.expect_ok("POST", "/api/charon/cluster/nodes", Some(body))?;
            vec![format!("Clustering node {} with {name}", field(&me, "node").as_str().unwrap_or_default())]
        }
        Verb::AddMember { vhost, queue, node } => {
            let path = format!("/api/queues/quorum/{}/{}/replicas/add", segment(vhost), segment(queue));
            api.expect_ok("POST", &path, Some(json!({ "node": node })))?;
            vec![format!("Adding a replica for queue {queue} in vhost {vhost} on node {node}...")]
        }
        Verb::DeleteMember { vhost, queue, node } => {
            let path = format!("/api/queues/quorum/{}/{}/replicas/delete", segment(vhost), segment(queue));
            api.expect_ok("DELETE", &path, Some(json!({ "node": node })))?;
            vec![format!("Removing a replica for queue {queue} in vhost {vhost} on node {node}...")]
        }
        Verb::Grow { node, strategy, vhost_pattern, queue_pattern } => {
            let path = format!("/api/queues/quorum/replicas/on/{}/grow", segment(node));
            let body = json!({ "strategy": strategy, "vhost_pattern": vhost_pattern, "queue_pattern": queue_pattern });
            api.expect_ok("POST", &path, Some(body))?;
            vec![format!(
                "Growing {strategy} quorum queues matching {queue_pattern} in vhosts matching {vhost_pattern} to {node}..."
            )]
        }
        Verb::Shrink { node } => {
            let outcomes =
                api.expect_ok("DELETE", &format!("/api/queues/quorum/replicas/on/{}/shrink", segment(node)), None)?;
            let mut lines =
                vec![format!("Shrinking quorum queues on {node}..."), "vhost\tname\tsize\tresult".to_owned()];
            for o in outcomes.as_array().into_iter().flatten() {
                let text = |k: &str| o[k].as_str().map_or_else(|| o[k].to_string(), str::to_owned);
                lines.push(format!("{}\t{}\t{}\t{}", text("vhost"), text("name"), text("size"), text("result")));
            }
            lines
        }
        Verb::QuorumStatus { vhost, queue } => {
            let path = format!("/api/queues/quorum/{}/{}/status", segment(vhost), segment(queue));
            let members = api.expect_ok("GET", &path, None)?;
            let keys = [
                "Node Name",
                "Raft State",
                "Membership",
                "Last Log Index",
                "Last Written",
                "Last Applied",
                "Commit Index",
                "Snapshot Index",
                "Term",
                "Machine Version",
            ];
            let me = api.expect_ok("GET", "/api/overview", None)?;
            let node = field(&me, "node").as_str().unwrap_or_default().to_owned();
            let mut lines = vec![format!("Status of quorum queue {queue} on node {node} ..."), keys.join("\t")];
            for m in members.as_array().into_iter().flatten() {
                let row: Vec<String> =
                    keys.iter().map(|k| m[*k].as_str().map_or_else(|| m[*k].to_string(), str::to_owned)).collect();
                lines.push(row.join("\t"));
            }
            lines
        }
        Verb::ForgetClusterNode { node } => {
            api.expect_ok("DELETE", &format!("/api/charon/cluster/nodes/{}", segment(node)), None)?;
            vec![format!("Removing node {node} from the cluster")]
        }
    };
    Ok(lines)
}

/// `cluster_status`'s sections, from `/api/overview`, `/api/cluster-name` and `/api/nodes`.
fn cluster_status(api: &Api) -> anyhow::Result<Vec<String>> {
    let overview = api.expect_ok("GET", "/api/overview", None)?;
    let name = api.expect_ok("GET", "/api/cluster-name", None)?;
    let nodes = api.expect_ok("GET", "/api/nodes", None)?;
    let nodes: Vec<&Value> = nodes.as_array().into_iter().flatten().collect();
    let named = |node: &&Value| field(node, "name").as_str().map(str::to_owned);
    let mut lines = vec![
        format!("Cluster status of node {} ...", field(&overview, "node").as_str().unwrap_or_default()),
        "Basics".to_owned(),
        String::new(),
        format!("Cluster name: {}", field(&name, "name").as_str().unwrap_or_default()),
        String::new(),
        "Disk Nodes".to_owned(),
        String::new(),
    ];
    lines.extend(nodes.iter().filter_map(named));
    lines.extend([String::new(), "Running Nodes".to_owned(), String::new()]);
    lines.extend(nodes.iter().filter(|n| field(n, "running") == &Value::Bool(true)).filter_map(named));
    lines.extend([String::new(), "Alarms".to_owned(), String::new()]);
    let alarms: Vec<String> = nodes
        .iter()
        .flat_map(|node| {
            let name = named(node).unwrap_or_default();
            let memory =
                (field(node, "mem_alarm") == &Value::Bool(true)).then(|| format!("Memory alarm on node {name}"));
            let disk = (field(node, "disk_free_alarm") == &Value::Bool(true))
                .then(|| format!("Free disk space alarm on node {name}"));
            memory.into_iter().chain(disk)
        })
        .collect();
    if alarms.is_empty() {
        lines.push("(none)".to_owned());
    }
    lines.extend(alarms);
    Ok(lines)
}
