//! Admin: users, virtual hosts, permissions and policies, as the API lists them to this user
//! (the API refuses the lists a user may not see; the page says so in their place). An
//! administrator also gets the forms of [`super::admin_access`] to manage the first three.

use std::sync::Arc;

use axum::extract::State;
use axum::http::Method;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde_json::{Value as JsonValue, json};

use crate::Ui;
use crate::api::segment;
use crate::form::Form;
use crate::format::{items, json, text};
use crate::layout::{Tab, csrf, failure};
use crate::viewer::Viewer;

use super::admin_access::{
    add_user_form, add_vhost_form, clear_permission, delete_user, delete_vhost, may_administer, set_permission_form,
};

/// `GET /admin`.
pub(crate) async fn page(State(ui): State<Arc<Ui>>, viewer: Viewer) -> Response {
    let users = ui.api.get(&viewer.user, "/api/users").await;
    let vhosts = ui.api.get(&viewer.user, "/api/vhosts").await;
    let permissions = ui.api.get(&viewer.user, "/api/permissions").await;
    let policies = ui.api.get(&viewer.user, "/api/policies").await;
    let admin = may_administer(&viewer);
    let content = html! {
        nav.subtabs { a href="#users" { "Users" } a href="#vhosts" { "Virtual hosts" } a href="#permissions" { "Permissions" } a href="#policies" { "Policies" } }
        section #users {
            h2 { "Users" }
            @match &users {
                Err(error) => (failure("Users", error)),
                Ok(users) => table.data {
                    thead { tr { th { "Name" } th { "Tags" } th { "Can access virtual hosts" } @if admin { th {} } } }
                    tbody { @for user in items(users, "") {
                        @let name = text(user, "/name");
                        tr {
                            td { (name) }
                            td { @for tag in items(user, "/tags") { span.badge { (json(tag)) } " " } }
                            td { @if let Ok(permissions) = &permissions {
                                (items(permissions, "").iter().filter(|p| text(p, "/user") == name).map(|p| text(p, "/vhost")).collect::<Vec<_>>().join(", "))
                            } }
                            @if admin { td.actions { (delete_user(&viewer, &name)) } }
                        }
                    } }
                },
            }
            @if admin { (add_user_form(&viewer)) }
        }
        section #vhosts {
            h2 { "Virtual hosts" }
            @match &vhosts {
                Err(error) => (failure("Virtual hosts", error)),
                Ok(vhosts) => table.data {
                    thead { tr { th { "Name" } th { "Description" } th { "Default queue type" } th { "Tags" } @if admin { th {} } } }
                    tbody { @for vhost in items(vhosts, "") { tr {
                        td { (text(vhost, "/name")) } td { (text(vhost, "/description")) }
                        td { (text(vhost, "/default_queue_type")) }
                        td { @for tag in items(vhost, "/tags") { span.badge { (json(tag)) } " " } }
                        @if admin { td.actions { (delete_vhost(&viewer, &text(vhost, "/name"))) } }
                    } } }
                },
            }
            @if admin { (add_vhost_form(&viewer)) }
        }
        section #permissions {
            h2 { "Permissions" }
            @match &permissions {
                Err(error) => (failure("Permissions", error)),
                Ok(permissions) => table.data {
                    thead { tr { th { "User" } th { "Virtual host" } th { "Configure" } th { "Write" } th { "Read" } @if admin { th {} } } }
                    tbody { @for p in items(permissions, "") { tr {
                        td { (text(p, "/user")) } td { (text(p, "/vhost")) }
                        td { code { (text(p, "/configure")) } } td { code { (text(p, "/write")) } } td { code { (text(p, "/read")) } }
                        @if admin { td.actions { (clear_permission(&viewer, &text(p, "/user"), &text(p, "/vhost"))) } }
                    } } }
                },
            }
            @if admin { (set_permission_form(&viewer, users.as_ref().ok(), vhosts.as_ref().ok())) }
        }
        section #policies {
            h2 { "Policies" }
            @match &policies {
                Err(error) => (failure("Policies", error)),
                Ok(policies) => {
                    @if items(policies, "").is_empty() { p.empty { "No policies" } }
                    @else {
                        table.data {
                            thead { tr { th { "Virtual host" } th { "Name" } th { "Pattern" } th { "Apply to" } th { "Definition" } th.num { "Priority" } th {} } }
                            tbody { @for p in items(policies, "") { tr {
                                td { (text(p, "/vhost")) } td { (text(p, "/name")) } td { code { (text(p, "/pattern")) } }
                                td { (text(p, "/apply-to")) }
                                td { @if let Some(d) = p.pointer("/definition").and_then(JsonValue::as_object) {
                                    @for (k, v) in d { code { (k) ": " (json(v)) } br; }
                                } }
                                td.num { (text(p, "/priority")) }
                                td {
                                    form.inline method="post" action="/admin/policies/delete" data-confirm="Delete this policy?" {
                                        (csrf(&viewer))
                                        input type="hidden" name="vhost" value=(text(p, "/vhost"));
                                        input type="hidden" name="name" value=(text(p, "/name"));
                                        button.danger.small type="submit" { "Delete" }
                                    }
                                }
                            } } }
                        }
                    }
                }
            }
            form.policy method="post" action="/admin/policies" {
                h3 { "Add or update a policy" }
                (csrf(&viewer))
                div.grid {
                    label { "Virtual host"
                        select name="vhost" { @if let Ok(vhosts) = &vhosts { @for v in items(vhosts, "") { option value=(text(v, "/name")) { (text(v, "/name")) } } } }
                    }
                    label { "Name" input type="text" name="name" required; }
                    label { "Pattern" input type="text" name="pattern" placeholder="^orders$" required; }
                    label { "Apply to"
                        select name="apply_to" { @for a in ["all", "queues", "classic_queues", "quorum_queues", "streams", "exchanges"] { option value=(a) { (a) } } }
                    }
                    label { "Priority" input type="number" name="priority" value="0"; }
                }
                label.block { "Definition (JSON)" textarea name="definition" rows="3" placeholder=r#"{"dead-letter-exchange": "dlx", "max-length": 1000}"# {} }
                button.primary type="submit" { "Add / update policy" }
            }
        }
    };
    crate::layout::page(&viewer, Tab::Admin, "Admin", content)
}

