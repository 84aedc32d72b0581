//! The logged-in user of a page request, from the session cookie.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use charon_engine::User;

use crate::Ui;
use crate::form::Form;
use crate::session::{self, Flash};

/// Who is looking: the user (as the broker knows it now), the session token and CSRF token,
/// and the message a form left for this page.
pub(crate) struct Viewer {
    pub(crate) user: User,
    pub(crate) token: String,
    pub(crate) csrf: String,
    pub(crate) flash: Option<Flash>,
}

impl Viewer {
    /// The refusal (403) of a form without this session's CSRF token; `None` when it has it.
    pub(crate) fn forged(&self, ui: &Ui, form: &Form) -> Option<Response> {
        let valid = ui.sessions.get(&self.token).is_some_and(|s| s.csrf_matches(form.get("csrf")));
        (!valid).then(|| (StatusCode::FORBIDDEN, "Invalid or missing CSRF token").into_response())
    }

    /// Leaves a message for the next page.
    pub(crate) fn flash(&self, ui: &Ui, error: bool, text: impl Into<String>) {
        ui.sessions.set_flash(&self.token, Flash { error, text: text.into() });
    }
}

/// The session's user, re-read from the broker on every request: a user deleted or stripped
/// of its management tag since the login is logged out.
pub(crate) fn resolve(ui: &Ui, parts: &Parts) -> Option<Viewer> {
    let token = parts
        .headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find_map(session::token_in)?
        .to_owned();
    let session = ui.sessions.get(&token)?;
    let user = ui.broker.user(session.user()).and_then(|user| charon_management::auth::management(user).ok());
    let Some(user) = user else {
        ui.sessions.end(&token);
        return None;
    };
    let flash = ui.sessions.take_flash(&token);
    Some(Viewer { user, csrf: session.csrf().to_owned(), token, flash })
}

impl FromRequestParts<Arc<Ui>> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, ui: &Arc<Ui>) -> Result<Self, Self::Rejection> {
        resolve(ui, parts).ok_or_else(|| {
            let here = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            let next = form_urlencoded::byte_serialize(here.as_bytes()).collect::<String>();
            Redirect::to(&format!("/login?next={next}")).into_response()
        })
    }
}
