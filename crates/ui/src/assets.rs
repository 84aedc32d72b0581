//! The stylesheet and the script, embedded in the binary.

use axum::http::header;
use axum::response::IntoResponse;

/// `GET /static/app.css`.
pub(crate) async fn css() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8"), (header::CACHE_CONTROL, "max-age=300")],
        include_str!("../assets/app.css"),
    )
}

/// `GET /static/app.js`.
pub(crate) async fn js() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8"), (header::CACHE_CONTROL, "max-age=300")],
        include_str!("../assets/app.js"),
    )
}
