//! Polls a management API endpoint (e.g. `GET /api/queues`) once a second while a scenario runs,
//! to show that operators watching the broker do not slow its traffic (issue 19: S1a with the
//! API polled every second). A minimal HTTP/1.1 client: one request per connection, basic auth
//! from the URL, the body read to the end and discarded.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How often the API is asked.
const PERIOD: Duration = Duration::from_secs(1);

/// A management API endpoint: `http://user:password@host:port/path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ApiUrl {
    authority: String,
    path: String,
    credentials: String,
}

impl ApiUrl {
    /// Parses `http://user:password@host:port/path`.
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let rest = url.strip_prefix("http://").ok_or_else(|| anyhow!("{url}: only http:// URLs are polled"))?;
        let (userinfo, rest) = rest.split_once('@').ok_or_else(|| anyhow!("{url}: needs user:password@"))?;
        let (authority, path) = rest.split_once('/').map_or((rest, "/".to_owned()), |(a, p)| (a, format!("/{p}")));
        if !userinfo.contains(':') || authority.is_empty() {
            bail!("{url}: expected http://user:password@host:port/path");
        }
        let credentials = base64::engine::general_purpose::STANDARD.encode(userinfo);
        Ok(Self { authority: authority.to_owned(), path, credentials })
    }

    /// The same server and credentials, another path (`/api/queues`).
    pub(crate) fn at(&self, path: &str) -> Self {
        Self { path: path.to_owned(), ..self.clone() }
    }

    /// One request with a JSON body (the redrive scenario's `POST`); the status code and the
    /// body.
    pub(crate) async fn send(&self, method: &str, body: &str) -> Result<(u16, String)> {
        let mut stream = TcpStream::connect(&self.authority).await.with_context(|| self.authority.clone())?;
        let head = format!(
            "{method} {} HTTP/1.1\r\nHost: {}\r\nAuthorization: Basic {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.path,
            self.authority,
            self.credentials,
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        let status = std::str::from_utf8(raw.get(9..12).unwrap_or_default())
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| anyhow!("malformed HTTP answer"))?;
        let text = String::from_utf8_lossy(&raw);
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
        Ok((status, body))
    }

    /// One GET; the status code and how many body bytes came back.
    pub(crate) async fn get(&self) -> Result<(u16, usize)> {
        let mut stream = TcpStream::connect(&self.authority).await.with_context(|| self.authority.clone())?;
        let head = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nAuthorization: Basic {}\r\nConnection: close\r\n\r\n",
            self.path, self.authority, self.credentials
        );
        stream.write_all(head.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        let status = std::str::from_utf8(raw.get(9..12).unwrap_or_default())
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| anyhow!("malformed HTTP answer"))?;
        Ok((status, raw.len()))
    }
}

/// A running poller; [`Poller::finish`] stops it and says what it saw.
pub(crate) struct Poller {
    stop: Arc<AtomicBool>,
    polls: Arc<AtomicU64>,
    failures: Arc<AtomicU64>,
    slowest_us: Arc<AtomicU64>,
}

/// What the poller saw over one run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Polled {
    pub(crate) polls: u64,
    pub(crate) failures: u64,
    pub(crate) slowest: Duration,
}

impl Poller {
    /// Starts polling `url` every second.
    pub(crate) fn start(url: ApiUrl) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let polls = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(AtomicU64::new(0));
        let slowest_us = Arc::new(AtomicU64::new(0));
        let (s, p, f, w) = (Arc::clone(&stop), Arc::clone(&polls), Arc::clone(&failures), Arc::clone(&slowest_us));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !s.load(Ordering::Relaxed) {
                tick.tick().await;
                let started = Instant::now();
                match url.get().await {
                    Ok((200, _)) => {
                        p.fetch_add(1, Ordering::Relaxed);
                        let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                        w.fetch_max(took, Ordering::Relaxed);
                    }
                    _ => {
                        f.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        Self { stop, polls, failures, slowest_us }
    }

    /// Stops polling.
    pub(crate) fn finish(self) -> Polled {
        self.stop.store(true, Ordering::Relaxed);
        Polled {
            polls: self.polls.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            slowest: Duration::from_micros(self.slowest_us.load(Ordering::Relaxed)),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_credentials_authority_and_path() {
        let url = ApiUrl::parse("http://guest:guest@127.0.0.1:15672/api/queues?columns=name").unwrap();
        assert_eq!(url.authority, "127.0.0.1:15672");
        assert_eq!(url.path, "/api/queues?columns=name");
        assert_eq!(url.credentials, "Z3Vlc3Q6Z3Vlc3Q=");
        assert_eq!(url.at("/api/overview").path, "/api/overview");
        assert_eq!(ApiUrl::parse("http://a:b@h:1").unwrap().path, "/");
        assert!(ApiUrl::parse("https://guest:guest@h:1/").is_err());
        assert!(ApiUrl::parse("http://h:1/api").is_err());
    }
}
