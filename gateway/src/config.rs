//! Configuration: command-line flags over an optional TOML file over RabbitMQ's defaults
//! (127.0.0.1:5672, user guest/guest, vhost `/`).

use crate::logging::LogFormat;
use std::path::PathBuf;

use anyhow::{Context, bail};
use charon_engine::login::{CertLoginFrom, LoginConfig};
use charon_engine::{BrokerConfig, UserConfig};
use clap::Parser;
use serde::Deserialize;

/// Command-line flags.
#[derive(Debug, Parser)]
#[command(name = "charon", version, about = "Charon: an AMQP 0.9.1 and 1.0 message broker")]
pub(crate) struct Cli {
    /// A tool instead of the broker.
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    /// A TOML configuration file.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Address to listen on for AMQP (repeatable). Default 127.0.0.1:5672; port 0 picks one.
    #[arg(long)]
    listen: Vec<String>,
    /// A user as `name:password` (repeatable), tagged `administrator` as RabbitMQ's default
    /// user is. Replaces the default guest user. Seeds the store on the first start only.
    #[arg(long = "user")]
    users: Vec<String>,
    /// A virtual host to create (repeatable). Default `/`.
    #[arg(long = "vhost")]
    vhosts: Vec<String>,
    /// Log level or filter (`info`, `debug`, `charon_amqp091=trace`, ...).
    #[arg(long)]
    log_level: Option<String>,
    /// Log line format: `text` (coloured only on a terminal) or `json` (one object per line).
    /// Default `text`.
    #[arg(long, value_enum)]
    log_format: Option<LogFormat>,
    /// The user SASL ANONYMOUS logs in as, on AMQP 0.9.1 and 1.0 (RabbitMQ's
    /// `anonymous_login_user`). Default `guest`, which `loopback_users` keeps to loopback
    /// clients; `none` turns ANONYMOUS off.
    #[arg(long)]
    anonymous_login_user: Option<String>,
    /// The password ANONYMOUS logs in with, checked as any password (RabbitMQ's
    /// `anonymous_login_pass`). Default `guest`.
    #[arg(long)]
    anonymous_login_pass: Option<String>,
    /// Address of the HTTP management API (policies, queue counters). Default 127.0.0.1:15672.
    #[arg(long)]
    http_listen: Option<String>,
    /// Address of the Prometheus endpoint (`/metrics`). Default 127.0.0.1:15692.
    #[arg(long)]
    prometheus_listen: Option<String>,
    /// Address of the Zaqar v2 HTTP gateway. Default 127.0.0.1:8888 (Zaqar's port).
    #[arg(long)]
    zaqar_listen: Option<String>,
    /// Turns the Zaqar gateway off.
    #[arg(long)]
    no_zaqar: bool,
    /// Refuse Zaqar projects that have no vhost (400) instead of creating the vhost on first
    /// use.
    #[arg(long)]
    zaqar_no_create_vhosts: bool,
    /// How Zaqar requests authenticate: `noauth` (Zaqar's: `X-Project-Id` names the project)
    /// or `tokens` (Keystone-free: `POST /v3/auth/tokens` with a broker user's password, then
    /// `X-Auth-Token`; the user's permissions apply). Default `noauth`.
    #[arg(long, value_enum)]
    zaqar_auth: Option<ZaqarAuthMode>,
    /// Data directory (durable topology and messages). Default `./data`.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Memory high watermark as a fraction of the machine's (or the cgroup's) memory: above it
    /// publishers are blocked. Default 0.4, as RabbitMQ's `vm_memory_high_watermark.relative`.
    #[arg(long)]
    vm_memory_high_watermark: Option<f64>,
    /// Memory high watermark in bytes (`512MB`, `2GiB`, ...), instead of a fraction, as
    /// RabbitMQ's `vm_memory_high_watermark.absolute`.
    #[arg(long)]
    vm_memory_high_watermark_absolute: Option<String>,
    /// Free disk space below which publishers are blocked (`50MB`, `1GB`, ...), as RabbitMQ's
    /// `disk_free_limit.absolute`. Default 50MB.
    #[arg(long)]
    disk_free_limit: Option<String>,
    /// Most channels a 0.9.1 client may negotiate, as RabbitMQ's `channel_max`. Default 2047.
    #[arg(long)]
    channel_max: Option<u16>,
    /// Largest frame, in bytes, offered to 0.9.1 clients and accepted from 1.0 clients, as
    /// RabbitMQ's `frame_max`. Default 131072.
    #[arg(long)]
    frame_max: Option<u32>,
    /// Largest message, in bytes, either protocol accepts, as RabbitMQ's `max_message_size`.
    /// Default 16777216 (16 MiB); at most 536870912 (512 MiB), as RabbitMQ allows.
    #[arg(long)]
    max_message_size: Option<u64>,
    /// How long, in ms, a 0.9.1 delivery may stay unacknowledged before its channel is closed
    /// (406), as RabbitMQ's `consumer_timeout`, for queues whose `x-consumer-timeout` argument
    /// or `consumer-timeout` policy sets none; `false` turns it off. Default 1800000 (30 min).
    #[arg(long)]
    consumer_timeout: Option<String>,
    /// Threads of the async runtime that runs connections and queues, as Erlang's `+S`
    /// schedulers for RabbitMQ. Default: one per core but one, at least one: the message log
    /// writes and syncs on a thread of its own, and paged reads and metadata commits run on a
    /// blocking pool (see [`default_worker_threads`]).
    #[arg(long)]
    worker_threads: Option<usize>,
    /// Keep dead letters RabbitMQ drops silently (missing DLX, no route, cycle, full target) in
    /// each vhost's `amq.charon.dead-letters` queue. Default true.
    #[arg(long)]
    dead_letter_fallback: Option<bool>,
    /// `at-least-once`: every queue with a dead-letter exchange keeps a dead letter until its
    /// targets confirmed it (Charon's guarantee; a `charon-dead-letter-guarantee` policy
    /// overrides it per queue). Default `at-most-once`, RabbitMQ's behaviour.
    #[arg(long)]
    dead_letter_guarantee: Option<String>,
    /// Server certificate chain (PEM) for amqps and HTTPS. With `--tls-key`, amqps listens on
    /// 127.0.0.1:5671 and HTTPS on 127.0.0.1:15671 unless told otherwise.
    #[arg(long)]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long)]
    tls_key: Option<PathBuf>,
    /// CA certificates (PEM) that client certificates must chain to (`--tls-verify-peer`).
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    /// Ask amqps clients for a certificate and verify it against `--tls-ca`, as RabbitMQ's
    /// `ssl_options.verify = verify_peer`. Default false (`verify_none`).
    #[arg(long)]
    tls_verify_peer: Option<bool>,
    /// Refuse amqps clients without a certificate, as RabbitMQ's
    /// `ssl_options.fail_if_no_peer_cert`. Needs `--tls-verify-peer true`. Default false.
    #[arg(long)]
    tls_fail_if_no_peer_cert: Option<bool>,
    /// Address to listen on for amqps (repeatable). Default 127.0.0.1:5671 when a certificate
    /// is configured; port 0 picks one.
    #[arg(long)]
    tls_listen: Vec<String>,
    /// Address of the HTTPS management API. Default 127.0.0.1:15671 when a certificate is
    /// configured.
    #[arg(long)]
    https_listen: Option<String>,
    /// Users that may only log in from loopback addresses, comma-separated (RabbitMQ's
    /// `loopback_users`). Default `guest`; an empty string allows every user from anywhere.
    #[arg(long)]
    loopback_users: Option<String>,
    /// A definitions file (or a directory of `.json` files) exported from RabbitMQ or Charon,
    /// imported at every start once the store is open, as RabbitMQ's `load_definitions`
    /// (`definitions.local.path`). A file that does not import stops the start. With it, and
    /// no users or vhosts configured, the first start seeds no `guest` user and no `/` vhost,
    /// as RabbitMQ then does: the file defines them.
    #[arg(long = "definitions")]
    definitions: Option<PathBuf>,
    /// This node's name, as RabbitMQ names its nodes (`rabbit@host`). Default
    /// `charon@<hostname>`.
    #[arg(long)]
    node_name: Option<String>,
    /// Address (`IP:port`) of this node's cluster listener: turns clustering on. Its peers
    /// connect here, and its own connections to them leave from this IP.
    #[arg(long)]
    cluster_listen: Option<String>,
    /// A member of the cluster as `NAME=ADDR`, this node included (repeatable), as RabbitMQ's
    /// classic config peer discovery lists its nodes. Every member gets the same list.
    #[arg(long = "cluster-peer")]
    cluster_peers: Vec<String>,
    /// The file with the cluster's shared secret, as RabbitMQ's Erlang cookie. Default
    /// `$HOME/.charon.cookie`, created with a random secret when missing.
    #[arg(long)]
    cluster_secret_file: Option<PathBuf>,
    /// TLS between the nodes (as RabbitMQ's inter-node TLS): each node presents `--tls-cert`
    /// both ways and checks its peers' against `--tls-ca`. Default false.
    #[arg(long)]
    cluster_tls: Option<bool>,
    /// Which part of a client certificate's subject SASL EXTERNAL logs in as:
    /// `common_name` (default) or `distinguished_name`, as RabbitMQ's `ssl_cert_login_from`.
    #[arg(long)]
    ssl_cert_login_from: Option<String>,
}

