//! Admin: users, virtual hosts, permissions and policies, as the API lists them to this user
//! (the API refuses the lists a user may not see; the page says so in their place).

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use maud::html;
use serde_json::Value as JsonValue;

use crate::Ui;
use crate::format::{items, json, text};
use crate::layout::{Tab, failure};
use crate::viewer::Viewer;

/// `GET /admin`.
pub(crate) async fn page(State(ui): State<Arc<Ui>>, viewer: Viewer) -> Response {
    let users = ui.api.get(&viewer.user, "/api/users").await;
    let vhosts = ui.api.get(&viewer.user, "/api/vhosts").await;
    let permissions = ui.api.get(&viewer.user, "/api/permissions").await;
    let policies = ui.api.get(&viewer.user, "/api/policies").await;
    let content = html! {
        nav.subtabs { a href="#users" { "Users" } a href="#vhosts" { "Virtual hosts" } a href="#permissions" { "Permissions" } a href="#policies" { "Policies" } }
        section #users {
            h2 { "Users" }
            @match &users {
                Err(error) => (failure("Users", error)),
                Ok(users) => table.data {
                    thead { tr { th { "Name" } th { "Tags" } th { "Can access virtual hosts" } } }
                    tbody { @for user in items(users, "") {
                        @let name = text(user, "/name");
                        tr {
                            td { (name) }
                            td { @for tag in items(user, "/tags") { span.badge { (json(tag)) } " " } }
                            td { @if let Ok(permissions) = &permissions {
                                (items(permissions, "").iter().filter(|p| text(p, "/user") == name).map(|p| text(p, "/vhost")).collect::<Vec<_>>().join(", "))
                            } }
                        }
                    } }
                },
            }
        }
        section #vhosts {
            h2 { "Virtual hosts" }
            @match &vhosts {
                Err(error) => (failure("Virtual hosts", error)),
                Ok(vhosts) => table.data {
                    thead { tr { th { "Name" } th { "Description" } th { "Default queue type" } th { "Tags" } } }
                    tbody { @for vhost in items(vhosts, "") { tr {
                        td { (text(vhost, "/name")) } td { (text(vhost, "/description")) }
                        td { (text(vhost, "/default_queue_type")) }
                        td { @for tag in items(vhost, "/tags") { span.badge { (json(tag)) } " " } }
                    } } }
                },
            }
        }
        section #permissions {
            h2 { "Permissions" }
            @match &permissions {
                Err(error) => (failure("Permissions", error)),
                Ok(permissions) => table.data {
                    thead { tr { th { "User" } th { "Virtual host" } th { "Configure" } th { "Write" } th { "Read" } } }
                    tbody { @for p in items(permissions, "") { tr {
                        td { (text(p, "/user")) } td { (text(p, "/vhost")) }
                        td { code { (text(p, "/configure")) } } td { code { (text(p, "/write")) } } td { code { (text(p, "/read")) } }
                    } } }
                },
            }
        }
        section #policies {
            h2 { "Policies" }
            @match &policies {
                Err(error) => (failure("Policies", error)),
                Ok(policies) => {
                    @if items(policies, "").is_empty() { p.empty { "No policies" } }
                    @else {
                        table.data {
                            thead { tr { th { "Virtual host" } th { "Name" } th { "Pattern" } th { "Apply to" } th { "Definition" } th.num { "Priority" } } }
                            tbody { @for p in items(policies, "") { tr {
                                td { (text(p, "/vhost")) } td { (text(p, "/name")) } td { code { (text(p, "/pattern")) } }
                                td { (text(p, "/apply-to")) }
                                td { @if let Some(d) = p.pointer("/definition").and_then(JsonValue::as_object) {
                                    @for (k, v) in d { code { (k) ": " (json(v)) } br; }
                                } }
                                td.num { (text(p, "/priority")) }
                            } } }
                        }
                    }
                }
            }
        }
    };
    crate::layout::page(&viewer, Tab::Admin, "Admin", content)
}
