//! The broker's HTTP side, as RabbitMQ exposes it: the management API (policies, queue
//! counters) and the Prometheus endpoint. A minimal HTTP/1.1 client keeps the suite free of an
//! HTTP stack: one request per connection, `Connection: close`, chunked bodies understood.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{CaseError, CaseResult, Ctx, check};

/// A response: status code and body.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Body text.
    pub body: String,
}

/// One request to `base` (`http://host:port`), with basic auth.
pub async fn request(
    base: &str,
    method: &str,
    path: &str,
    auth: (&str, &str),
    body: Option<&str>,
) -> Result<HttpResponse, CaseError> {
    request_with_headers(base, method, path, auth, body, &[]).await
}

/// [`request`] with extra headers (`X-Reason` on a connection's `DELETE`).
pub async fn request_with_headers(
    base: &str,
    method: &str,
    path: &str,
    auth: (&str, &str),
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> Result<HttpResponse, CaseError> {
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    let authority = base.strip_prefix("http://").ok_or_else(|| CaseError::new(format!("not an http URL: {base}")))?;
    let authority = authority.trim_end_matches('/');
    let credentials = base64_encode(format!("{}:{}", auth.0, auth.1).as_bytes());
    let body = body.unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Basic {credentials}\r\n{extra}\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let exchange = async {
        let mut stream = TcpStream::connect(authority).await?;
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| CaseError::new(format!("{method} {base}{path}: no answer within 10 s")))?
        .map_err(|e| CaseError::new(format!("{method} {base}{path}: {e}")))?;
    parse_response(&raw).ok_or_else(|| CaseError::new(format!("{method} {base}{path}: malformed HTTP response")))
}

fn parse_response(raw: &[u8]) -> Option<HttpResponse> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(raw.get(..split)?).ok()?;
    let rest = raw.get(split + 4..)?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked { dechunk(rest)? } else { rest.to_vec() };
    Some(HttpResponse { status, body: String::from_utf8_lossy(&body).into_owned() })
}

fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size = usize::from_str_radix(std::str::from_utf8(rest.get(..line_end)?).ok()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(rest.get(line_end + 2..line_end + 2 + size)?);
        rest = rest.get(line_end + 4 + size..)?;
    }
}

fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                let index = usize::try_from((n >> (18 - 6 * i)) & 63).unwrap_or(0);
                out.push(char::from(ALPHABET.get(index).copied().unwrap_or(b'A')));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `%2F` for `/`: a vhost as a path segment.
