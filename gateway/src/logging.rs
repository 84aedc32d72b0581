//! Logs operators can read: RabbitMQ's lines on stderr, as text (coloured only on a terminal)
//! or as one JSON object per line (`--log-format json`, `log_format = "json"`, for log
//! shippers, as RabbitMQ's `log.console.formatter = json`).

use std::io::IsTerminal;

use serde::Deserialize;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LogFormat {
    /// Human-readable lines; ANSI colours only when stderr is a terminal.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `fields.message`, the other fields,
    /// `target` and the enclosing spans (the connection).
    Json,
}

/// Installs the subscriber: `filter` (`RUST_LOG` wins) and `format`, on stderr.
pub(crate) fn init(filter: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}
