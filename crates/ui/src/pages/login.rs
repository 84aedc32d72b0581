//! Logging in with the broker's users (the API's rules: login policy, management tag) and out.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{Extensions, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use charon_management::auth::{self, Refusal};
use maud::html;
use std::collections::HashMap;

use crate::Ui;
use crate::form::Form;
use crate::layout::document;
use crate::session;
use crate::viewer::Viewer;

/// The mechanism named in the login policy's log line for a refused form login.
const MECHANISM: &str = "HTTP form";

/// The login form.
pub(crate) async fn form(Query(query): Query<HashMap<String, String>>) -> Response {
    let next = query.get("next").map_or("/", String::as_str);
    render(next, None, StatusCode::OK)
}

fn render(next: &str, error: Option<&str>, status: StatusCode) -> Response {
    let body = html! {
        div.login {
            h1 { (crate::layout::LOGO) " Charon" }
            p.sub { "Management" }
            @if let Some(error) = error { p.flash.error role="alert" { (error) } }
            form method="post" action="/login" {
                input type="hidden" name="next" value=(next);
                label { "Username" input type="text" name="username" autocomplete="username" autofocus required; }
                label { "Password" input type="password" name="password" autocomplete="current-password"; }
                button.primary type="submit" { "Login" }
            }
        }
    };
    (status, document("Login", body)).into_response()
}

/// Only a path on this server (no `//host`, no scheme): the form cannot send anyone elsewhere.
fn local(next: &str) -> &str {
    if next.starts_with('/') && !next.starts_with("//") && !next.starts_with("/\\") { next } else { "/" }
}

/// Checks the credentials; starts a session and goes to `next`, or shows the form again.
pub(crate) async fn submit(State(ui): State<Arc<Ui>>, extensions: Extensions, form: Form) -> Response {
    let peer = extensions.get::<ConnectInfo<SocketAddr>>().map(|info| info.0);
    let next = local(form.get("next"));
    match auth::log_in(&ui.broker, peer, MECHANISM, form.get("username"), form.get("password")).await {
        Ok(user) => {
            let token = ui.sessions.start(&user.name);
            let secure = extensions.get::<crate::OverTls>().is_some();
            ([(header::SET_COOKIE, session::set_cookie(&token, secure))], Redirect::to(next)).into_response()
        }
        Err(Refusal::Credentials) => render(next, Some("Login failed"), StatusCode::UNAUTHORIZED),
        Err(Refusal::NotManagement) => {
            render(next, Some("Not management user: this user has no management tag"), StatusCode::FORBIDDEN)
        }
    }
}

/// Ends the session.
pub(crate) async fn logout(State(ui): State<Arc<Ui>>, viewer: Viewer, form: Form) -> Response {
    if let Some(refused) = viewer.forged(&ui, &form) {
        return refused;
    }
    ui.sessions.end(&viewer.token);
    ([(header::SET_COOKIE, session::clear_cookie())], Redirect::to("/login")).into_response()
}