/// The tools the binary runs instead of the broker.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// rabbitmqctl's user, vhost and permission verbs against a running broker (through its
    /// management API).
    Ctl(crate::ctl::CtlArgs),
}

/// A user in the configuration file.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct FileUser {
    name: String,
    password: String,
    vhosts: Option<Vec<String>>,
    /// None by default, as `rabbitmqctl add_user` creates a user.
    #[serde(default)]
    tags: Vec<String>,
}

/// `--zaqar-auth` / `zaqar_auth`: how Zaqar requests authenticate.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
enum ZaqarAuthMode {
    /// Zaqar's `noauth`.
    #[default]
    Noauth,
    /// Keystone-free tokens of the broker's users.
    Tokens,
}

/// The configuration file.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileConfig {
    listen: Option<Vec<String>>,
    users: Option<Vec<FileUser>>,
    vhosts: Option<Vec<String>>,
    log_level: Option<String>,
    log_format: Option<LogFormat>,
    anonymous_login_user: Option<String>,
    anonymous_login_pass: Option<String>,
    http_listen: Option<String>,
    prometheus_listen: Option<String>,
    zaqar_listen: Option<String>,
    zaqar_enabled: Option<bool>,
    zaqar_create_vhosts: Option<bool>,
    zaqar_auth: Option<ZaqarAuthMode>,
    data_dir: Option<PathBuf>,
    vm_memory_high_watermark: Option<f64>,
    vm_memory_high_watermark_absolute: Option<ByteSize>,
    disk_free_limit: Option<ByteSize>,
    channel_max: Option<u16>,
    frame_max: Option<u32>,
    max_message_size: Option<u64>,
    consumer_timeout: Option<Timeout>,
    worker_threads: Option<usize>,
    dead_letter_fallback: Option<bool>,
    dead_letter_guarantee: Option<String>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
    tls_verify_peer: Option<bool>,
    tls_fail_if_no_peer_cert: Option<bool>,
    tls_listen: Option<Vec<String>>,
    https_listen: Option<String>,
    loopback_users: Option<Vec<String>>,
    ssl_cert_login_from: Option<String>,
    load_definitions: Option<PathBuf>,
    node_name: Option<String>,
    cluster_listen: Option<String>,
    cluster_peers: Option<Vec<String>>,
    cluster_secret_file: Option<PathBuf>,
    cluster_tls: Option<bool>,
}

/// `consumer_timeout` in the configuration file: ms, or `false` (off).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
enum Timeout {
    Millis(u64),
    Enabled(bool),
}

impl Timeout {
    fn parse(text: &str) -> anyhow::Result<Self> {
        match text {
            "false" => Ok(Self::Enabled(false)),
            _ => text.parse().map(Self::Millis).map_err(|_| {
                anyhow::anyhow!("consumer_timeout must be a number of milliseconds or false, got {text:?}")
            }),
        }
    }

    /// The timeout in ms; `None`: off.
    fn millis(self) -> anyhow::Result<Option<u64>> {
        match self {
            Self::Millis(ms) => Ok(Some(ms)),
            Self::Enabled(false) => Ok(None),
            Self::Enabled(true) => bail!("consumer_timeout must be a number of milliseconds or false, got true"),
        }
    }
}

/// A size in bytes in the configuration file: a number, or a string with RabbitMQ's units.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
enum ByteSize {
    Bytes(u64),
    Text(String),
}

impl ByteSize {
    fn bytes(&self) -> anyhow::Result<u64> {
        match self {
            Self::Bytes(n) => Ok(*n),
            Self::Text(text) => parse_size(text),
        }
    }
}

