//! Admin: adding and deleting users and virtual hosts, setting and clearing permissions.
//!
//! Each form goes through the management API's own endpoints, called as the logged-in user
//! (`PUT`/`DELETE /api/users/{name}`, `/api/vhosts/{name}`, `/api/permissions/{vhost}/{user}`),
//! so the API's validation and refusals apply and are shown as they are. As in RabbitMQ's UI,
//! these forms are an administrator's: other users are not shown them, and a post from one is
//! refused with 403 before anything is called.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde_json::{Value as JsonValue, json};

use crate::Ui;
use crate::api::segment;
use crate::form::Form;
use crate::format::{items, text};
use crate::layout::csrf;
use crate::viewer::Viewer;

/// Whether the viewer may manage users, vhosts and permissions (RabbitMQ: `administrator`).
pub(crate) fn may_administer(viewer: &Viewer) -> bool {
    viewer.user.tags().is_administrator()
}

/// The refusal of a post by a non-administrator, or of a forged one; `None` when it may go on.
fn refused(ui: &Ui, viewer: &Viewer, form: &Form) -> Option<Response> {
    if !may_administer(viewer) {
        return Some(
            (StatusCode::FORBIDDEN, "Only administrators manage users, virtual hosts and permissions").into_response(),
        );
    }
    viewer.forged(ui, form)
}

/// Calls the API and leaves the outcome for the page at `back`.
async fn act(
    ui: &Ui,
    viewer: &Viewer,
    method: Method,
    path: &str,
    body: Option<&JsonValue>,
    done: String,
    back: &str,
) -> Response {
    match ui.api.call(&viewer.user, method, path, body).await {
        Ok(_) => viewer.flash(ui, false, done),
        Err(error) => viewer.flash(ui, true, format!("Refused: {error}")),
    }
    Redirect::to(back).into_response()
}

/// A small form posting `fields` to `action`, behind a confirmation.
fn delete_button(viewer: &Viewer, action: &str, fields: &[(&str, &str)], label: &str, confirm: &str) -> Markup {
    html! {
        form.inline method="post" action=(action) data-confirm=(confirm) {
            (csrf(viewer))
            @for (name, value) in fields { input type="hidden" name=(name) value=(value); }
            button.danger.small type="submit" { (label) }
        }
    }
}

/// The delete button of a user row.
pub(crate) fn delete_user(viewer: &Viewer, name: &str) -> Markup {
    delete_button(viewer, "/admin/users/delete", &[("name", name)], "Delete", &format!("Delete user {name}?"))
}

/// The delete button of a vhost row.
pub(crate) fn delete_vhost(viewer: &Viewer, name: &str) -> Markup {
    let confirm = format!("Delete virtual host {name} and everything in it?");
    delete_button(viewer, "/admin/vhosts/delete", &[("name", name)], "Delete", &confirm)
}

/// The clear button of a permission row.
pub(crate) fn clear_permission(viewer: &Viewer, user: &str, vhost: &str) -> Markup {
    let confirm = format!("Clear the permissions of {user} in {vhost}?");
    delete_button(viewer, "/admin/permissions/delete", &[("user", user), ("vhost", vhost)], "Clear", &confirm)
}

/// The add-user form.
pub(crate) fn add_user_form(viewer: &Viewer) -> Markup {
    html! {
        form.admin #add-user method="post" action="/admin/users" {
            h3 { "Add a user" }
            (csrf(viewer))
            div.grid {
                label { "Username" input type="text" name="name" required autocomplete="off"; }
                label { "Password" input type="password" name="password" required autocomplete="new-password"; }
                label { "Password (confirm)" input type="password" name="password_confirm" required autocomplete="new-password"; }
                label { "Tags" input type="text" name="tags" placeholder="administrator, management" list="known-tags";
                    datalist #known-tags { @for t in ["administrator", "monitoring", "policymaker", "management", "impersonator"] { option value=(t); } }
                }
            }
            button.primary type="submit" { "Add user" }
        }
    }
}

/// The add-vhost form.
pub(crate) fn add_vhost_form(viewer: &Viewer) -> Markup {
    html! {
        form.admin #add-vhost method="post" action="/admin/vhosts" {
            h3 { "Add a virtual host" }
            (csrf(viewer))
            div.grid {
                label { "Name" input type="text" name="name" required autocomplete="off"; }
                label { "Description" input type="text" name="description"; }
                label { "Tags" input type="text" name="tags" placeholder="production, eu"; }
            }
            button.primary type="submit" { "Add virtual host" }
        }
    }
}

