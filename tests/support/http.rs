//! The one HTTP client of the end-to-end tests: a request to one of the broker's listeners
//! (the management API, the web UI, the Zaqar gateway), answered with its status and body.
//! Statuses are answers, not errors; a request that gets no answer at all (the broker is
//! down, or killed mid-request) has status 0.

use base64::Engine;

/// What came back.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The HTTP status (0: no answer).
    pub status: u16,
    /// The body as text.
    pub body: String,
}

impl Reply {
    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// One request, built up and then sent.
#[derive(Debug, Clone)]
pub struct Call {
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Call {
    /// `method` `path` on 127.0.0.1:`port`, without credentials.
    pub fn new(port: u16, method: &str, path: &str) -> Self {
        Self {
            method: method.to_owned(),
            url: format!("http://127.0.0.1:{port}{path}"),
            headers: Vec::new(),
            body: String::new(),
        }
    }

    /// The management API as guest: basic auth and a JSON content type.
    pub fn api(port: u16, method: &str, path: &str) -> Self {
        Self::new(port, method, path).basic("guest", "guest").header("content-type", "application/json")
    }

    /// HTTP basic auth as `user`.
    pub fn basic(self, user: &str, password: &str) -> Self {
        let credentials = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        self.header("authorization", &format!("Basic {credentials}"))
    }

    /// One more header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The body.
    pub fn body(mut self, body: impl Into<String>) -> Self {
        self.body = body.into();
        self
    }

    /// Sends it, blocking the thread.
    pub fn send_blocking(self) -> Reply {
        let config = ureq::Agent::config_builder().http_status_as_error(false).build();
        let agent = ureq::Agent::new_with_config(config);
        let mut request = ureq::http::Request::builder().method(self.method.as_str()).uri(self.url);
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        match agent.run(request.body(self.body).expect("a valid request")) {
            Ok(mut response) => {
                let body = response.body_mut().read_to_string().unwrap_or_default();
                Reply { status: response.status().as_u16(), body }
            }
            Err(_) => Reply { status: 0, body: String::new() },
        }
    }

    /// Sends it from the blocking pool (for async tests).
    pub async fn send(self) -> Reply {
        tokio::task::spawn_blocking(move || self.send_blocking()).await.expect("the request's thread")
    }
}