/// Where the memory alarm goes off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum MemoryWatermark {
    /// A fraction of the machine's (or cgroup's) memory.
    Relative(f64),
    /// Bytes.
    Absolute(u64),
}

/// A size as RabbitMQ's configuration writes it: bytes, or a number with a unit — `k`/`kiB`,
/// `M`/`MiB`, `G`/`GiB` are powers of 1024; `kB`, `MB`, `GB` powers of 1000.
fn parse_size(text: &str) -> anyhow::Result<u64> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().with_context(|| format!("not a size: {text:?}"))?;
    let factor: u64 = match unit.trim() {
        "" => 1,
        "k" | "K" | "kiB" | "KiB" => 1 << 10,
        "kB" | "KB" => 1_000,
        "M" | "MiB" => 1 << 20,
        "MB" => 1_000_000,
        "G" | "GiB" => 1 << 30,
        "GB" => 1_000_000_000,
        other => bail!("unknown size unit {other:?} in {text:?}"),
    };
    number.checked_mul(factor).with_context(|| format!("size too large: {text:?}"))
}

/// RabbitMQ refuses a `max_message_size` above 512 MiB.
const MAX_MESSAGE_SIZE_LIMIT: u64 = 536_870_912;

/// The resolved configuration.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Config {
    pub(crate) listen: Vec<String>,
    pub(crate) users: Vec<UserConfig>,
    pub(crate) vhosts: Vec<String>,
    pub(crate) log_level: String,
    pub(crate) log_format: LogFormat,
    pub(crate) http_listen: String,
    pub(crate) prometheus_listen: String,
    /// The Zaqar gateway's address; `None`: off.
    pub(crate) zaqar_listen: Option<String>,
    /// Whether Zaqar creates a missing project's vhost on first use.
    pub(crate) zaqar_create_vhosts: bool,
    /// How Zaqar requests authenticate.
    pub(crate) zaqar_auth: charon_zaqar::ZaqarAuth,
    pub(crate) data_dir: PathBuf,
    pub(crate) memory_watermark: MemoryWatermark,
    /// Bytes.
    pub(crate) disk_free_limit: u64,
    pub(crate) channel_max: u16,
    pub(crate) frame_max: u32,
    pub(crate) max_message_size: u64,
    /// ms; `None`: off.
    pub(crate) consumer_timeout: Option<u64>,
    /// The runtime's worker threads.
    pub(crate) worker_threads: usize,
    pub(crate) dead_letter_fallback: bool,
    pub(crate) dead_letter_guarantee: bool,
    /// amqps and HTTPS; `None` without a certificate.
    pub(crate) tls: Option<TlsConfig>,
    pub(crate) login: LoginConfig,
    /// Definitions imported at start (`--definitions`, `load_definitions`).
    pub(crate) definitions: Option<PathBuf>,
    /// `--node-name`; `None`: `charon@<hostname>`.
    pub(crate) node_name: Option<String>,
    /// The cluster this node is a member of; `None`: a single node.
    pub(crate) cluster: Option<ClusterConfig>,
}

/// `cluster_listen`, `cluster_peers`, `cluster_secret_file`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ClusterConfig {
    /// This node's name (in `peers`).
    pub(crate) node: String,
    /// The cluster listener.
    pub(crate) listen: std::net::SocketAddr,
    /// Every member, this node included: name and `host:port`.
    pub(crate) peers: Vec<(String, String)>,
    /// `None`: `$HOME/.charon.cookie`.
    pub(crate) secret_file: Option<PathBuf>,
    /// `cluster_tls`: this node's certificate chain, its key and the cluster's CA (PEM files).
    pub(crate) tls: Option<(PathBuf, PathBuf, PathBuf)>,
}

impl ClusterConfig {
    fn resolve(
        cli: &Cli,
        file: &FileConfig,
        node: Option<&str>,
        certificates: Option<&TlsConfig>,
    ) -> anyhow::Result<Option<Self>> {
        let listen = cli.cluster_listen.clone().or_else(|| file.cluster_listen.clone());
        let tls = match cli.cluster_tls.or(file.cluster_tls).unwrap_or(false) {
            false => None,
            true => match certificates {
                Some(TlsConfig { cert, key, ca: Some(ca), .. }) => Some((cert.clone(), key.clone(), ca.clone())),
                _ => {
                    bail!("cluster_tls needs tls_cert, tls_key and tls_ca (the CA every node's certificate chains to)")
                }
            },
        };
        let peers =
            if cli.cluster_peers.is_empty() { file.cluster_peers.clone() } else { Some(cli.cluster_peers.clone()) };
        let secret_file = cli.cluster_secret_file.clone().or_else(|| file.cluster_secret_file.clone());
        let Some(listen) = listen else {
            if peers.is_some() || secret_file.is_some() || tls.is_some() {
                bail!(
                    "cluster_peers, cluster_secret_file and cluster_tls need cluster_listen (this node's cluster address)"
                );
            }
            return Ok(None);
        };
        let listen: std::net::SocketAddr =
            listen.parse().with_context(|| format!("cluster_listen must be IP:port, got {listen:?}"))?;
        let node = node.map_or_else(charon_model::node_name, str::to_owned);
        let mut members: Vec<(String, String)> = Vec::new();
        for spec in peers.unwrap_or_default() {
            let Some((name, address)) = spec.split_once('=').filter(|(n, a)| !n.is_empty() && !a.is_empty()) else {
                bail!("a cluster peer is NAME=ADDR, got {spec:?}");
            };
            if members.iter().any(|(known, _)| known == name) {
                bail!("cluster peer {name} is listed twice");
            }
            members.push((name.to_owned(), address.to_owned()));
        }
        match members.iter().find(|(name, _)| *name == node) {
            None if members.is_empty() => members.push((node.clone(), listen.to_string())),
            None => bail!("cluster_peers must list this node ({node}) with its cluster_listen address"),
            Some((_, address)) if address.parse::<std::net::SocketAddr>().ok() != Some(listen) => {
                bail!("cluster_peers gives {node} the address {address}, but cluster_listen is {listen}")
            }
            Some(_) => {}
        }
        Ok(Some(Self { node, listen, peers: members, secret_file, tls }))
    }
}

/// amqps and HTTPS settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TlsConfig {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
    pub(crate) ca: Option<PathBuf>,
    pub(crate) verify_peer: bool,
    pub(crate) fail_if_no_peer_cert: bool,
    pub(crate) listen: Vec<String>,
    pub(crate) https_listen: String,
}

