//! The pages' data source: the management API's own router, called in-process as the logged-in
//! user. Every number a page shows is what `/api` answers at that moment (the same router
//! instance, so the same rate sampler), and every action goes through the API's own checks.

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use charon_engine::User;
use charon_management::auth::Authenticated;
use serde_json::Value as JsonValue;
use tower::ServiceExt;

/// The largest API answer a page reads (a listing of 100,000 queues is about 60 MB).
const MAX_BODY: usize = 512 * 1024 * 1024;

/// The API, for one user at a time.
#[derive(Clone)]
pub(crate) struct Api {
    router: Router,
}

/// An API call that did not succeed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{status}: {reason}")]
pub(crate) struct ApiFailure {
    /// The API's status.
    pub(crate) status: StatusCode,
    /// The API's `reason` (or its whole body when it has none).
    pub(crate) reason: String,
}

impl Api {
    pub(crate) fn new(router: Router) -> Self {
        Self { router }
    }

    /// `GET path` (path and query, already encoded) as `user`.
    pub(crate) async fn get(&self, user: &User, path: &str) -> Result<JsonValue, ApiFailure> {
        self.call(user, Method::GET, path, None).await
    }

    /// A request as `user`, with a JSON body when given; the answer's JSON (`null` when empty).
    pub(crate) async fn call(
        &self,
        user: &User,
        method: Method,
        path: &str,
        body: Option<&JsonValue>,
    ) -> Result<JsonValue, ApiFailure> {
        let (status, bytes) = self.raw(user, method, path, body, None).await?;
        let json =
            if bytes.is_empty() { JsonValue::Null } else { serde_json::from_slice(&bytes).unwrap_or(JsonValue::Null) };
        if status.is_success() {
            Ok(json)
        } else {
            let reason = json
                .get("reason")
                .and_then(JsonValue::as_str)
                .map_or_else(|| String::from_utf8_lossy(&bytes).into_owned(), str::to_owned);
            Err(ApiFailure { status, reason })
        }
    }

    /// A request without a body carrying RabbitMQ's `X-Reason` header (closing a connection).
    pub(crate) async fn call_with_reason(
        &self,
        user: &User,
        method: Method,
        path: &str,
        reason: &str,
    ) -> Result<(), ApiFailure> {
        let (status, bytes) = self.raw(user, method, path, None, Some(reason)).await?;
        if status.is_success() {
            Ok(())
        } else {
            Err(ApiFailure { status, reason: String::from_utf8_lossy(&bytes).into_owned() })
        }
    }

    /// A request as `user`: the status and body as they are (the JSON proxy passes them on).
    pub(crate) async fn raw(
        &self,
        user: &User,
        method: Method,
        path: &str,
        body: Option<&JsonValue>,
        reason: Option<&str>,
    ) -> Result<(StatusCode, bytes::Bytes), ApiFailure> {
        let body = body.map_or_else(Body::empty, |json| Body::from(json.to_string()));
        let mut builder = Request::builder().method(method).uri(path).header(header::CONTENT_TYPE, "application/json");
        if let Some(reason) = reason.filter(|r| r.bytes().all(|b| b.is_ascii_graphic() || b == b' ')) {
            builder = builder.header("x-reason", reason);
        }
        let mut request = builder
            .body(body)
            .map_err(|error| ApiFailure { status: StatusCode::BAD_REQUEST, reason: error.to_string() })?;
        request.extensions_mut().insert(Authenticated::new(user.clone()));
        let response = match self.router.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), MAX_BODY)
            .await
            .map_err(|error| ApiFailure { status: StatusCode::INTERNAL_SERVER_ERROR, reason: error.to_string() })?;
        Ok((status, bytes))
    }
}

/// `segment` encoded for a path (`/` is `%2F`, as the API expects vhost `/`).
pub(crate) fn segment(segment: &str) -> String {
    percent_encoding::utf8_percent_encode(segment, percent_encoding::NON_ALPHANUMERIC).to_string()
}
