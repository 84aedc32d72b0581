//! Configuration: command-line flags over an optional TOML file over RabbitMQ's defaults
//! (127.0.0.1:5672, user guest/guest, vhost `/`).

use std::path::PathBuf;

use anyhow::{Context, bail};
use charon_engine::{BrokerConfig, UserConfig};
use clap::Parser;
use serde::Deserialize;

/// Command-line flags.
#[derive(Debug, Parser)]
#[command(name = "charon", version, about = "Charon: an AMQP 0.9.1 and 1.0 message broker")]
pub(crate) struct Cli {
    /// A TOML configuration file.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Address to listen on for AMQP (repeatable). Default 127.0.0.1:5672; port 0 picks one.
    #[arg(long)]
    listen: Vec<String>,
    /// A user as `name:password` (repeatable). Replaces the default guest user.
    #[arg(long = "user")]
    users: Vec<String>,
    /// A virtual host to create (repeatable). Default `/`.
    #[arg(long = "vhost")]
    vhosts: Vec<String>,
    /// Log level or filter (`info`, `debug`, `charon_amqp091=trace`, ...).
    #[arg(long)]
    log_level: Option<String>,
    /// Accept SASL ANONYMOUS on AMQP 1.0, logging in as this configured user (off unless set).
    #[arg(long)]
    anonymous_user: Option<String>,
    /// Address of the HTTP management API (policies, queue counters). Default 127.0.0.1:15672.
    #[arg(long)]
    http_listen: Option<String>,
    /// Address of the Prometheus endpoint (`/metrics`). Default 127.0.0.1:15692.
    #[arg(long)]
    prometheus_listen: Option<String>,
    /// Data directory (durable topology and messages). Default `./data`.
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

/// A user in the configuration file.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct FileUser {
    name: String,
    password: String,
    vhosts: Option<Vec<String>>,
}

/// The configuration file.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<Vec<String>>,
    users: Option<Vec<FileUser>>,
    vhosts: Option<Vec<String>>,
    log_level: Option<String>,
    anonymous_user: Option<String>,
    http_listen: Option<String>,
    prometheus_listen: Option<String>,
    data_dir: Option<PathBuf>,
}

/// The resolved configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Config {
    pub(crate) listen: Vec<String>,
    pub(crate) users: Vec<UserConfig>,
    pub(crate) vhosts: Vec<String>,
    pub(crate) log_level: String,
    pub(crate) anonymous_user: Option<String>,
    pub(crate) http_listen: String,
    pub(crate) prometheus_listen: String,
    pub(crate) data_dir: PathBuf,
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

    fn resolve(cli: &Cli, file: FileConfig) -> anyhow::Result<Self> {
        let listen = if cli.listen.is_empty() {
            file.listen.unwrap_or_else(|| vec!["127.0.0.1:5672".to_owned()])
        } else {
            cli.listen.clone()
        };
        let users = if cli.users.is_empty() {
            match file.users {
                Some(users) => users
                    .into_iter()
                    .map(|u| UserConfig { name: u.name, password: u.password, vhosts: u.vhosts })
                    .collect(),
                None => BrokerConfig::default().users,
            }
        } else {
            let mut users = Vec::new();
            for spec in &cli.users {
                let Some((name, password)) = spec.split_once(':') else {
                    bail!("--user expects name:password, got {spec:?}");
                };
                users.push(UserConfig { name: name.to_owned(), password: password.to_owned(), vhosts: None });
            }
            users
        };
        let vhosts = if cli.vhosts.is_empty() {
            file.vhosts.unwrap_or_else(|| vec!["/".to_owned()])
        } else {
            cli.vhosts.clone()
        };
        let log_level = cli.log_level.clone().or(file.log_level).unwrap_or_else(|| "info".to_owned());
        let anonymous_user = cli.anonymous_user.clone().or(file.anonymous_user);
        if let Some(name) = &anonymous_user
            && !users.iter().any(|u| &u.name == name)
        {
            bail!("anonymous_user {name:?} is not a configured user");
        }
        let http_listen = cli.http_listen.clone().or(file.http_listen).unwrap_or_else(|| "127.0.0.1:15672".to_owned());
        let prometheus_listen =
            cli.prometheus_listen.clone().or(file.prometheus_listen).unwrap_or_else(|| "127.0.0.1:15692".to_owned());
        let data_dir = cli.data_dir.clone().or(file.data_dir).unwrap_or_else(|| PathBuf::from("./data"));
        Ok(Self { listen, users, vhosts, log_level, anonymous_user, http_listen, prometheus_listen, data_dir })
    }

    pub(crate) fn broker_config(&self) -> BrokerConfig {
        BrokerConfig { users: self.users.clone(), vhosts: self.vhosts.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::parse_from(std::iter::once("charon").chain(args.iter().copied()))
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
        assert_eq!(config.anonymous_user, None);
        assert_eq!(config.data_dir, PathBuf::from("./data"));
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
    fn bad_user_flag_and_unknown_file_keys_are_errors() {
        assert!(Config::resolve(&cli(&["--user", "nocolon"]), FileConfig::default()).is_err());
        assert!(toml::from_str::<FileConfig>("bogus = 1").is_err());
    }
}