impl TlsConfig {
    fn resolve(cli: &Cli, file: &FileConfig) -> anyhow::Result<Option<Self>> {
        let cert = cli.tls_cert.clone().or_else(|| file.tls_cert.clone());
        let key = cli.tls_key.clone().or_else(|| file.tls_key.clone());
        let ca = cli.tls_ca.clone().or_else(|| file.tls_ca.clone());
        let verify_peer = cli.tls_verify_peer.or(file.tls_verify_peer).unwrap_or(false);
        let fail_if_no_peer_cert = cli.tls_fail_if_no_peer_cert.or(file.tls_fail_if_no_peer_cert).unwrap_or(false);
        let listen = if cli.tls_listen.is_empty() { file.tls_listen.clone() } else { Some(cli.tls_listen.clone()) };
        let https_listen = cli.https_listen.clone().or_else(|| file.https_listen.clone());
        let (cert, key) = match (cert, key) {
            (Some(cert), Some(key)) => (cert, key),
            (None, None) => {
                let set = [
                    ("tls_ca", ca.is_some()),
                    ("tls_verify_peer", verify_peer),
                    ("tls_fail_if_no_peer_cert", fail_if_no_peer_cert),
                    ("tls_listen", listen.is_some()),
                    ("https_listen", https_listen.is_some()),
                ];
                if let Some((name, _)) = set.iter().find(|(_, set)| *set) {
                    bail!("{name} needs a server certificate: set tls_cert and tls_key");
                }
                return Ok(None);
            }
            (Some(_), None) => bail!("tls_cert needs tls_key"),
            (None, Some(_)) => bail!("tls_key needs tls_cert"),
        };
        if verify_peer && ca.is_none() {
            bail!("tls_verify_peer needs tls_ca (the CA certificates client certificates are checked against)");
        }
        if fail_if_no_peer_cert && !verify_peer {
            bail!("tls_fail_if_no_peer_cert needs tls_verify_peer = true");
        }
        Ok(Some(Self {
            cert,
            key,
            ca,
            verify_peer,
            fail_if_no_peer_cert,
            listen: listen.unwrap_or_else(|| vec!["127.0.0.1:5671".to_owned()]),
            https_listen: https_listen.unwrap_or_else(|| "127.0.0.1:15671".to_owned()),
        }))
    }
}

