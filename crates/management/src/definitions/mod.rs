//! RabbitMQ's definitions: the broker's users, vhosts, permissions, policies, limits, queues,
//! exchanges and bindings as one JSON document, exported and imported as RabbitMQ 4.0.5 does
//! (`rabbit_mgmt_wm_definitions`, `rabbit_definitions`), so that a file moves between the two
//! brokers either way.
//!
//! - [`export`]: `GET /api/definitions[/{vhost}]`.
//! - [`import`]: `POST /api/definitions[/{vhost}]`, and the gateway's `--definitions FILE`.
//!
//! Both endpoints are for administrators. RabbitMQ's management UI also uploads a file as a
//! multipart form; Charon takes the JSON body that `rabbitmqadmin` and scripts send, and
//! answers a form as any body that is not JSON (`failed_to_parse_json`).

mod error;
pub mod export;
pub mod import;
mod pretty;

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use charon_engine::{Broker, User};
use serde_json::Value as JsonValue;

pub use error::ImportError;

use crate::auth;
use crate::error::ApiError;

/// `?download=NAME`: the export as an attachment of that name, as the management UI asks.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct ExportQuery {
    download: Option<String>,
}

fn exported(definitions: JsonValue, query: &ExportQuery) -> Response {
    let mut response = Json(definitions).into_response();
    if let Some(value) =
        query.download.as_ref().and_then(|name| HeaderValue::from_str(&format!("attachment; filename={name}")).ok())
    {
        response.headers_mut().insert(header::CONTENT_DISPOSITION, value);
    }
    response
}

/// `GET /api/definitions`
pub(crate) async fn get_all(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Query(query): Query<ExportQuery>,
) -> Result<Response, ApiError> {
    auth::admin(&user)?;
    Ok(exported(export::cluster(&broker), &query))
}

/// `GET /api/definitions/{vhost}`: 400 `vhost_not_found` for a vhost that does not exist, as
/// 4.0.5 answers.
pub(crate) async fn get_vhost(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(vhost): Path<String>,
    Query(query): Query<ExportQuery>,
) -> Result<Response, ApiError> {
    auth::admin(&user)?;
    let definitions = export::vhost(&broker, &vhost).ok_or_else(|| ApiError::bad_request("vhost_not_found"))?;
    Ok(exported(definitions, &query))
}

/// `POST /api/definitions`: 204 once everything is applied.
pub(crate) async fn post_all(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    auth::admin(&user)?;
    let definitions = import::parse(&body).map_err(api_error)?;
    tracing::info!(user = user.name, "importing definitions");
    import::cluster(&broker, &definitions, Some(&user.name)).await.map_err(api_error)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/definitions/{vhost}`: 204 once everything is applied; 404 `vhost_not_found`.
pub(crate) async fn post_vhost(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(vhost): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    auth::admin(&user)?;
    let definitions = import::parse(&body).map_err(api_error)?;
    tracing::info!(user = user.name, vhost, "importing definitions for a virtual host");
    import::vhost(&broker, &vhost, &definitions).await.map_err(api_error)?;
    Ok(StatusCode::NO_CONTENT)
}

/// RabbitMQ's answers: 400 with the reason as it formats it (not HTML-escaped again), 404 for
/// a scoped import's missing vhost.
fn api_error(error: ImportError) -> ApiError {
    match error {
        ImportError::NoSuchVhost => ApiError::not_found_named("not_found", "vhost_not_found"),
        ImportError::Store(reason) => ApiError::internal(reason),
        other => ApiError::bad_request_verbatim(other.to_string()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests;
