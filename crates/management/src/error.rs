//! Error responses in RabbitMQ's shape: `{"error": …, "reason": …}`.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// An API error.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    error: &'static str,
    reason: String,
    /// A reason RabbitMQ sends as a JSON term (`["not_integer","x"]`) instead of a string.
    term: Option<serde_json::Value>,
    /// Whether `<`, `>` and `&` in the reason are HTML-escaped, as RabbitMQ does for most
    /// endpoints (policies) but not all (limits, observed on 4.0.5).
    escape: bool,
}

impl ApiError {
    /// 404 `Object Not Found`.
    pub(crate) fn not_found() -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            error: "Object Not Found",
            reason: "Not Found".to_owned(),
            term: None,
            escape: true,
        }
    }

    /// 400 `bad_request`.
    pub(crate) fn bad_request(reason: impl Into<String>) -> Self {
        Self { status: StatusCode::BAD_REQUEST, error: "bad_request", reason: reason.into(), term: None, escape: true }
    }

    /// 400 `bad_request` whose reason RabbitMQ sends as it is (`<<"bogus">>`, not escaped).
    pub(crate) fn bad_request_verbatim(reason: impl Into<String>) -> Self {
        Self { escape: false, ..Self::bad_request(reason) }
    }

    /// 400 with RabbitMQ's own error name (`invalid_pagination_parameters`, `page_out_of_range`).
    pub(crate) fn bad_request_named(error: &'static str, reason: impl Into<String>) -> Self {
        Self { error, ..Self::bad_request(reason) }
    }

    /// 404 with RabbitMQ's own error and reason (`not_found`/`queue_not_found` from a queue's
    /// `get`, `not_found`/`vhost_not_found` from a scoped definitions import).
    pub(crate) fn not_found_named(error: &'static str, reason: &str) -> Self {
        Self { error, reason: reason.to_owned(), ..Self::not_found() }
    }

    /// 400 `bad_request` whose reason is a JSON term, as RabbitMQ reports a value it could not
    /// read: `["not_integer","x"]`.
    pub(crate) fn bad_request_json(term: serde_json::Value) -> Self {
        Self { term: Some(term), ..Self::bad_request("") }
    }

    /// A change the cluster did not take (no majority within the write's time): RabbitMQ
    /// 4.3.6's answer there, 500 with an empty body (docs/clustering.md); the reason goes to
    /// the log.
    pub(crate) fn cluster(error: charon_engine::EngineError) -> Self {
        tracing::warn!(%error, "metadata change not taken by the cluster");
        Self::crash()
    }

    /// 500 with an empty body: what RabbitMQ 4.0.5 answers when a handler crashes on a value
    /// it does not expect (`sort_reverse=bogus`, an unknown `ackmode`), observed.
    pub(crate) fn crash() -> Self {
        Self { error: "", reason: String::new(), ..Self::internal("") }
    }

    /// 409 `conflict` (Charon's own endpoints: a redrive job already running on a queue, or
    /// not in a state that allows the action).
    pub(crate) fn conflict(reason: impl Into<String>) -> Self {
        Self { status: StatusCode::CONFLICT, error: "conflict", reason: reason.into(), term: None, escape: false }
    }

    /// 503 `service_unavailable` (Charon's own endpoints: the node a redrive job runs on is
    /// down or cannot be reached).
    pub(crate) fn unavailable(reason: impl Into<String>) -> Self {
        Self { status: StatusCode::SERVICE_UNAVAILABLE, error: "service_unavailable", ..Self::conflict(reason) }
    }

    /// 404 `not_found` with a reason of Charon's own endpoints, as it is.
    pub(crate) fn not_found_reason(reason: impl Into<String>) -> Self {
        Self { error: "not_found", reason: reason.into(), escape: false, ..Self::not_found() }
    }

    /// 500 `internal_server_error` (the store could not record a change).
    pub(crate) fn internal(reason: impl Into<String>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            error: "internal_server_error",
            reason: reason.into(),
            term: None,
            escape: true,
        }
    }

    /// 401 `not_authorised` (RabbitMQ's spelling for an authenticated user the endpoint
    /// refuses, `rabbit_web_dispatch_access_control:not_authorised/3`).
    pub(crate) fn not_authorised(reason: &str) -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            error: "not_authorised",
            reason: reason.to_owned(),
            term: None,
            escape: true,
        }
    }

    /// 401 `not_authorized`.
    pub(crate) fn not_authorized() -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            error: "not_authorized",
            reason: "Not_Authorized".to_owned(),
            term: None,
            escape: true,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.error.is_empty() {
            return self.status.into_response();
        }
        // RabbitMQ HTML-escapes reasons (its Erlang terms' << and >> arrive as &lt;&lt; …).
        let reason = if self.escape {
            self.reason.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
        } else {
            self.reason
        };
        let reason = self.term.unwrap_or(serde_json::Value::String(reason));
        let body = serde_json::json!({ "error": self.error, "reason": reason }).to_string();
        let mut response = (self.status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Basic realm=\"RabbitMQ Management\""),
            );
        }
        response
    }
}