impl Config {
    pub(crate) fn load(cli: &Cli) -> anyhow::Result<Self> {
        let file = match &cli.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
                toml::from_str::<FileConfig>(&text).with_context(|| format!("parsing {}", path.display()))?
            }
            None => FileConfig::default(),
        };
        Self::resolve(cli, file)
    }

    pub(crate) fn resolve(cli: &Cli, file: FileConfig) -> anyhow::Result<Self> {
        let tls = TlsConfig::resolve(cli, &file)?;
        let node_name = cli.node_name.clone().or_else(|| file.node_name.clone());
        if node_name.as_deref().is_some_and(|n| n.is_empty() || n.len() > 255) {
            bail!("node_name must be 1 to 255 bytes");
        }
        let cluster = ClusterConfig::resolve(cli, &file, node_name.as_deref(), tls.as_ref())?;
        let definitions = cli.definitions.clone().or_else(|| file.load_definitions.clone());
        // RabbitMQ seeds no default user and vhost when definitions are to be loaded.
        let seed_defaults = definitions.is_none();
        let listen = if cli.listen.is_empty() {
            file.listen.unwrap_or_else(|| vec!["127.0.0.1:5672".to_owned()])
        } else {
            cli.listen.clone()
        };
        let users = if cli.users.is_empty() {
            match file.users {
                Some(users) => users
                    .into_iter()
                    .map(|u| UserConfig { name: u.name, password: u.password, vhosts: u.vhosts, tags: u.tags })
                    .collect(),
                None if seed_defaults => BrokerConfig::default().users,
                None => Vec::new(),
            }
        } else {
            let mut users = Vec::new();
            for spec in &cli.users {
                let Some((name, password)) = spec.split_once(':') else {
                    bail!("--user expects name:password, got {spec:?}");
                };
                users.push(UserConfig {
                    name: name.to_owned(),
                    password: password.to_owned(),
                    vhosts: None,
                    tags: vec!["administrator".to_owned()],
                });
            }
            users
        };
        let vhosts = if cli.vhosts.is_empty() {
            file.vhosts.unwrap_or_else(|| if seed_defaults { vec!["/".to_owned()] } else { Vec::new() })
        } else {
            cli.vhosts.clone()
        };
        let log_level = cli.log_level.clone().or(file.log_level).unwrap_or_else(|| "info".to_owned());
        let log_format = cli.log_format.or(file.log_format).unwrap_or_default();
        let http_listen = cli.http_listen.clone().or(file.http_listen).unwrap_or_else(|| "127.0.0.1:15672".to_owned());
        let prometheus_listen =
            cli.prometheus_listen.clone().or(file.prometheus_listen).unwrap_or_else(|| "127.0.0.1:15692".to_owned());
        let zaqar_enabled = !cli.no_zaqar && file.zaqar_enabled.unwrap_or(true);
        let zaqar_listen = zaqar_enabled
            .then(|| cli.zaqar_listen.clone().or(file.zaqar_listen).unwrap_or_else(|| "127.0.0.1:8888".to_owned()));
        let zaqar_create_vhosts = !cli.zaqar_no_create_vhosts && file.zaqar_create_vhosts.unwrap_or(true);
        let zaqar_auth = match cli.zaqar_auth.or(file.zaqar_auth).unwrap_or_default() {
            ZaqarAuthMode::Noauth => charon_zaqar::ZaqarAuth::NoAuth,
            ZaqarAuthMode::Tokens => charon_zaqar::ZaqarAuth::Tokens,
        };
        let data_dir = cli.data_dir.clone().or(file.data_dir).unwrap_or_else(|| PathBuf::from("./data"));
        let absolute = match &cli.vm_memory_high_watermark_absolute {
            Some(text) => Some(parse_size(text)?),
            None => file.vm_memory_high_watermark_absolute.as_ref().map(ByteSize::bytes).transpose()?,
        };
        let memory_watermark = match (absolute, cli.vm_memory_high_watermark.or(file.vm_memory_high_watermark)) {
            (Some(bytes), _) => MemoryWatermark::Absolute(bytes),
            (None, Some(fraction)) if fraction > 0.0 && fraction <= 1.0 => MemoryWatermark::Relative(fraction),
            (None, Some(fraction)) => bail!("vm_memory_high_watermark must be in (0, 1], got {fraction}"),
            (None, None) => MemoryWatermark::Relative(0.4),
        };
        let disk_free_limit = match &cli.disk_free_limit {
            Some(text) => parse_size(text)?,
            None => file.disk_free_limit.as_ref().map(ByteSize::bytes).transpose()?.unwrap_or(50_000_000),
        };
        let channel_max = cli.channel_max.or(file.channel_max).unwrap_or(2047);
        if channel_max == 0 {
            bail!("channel_max must be 1 to 65535");
        }
        let frame_max = cli.frame_max.or(file.frame_max).unwrap_or(131_072);
        if frame_max < 4096 {
            bail!("frame_max must be at least 4096 (AMQP 0.9.1's minimum frame size), got {frame_max}");
        }
        let max_message_size = cli.max_message_size.or(file.max_message_size).unwrap_or(16_777_216);
        if !(1..=MAX_MESSAGE_SIZE_LIMIT).contains(&max_message_size) {
            bail!("max_message_size must be 1 to {MAX_MESSAGE_SIZE_LIMIT}, got {max_message_size}");
        }
        let consumer_timeout = match cli.consumer_timeout.as_deref().map(Timeout::parse).transpose()? {
            Some(timeout) => timeout.millis()?,
            None => file
                .consumer_timeout
                .map_or(Ok(Some(charon_engine::queue::DEFAULT_CONSUMER_TIMEOUT_MS)), Timeout::millis)?,
        };
        let worker_threads = cli.worker_threads.or(file.worker_threads);
        if worker_threads == Some(0) {
            bail!("worker_threads must be at least 1");
        }
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        let worker_threads = worker_threads.unwrap_or_else(|| default_worker_threads(cores));
        let loopback_users = match &cli.loopback_users {
            Some(text) => text.split(',').map(str::trim).filter(|u| !u.is_empty()).map(str::to_owned).collect(),
            None => file.loopback_users.clone().unwrap_or_else(|| LoginConfig::default().loopback_users),
        };
        let cert_login_from = match cli.ssl_cert_login_from.as_deref().or(file.ssl_cert_login_from.as_deref()) {
            None | Some("common_name") => CertLoginFrom::CommonName,
            Some("distinguished_name") => CertLoginFrom::DistinguishedName,
            Some(other) => bail!("ssl_cert_login_from must be common_name or distinguished_name, got {other:?}"),
        };
        // RabbitMQ's `anonymous_login_user = none` turns ANONYMOUS off.
        let anonymous = match cli.anonymous_login_user.clone().or(file.anonymous_login_user) {
            Some(name) if name == "none" => None,
            name => Some((
                name.unwrap_or_else(|| "guest".to_owned()),
                cli.anonymous_login_pass.clone().or(file.anonymous_login_pass).unwrap_or_else(|| "guest".to_owned()),
            )),
        };
        let login = LoginConfig { loopback_users, cert_login_from, anonymous };
        let dead_letter_fallback = cli.dead_letter_fallback.or(file.dead_letter_fallback).unwrap_or(true);
        let dead_letter_guarantee = match cli.dead_letter_guarantee.clone().or(file.dead_letter_guarantee).as_deref() {
            None | Some("at-most-once") => false,
            Some("at-least-once") => true,
            Some(other) => bail!("dead_letter_guarantee must be at-most-once or at-least-once, got {other:?}"),
        };
        Ok(Self {
            listen,
            users,
            vhosts,
            log_level,
            log_format,
            http_listen,
            prometheus_listen,
            zaqar_listen,
            zaqar_create_vhosts,
            zaqar_auth,
            data_dir,
            memory_watermark,
            disk_free_limit,
            channel_max,
            frame_max,
            max_message_size,
            consumer_timeout,
            worker_threads,
            dead_letter_fallback,
            dead_letter_guarantee,
            tls,
            login,
            definitions,
            node_name,
            cluster,
        })
    }

    /// The 0.9.1 connection settings.
    pub(crate) fn amqp091(&self) -> charon_amqp091::server::ServerConfig {
        let connection = charon_amqp091::proto::ConnectionConfig {
            channel_max: self.channel_max,
            frame_max: self.frame_max,
            max_message_size: self.max_message_size,
            ..Default::default()
        };
        charon_amqp091::server::ServerConfig { connection }
    }

    /// The 1.0 connection settings.
    pub(crate) fn amqp10(&self) -> charon_amqp10::server::ServerConfig {
        let connection = charon_amqp10::proto::Config {
            max_frame_size: self.frame_max,
            max_message_size: usize::try_from(self.max_message_size).unwrap_or(usize::MAX),
            ..Default::default()
        };
        charon_amqp10::server::ServerConfig { connection }
    }

    pub(crate) fn broker_config(&self) -> BrokerConfig {
        BrokerConfig {
            users: self.users.clone(),
            vhosts: self.vhosts.clone(),
            dead_letter_fallback: self.dead_letter_fallback,
            dead_letter_guarantee: self.dead_letter_guarantee,
            login: self.login.clone(),
            consumer_timeout: self.consumer_timeout,
        }
    }
}

