//! Error responses in RabbitMQ's shape: `{"error": …, "reason": …}`.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// An API error.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    error: &'static str,
    reason: String,
    /// Whether `<`, `>` and `&` in the reason are HTML-escaped, as RabbitMQ does for most
    /// endpoints (policies) but not all (limits, observed on 4.0.5).
    escape: bool,
}

impl ApiError {
    /// 404 `Object Not Found`.
    pub(crate) fn not_found() -> Self {
        Self { status: StatusCode::NOT_FOUND, error: "Object Not Found", reason: "Not Found".to_owned(), escape: true }
    }

    /// 404 with RabbitMQ's `error` and `reason` for this case (the scoped definitions import
    /// answers `{"error":"not_found","reason":"vhost_not_found"}`).
    pub(crate) fn not_found_as(error: &'static str, reason: &str) -> Self {
        Self { status: StatusCode::NOT_FOUND, error, reason: reason.to_owned(), escape: true }
    }

    /// 400 `bad_request`.
    pub(crate) fn bad_request(reason: impl Into<String>) -> Self {
        Self { status: StatusCode::BAD_REQUEST, error: "bad_request", reason: reason.into(), escape: true }
    }

    /// 400 `bad_request` whose reason RabbitMQ sends as it is (`<<"bogus">>`, not escaped).
    pub(crate) fn bad_request_verbatim(reason: impl Into<String>) -> Self {
        Self { escape: false, ..Self::bad_request(reason) }
    }

    /// 500 `internal_server_error` (the store could not record a change).
    pub(crate) fn internal(reason: impl Into<String>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            error: "internal_server_error",
            reason: reason.into(),
            escape: true,
        }
    }

    /// 401 `not_authorised` (RabbitMQ's spelling for an authenticated user the endpoint
    /// refuses, `rabbit_web_dispatch_access_control:not_authorised/3`).
    pub(crate) fn not_authorised(reason: &str) -> Self {
        Self { status: StatusCode::UNAUTHORIZED, error: "not_authorised", reason: reason.to_owned(), escape: true }
    }

    /// 401 `not_authorized`.
    pub(crate) fn not_authorized() -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            error: "not_authorized",
            reason: "Not_Authorized".to_owned(),
            escape: true,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // RabbitMQ HTML-escapes reasons (its Erlang terms' << and >> arrive as &lt;&lt; …).
        let reason = if self.escape {
            self.reason.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
        } else {
            self.reason
        };
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
