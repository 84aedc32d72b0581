//! A submitted HTML form (`application/x-www-form-urlencoded`), keeping repeated keys (the
//! message browser's selected ids).

use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

/// The fields of a form, in order.
#[derive(Debug, Default)]
pub(crate) struct Form {
    fields: Vec<(String, String)>,
}

impl Form {
    /// Reads `body`.
    pub(crate) fn parse(body: &[u8]) -> Self {
        Self { fields: form_urlencoded::parse(body).map(|(k, v)| (k.into_owned(), v.into_owned())).collect() }
    }

    /// The first value of `name` (empty when missing).
    pub(crate) fn get(&self, name: &str) -> &str {
        self.fields.iter().find(|(k, _)| k == name).map_or("", |(_, v)| v.as_str())
    }

    /// The value of `name`, trimmed, when not empty.
    pub(crate) fn some(&self, name: &str) -> Option<&str> {
        Some(self.get(name).trim()).filter(|v| !v.is_empty())
    }

    /// Every value of `name`.
    pub(crate) fn all(&self, name: &str) -> Vec<&str> {
        self.fields.iter().filter(|(k, _)| k == name).map(|(_, v)| v.as_str()).collect()
    }
}

impl<S: Send + Sync> FromRequest<S> for Form {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let body = Bytes::from_request(request, state)
            .await
            .map_err(|error| (StatusCode::BAD_REQUEST, error.to_string()).into_response())?;
        Ok(Self::parse(&body))
    }
}