/// `POST /admin/policies`: `PUT /api/policies/{vhost}/{name}`, the API's refusals shown as they are.
pub(crate) async fn put_policy(State(ui): State<Arc<Ui>>, viewer: Viewer, form: Form) -> Response {
    if let Some(refused) = viewer.forged(&ui, &form) {
        return refused;
    }
    let definition: Result<JsonValue, _> = serde_json::from_str(form.get("definition"));
    let priority: Result<i64, _> = form.some("priority").unwrap_or("0").parse();
    match (definition, priority) {
        (Ok(definition), Ok(priority)) => {
            let (vhost, name) = (form.get("vhost"), form.get("name").trim());
            let body = json!({
                "pattern": form.get("pattern"),
                "definition": definition,
                "priority": priority,
                "apply-to": form.some("apply_to").unwrap_or("all"),
            });
            let path = format!("/api/policies/{}/{}", segment(vhost), segment(name));
            match ui.api.call(&viewer.user, Method::PUT, &path, Some(&body)).await {
                Ok(_) => viewer.flash(&ui, false, format!("Policy {name} saved")),
                Err(error) => viewer.flash(&ui, true, format!("Policy refused: {error}")),
            }
        }
        (Err(error), _) => viewer.flash(&ui, true, format!("Definition is not JSON: {error}")),
        (_, Err(_)) => viewer.flash(&ui, true, "Priority: a whole number"),
    }
    Redirect::to("/admin#policies").into_response()
}

/// `POST /admin/policies/delete`.
pub(crate) async fn delete_policy(State(ui): State<Arc<Ui>>, viewer: Viewer, form: Form) -> Response {
    if let Some(refused) = viewer.forged(&ui, &form) {
        return refused;
    }
    let name = form.get("name");
    let path = format!("/api/policies/{}/{}", segment(form.get("vhost")), segment(name));
    match ui.api.call(&viewer.user, Method::DELETE, &path, None).await {
        Ok(_) => viewer.flash(&ui, false, format!("Policy {name} deleted")),
        Err(error) => viewer.flash(&ui, true, format!("Delete failed: {error}")),
    }
    Redirect::to("/admin#policies").into_response()
}