/// The set-permission form, its choices the users and vhosts the page listed.
pub(crate) fn set_permission_form(viewer: &Viewer, users: Option<&JsonValue>, vhosts: Option<&JsonValue>) -> Markup {
    html! {
        form.admin #set-permission method="post" action="/admin/permissions" {
            h3 { "Set permission" }
            (csrf(viewer))
            div.grid {
                label { "User"
                    select name="user" { @if let Some(users) = users { @for u in items(users, "") { option value=(text(u, "/name")) { (text(u, "/name")) } } } }
                }
                label { "Virtual host"
                    select name="vhost" { @if let Some(vhosts) = vhosts { @for v in items(vhosts, "") { option value=(text(v, "/name")) { (text(v, "/name")) } } } }
                }
                label { "Configure regexp" input type="text" name="configure" value=".*"; }
                label { "Write regexp" input type="text" name="write" value=".*"; }
                label { "Read regexp" input type="text" name="read" value=".*"; }
            }
            button.primary type="submit" { "Set permission" }
        }
    }
}

/// `POST /admin/users`: `PUT /api/users/{name}` with the password and tags.
pub(crate) async fn put_user(State(ui): State<Arc<Ui>>, viewer: Viewer, form: Form) -> Response {
    if let Some(refused) = refused(&ui, &viewer, &form) {
        return refused;
    }
    let name = form.get("name").trim();
    let password = form.get("password");
    if name.is_empty() || password.is_empty() {
        viewer.flash(&ui, true, "A user needs a name and a password");
    } else if password != form.get("password_confirm") {
        viewer.flash(&ui, true, "The passwords do not match");
    } else {
        let body = json!({ "password": password, "tags": form.get("tags") });
        let path = format!("/api/users/{}", segment(name));
        return act(&ui, &viewer, Method::PUT, &path, Some(&body), format!("User {name} saved"), "/admin#users").await;
    }
    Redirect::to("/admin#users").into_response()
}

/// `POST /admin/users/delete`: `DELETE /api/users/{name}`.
pub(crate) async fn delete_user_post(State(ui): State<Arc<Ui>>, viewer: Viewer, form: Form) -> Response {
    if let Some(refused) = refused(&ui, &viewer, &form) {
        return refused;
    }
    let name = form.get("name");
    let path = format!("/api/users/{}", segment(name));
    act(&ui, &viewer, Method::DELETE, &path, None, format!("User {name} deleted"), "/admin#users").await
}

/// `POST /admin/vhosts`: `PUT /api/vhosts/{name}` with the description and tags.
pub(crate) async fn put_vhost(State(ui): State<Arc<Ui>>, viewer: Viewer, form: Form) -> Response {
    if let Some(refused) = refused(&ui, &viewer, &form) {
        return refused;
    }
    let name = form.get("name").trim();
    if name.is_empty() {
        viewer.flash(&ui, true, "A virtual host needs a name");
        return Redirect::to("/admin#vhosts").into_response();
    }
    let body = json!({ "description": form.get("description"), "tags": form.get("tags") });
    let path = format!("/api/vhosts/{}", segment(name));
    act(&ui, &viewer, Method::PUT, &path, Some(&body), format!("Virtual host {name} saved"), "/admin#vhosts").await
}

/// `POST /admin/vhosts/delete`: `DELETE /api/vhosts/{name}`.
pub(crate) async fn delete_vhost_post(State(ui): State<Arc<Ui>>, viewer: Viewer, form: Form) -> Response {
    if let Some(refused) = refused(&ui, &viewer, &form) {
        return refused;
    }
    let name = form.get("name");
    let path = format!("/api/vhosts/{}", segment(name));
    act(&ui, &viewer, Method::DELETE, &path, None, format!("Virtual host {name} deleted"), "/admin#vhosts").await
}

/// `POST /admin/permissions`: `PUT /api/permissions/{vhost}/{user}` with the three regexps.
pub(crate) async fn put_permission(State(ui): State<Arc<Ui>>, viewer: Viewer, form: Form) -> Response {
    if let Some(refused) = refused(&ui, &viewer, &form) {
        return refused;
    }
    let (user, vhost) = (form.get("user"), form.get("vhost"));
    let body = json!({ "configure": form.get("configure"), "write": form.get("write"), "read": form.get("read") });
    let path = format!("/api/permissions/{}/{}", segment(vhost), segment(user));
    let done = format!("Permissions of {user} in {vhost} set");
    act(&ui, &viewer, Method::PUT, &path, Some(&body), done, "/admin#permissions").await
}

/// `POST /admin/permissions/delete`: `DELETE /api/permissions/{vhost}/{user}`.
pub(crate) async fn delete_permission(State(ui): State<Arc<Ui>>, viewer: Viewer, form: Form) -> Response {
    if let Some(refused) = refused(&ui, &viewer, &form) {
        return refused;
    }
    let (user, vhost) = (form.get("user"), form.get("vhost"));
    let path = format!("/api/permissions/{}/{}", segment(vhost), segment(user));
    let done = format!("Permissions of {user} in {vhost} cleared");
    act(&ui, &viewer, Method::DELETE, &path, None, done, "/admin#permissions").await
}
