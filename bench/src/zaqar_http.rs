//! A minimal keep-alive HTTP/1.1 client for the Zaqar scenario: one connection per simulated
//! client, requests with a JSON body, answers read by their `Content-Length`.

use anyhow::{Context, Result, anyhow};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The `Client-ID` every bench client sends (Zaqar wants a UUID).
const CLIENT_ID: &str = "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a";

/// One connection to the Zaqar gateway, as project `/` (the default vhost).
pub(crate) struct ZaqarClient {
    stream: BufReader<TcpStream>,
    authority: String,
}

impl ZaqarClient {
    /// Connects to `authority` (`host:port`).
    pub(crate) async fn connect(authority: &str) -> Result<Self> {
        let stream = TcpStream::connect(authority).await.with_context(|| authority.to_owned())?;
        stream.set_nodelay(true)?;
        Ok(Self { stream: BufReader::new(stream), authority: authority.to_owned() })
    }

    /// One request; the status and the body.
    pub(crate) async fn request(&mut self, method: &str, path: &str, body: &str) -> Result<(u16, Vec<u8>)> {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nClient-ID: {CLIENT_ID}\r\nX-Project-ID: /\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.authority,
            body.len()
        );
        let stream = self.stream.get_mut();
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        let mut line = String::new();
        self.stream.read_line(&mut line).await?;
        let status: u16 = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| anyhow!("malformed status line {line:?}"))?;
        let mut length = 0usize;
        loop {
            line.clear();
            self.stream.read_line(&mut line).await?;
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse()?;
            }
        }
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).await?;
        Ok((status, body))
    }
}
