//! `GET /ui/api/{path}`: the JSON API for the pages' script, with the session instead of basic
//! auth (the browser never holds the password). Reads only: every change goes through a form
//! with the CSRF token.

use std::sync::Arc;

use axum::extract::State;
use axum::http::request::Parts;
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::Ui;
use crate::viewer::resolve;

/// Forwards the request to `/api/{path}?{query}` as the session's user.
pub(crate) async fn get(State(ui): State<Arc<Ui>>, parts: Parts) -> Response {
    let Some(viewer) = resolve(&ui, &parts) else {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::CONTENT_TYPE, "application/json")],
            r#"{"error":"not_authorized","reason":"Login expired"}"#,
        )
            .into_response();
    };
    let Some(path) = parts.uri.path_and_query().map(|p| p.as_str()).and_then(|p| p.strip_prefix("/ui")) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    match ui.api.raw(&viewer.user, Method::GET, path, None, None).await {
        Ok((status, body)) => {
            (status, [(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-store")], body)
                .into_response()
        }
        Err(failure) => (failure.status, failure.reason).into_response(),
    }
}
