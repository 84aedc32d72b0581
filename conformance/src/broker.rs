//! The broker address, parsed from an `amqp://user:pass@host:port/vhost` URL.

use crate::error::CaseError;

/// Connection parameters pulled out of the URL the suite was pointed at.
///
/// lapin takes the URL as is; amqprs and the raw-socket helper need the pieces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    /// The URL exactly as given.
    pub url: String,
    /// Host name or IP address.
    pub host: String,
    /// TCP port (5672 when the URL has none).
    pub port: u16,
    /// User name (`guest` when the URL has none).
    pub user: String,
    /// Password (`guest` when the URL has none).
    pub password: String,
    /// Virtual host, percent-decoded (`/` when the URL path is empty or `/`).
    pub vhost: String,
    /// Base URL of the HTTP management API (`http://host:port`); RabbitMQ's convention puts it
    /// 10000 above the AMQP port (5672 → 15672).
    pub http: String,
    /// URL of the Prometheus endpoint; by convention 10020 above the AMQP port (→ 15692).
    pub metrics: String,
}

impl Broker {
    /// Parses an `amqp://` URL.
    pub fn parse(url: &str) -> Result<Self, CaseError> {
        let rest = url
            .strip_prefix("amqp://")
            .ok_or_else(|| CaseError::new(format!("only amqp:// URLs are supported: {url}")))?;
        let (authority, path) = match rest.split_once('/') {
            Some((a, p)) => (a, p),
            None => (rest, ""),
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((n, p)) => (decode(n)?, decode(p)?),
                None => (decode(u)?, String::new()),
            },
            None => ("guest".to_owned(), "guest".to_owned()),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), p.parse::<u16>().map_err(|_| CaseError::new(format!("bad port in {url}")))?),
            None => (hostport.to_owned(), 5672),
        };
        let vhost = if path.is_empty() { "/".to_owned() } else { decode(path)? };
        let http = format!("http://{host}:{}", u32::from(port) + 10_000);
        let metrics = format!("http://{host}:{}/metrics", u32::from(port) + 10_020);
        Ok(Self { url: url.to_owned(), host, port, user, password, vhost, http, metrics })
    }

    /// `host:port`, for `TcpStream::connect`.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The same broker and vhost, logged in as another user (the access-control cases).
    pub fn as_user(&self, user: &str, password: &str) -> Self {
        Self {
            user: user.to_owned(),
            password: password.to_owned(),
            url: self.url_with_user(user, password),
            ..self.clone()
        }
    }

    fn url_with_user(&self, user: &str, password: &str) -> String {
        format!("amqp://{}:{}@{}:{}/{}", encode(user), encode(password), self.host, self.port, encode(&self.vhost))
    }

    /// The same broker URL with other credentials (used by the bad-password cases).
    pub fn url_with_password(&self, password: &str) -> String {
        format!(
            "amqp://{}:{}@{}:{}/{}",
            encode(&self.user),
            encode(password),
            self.host,
            self.port,
            encode(&self.vhost)
        )
    }

    /// The same broker URL with another virtual host.
    pub fn url_with_vhost(&self, vhost: &str) -> String {
        format!(
            "amqp://{}:{}@{}:{}/{}",
            encode(&self.user),
            encode(&self.password),
            self.host,
            self.port,
            encode(vhost)
        )
    }
}

fn decode(s: &str) -> Result<String, CaseError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = s.get(i + 1..i + 3).ok_or_else(|| CaseError::new(format!("bad percent escape in {s}")))?;
            let v = u8::from_str_radix(hex, 16).map_err(|_| CaseError::new(format!("bad percent escape in {s}")))?;
            out.push(v);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| CaseError::new(format!("URL part is not UTF-8: {s}")))
}

fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_default_vhost() -> Result<(), CaseError> {
        let b = Broker::parse("amqp://guest:guest@127.0.0.1:5682/")?;
        assert_eq!(b.vhost, "/");
        assert_eq!(b.port, 5682);
        let b = Broker::parse("amqp://u:p%40@h/%2f")?;
        assert_eq!((b.password.as_str(), b.vhost.as_str(), b.port), ("p@", "/", 5672));
        assert_eq!(b.url_with_vhost("/"), "amqp://u:p%40@h:5672/%2F");
        Ok(())
    }
}