/// The runtime's worker threads when none are configured: one per core but one, at least one.
///
/// The log writer's thread, busy with every persistent message, and the blocking pool need a
/// core too. With one worker per core on a 2-core machine shared with its clients, the
/// workers handed each read across cores and synced tiny batches: one worker instead carried
/// S1b with amqprs 1.3× as fast (3.9–4.05× RabbitMQ 4.0.5, every round fast), S10 and S1a at
/// less CPU per message, S1b with lapin and S6 at par; S5, whose source and dead-letter queue
/// work in parallel, lost 9 % (bench/history/until-2026-11-29.md,
/// "One runtime worker per core but one").
pub(crate) fn default_worker_threads(cores: usize) -> usize {
    cores.saturating_sub(1).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::parse_from(std::iter::once("charon").chain(args.iter().copied()))
    }

    #[test]
    fn the_zaqar_gateway_is_on_at_8888_by_default_and_can_be_turned_off() {
        let config = Config::resolve(&cli(&[]), FileConfig::default()).unwrap();
        assert_eq!((config.zaqar_listen.as_deref(), config.zaqar_create_vhosts), (Some("127.0.0.1:8888"), true));
        let off = Config::resolve(&cli(&["--no-zaqar", "--zaqar-no-create-vhosts"]), FileConfig::default()).unwrap();
        assert_eq!((off.zaqar_listen, off.zaqar_create_vhosts), (None, false));
        let file =
            toml::from_str::<FileConfig>("zaqar_listen = \"0.0.0.0:9999\"\nzaqar_create_vhosts = false").unwrap();
        let from_file = Config::resolve(&cli(&[]), file).unwrap();
        assert_eq!((from_file.zaqar_listen.as_deref(), from_file.zaqar_create_vhosts), (Some("0.0.0.0:9999"), false));
        let disabled =
            Config::resolve(&cli(&[]), toml::from_str::<FileConfig>("zaqar_enabled = false").unwrap()).unwrap();
        assert_eq!(disabled.zaqar_listen, None);
    }

    #[test]
    fn worker_threads_default_to_one_per_core_but_one_and_zero_is_refused() {
        assert_eq!((default_worker_threads(1), default_worker_threads(2), default_worker_threads(8)), (1, 1, 7));
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        let default = Config::resolve(&cli(&[]), FileConfig::default()).unwrap();
        assert_eq!(default.worker_threads, default_worker_threads(cores));
        let flag = Config::resolve(&cli(&["--worker-threads", "2"]), FileConfig::default()).unwrap();
        assert_eq!(flag.worker_threads, 2);
        let file = toml::from_str::<FileConfig>("worker_threads = 3").unwrap();
        assert_eq!(Config::resolve(&cli(&[]), file).unwrap().worker_threads, 3);
        let zero = Config::resolve(&cli(&["--worker-threads", "0"]), FileConfig::default());
        assert_eq!(zero.unwrap_err().to_string(), "worker_threads must be at least 1");
    }

    #[test]
    fn zaqar_authenticates_nothing_by_default_and_tokens_when_asked() {
        use charon_zaqar::ZaqarAuth;
        assert_eq!(Config::resolve(&cli(&[]), FileConfig::default()).unwrap().zaqar_auth, ZaqarAuth::NoAuth);
        let flag = Config::resolve(&cli(&["--zaqar-auth", "tokens"]), FileConfig::default()).unwrap();
        assert_eq!(flag.zaqar_auth, ZaqarAuth::Tokens);
        let file = toml::from_str::<FileConfig>("zaqar_auth = \"tokens\"").unwrap();
        assert_eq!(Config::resolve(&cli(&[]), file).unwrap().zaqar_auth, ZaqarAuth::Tokens);
        let over = toml::from_str::<FileConfig>("zaqar_auth = \"tokens\"").unwrap();
        assert_eq!(Config::resolve(&cli(&["--zaqar-auth", "noauth"]), over).unwrap().zaqar_auth, ZaqarAuth::NoAuth);
        assert!(toml::from_str::<FileConfig>("zaqar_auth = \"keystone\"").is_err(), "refused, not ignored");
    }

    #[test]
    fn defaults_are_rabbitmqs() {
        let config = Config::resolve(&cli(&[]), FileConfig::default()).unwrap();
        assert_eq!(config.listen, ["127.0.0.1:5672"]);
        assert_eq!(config.vhosts, ["/"]);
        assert_eq!(config.users.first().map(|u| (u.name.as_str(), u.password.as_str())), Some(("guest", "guest")));
        assert_eq!(config.log_level, "info");
        assert_eq!(
            (config.http_listen.as_str(), config.prometheus_listen.as_str()),
            ("127.0.0.1:15672", "127.0.0.1:15692")
        );
        assert_eq!(config.login.anonymous, Some(("guest".to_owned(), "guest".to_owned())));
        assert_eq!(config.data_dir, PathBuf::from("./data"));
    }

    #[test]
    fn the_dead_letter_fallback_is_on_unless_the_flag_or_the_file_turns_it_off() {
        assert!(Config::resolve(&cli(&[]), FileConfig::default()).unwrap().dead_letter_fallback);
        let file: FileConfig = toml::from_str("dead_letter_fallback = false").unwrap();
        assert!(!Config::resolve(&cli(&[]), file.clone()).unwrap().dead_letter_fallback);
        let config = Config::resolve(&cli(&["--dead-letter-fallback", "true"]), file).unwrap();
        assert!(config.dead_letter_fallback, "the flag wins");
        assert!(
            !Config::resolve(&cli(&["--dead-letter-fallback", "false"]), FileConfig::default())
                .unwrap()
                .broker_config()
                .dead_letter_fallback
        );
    }

    #[test]
    fn the_dead_letter_guarantee_is_rabbitmqs_unless_asked_for() {
        assert!(!Config::resolve(&cli(&[]), FileConfig::default()).unwrap().broker_config().dead_letter_guarantee);
        let file: FileConfig = toml::from_str("dead_letter_guarantee = \"at-least-once\"").unwrap();
        assert!(Config::resolve(&cli(&[]), file.clone()).unwrap().broker_config().dead_letter_guarantee);
        let flag = cli(&["--dead-letter-guarantee", "at-most-once"]);
        assert!(!Config::resolve(&flag, file).unwrap().dead_letter_guarantee, "the flag wins");
        let bad = Config::resolve(&cli(&["--dead-letter-guarantee", "always"]), FileConfig::default());
        assert!(bad.unwrap_err().to_string().contains("at-most-once or at-least-once"));
    }

    #[test]
    fn definitions_come_from_the_flag_or_the_file_and_replace_the_default_seed() {
        let file: FileConfig = toml::from_str("load_definitions = \"/etc/charon/definitions.json\"").unwrap();
        let config = Config::resolve(&cli(&[]), file.clone()).unwrap();
        assert_eq!(config.definitions, Some(PathBuf::from("/etc/charon/definitions.json")));
        assert!(config.users.is_empty() && config.vhosts.is_empty(), "no guest, no /: the file has them");
        let config = Config::resolve(&cli(&["--definitions", "/tmp/d.json", "--user", "a:b"]), file).unwrap();
        assert_eq!(config.definitions, Some(PathBuf::from("/tmp/d.json")), "the flag wins");
        assert_eq!(config.users.iter().map(|u| u.name.as_str()).collect::<Vec<_>>(), ["a"], "configured users stay");
        assert_eq!(Config::resolve(&cli(&[]), FileConfig::default()).unwrap().definitions, None);
    }

    #[test]
    fn the_data_directory_comes_from_the_flag_or_the_file() {
        let file: FileConfig = toml::from_str("data_dir = \"/var/lib/charon\"").unwrap();
        assert_eq!(Config::resolve(&cli(&[]), file.clone()).unwrap().data_dir, PathBuf::from("/var/lib/charon"));
        let config = Config::resolve(&cli(&["--data-dir", "/tmp/c"]), file).unwrap();
        assert_eq!(config.data_dir, PathBuf::from("/tmp/c"));
    }

    #[test]
    fn http_and_prometheus_addresses_come_from_flags_or_the_file() {
        let file: FileConfig =
            toml::from_str("http_listen = \"0.0.0.0:15672\"\nprometheus_listen = \"0.0.0.0:9419\"").unwrap();
        let config = Config::resolve(&cli(&["--http-listen", "127.0.0.1:0"]), file).unwrap();
        assert_eq!((config.http_listen.as_str(), config.prometheus_listen.as_str()), ("127.0.0.1:0", "0.0.0.0:9419"));
    }

    #[test]
    fn flags_override_the_file() {
        let file: FileConfig = toml::from_str(
            r#"
            listen = ["0.0.0.0:5672"]
            vhosts = ["/", "dev"]
            log_level = "debug"
            [[users]]
            name = "app"
            password = "s3cret"
            vhosts = ["dev"]
            "#,
        )
        .unwrap();
        let config = Config::resolve(&cli(&["--listen", "127.0.0.1:0"]), file).unwrap();
        assert_eq!(config.listen, ["127.0.0.1:0"]);
        assert_eq!(config.vhosts, ["/", "dev"]);
        assert_eq!(config.log_level, "debug");
        assert_eq!(config.users.first().and_then(|u| u.vhosts.clone()), Some(vec!["dev".to_owned()]));
    }

    #[test]
    fn alarm_limits_default_to_rabbitmqs_and_take_its_units() {
        let config = Config::resolve(&cli(&[]), FileConfig::default()).unwrap();
        assert_eq!((config.memory_watermark, config.disk_free_limit), (MemoryWatermark::Relative(0.4), 50_000_000));
        let file: FileConfig = toml::from_str("vm_memory_high_watermark = 0.6\ndisk_free_limit = \"2GiB\"").unwrap();
        let config = Config::resolve(&cli(&[]), file.clone()).unwrap();
        assert_eq!((config.memory_watermark, config.disk_free_limit), (MemoryWatermark::Relative(0.6), 2 << 30));
        let flags = cli(&["--vm-memory-high-watermark-absolute", "300MB", "--disk-free-limit", "1000"]);
        let config = Config::resolve(&flags, file).unwrap();
        assert_eq!((config.memory_watermark, config.disk_free_limit), (MemoryWatermark::Absolute(300_000_000), 1000));
        assert!(Config::resolve(&cli(&["--vm-memory-high-watermark", "1.5"]), FileConfig::default()).is_err());
        assert!(Config::resolve(&cli(&["--disk-free-limit", "5XB"]), FileConfig::default()).is_err());
        assert_eq!(parse_size("64k").unwrap(), 65_536);
        assert_eq!(parse_size("64kB").unwrap(), 64_000);
    }

    #[test]
    fn protocol_limits_default_to_rabbitmqs_and_are_checked() {
        let config = Config::resolve(&cli(&[]), FileConfig::default()).unwrap();
        assert_eq!((config.channel_max, config.frame_max, config.max_message_size), (2047, 131_072, 16_777_216));
        let file: FileConfig = toml::from_str("channel_max = 16\nframe_max = 8192\nmax_message_size = 1000").unwrap();
        let config = Config::resolve(&cli(&["--frame-max", "65536"]), file).unwrap();
        assert_eq!((config.channel_max, config.frame_max, config.max_message_size), (16, 65_536, 1000));
        assert_eq!(config.amqp091().connection.frame_max, 65_536);
        assert_eq!(config.amqp10().connection.max_message_size, 1000);
        for bad in [["--channel-max", "0"], ["--frame-max", "4095"], ["--max-message-size", "536870913"]] {
            assert!(Config::resolve(&cli(&bad), FileConfig::default()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn consumer_timeout_defaults_to_rabbitmqs_and_false_turns_it_off() {
        let config = Config::resolve(&cli(&[]), FileConfig::default()).unwrap();
        assert_eq!(config.consumer_timeout, Some(1_800_000));
        assert_eq!(config.broker_config().consumer_timeout, Some(1_800_000));
        let file: FileConfig = toml::from_str("consumer_timeout = 5000").unwrap();
        assert_eq!(Config::resolve(&cli(&[]), file.clone()).unwrap().consumer_timeout, Some(5000));
        let off: FileConfig = toml::from_str("consumer_timeout = false").unwrap();
        assert_eq!(Config::resolve(&cli(&[]), off).unwrap().consumer_timeout, None);
        // The flag wins over the file.
        assert_eq!(
            Config::resolve(&cli(&["--consumer-timeout", "false"]), file.clone()).unwrap().consumer_timeout,
            None
        );
        assert_eq!(Config::resolve(&cli(&["--consumer-timeout", "70"]), file).unwrap().consumer_timeout, Some(70));
        let on: FileConfig = toml::from_str("consumer_timeout = true").unwrap();
        assert!(Config::resolve(&cli(&[]), on).is_err());
        assert!(Config::resolve(&cli(&["--consumer-timeout", "soon"]), FileConfig::default()).is_err());
        assert!(toml::from_str::<FileConfig>("consumer_timeout = -1").is_err());
    }

    #[test]
    fn tls_is_off_without_a_certificate_and_defaults_to_rabbitmqs_ports() {
        assert_eq!(Config::resolve(&cli(&[]), FileConfig::default()).unwrap().tls, None);
        let file: FileConfig = toml::from_str("tls_cert = \"c.pem\"\ntls_key = \"k.pem\"").unwrap();
        let tls = Config::resolve(&cli(&[]), file).unwrap().tls.unwrap();
        assert_eq!((tls.listen, tls.https_listen.as_str()), (vec!["127.0.0.1:5671".to_owned()], "127.0.0.1:15671"));
        assert!((!tls.verify_peer && !tls.fail_if_no_peer_cert && tls.ca.is_none()));
        let flags = cli(&[
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--tls-ca",
            "ca.pem",
            "--tls-verify-peer",
            "true",
            "--tls-fail-if-no-peer-cert",
            "true",
            "--tls-listen",
            "0.0.0.0:5671",
            "--https-listen",
            "127.0.0.1:0",
        ]);
        let tls = Config::resolve(&flags, FileConfig::default()).unwrap().tls.unwrap();
        assert_eq!(tls.ca, Some(PathBuf::from("ca.pem")));
        assert!(tls.verify_peer && tls.fail_if_no_peer_cert);
        assert_eq!((tls.listen, tls.https_listen.as_str()), (vec!["0.0.0.0:5671".to_owned()], "127.0.0.1:0"));
    }

    #[test]
    fn tls_settings_that_cannot_work_are_errors() {
        let bad: [&[&str]; 5] = [
            &["--tls-cert", "c.pem"],
            &["--tls-listen", "127.0.0.1:5671"],
            &["--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-verify-peer", "true"],
            &["--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-fail-if-no-peer-cert", "true"],
            &["--https-listen", "127.0.0.1:15671"],
        ];
        for args in bad {
            assert!(Config::resolve(&cli(args), FileConfig::default()).is_err(), "{args:?}");
        }
    }

    #[test]
    fn anonymous_logins_are_guests_unless_configured_or_turned_off() {
        let file: FileConfig = toml::from_str("anonymous_login_user = \"app\"\nanonymous_login_pass = \"s3\"").unwrap();
        let config = Config::resolve(&cli(&[]), file).unwrap();
        assert_eq!(config.login.anonymous, Some(("app".to_owned(), "s3".to_owned())));
        let config = Config::resolve(&cli(&["--anonymous-login-user", "none"]), FileConfig::default()).unwrap();
        assert_eq!(config.login.anonymous, None);
    }

    #[test]
    fn loopback_users_and_cert_login_from() {
        let config = Config::resolve(&cli(&[]), FileConfig::default()).unwrap();
        assert_eq!(config.broker_config().login, LoginConfig::default());
        assert_eq!(config.login.loopback_users, ["guest"]);
        let file: FileConfig =
            toml::from_str("loopback_users = []\nssl_cert_login_from = \"distinguished_name\"").unwrap();
        let config = Config::resolve(&cli(&[]), file.clone()).unwrap();
        assert!(config.login.loopback_users.is_empty());
        assert_eq!(config.login.cert_login_from, CertLoginFrom::DistinguishedName);
        let config = Config::resolve(&cli(&["--loopback-users", "guest, admin"]), file).unwrap();
        assert_eq!(config.login.loopback_users, ["guest", "admin"]);
        assert!(Config::resolve(&cli(&["--ssl-cert-login-from", "cn"]), FileConfig::default()).is_err());
    }

    #[test]
    fn clustering_takes_rabbitmqs_peer_list_and_refuses_a_list_without_this_node() {
        let peers = [
            "--cluster-peer",
            "charon-1@localhost=127.0.0.1:25901",
            "--cluster-peer",
            "charon-2@localhost=127.0.0.1:25902",
        ];
        let node = ["--node-name", "charon-1@localhost", "--cluster-listen", "127.0.0.1:25901"];
        let args: Vec<&str> = node.iter().chain(peers.iter()).copied().collect();
        let config = Config::resolve(&cli(&args), FileConfig::default()).unwrap();
        let cluster = config.cluster.unwrap();
        assert_eq!(
            (cluster.node.as_str(), cluster.listen.to_string()),
            ("charon-1@localhost", "127.0.0.1:25901".into())
        );
        assert_eq!(cluster.peers[1], ("charon-2@localhost".to_owned(), "127.0.0.1:25902".to_owned()));
        assert_eq!(config.node_name.as_deref(), Some("charon-1@localhost"));
        // The same from the file's keys.
        let file = toml::from_str::<FileConfig>(
            "node_name = \"charon-1@localhost\"\ncluster_listen = \"127.0.0.1:25901\"\n\
             cluster_peers = [\"charon-1@localhost=127.0.0.1:25901\", \"charon-2@localhost=127.0.0.1:25902\"]\n\
             cluster_secret_file = \"/etc/charon/secret\"",
        )
        .unwrap();
        let from_file = Config::resolve(&cli(&[]), file).unwrap().cluster.unwrap();
        assert_eq!((from_file.peers.len(), from_file.secret_file), (2, Some(PathBuf::from("/etc/charon/secret"))));
        // Alone: a single-member cluster of this node.
        let alone = Config::resolve(&cli(&node), FileConfig::default()).unwrap().cluster.unwrap();
        assert_eq!(alone.peers, vec![("charon-1@localhost".to_owned(), "127.0.0.1:25901".to_owned())]);
        assert_eq!(Config::resolve(&cli(&[]), FileConfig::default()).unwrap().cluster, None);
        // TLS between nodes takes the node's certificate, key and the CA.
        let tls = ["--tls-cert", "/c.pem", "--tls-key", "/k.pem", "--tls-ca", "/ca.pem", "--cluster-tls", "true"];
        let with_tls = Config::resolve(&cli(&[&node[..], &tls[..]].concat()), FileConfig::default()).unwrap();
        let expected = (PathBuf::from("/c.pem"), PathBuf::from("/k.pem"), PathBuf::from("/ca.pem"));
        assert_eq!(with_tls.cluster.unwrap().tls, Some(expected));
        let refused = [
            // TLS between nodes without a CA, or without a cluster.
            [&node[..], &tls[..4], &tls[6..]].concat(),
            tls.to_vec(),
            // Peers without a listener.
            vec!["--cluster-peer", "a@h=127.0.0.1:1"],
            // This node missing from the list, or at another address.
            vec![
                "--node-name",
                "charon-3@localhost",
                "--cluster-listen",
                "127.0.0.1:25903",
                "--cluster-peer",
                "charon-1@localhost=127.0.0.1:25901",
            ],
            vec![
                "--node-name",
                "charon-1@localhost",
                "--cluster-listen",
                "127.0.0.1:25909",
                "--cluster-peer",
                "charon-1@localhost=127.0.0.1:25901",
            ],
            // Malformed or repeated peers, a listener that is no IP:port.
            vec!["--node-name", "a@h", "--cluster-listen", "127.0.0.1:1", "--cluster-peer", "a@h"],
            vec![
                "--node-name",
                "a@h",
                "--cluster-listen",
                "127.0.0.1:1",
                "--cluster-peer",
                "a@h=127.0.0.1:1",
                "--cluster-peer",
                "a@h=127.0.0.1:2",
            ],
            vec!["--cluster-listen", "localhost:25901"],
        ];
        for args in refused {
            assert!(Config::resolve(&cli(&args), FileConfig::default()).is_err(), "{args:?}");
        }
    }

    #[test]
    fn bad_user_flag_and_unknown_file_keys_are_errors() {
        assert!(Config::resolve(&cli(&["--user", "nocolon"]), FileConfig::default()).is_err());
        assert!(toml::from_str::<FileConfig>("bogus = 1").is_err());
    }
}
