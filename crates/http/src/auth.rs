//! HTTP basic authentication against the broker's users.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use charon_engine::{Broker, User};

use crate::error::ApiError;

/// Rejects requests without valid credentials; passes the [`User`] on to the handlers.
pub(crate) async fn require_user(State(broker): State<Arc<Broker>>, mut request: Request, next: Next) -> Response {
    let user = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Basic "))
        .and_then(|encoded| base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok())
        .and_then(|decoded| String::from_utf8(decoded).ok())
        .and_then(|text| {
            let (name, password) = text.split_once(':')?;
            broker.authenticate(name, password)
        });
    match user {
        Some(user) => {
            request.extensions_mut().insert::<User>(user);
            next.run(request).await
        }
        None => ApiError::not_authorized().into_response(),
    }
}