pub fn segment(text: &str) -> String {
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

impl Ctx {
    /// One request to the management API as the case's user.
    pub async fn api(&self, method: &str, path: &str, body: Option<&str>) -> Result<HttpResponse, CaseError> {
        let b = self.broker();
        request(&b.http, method, path, (&b.user, &b.password), body).await
    }

    /// Sets a policy on the case's vhost (RabbitMQ's `PUT /api/policies/{vhost}/{name}`) and
    /// returns its name; the runner deletes it after the case.
    pub async fn set_policy(
        &self,
        pattern: &str,
        apply_to: &str,
        priority: i64,
        definition: &str,
    ) -> Result<String, CaseError> {
        let name = self.name("policy");
        self.track_policy(&name);
        self.put_policy(&name, pattern, apply_to, priority, definition).await?;
        Ok(name)
    }

    /// `PUT`s a policy by name, expecting 201 or 204.
    pub async fn put_policy(
        &self,
        name: &str,
        pattern: &str,
        apply_to: &str,
        priority: i64,
        definition: &str,
    ) -> CaseResult {
        let body = format!(
            r#"{{"pattern":{},"apply-to":"{apply_to}","priority":{priority},"definition":{definition}}}"#,
            json_string(pattern)
        );
        let path = format!("/api/policies/{}/{}", segment(&self.broker().vhost), segment(name));
        let response = self.api("PUT", &path, Some(&body)).await?;
        check!(matches!(response.status, 201 | 204), "PUT policy {name}: {} {}", response.status, response.body);
        Ok(())
    }

    /// `PUT`s a policy and returns the raw answer (for validation cases).
    pub async fn put_policy_raw(&self, name: &str, body: &str) -> Result<HttpResponse, CaseError> {
        self.track_policy(name);
        let path = format!("/api/policies/{}/{}", segment(&self.broker().vhost), segment(name));
        self.api("PUT", &path, Some(body)).await
    }

    /// `GET /api/policies/{vhost}/{name}`.
    pub async fn get_policy(&self, name: &str) -> Result<HttpResponse, CaseError> {
        let path = format!("/api/policies/{}/{}", segment(&self.broker().vhost), segment(name));
        self.api("GET", &path, None).await
    }

    /// Deletes a policy (errors ignored: cleanup and idempotent removal).
    pub async fn delete_policy(&self, name: &str) -> Result<HttpResponse, CaseError> {
        let path = format!("/api/policies/{}/{}", segment(&self.broker().vhost), segment(name));
        self.api("DELETE", &path, None).await
    }

    /// Deletes an operator policy of the case's vhost (errors ignored: cleanup).
    pub async fn delete_operator_policy(&self, name: &str) -> Result<HttpResponse, CaseError> {
        let path = format!("/api/operator-policies/{}/{}", segment(&self.broker().vhost), segment(name));
        self.api("DELETE", &path, None).await
    }

    /// Creates a user (RabbitMQ's `PUT /api/users/{name}`) with `tags` and these permissions on
    /// the case's vhost, and returns the broker as seen by it; the runner deletes the user
    /// after the case. `None` permissions: the user has none on the vhost.
    pub async fn user_with(
        &self,
        tags: &str,
        permissions: Option<(&str, &str, &str)>,
    ) -> Result<crate::broker::Broker, CaseError> {
        let name = self.name("user");
        let password = format!("{name}-pw");
        self.track_user(&name);
        let body = format!(r#"{{"password":{},"tags":{}}}"#, json_string(&password), json_string(tags));
        let response = self.api("PUT", &format!("/api/users/{}", segment(&name)), Some(&body)).await?;
        check!(response.status == 201, "PUT user {name}: {} {}", response.status, response.body);
        if let Some((configure, write, read)) = permissions {
            let body = format!(
                r#"{{"configure":{},"write":{},"read":{}}}"#,
                json_string(configure),
                json_string(write),
                json_string(read)
            );
            let path = format!("/api/permissions/{}/{}", segment(&self.broker().vhost), segment(&name));
            let response = self.api("PUT", &path, Some(&body)).await?;
            check!(response.status == 201, "PUT permissions {name}: {} {}", response.status, response.body);
        }
        Ok(self.broker().as_user(&name, &password))
    }

    /// Deletes a user (errors ignored: cleanup).
    pub async fn delete_user(&self, name: &str) -> Result<HttpResponse, CaseError> {
        self.api("DELETE", &format!("/api/users/{}", segment(name)), None).await
    }

    /// One request to the management API as `as_user`.
    pub async fn api_as(
        &self,
        as_user: &crate::broker::Broker,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Result<HttpResponse, CaseError> {
        request(&as_user.http, method, path, (&as_user.user, &as_user.password), body).await
    }

    /// `GET /api/queues/{vhost}/{name}` as JSON.
    pub async fn queue_info(&self, queue: &str) -> Result<serde_json::Value, CaseError> {
        let path = format!("/api/queues/{}/{}", segment(&self.broker().vhost), segment(queue));
        let response = self.api("GET", &path, None).await?;
        check!(response.status == 200, "GET queue {queue}: {} {}", response.status, response.body);
        serde_json::from_str(&response.body).map_err(|e| CaseError::new(format!("queue {queue} JSON: {e}")))
    }

    /// Waits (up to 15 s: RabbitMQ refreshes its counters every 5 s) until the management API
    /// reports `(messages, messages_ready, messages_unacknowledged)` for `queue`.
    pub async fn expect_queue_counts(&self, queue: &str, expected: (u64, u64, u64)) -> CaseResult {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let info = self.queue_info(queue).await?;
            let field = |k: &str| info.get(k).and_then(serde_json::Value::as_u64);
            let got = (field("messages"), field("messages_ready"), field("messages_unacknowledged"));
            if got == (Some(expected.0), Some(expected.1), Some(expected.2)) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(CaseError::new(format!(
                    "queue {queue} (messages, ready, unacked): expected {expected:?} got {got:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The value of one Prometheus series (`name{labels}`, labels as written by the broker).
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> Result<f64, CaseError> {
        let b = self.broker();
        let (base, path) = split_url(&b.metrics)?;
        let response = request(base, "GET", path, (&b.user, &b.password), None).await?;
        check!(response.status == 200, "GET {}: {}", b.metrics, response.status);
        find_series(&response.body, name, labels)
            .ok_or_else(|| CaseError::new(format!("no series {name}{labels:?} at {}", b.metrics)))
    }
}

fn split_url(url: &str) -> Result<(&str, &str), CaseError> {
    let without = url.strip_prefix("http://").ok_or_else(|| CaseError::new(format!("not an http URL: {url}")))?;
    let slash = without.find('/').unwrap_or(without.len());
    let base_len = "http://".len() + slash;
    let path = url.get(base_len..).filter(|p| !p.is_empty()).unwrap_or("/");
    Ok((url.get(..base_len).unwrap_or(url), path))
}

/// Finds `name{...}` with all `labels` (in any order) in a Prometheus text exposition.
fn find_series(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let (label_part, value) = match rest.strip_prefix('{') {
            Some(r) => r.split_once('}')?,
            None => ("", rest),
        };
        let all = labels.iter().all(|(k, v)| label_part.split(',').any(|pair| pair == format!("{k}=\"{v}\"")));
        all.then(|| value.trim().parse().ok()).flatten()
    })
}

fn json_string(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_chunked_bodies_and_series() {
        let plain = parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").unwrap();
        assert_eq!((plain.status, plain.body.as_str()), (200, "{}"));
        let chunked = parse_response(
            b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!((chunked.status, chunked.body.as_str()), (201, "abcde"));
        let text = "# HELP x\nm_total{a=\"1\",b=\"2\"} 5\nm_total{a=\"1\",b=\"3\"} 7\n";
        assert_eq!(find_series(text, "m_total", &[("b", "3"), ("a", "1")]), Some(7.0));
        assert_eq!(base64_encode(b"guest:guest"), "Z3Vlc3Q6Z3Vlc3Q=");
        assert_eq!(split_url("http://h:1/metrics").unwrap(), ("http://h:1", "/metrics"));
    }
}
