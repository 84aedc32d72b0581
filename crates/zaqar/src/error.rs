//! Zaqar's error answers: a status with falcon's JSON body `{"title": ..., "description": ...}`,
//! the titles and texts Zaqar's WSGI transport uses (`zaqar/transport/wsgi/errors.py`, its
//! hooks in `zaqar/common/transport/wsgi/helpers.py` and `wsgi/utils.py`).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A failed request, as Zaqar answers it.
#[derive(Debug, thiserror::Error)]
#[error("{status} {title}: {description}")]
pub struct ZaqarError {
    status: StatusCode,
    title: String,
    description: String,
}

impl ZaqarError {
    /// Any status, title and description.
    pub(crate) fn new(status: StatusCode, title: &str, description: impl Into<String>) -> Self {
        Self { status, title: title.to_owned(), description: description.into() }
    }

    /// `HTTPBadRequestAPI`: a validation failure (`Invalid API request`).
    pub(crate) fn invalid(description: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "Invalid API request", description)
    }

    /// `HTTPBadRequestBody`: a body that does not have the fields it needs.
    pub(crate) fn body(description: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "Invalid request body", description)
    }

    /// A body that is not JSON (`wsgi_utils.deserialize`, `HTTPBadRequestBody`).
    pub(crate) fn malformed() -> Self {
        Self::body("Request body could not be parsed.")
    }

    /// The same failure as a body error: `PATCH` answers its validation failures with
    /// `HTTPBadRequestBody` where other requests use `HTTPBadRequestAPI`.
    pub(crate) fn into_body_error(self) -> Self {
        if self.title == "Invalid API request" {
            Self { title: "Invalid request body".to_owned(), ..self }
        } else {
            self
        }
    }

    /// `HTTPNotFound`.
    pub(crate) fn not_found(description: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "Not found", description)
    }

    /// `HTTPServiceUnavailable`: the engine could not do it.
    pub(crate) fn unavailable(description: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "Service temporarily unavailable", description)
    }

    /// The status.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        self.status
    }
}

impl IntoResponse for ZaqarError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "title": self.title, "description": self.description }))).into_response()
    }
}
