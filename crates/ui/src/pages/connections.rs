//! Connections (with close) and channels.

use std::sync::Arc;

use axum::extract::State;
use axum::http::Method;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;

use crate::Ui;
use crate::api::segment;
use crate::form::Form;
use crate::format::{count, int, items, text};
use crate::layout::{Tab, csrf, failure, page};
use crate::viewer::Viewer;

/// `GET /connections`.
pub(crate) async fn list(State(ui): State<Arc<Ui>>, viewer: Viewer) -> Response {
    let listed = ui.api.get(&viewer.user, "/api/connections").await;
    let content = html! {
        @match &listed {
            Err(error) => (failure("Connections", error)),
            Ok(listed) => {
                table.data #connections {
                    thead { tr {
                        th { "Virtual host" } th { "Name" } th { "User" } th { "State" } th { "Protocol" }
                        th { "TLS" } th.num { "Channels" } th { "Client" } th { "" }
                    } }
                    tbody {
                        @for c in items(listed, "") {
                            tr {
                                td { (text(c, "/vhost")) }
                                td { (text(c, "/name")) @let given = text(c, "/user_provided_name"); @if !given.is_empty() { br; small { (given) } } }
                                td { (text(c, "/user")) }
                                td { span.state { (text(c, "/state")) } }
                                td { (text(c, "/protocol")) }
                                td { @if text(c, "/ssl") == "true" { "●" } @else { "○" } }
                                td.num { (count(int(c, "/channels"))) }
                                td { (text(c, "/client_properties/product")) " " (text(c, "/client_properties/version")) }
                                td {
                                    form.inline method="post" action="/connections/close" data-confirm="Force-close this connection?" {
                                        (csrf(&viewer))
                                        input type="hidden" name="name" value=(text(c, "/name"));
                                        input type="hidden" name="reason" value="Closed via management UI";
                                        button.danger.small type="submit" { "Close" }
                                    }
                                }
                            }
                        }
                        @if items(listed, "").is_empty() { tr { td colspan="9" .empty { "No connections" } } }
                    }
                }
            }
        }
    };
    page(&viewer, Tab::Connections, "Connections", content)
}

/// `POST /connections/close`: closes with RabbitMQ's 320 and the reason given.
pub(crate) async fn close(State(ui): State<Arc<Ui>>, viewer: Viewer, form: Form) -> Response {
    if let Some(refused) = viewer.forged(&ui, &form) {
        return refused;
    }
    let name = form.get("name");
    let path = format!("/api/connections/{}", segment(name));
    match ui.api.call_with_reason(&viewer.user, Method::DELETE, &path, form.get("reason")).await {
        Ok(()) => viewer.flash(&ui, false, format!("Connection {name} closed")),
        Err(error) => viewer.flash(&ui, true, format!("Close failed: {error}")),
    }
    Redirect::to("/connections").into_response()
}

/// `GET /channels`.
pub(crate) async fn channels(State(ui): State<Arc<Ui>>, viewer: Viewer) -> Response {
    let listed = ui.api.get(&viewer.user, "/api/channels").await;
    let content = html! {
        @match &listed {
            Err(error) => (failure("Channels", error)),
            Ok(listed) => {
                table.data #channels {
                    thead { tr {
                        th { "Channel" } th { "Virtual host" } th { "User" } th { "Mode" } th { "State" }
                        th.num { "Unconfirmed" } th.num { "Prefetch" } th.num { "Unacked" } th.num { "Consumers" }
                    } }
                    tbody {
                        @for c in items(listed, "") {
                            tr {
                                td { (text(c, "/name")) }
                                td { (text(c, "/vhost")) }
                                td { (text(c, "/user")) }
                                td {
                                    @if text(c, "/confirm") == "true" { abbr.badge title="confirm" { "C" } }
                                    @if text(c, "/transactional") == "true" { abbr.badge title="transactional" { "T" } }
                                }
                                td { span.state { (text(c, "/state")) } }
                                td.num { (count(int(c, "/messages_unconfirmed"))) }
                                td.num { (count(int(c, "/prefetch_count"))) }
                                td.num { (count(int(c, "/messages_unacknowledged"))) }
                                td.num { (count(int(c, "/consumer_count"))) }
                            }
                        }
                        @if items(listed, "").is_empty() { tr { td colspan="9" .empty { "No channels" } } }
                    }
                }
                p.hint { "Channels close with their connection: close the connection on the Connections tab." }
            }
        }
    };
    page(&viewer, Tab::Channels, "Channels", content)
}
